//! What every guard builder asks for: who holds, for how long, how long to
//! wait. Shared by the lock, semaphore and election builders.

use std::time::Duration;

/// How long `acquire()`/`campaign()` wait for the lease unless told.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone)]
pub(crate) struct LeaseOptions {
    pub owner: Option<String>,
    pub ttl: Option<Duration>,
    pub wait: Duration,
    pub priority: Option<i32>,
}

impl Default for LeaseOptions {
    fn default() -> LeaseOptions {
        LeaseOptions {
            owner: None,
            ttl: None,
            wait: DEFAULT_WAIT,
            priority: None,
        }
    }
}

/// Milliseconds for the wire, saturating.
pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl LeaseOptions {
    pub(crate) fn ttl_ms(&self) -> Option<u64> {
        self.ttl.map(millis)
    }
}

/// The builder methods every guard builder has, written once.
macro_rules! lease_options {
    ($builder:ident, $who:literal) => {
        impl $builder {
            #[doc = concat!("Who holds it (default: a name unique to this guard, `host:pid:n`). ",
                                "The same ", $who, " acquiring again re-enters rather than waits.")]
            pub fn owner(mut self, owner: impl Into<String>) -> $builder {
                self.options.owner = Some(owner.into());
                self
            }

            /// Lease length (default: the broker's, 30 s); the guard renews
            /// every third of it.
            pub fn ttl(mut self, ttl: std::time::Duration) -> $builder {
                self.options.ttl = Some(ttl);
                self
            }

            /// How long to wait in the queue (default
            /// [`DEFAULT_WAIT`](crate::DEFAULT_WAIT); at most 300 s).
            pub fn wait(mut self, wait: std::time::Duration) -> $builder {
                self.options.wait = wait;
                self
            }
        }
    };
}
pub(crate) use lease_options;
