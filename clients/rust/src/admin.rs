//! `/v1/admin`: tenants and their policies, with the admin token
//! ([`Admin`], from [`Client::admin`]).

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::{
    ForceReleaseResponse, PolicyVersions, RollbackRequest, TenantInfo, TenantList,
};

use crate::{
    client::{Client, Idempotent},
    error::{Error, Result},
    transport::segment,
};

/// The admin calls. The client's key must be the broker's admin token
/// (see [`Client::with_api_key`]); a tenant's key gets `forbidden`.
#[derive(Clone, Copy)]
pub struct Admin<'a> {
    client: &'a Client,
}

impl Client {
    /// The admin calls (the client's key must be the admin token).
    pub fn admin(&self) -> Admin<'_> {
        Admin { client: self }
    }
}

impl Admin<'_> {
    /// `GET /v1/admin/tenants`: every tenant and the policy in force.
    ///
    /// # Errors
    /// `unauthenticated` / `forbidden` without the admin token.
    pub async fn tenants(&self) -> Result<TenantList> {
        self.client
            .call(
                Method::GET,
                "/v1/admin/tenants",
                None::<&()>,
                Duration::ZERO,
                Idempotent::Yes,
            )
            .await
    }

    /// `POST /v1/admin/tenants/{tenant}/locks/{key}/release`: ends the
    /// live lease of `tenant`'s lock `key`, whoever holds it; the lease
    /// that was ended.
    ///
    /// # Errors
    /// `not_found` when there is no such tenant or nobody holds the lock.
    pub async fn force_release(&self, tenant: &str, key: &str) -> Result<ForceReleaseResponse> {
        let path = format!(
            "/v1/admin/tenants/{}/locks/{}/release",
            segment(tenant),
            segment(key)
        );
        self.client
            .call(
                Method::POST,
                &path,
                None::<&()>,
                Duration::ZERO,
                Idempotent::No,
            )
            .await
    }

    /// The policy in force for `tenant` (its entry of [`Admin::tenants`]).
    ///
    /// # Errors
    /// `not_found` when there is no such tenant.
    pub async fn policy_status(&self, tenant: &str) -> Result<TenantInfo> {
        self.tenants()
            .await?
            .tenants
            .into_iter()
            .find(|t| t.name == tenant)
            .ok_or_else(|| {
                Error::Api(crate::ApiError {
                    status: 404,
                    code: lockbroker_api::ErrorCode::NotFound,
                    message: format!("no tenant {tenant:?}"),
                    retry_after: None,
                })
            })
    }

    /// `GET /v1/admin/tenants/{tenant}/policy/versions`: the versions of
    /// `tenant`'s policy the broker keeps, newest first.
    ///
    /// # Errors
    /// `not_found` when there is no such tenant.
    pub async fn policy_versions(&self, tenant: &str) -> Result<PolicyVersions> {
        let path = format!("/v1/admin/tenants/{}/policy/versions", segment(tenant));
        self.client
            .call(
                Method::GET,
                &path,
                None::<&()>,
                Duration::ZERO,
                Idempotent::Yes,
            )
            .await
    }

    /// `POST /v1/admin/tenants/{tenant}/policy/rollback`: puts the kept
    /// version `version` (an id or sha256; `None`: the previous one) back
    /// in force; the kept versions after it.
    ///
    /// # Errors
    /// `not_found` (no such tenant or version, or no previous one),
    /// `invalid_policy` (the version could not be restored).
    pub async fn rollback_policy(
        &self,
        tenant: &str,
        version: Option<&str>,
    ) -> Result<PolicyVersions> {
        let path = format!("/v1/admin/tenants/{}/policy/rollback", segment(tenant));
        let body = RollbackRequest {
            version: version.map(str::to_owned),
        };
        // Back to a named version is idempotent; to "the previous" is not.
        let idempotent = if version.is_some() {
            Idempotent::Yes
        } else {
            Idempotent::No
        };
        self.client
            .call(
                Method::POST,
                &path,
                Some(&body),
                // After a restart a kept version may need compiling.
                Duration::from_secs(30),
                idempotent,
            )
            .await
    }

    /// `PUT /v1/admin/tenants/{tenant}/policy`: validates the component and
    /// swaps it in; the tenant with its new policy.
    ///
    /// # Errors
    /// `invalid_policy` (the old policy stays in force), `too_large`,
    /// `not_found`.
    pub async fn upload_policy(&self, tenant: &str, wasm: impl Into<Bytes>) -> Result<TenantInfo> {
        let path = format!("/v1/admin/tenants/{}/policy", segment(tenant));
        let bytes = self
            .client
            .call_bytes(
                Method::PUT,
                &path,
                Some("application/wasm"),
                wasm.into(),
                // Validation compiles the component: allow it time.
                Duration::from_secs(30),
                Idempotent::Yes,
            )
            .await?;
        serde_json::from_slice(&bytes).map_err(|e| Error::Unexpected {
            status: 200,
            detail: e.to_string(),
        })
    }
}
