//! This broker's heartbeat: how the other brokers on the database tell
//! that it is alive, and so whether its waiters can still take a lease,
//! and where to push wake-ups to it (`wake`). Each beat also reads which
//! brokers are alive to push to.
//!
//! The heartbeat also says which server the broker writes through. Brokers
//! whose `database_url` lists the same servers in different orders (a
//! misconfiguration) would write through different nodes of one cluster,
//! where row locks do not see each other and commits fail certification:
//! so every broker follows the server of the longest-running live broker,
//! when that server is in its own list and answers.

use tokio::sync::watch;

use super::{Engine, EngineError, HEARTBEAT_EVERY};
use crate::store::brokers;

/// Heartbeats between cleanups of brokers long gone.
const FORGET_EVERY: u32 = 3000;
/// A broker silent this long is forgotten (its waiters are long gone).
const FORGET_AFTER_S: u64 = 24 * 3600;
/// Brokers forgotten per cleanup.
const FORGET_BATCH: u32 = 100;
/// Heartbeats between looks at the server the other brokers use.
const FOLLOW_EVERY: u32 = 5;
/// Heartbeats between reads of the brokers to push wake-ups to (a broker
/// not yet in the directory is read on its first push).
const PEERS_EVERY: u32 = 5;

impl Engine {
    /// Says this broker is alive, and which server it writes through.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`].
    pub async fn heartbeat(&self) -> Result<(), EngineError> {
        let mut conn = self.conn(self.budget()).await?;
        let server = conn.server().to_owned();
        brokers::heartbeat(&mut conn, &self.broker, &server, self.contact()).await?;
        conn.done();
        Ok(())
    }

    /// Says this broker is gone (at shutdown): its leftover rows stop
    /// counting at once instead of after [`super::BROKER_DEAD_AFTER`].
    pub async fn depart(&self) {
        if let Ok(mut conn) = self.conn(self.budget()).await {
            if brokers::remove(&mut conn, &self.broker).await.is_ok() {
                conn.done();
            }
        }
    }

    /// Heartbeats until `stop`.
    pub async fn run_heartbeat(self, stop: watch::Receiver<bool>) {
        let failed = "heartbeat failed: other brokers will skip this broker's waiters";
        let errors = "lockbroker_heartbeat_errors_total";
        let engine = &self;
        self.every(HEARTBEAT_EVERY, stop, errors, failed, |beat| async move {
            engine.heartbeat().await?;
            if beat.is_multiple_of(PEERS_EVERY) {
                engine.refresh_peers().await?;
            }
            if beat.is_multiple_of(FOLLOW_EVERY) {
                engine.follow_the_oldest().await?;
            }
            if beat.is_multiple_of(FORGET_EVERY) {
                engine.forget_departed().await?;
            }
            Ok(())
        })
        .await;
    }

    /// Moves to the server the longest-running live broker writes through,
    /// if it is not this broker's and it is in this broker's list.
    async fn follow_the_oldest(&self) -> Result<(), EngineError> {
        let budget = self.budget();
        let mut conn = self.conn(budget).await?;
        let oldest = brokers::oldest_alive(&mut conn, self.alive_us()).await?;
        conn.done();
        drop(conn);
        if let Some((name, Some(server))) = oldest {
            let server = String::from_utf8_lossy(&server);
            if name != self.broker.as_bytes() && server != self.db.current() {
                self.db.move_to(&server, budget.deadline).await;
            }
        }
        Ok(())
    }

    async fn forget_departed(&self) -> Result<(), EngineError> {
        let mut conn = self.conn(self.budget()).await?;
        brokers::forget_departed(&mut conn, FORGET_AFTER_S, FORGET_BATCH).await?;
        conn.done();
        Ok(())
    }
}
