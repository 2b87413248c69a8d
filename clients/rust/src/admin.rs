//! `/v1/admin`: tenants and their policies, with the admin token
//! ([`Admin`], from [`Client::admin`]).

use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use lockbroker_api::{
    ForceReleaseResponse, PolicyShadow, PolicyVersions, RollbackRequest, TenantInfo, TenantList,
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
        self.bodiless(Method::GET, "/v1/admin/tenants").await
    }

    /// A call without a body, answered at once; a `GET` (only) may be
    /// retried.
    async fn bodiless<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
    ) -> Result<T> {
        let idempotent = if method == Method::GET {
            Idempotent::Yes
        } else {
            Idempotent::No
        };
        self.client
            .call(method, path, None::<&()>, Duration::ZERO, idempotent)
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
        self.bodiless(Method::POST, &path).await
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
        self.bodiless(Method::GET, &path).await
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
        self.put_policy(&path, wasm.into()).await
    }

    /// `PUT /v1/admin/tenants/{tenant}/policy?mode=shadow`: validates the
    /// component and loads it as `tenant`'s shadow candidate (replacing
    /// any), which runs beside the policy in force and decides nothing;
    /// the tenant, its `shadow` the candidate.
    ///
    /// # Errors
    /// As [`Admin::upload_policy`] (the shadow before, if any, stays).
    pub async fn shadow_policy(&self, tenant: &str, wasm: impl Into<Bytes>) -> Result<TenantInfo> {
        let path = format!("/v1/admin/tenants/{}/policy?mode=shadow", segment(tenant));
        self.put_policy(&path, wasm.into()).await
    }

    /// `GET /v1/admin/tenants/{tenant}/policy/shadow`: how `tenant`'s
    /// shadow candidate's answers compare with the policy in force.
    ///
    /// # Errors
    /// `not_found` when there is no such tenant or no shadow.
    pub async fn shadow_report(&self, tenant: &str) -> Result<PolicyShadow> {
        self.shadow_call(Method::GET, tenant).await
    }

    /// `DELETE /v1/admin/tenants/{tenant}/policy/shadow`: ends `tenant`'s
    /// shadow; its last report.
    ///
    /// # Errors
    /// `not_found` when there is no such tenant or no shadow.
    pub async fn drop_shadow(&self, tenant: &str) -> Result<PolicyShadow> {
        self.shadow_call(Method::DELETE, tenant).await
    }

    async fn shadow_call(&self, method: Method, tenant: &str) -> Result<PolicyShadow> {
        let path = format!("/v1/admin/tenants/{}/policy/shadow", segment(tenant));
        self.bodiless(method, &path).await
    }

    /// `POST /v1/admin/tenants/{tenant}/policy/promote`: puts `tenant`'s
    /// shadow candidate in force (a version `promote`) and ends the
    /// shadow; the kept versions after it.
    ///
    /// # Errors
    /// `not_found` (no such tenant, or no shadow), `invalid_policy` (the
    /// policy file could not be written).
    pub async fn promote_policy(&self, tenant: &str) -> Result<PolicyVersions> {
        let path = format!("/v1/admin/tenants/{}/policy/promote", segment(tenant));
        self.bodiless(Method::POST, &path).await
    }

    /// A `PUT` of a policy component to `path`.
    async fn put_policy(&self, path: &str, wasm: Bytes) -> Result<TenantInfo> {
        let bytes = self
            .client
            .call_bytes(
                Method::PUT,
                path,
                Some("application/wasm"),
                wasm,
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
