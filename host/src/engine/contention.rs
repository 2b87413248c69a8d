//! The hottest keys (issue #32, `GET /v1/contention`): every live
//! broker's counts of the last window added up (`heat`), the most
//! contended keys first, each with who holds it and how many wait for it
//! now (read from the database and the brokers' memory).

use std::collections::HashMap;

use super::{
    detach::finish,
    heat::{Counts, BUCKET, BUCKETS},
    waiting::Party,
    Engine, EngineError, Op,
};
use crate::store::{
    listing::HeldCounts,
    sessions::kind_of,
    waiting::{self, HolderRow},
    Kind,
};

/// The longest window, in seconds.
pub const MAX_WINDOW_S: u64 = BUCKET.as_secs() * BUCKETS;

/// One key of `GET /v1/contention`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotKey {
    pub kind: Kind,
    pub storage_key: String,
    /// Over the window, every broker's added up.
    pub counts: Counts,
    /// Waiting now (database queue and brokers' memory).
    pub waiters: u64,
    /// Holding now.
    pub holders: Vec<Party>,
}

/// The hottest keys, and whether every broker answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contention {
    pub keys: Vec<HotKey>,
    pub complete: bool,
    /// The tenant's leases held, by kind, as last counted (every 15 s).
    pub held: Option<HeldCounts>,
}

/// How contended a key's counts say it is: waits that ended in a handoff
/// or a refusal, then plain grants.
fn rank(c: &Counts) -> (u64, u64) {
    (c.handoffs + c.refusals, c.grants)
}

impl Engine {
    /// The `top` most contended of `tenant`'s keys that start with
    /// `prefix`, over the last `window_s` seconds (rounded up to whole
    /// ten-second buckets, at most [`MAX_WINDOW_S`]).
    ///
    /// # Errors
    /// [`EngineError::Unavailable`] (for what holds and waits now).
    pub fn contention(
        &self,
        tenant: &str,
        prefix: String,
        window_s: u64,
        top: usize,
    ) -> Op<Contention> {
        let (engine, tenant) = (self.clone(), tenant.to_owned());
        finish(move |_| async move {
            let (heat, complete) = engine.heat_everywhere(&tenant, &prefix, window_s).await;
            let mut merged: HashMap<(u8, String), Counts> = HashMap::new();
            for k in heat {
                merged
                    .entry((k.kind, k.storage_key))
                    .or_default()
                    .add(&k.counts);
            }
            let mut keys: Vec<((u8, String), Counts)> = merged.into_iter().collect();
            keys.sort_by(|(a_key, a), (b_key, b)| rank(b).cmp(&rank(a)).then(a_key.cmp(b_key)));
            keys.truncate(top);
            let keys: Vec<(Kind, String, Counts)> = keys
                .into_iter()
                .filter_map(|((kind, key), c)| Some((kind_of(kind)?, key, c)))
                .collect();
            let (now, memory_complete) = engine.now_of(&tenant, &prefix, &keys).await?;
            let keys = keys
                .into_iter()
                .map(|(kind, storage_key, counts)| {
                    let (waiters, holders) = now
                        .get(&(kind, storage_key.clone()))
                        .cloned()
                        .unwrap_or_default();
                    HotKey {
                        kind,
                        storage_key,
                        counts,
                        waiters,
                        holders,
                    }
                })
                .collect();
            Ok(Contention {
                keys,
                complete: complete && memory_complete,
                held: engine.heat.held(&tenant),
            })
        })
    }

    /// Who waits (how many) and who holds, now, for each of `keys`; and
    /// whether every broker told what it keeps in memory.
    #[allow(clippy::type_complexity)]
    async fn now_of(
        &self,
        tenant: &str,
        prefix: &str,
        keys: &[(Kind, String, Counts)],
    ) -> Result<(HashMap<(Kind, String), (u64, Vec<Party>)>, bool), EngineError> {
        let mut now: HashMap<(Kind, String), (u64, Vec<Party>)> = HashMap::new();
        if keys.is_empty() {
            return Ok((now, true));
        }
        let mut by_kind: HashMap<Kind, Vec<Vec<u8>>> = HashMap::new();
        for (kind, key, _) in keys {
            by_kind
                .entry(*kind)
                .or_default()
                .push(key.as_bytes().to_vec());
        }
        let (budget, stale) = (self.budget(), self.stale());
        let (holders, waiting) = self
            .retry(budget, || async {
                let mut conn = self.conn(budget).await?;
                let mut holders: Vec<HolderRow> = Vec::new();
                let mut waiting = Vec::new();
                for (kind, keys) in &by_kind {
                    holders.extend(waiting::holders(&mut conn, tenant, *kind, keys).await?);
                    waiting.extend(waiting::counts(&mut conn, tenant, *kind, keys, stale).await?);
                }
                conn.done();
                Ok((holders, waiting))
            })
            .await?;
        for h in holders {
            if let Some(kind) = kind_of(h.kind) {
                let key = String::from_utf8_lossy(&h.lock_key).into_owned();
                let party = Party {
                    owner: String::from_utf8_lossy(&h.owner).into_owned(),
                    session: h
                        .session
                        .as_deref()
                        .map(|s| String::from_utf8_lossy(s).into_owned()),
                };
                now.entry((kind, key)).or_default().1.push(party);
            }
        }
        for (kind, key, n) in waiting {
            if let Some(kind) = kind_of(kind) {
                let key = String::from_utf8_lossy(&key).into_owned();
                now.entry((kind, key)).or_default().0 += n;
            }
        }
        let locks = keys.iter().any(|(kind, ..)| *kind == Kind::Lock);
        let mut complete = true;
        if locks {
            let (memory, answered) = self.waiting_everywhere(tenant, prefix).await;
            complete = answered;
            for (_, w) in memory {
                if let Some(entry) = now.get_mut(&(Kind::Lock, w.storage_key.clone())) {
                    entry.0 += 1;
                } else if keys
                    .iter()
                    .any(|(k, key, _)| *k == Kind::Lock && *key == w.storage_key)
                {
                    now.insert((Kind::Lock, w.storage_key), (1, Vec::new()));
                }
            }
        }
        Ok((now, complete))
    }
}
