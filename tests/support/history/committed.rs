//! Releases answered `200 released: true` really committed: the database
//! must not still show their lease live. A broker that answers before its
//! commit is durable (or answers although the commit failed) passes the
//! in-memory checks and fails this one, typically after the database was
//! killed or cut off mid-run.
//!
//! Run it after the clients stopped. It reads the lock rows of one tenant
//! directly; under the built-in policy a row's `lock_key` is the client's
//! key.

use std::collections::HashSet;

use chrono::NaiveDateTime;
use sqlx::MySqlConnection;

use super::{History, Release503, Report, Request, Violation, DEFAULT_TENANT};

impl History {
    /// Live leases in `locks` (tenant [`DEFAULT_TENANT`]) whose release was
    /// answered `200 released: true`.
    ///
    /// # Errors
    /// The query failed.
    pub async fn check_committed(
        &self,
        conn: &mut MySqlConnection,
    ) -> Result<Vec<Violation>, sqlx::Error> {
        self.check_committed_for(conn, DEFAULT_TENANT).await
    }

    /// As [`check_committed`](Self::check_committed), for another tenant.
    ///
    /// # Errors
    /// The query failed.
    pub async fn check_committed_for(
        &self,
        conn: &mut MySqlConnection,
        tenant: &str,
    ) -> Result<Vec<Violation>, sqlx::Error> {
        let freed: HashSet<(String, String, u64)> = self
            .ops()
            .into_iter()
            .filter(|op| op.outcome.freed())
            .filter_map(|op| match op.request {
                Request::Release { token } => Some((op.key, op.owner, token)),
                _ => None,
            })
            .collect();
        let live = live_leases(conn, tenant).await?;
        Ok(live
            .into_iter()
            .filter_map(|(key, owner, token, expires_at)| {
                let key = String::from_utf8_lossy(&key).into_owned();
                let owner = String::from_utf8_lossy(&owner).into_owned();
                freed
                    .contains(&(key.clone(), owner.clone(), token))
                    .then(|| Violation::ReleaseNotCommitted {
                        key,
                        owner,
                        token,
                        expires_at: expires_at.to_string(),
                    })
            })
            .collect())
    }

    /// [`check_with`](Self::check_with) and
    /// [`check_committed`](Self::check_committed) in one report.
    ///
    /// # Panics
    /// When the database cannot be read.
    pub async fn check_with_database(
        &self,
        conn: &mut MySqlConnection,
        release_503: Release503,
    ) -> Report {
        let mut report = self.check_with(release_503);
        let uncommitted = self
            .check_committed(conn)
            .await
            .expect("read the lock rows");
        report.violations.extend(uncommitted);
        report
    }
}

async fn live_leases(
    conn: &mut MySqlConnection,
    tenant: &str,
) -> Result<Vec<(Vec<u8>, Vec<u8>, u64, NaiveDateTime)>, sqlx::Error> {
    sqlx::query_as(
        r#"
SELECT lock_key, owner, token, expires_at
FROM locks
WHERE tenant = ? AND kind = 0 AND owner IS NOT NULL AND expires_at > NOW(6)
"#,
    )
    .bind(tenant.as_bytes())
    .fetch_all(conn)
    .await
}
