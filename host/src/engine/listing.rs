//! Listing a tenant's live leases of one kind, a page at a time, in
//! storage-key order (keyset pagination: a page's `next` is the last key it
//! looked at). A key live for the whole of a paged scan is listed exactly
//! once; one that comes or goes during it may or may not be.
//!
//! A page reads stretches of keys (`store::listing`) until it holds `limit`
//! live ones or has looked at [`SCAN_FACTOR`] times as many keys: a run of
//! expired or idle keys ends a page early, with a `next` to go on from,
//! rather than being read without bound.

use std::collections::HashMap;

use super::{
    detach::finish, lock::LockState, rwlock::RwHolder, semaphore::SlotState, Engine, EngineError,
    Op, RwState, Scopes, SemaphoreState,
};
use crate::store::{
    listing::{
        self, Entry, HeldCounts, Holder, Holders, LockEntry, RwEntry, SemaphoreEntry, Stretch,
    },
    Kind,
};

/// At most this many times `limit` keys are looked at for one page.
const SCAN_FACTOR: u32 = 10;

/// Which page: the keys that start with `prefix`, after `after` (the
/// previous page's `next`), at most `limit` of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    pub prefix: Vec<u8>,
    pub after: Option<Vec<u8>>,
    pub limit: u32,
}

/// A page: each live resource with its storage key, and the key to go on
/// after, if the scan did not reach the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing<T> {
    pub items: Vec<(String, T)>,
    pub next: Option<Vec<u8>>,
}

/// The gauge of the leases each tenant holds, by kind.
const HELD: &str = "lockbroker_held_leases";
/// How often the reaper counts them (a count reads every row of a
/// tenant's, so not every pass).
pub const HELD_COUNT_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

