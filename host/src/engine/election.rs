//! Watching an election: one change event per new term and per vacancy.
//!
//! One poller per election, shared by every observer of it on this broker:
//! it follows the election's term log (written by the transaction that
//! grants each term, so even a leader that lasted less than a tick is
//! seen) and, while there is a leader, the lease itself, to notice a
//! resignation or an expiry. It runs while somebody observes and stops
//! with the last observer.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use chrono::NaiveDateTime;
use tokio::sync::broadcast;

use super::{Engine, EngineError, LockRef, LockState};

/// How often a poller looks at its election.
const TICK: Duration = Duration::from_millis(50);
/// Changes kept for an observer that falls behind; past it, the observer
/// is told the current state instead (see [`Observation::next`]).
const BACKLOG: usize = 256;

/// The leader of an election after a change, or now: `None`s when vacant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leadership {
    pub leader: Option<String>,
    pub term: Option<u64>,
    pub expires_at: Option<NaiveDateTime>,
}

impl Leadership {
    fn vacant() -> Leadership {
        Leadership {
            leader: None,
            term: None,
            expires_at: None,
        }
    }
}

impl From<&LockState> for Leadership {
    fn from(state: &LockState) -> Leadership {
        if state.held {
            Leadership {
                leader: state.owner.clone(),
                term: state.token,
                expires_at: state.expires_at,
            }
        } else {
            Leadership::vacant()
        }
    }
}

/// The pollers running on this broker, by (tenant, election).
#[derive(Default)]
pub(super) struct Pollers(Mutex<HashMap<(String, String), broadcast::Sender<Leadership>>>);

/// One observer's view: the state when it began, then every change.
pub struct Observation {
    /// The leadership when observation began.
    pub first: Leadership,
    changes: broadcast::Receiver<Leadership>,
    engine: Engine,
    lock: LockRef,
    /// The newest term already shown, and whether a vacancy was shown last.
    shown_term: u64,
    vacant: bool,
}

impl Observation {
    /// The next change (waiting for it). An observer that fell more than
    /// [`BACKLOG`] changes behind gets the current state instead, so it
    /// never shows a leader that is not current as the latest.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`] when it had to read the current state
    /// and could not.
    pub async fn next(&mut self) -> Result<Leadership, EngineError> {
        loop {
            let change = match self.changes.recv().await {
                Ok(change) => change,
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    Leadership::from(&self.engine.inspect_now(&self.lock).await?)
                }
                // The poller stops only without observers: not while we
                // hold a receiver, except when the broker shuts down.
                Err(broadcast::error::RecvError::Closed) => {
                    return Err(EngineError::ShuttingDown);
                }
            };
            match change.term {
                // A term this observer has shown already (it began after).
                Some(term) if term <= self.shown_term => continue,
                Some(term) => {
                    self.shown_term = term;
                    self.vacant = false;
                }
                None if self.vacant => continue,
                None => self.vacant = true,
            }
            return Ok(change);
        }
    }
}

impl Engine {
    /// Begins observing an election: its leadership now, then every
    /// change.
    ///
    /// # Errors
    /// [`EngineError::Unavailable`] when the database cannot be read now.
    pub async fn observe(&self, lock: &LockRef) -> Result<Observation, EngineError> {
        // Subscribed before reading the state: no change can slip between.
        let changes = self.subscribe(lock).await?;
        let first = Leadership::from(&self.inspect_now(lock).await?);
        Ok(Observation {
            shown_term: first.term.unwrap_or(0),
            vacant: first.term.is_none(),
            first,
            changes,
            engine: self.clone(),
            lock: lock.clone(),
        })
    }

    /// A receiver of the election's changes, starting its poller if none
    /// runs.
    async fn subscribe(
        &self,
        lock: &LockRef,
    ) -> Result<broadcast::Receiver<Leadership>, EngineError> {
        let key = (lock.tenant.clone(), lock.storage_key.clone());
        if let Some(sender) = self.pollers.0.lock().expect("pollers").get(&key) {
            return Ok(sender.subscribe());
        }
        // Where the new poller starts: the latest term, live or not.
        let after = self.last_term(lock).await?;
        let state = self.inspect_now(lock).await?;
        let mut pollers = self.pollers.0.lock().expect("pollers");
        if let Some(sender) = pollers.get(&key) {
            return Ok(sender.subscribe()); // another observer started one
        }
        let (sender, receiver) = broadcast::channel(BACKLOG);
        pollers.insert(key.clone(), sender.clone());
        drop(pollers);
        self.metrics
            .add_gauge("lockbroker_election_pollers", &[], 1);
        let engine = self.clone();
        let lock = lock.clone();
        tokio::spawn(async move {
            engine.poll(&lock, key, sender, after, !state.held).await;
            engine
                .metrics
                .add_gauge("lockbroker_election_pollers", &[], -1);
        });
        Ok(receiver)
    }

    /// The poller of one election: until nobody observes it, or the broker
    /// stops.
    async fn poll(
        &self,
        lock: &LockRef,
        key: (String, String),
        sender: broadcast::Sender<Leadership>,
        mut after: u64,
        mut vacant: bool,
    ) {
        let mut stop = self.shutdown.clone();
        loop {
            tokio::select! {
                () = tokio::time::sleep(TICK) => {}
                () = crate::shutdown::stopped(&mut stop) => break,
            }
            {
                let mut pollers = self.pollers.0.lock().expect("pollers");
                if sender.receiver_count() == 0 {
                    pollers.remove(&key);
                    return;
                }
            }
            // The database may be away: try again next tick.
            let Ok(terms) = self.terms_since(lock, after).await else {
                continue;
            };
            for term in terms {
                after = term.term;
                vacant = false;
                let _ = sender.send(Leadership {
                    leader: Some(String::from_utf8_lossy(&term.leader).into_owned()),
                    term: Some(term.term),
                    expires_at: Some(term.expires_at),
                });
            }
            if !vacant {
                // A term newer than `after` shows up in the log next tick.
                if let Ok(state) = self.inspect_now(lock).await {
                    if !state.held {
                        vacant = true;
                        let _ = sender.send(Leadership::vacant());
                    }
                }
            }
        }
        self.pollers.0.lock().expect("pollers").remove(&key);
    }
}
