/**
 * `client.admin`: the calls that need the broker's admin token (make the
 * client with it, or `client.withApiKey(adminToken)`); a tenant's key gets
 * `forbidden`.
 */
import type { Caller, CallOptions } from "./caller.js";
import { segment } from "./kinds.js";
import type { ForceReleaseResponse, TenantList } from "./types.js";

export class Admin {
  /** @internal */
  constructor(private readonly caller: Caller) {}

  /** `GET /v1/admin/tenants`: every tenant and the policy in force. */
  tenants(options: CallOptions = {}): Promise<TenantList> {
    return this.caller.call<TenantList>({ method: "GET", path: "/v1/admin/tenants", idempotent: true, ...options });
  }

  /**
   * `POST /v1/admin/tenants/{tenant}/locks/{key}/release`: ends the live
   * lease of `tenant`'s lock `key`, whoever holds it.
   *
   * @throws LockbrokerError `not_found` when nobody holds it or there is no such tenant.
   */
  forceRelease(tenant: string, key: string, options: CallOptions = {}): Promise<ForceReleaseResponse> {
    return this.caller.call<ForceReleaseResponse>({
      method: "POST",
      path: `/v1/admin/tenants/${segment(tenant)}/locks/${segment(key)}/release`,
      idempotent: false,
      ...options,
    });
  }
}