impl Engine {
    /// How many live leases `tenant` holds, every kind together.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub fn count_held(&self, tenant: &str) -> Op<u64> {
        let (engine, tenant) = (self.clone(), tenant.to_owned());
        finish(move |_| async move { Ok(engine.held_by_kind(&tenant).await?.total()) })
    }

    /// How many live leases `tenant` holds, by kind.
    pub(super) async fn held_by_kind(&self, tenant: &str) -> Result<HeldCounts, EngineError> {
        let budget = self.budget();
        self.retry(budget, || async {
            let mut conn = self.conn(budget).await?;
            let counts = listing::count_held(&mut conn, tenant).await?;
            conn.done();
            Ok(counts)
        })
        .await
    }

    /// Sets `lockbroker_held_leases{tenant,kind}` of each tenant of
    /// `tenants` to what it holds in the database (the reaper's, every
    /// [`HELD_COUNT_EVERY`]: a count reads the tenant's rows).
    pub(super) async fn count_held_leases(&self, tenants: &Scopes) -> Result<(), EngineError> {
        for scope in tenants.values() {
            let counts = self.held_by_kind(&scope.tenant).await?;
            self.heat.held_now(&scope.tenant, counts);
            for (kind, n) in [
                ("lock", counts.locks),
                ("election", counts.elections),
                ("semaphore", counts.semaphores),
                ("rwlock", counts.rwlocks),
            ] {
                let labels = [("tenant", scope.tenant.as_str()), ("kind", kind)];
                self.metrics
                    .set_gauge(HELD, &labels, i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        Ok(())
    }

    /// A page of the tenant's live locks (or elections, by `kind`).
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub fn list_locks(&self, tenant: &str, kind: Kind, span: Span) -> Op<Listing<LockState>> {
        let (engine, tenant) = (self.clone(), tenant.to_owned());
        finish(move |_| async move {
            let sql = |s: &Stretch| listing::locks(kind, s);
            let (entries, next) = engine.page::<LockEntry>(&tenant, &span, sql).await?;
            let items = entries
                .into_iter()
                .map(|e| {
                    let key = text(&e.entry_key);
                    let mut state = LockState::of(e.live, &e.row);
                    // Waiters in memory here count too (`held_here`).
                    state.waiters += engine.held_here.waiting_for(&tenant, kind, &key);
                    (key, state)
                })
                .collect();
            Ok(Listing { items, next })
        })
    }

    /// A page of the tenant's semaphores with a live permit.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub fn list_semaphores(&self, tenant: &str, span: Span) -> Op<Listing<SemaphoreState>> {
        let (engine, tenant) = (self.clone(), tenant.to_owned());
        finish(move |_| async move {
            let sql = listing::semaphores;
            engine
                .with_holders(&tenant, &span, sql, Holders::Slots, SemaphoreState::listed)
                .await
        })
    }

    /// A page of the tenant's rwlocks with a live writer or reader.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub fn list_rwlocks(&self, tenant: &str, span: Span) -> Op<Listing<RwState>> {
        let (engine, tenant) = (self.clone(), tenant.to_owned());
        finish(move |_| async move {
            let sql = listing::rwlocks;
            engine
                .with_holders(&tenant, &span, sql, Holders::Readers, RwState::listed)
                .await
        })
    }

    /// A page by `sql` of keys whose leases are rows of their own (`of`),
    /// each made into a state by `state` from its entry and its leases.
    async fn with_holders<T, S>(
        &self,
        tenant: &str,
        span: &Span,
        sql: impl Fn(&Stretch<'_>) -> String,
        of: Holders,
        state: impl Fn(T, Vec<Holder>) -> S,
    ) -> Result<Listing<S>, EngineError>
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::mysql::MySqlRow> + Send + Unpin,
    {
        let (entries, next) = self.page::<T>(tenant, span, sql).await?;
        let keys: Vec<Vec<u8>> = entries.iter().map(|e| e.entry_key.clone()).collect();
        let budget = self.budget();
        let rows = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let rows = listing::holders(&mut conn, of, tenant, &keys).await?;
                conn.done();
                Ok(rows)
            })
            .await?;
        let mut by_key: HashMap<Vec<u8>, Vec<Holder>> = HashMap::new();
        for row in rows {
            by_key.entry(row.key.clone()).or_default().push(row);
        }
        let items = entries
            .into_iter()
            .map(|e| {
                let holders = by_key.remove(&e.entry_key).unwrap_or_default();
                (text(&e.entry_key), state(e.row, holders))
            })
            .collect();
        Ok(Listing { items, next })
    }

    /// One stretch of the tenant's keys, read by the statement `sql`.
    pub(super) async fn stretch<T>(
        &self,
        sql: &str,
        s: Stretch<'_>,
    ) -> Result<Vec<Entry<T>>, EngineError>
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::mysql::MySqlRow> + Send + Unpin,
    {
        let budget = self.budget();
        self.retry(budget, || async {
            let mut conn = self.conn(budget).await?;
            let rows = listing::stretch(&mut conn, sql, s).await?;
            conn.done();
            Ok(rows)
        })
        .await
    }

    /// The live entries of the page `span` of the tenant's keys, and the
    /// key to go on after: stretches read by `sql` (see
    /// `store::listing::stretch`) until the page is full, the keys run out,
    /// or [`SCAN_FACTOR`] times its limit were looked at.
    async fn page<T>(
        &self,
        tenant: &str,
        span: &Span,
        sql: impl Fn(&Stretch<'_>) -> String,
    ) -> Result<(Vec<Entry<T>>, Option<Vec<u8>>), EngineError>
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::mysql::MySqlRow> + Send + Unpin,
    {
        let mut live = Vec::new();
        let mut after = span.after.clone();
        let mut looked = 0usize;
        let most = span.limit.saturating_mul(SCAN_FACTOR) as usize;
        loop {
            let want = span.limit as usize - live.len();
            let stretch = Stretch {
                tenant,
                after: after.as_deref(),
                prefix: &span.prefix,
                limit: u32::try_from(want).unwrap_or(u32::MAX),
            };
            let statement = sql(&stretch);
            let rows: Vec<Entry<T>> = self.stretch(&statement, stretch).await?;
            let ended = rows.len() < want;
            looked += rows.len();
            if let Some(last) = rows.last() {
                after = Some(last.entry_key.clone());
            }
            live.extend(rows.into_iter().filter(|e| e.live));
            if ended {
                return Ok((live, None));
            }
            if live.len() >= span.limit as usize || looked >= most {
                return Ok((live, after));
            }
        }
    }
}

impl SemaphoreState {
    /// A listed semaphore: its header and its live slots.
    fn listed(header: SemaphoreEntry, slots: Vec<Holder>) -> SemaphoreState {
        SemaphoreState {
            permits: Some(header.permits),
            holders: slots
                .into_iter()
                .map(|h| SlotState {
                    slot: h.slot.unwrap_or_default(),
                    owner: text(&h.owner),
                    token: h.token,
                    expires_at: h.expires_at,
                    session: h.session.as_deref().map(text),
                })
                .collect(),
            waiters: u64::from(header.queued),
        }
    }
}

impl RwState {
    /// A listed rwlock: its header (a live writer, if any) and its live
    /// readers.
    fn listed(header: RwEntry, readers: Vec<Holder>) -> RwState {
        let holder = |owner: &[u8], token, expires_at, session: Option<&[u8]>| RwHolder {
            owner: text(owner),
            token,
            expires_at,
            session: session.map(text),
        };
        let writer = match (
            &header.writer,
            header.writer_token,
            header.writer_expires_at,
        ) {
            (Some(w), Some(t), Some(at)) if at > header.now => {
                Some(holder(w, t, at, header.writer_session.as_deref()))
            }
            _ => None,
        };
        RwState {
            writer,
            readers: readers
                .iter()
                .map(|r| holder(&r.owner, r.token, r.expires_at, r.session.as_deref()))
                .collect(),
            waiters: u64::from(header.queued),
        }
    }
}
