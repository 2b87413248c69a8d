/**
 * The API's types by name: aliases of the generated OpenAPI types
 * (`generated/openapi.ts`), so the rest of the client, and its users, never
 * spell `components["schemas"][...]`. Lease-shaped answers are called
 * grants here (`LockGrant` is the schema `Lease`) because `Lease` is the
 * client's own handle of a held lease.
 */
import type { components } from "./generated/openapi.js";

type Schemas = components["schemas"];

export type ErrorCode = Schemas["ErrorCode"];
export type ErrorBody = Schemas["ErrorBody"];
/** One step of a deadlock's cycle (`DeadlockError.cycle`). */
export type CycleStep = Schemas["CycleStep"];

export type LeaseTerms = Schemas["LeaseTerms"];

export type AcquireRequest = Schemas["AcquireRequest"];
export type RenewRequest = Schemas["RenewRequest"];
export type ReleaseRequest = Schemas["ReleaseRequest"];
export type ReleaseResponse = Schemas["ReleaseResponse"];
/** A granted, re-entered or renewed lock (the schema `Lease`). */
export type LockGrant = Schemas["Lease"];
export type LockStatus = Schemas["LockStatus"];
export type LockStatusPage = Schemas["LockStatusPage"];
export type ValidateRequest = Schemas["ValidateRequest"];
export type Validity = Schemas["Validity"];
export type LockEvent = Schemas["LockEvent"];
export type LockEventKind = Schemas["LockEventKind"];
export type LockHistory = Schemas["LockHistory"];

export type SemaphoreAcquireRequest = Schemas["SemaphoreAcquireRequest"];
export type SemaphoreRenewRequest = Schemas["SemaphoreRenewRequest"];
export type SemaphoreReleaseRequest = Schemas["SemaphoreReleaseRequest"];
/** A granted or renewed semaphore slot (the schema `SemaphoreLease`). */
export type SemaphoreGrant = Schemas["SemaphoreLease"];
export type SemaphoreStatus = Schemas["SemaphoreStatus"];
export type SemaphoreHolder = Schemas["SemaphoreHolder"];
export type SemaphoreStatusPage = Schemas["SemaphoreStatusPage"];

export type RwMode = Schemas["RwMode"];
export type RwAcquireRequest = Schemas["RwAcquireRequest"];
/** A granted or renewed read or write lease (the schema `RwLease`). */
export type RwGrant = Schemas["RwLease"];
export type RwHolder = Schemas["RwHolder"];
export type RwLockStatus = Schemas["RwLockStatus"];
export type RwLockStatusPage = Schemas["RwLockStatusPage"];

export type MultiLockAcquireRequest = Schemas["MultiLockAcquireRequest"];
export type MultiLockRenewRequest = Schemas["MultiLockRenewRequest"];
export type MultiLockReleaseRequest = Schemas["MultiLockReleaseRequest"];
export type MultiLockReleaseResponse = Schemas["MultiLockReleaseResponse"];
/** Several locks granted together (the schema `MultiLockLease`). */
export type MultiLockGrant = Schemas["MultiLockLease"];
export type MultiLockEntry = Schemas["MultiLockEntry"];
export type HeldKey = Schemas["HeldKey"];

export type CampaignRequest = Schemas["CampaignRequest"];
export type ElectionRenewRequest = Schemas["ElectionRenewRequest"];
export type ResignRequest = Schemas["ResignRequest"];
export type ResignResponse = Schemas["ResignResponse"];
/** A leadership won or renewed; `term` is its fencing token. */
export type Leadership = Schemas["Leadership"];
export type ElectionStatus = Schemas["ElectionStatus"];
export type ElectionStatusPage = Schemas["ElectionStatusPage"];

export type CreateSessionRequest = Schemas["CreateSessionRequest"];
/** An open session (the answer to `POST /v1/sessions`, and an item of `GET /v1/sessions`). */
export type SessionInfo = Schemas["Session"];
export type SessionKeepalive = Schemas["SessionKeepalive"];
export type SessionClosed = Schemas["SessionClosed"];
/** `GET /v1/sessions/{id}`: the session and every lease held in it. */
export type SessionStatus = Schemas["SessionStatus"];
export type SessionLease = Schemas["SessionLease"];

export type StreamEvent = Schemas["StreamEvent"];
export type ResourceKind = Schemas["ResourceKind"];

export type ForceReleaseResponse = Schemas["ForceReleaseResponse"];
export type TenantInfo = Schemas["TenantInfo"];
export type TenantList = Schemas["TenantList"];

/** One page of a listing: `next` is the cursor of the page after, null at the end. */
export interface Page<T> {
  items: T[];
  next: string | null;
}
