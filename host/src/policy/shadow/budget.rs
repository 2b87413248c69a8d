//! How much CPU a shadow's thread may take: on average [`SHARE`] of one
//! core, in bursts of at most [`BURST`].
//!
//! Running at the lowest priority is not enough on a small machine: a
//! candidate that loops to its deadline on every call kept one of two
//! cores busy, and requests of the policy in force took 1.9 times as long
//! (measured by the benchmark's `policy-shadow` rows; one that traps on
//! every call, its instance rebuilt each time: 1.26 times). So the thread
//! spends from a budget that refills with time: a call is put to the
//! candidate only while the budget is not overdrawn, and what it took
//! (wall time, so a busy machine, which slows the thread down, also makes
//! it take fewer calls) is then drawn from it. Calls met while overdrawn
//! are dropped, counted. A failed call costs at least
//! [`FAILED_AT_LEAST`]. A well-behaved candidate (tens of microseconds a
//! call) is never held back at the traffic of one broker; a looping one is
//! asked about twice a second, a trapping one about 20 times.

use std::time::{Duration, Instant};

/// The share of one core a shadow's thread may use, on average.
pub const SHARE: f64 = 0.10;

/// The most the budget holds: what a shadow may spend at once after a
/// quiet spell (a few looping calls, say, before it is held back).
pub const BURST: Duration = Duration::from_secs(1);

/// What a failed call costs the budget at least. A trap's cost is not all
/// in the call: the candidate's instance is rebuilt and its memory given
/// back, which touches the other threads of the broker (measured: with a
/// candidate trapping on every call and charged only its call's time, the
/// policy in force's pair p50 was 1.42 times that without a shadow). A
/// candidate that fails on every call is then asked about 20 times a
/// second, enough to count its failures.
pub const FAILED_AT_LEAST: Duration = Duration::from_millis(5);

/// A shadow thread's CPU budget.
#[derive(Debug)]
pub struct Budget {
    share: f64,
    burst: f64,
    /// Seconds left; below zero when a call overdrew it.
    left: f64,
    refilled: Instant,
}

impl Budget {
    /// A full budget refilling at `share` of wall time, holding at most
    /// `burst`.
    pub fn new(share: f64, burst: Duration, now: Instant) -> Budget {
        Budget {
            share,
            burst: burst.as_secs_f64(),
            left: burst.as_secs_f64(),
            refilled: now,
        }
    }

    /// Whether a call may be put to the candidate at `now`.
    pub fn allows(&mut self, now: Instant) -> bool {
        let since = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.left = (self.left + since * self.share).min(self.burst);
        self.refilled = now;
        self.left > 0.0
    }

    /// Draws what a call took ([`FAILED_AT_LEAST`] if it `failed`).
    pub fn spend(&mut self, took: Duration, failed: bool) {
        let took = if failed {
            took.max(FAILED_AT_LEAST)
        } else {
            took
        };
        self.left -= took.as_secs_f64();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_burst_then_the_share() {
        let t0 = Instant::now();
        let mut b = Budget::new(0.10, 100 * MS, t0);
        // Two calls of 60 ms: the second overdraws the budget.
        assert!(b.allows(t0));
        b.spend(60 * MS, false);
        assert!(b.allows(t0));
        b.spend(60 * MS, false);
        assert!(!b.allows(t0), "20 ms overdrawn");
        // 20 ms back at a tenth of wall time: after 200 ms.
        assert!(!b.allows(t0 + 199 * MS));
        assert!(b.allows(t0 + 201 * MS));
    }

    #[test]
    fn a_quiet_spell_refills_no_more_than_the_burst() {
        let t0 = Instant::now();
        let mut b = Budget::new(0.10, 100 * MS, t0);
        assert!(b.allows(t0 + Duration::from_secs(3600)));
        b.spend(101 * MS, false);
        assert!(!b.allows(t0 + Duration::from_secs(3600)));
    }

    #[test]
    fn a_failed_call_costs_at_least_its_floor() {
        let t0 = Instant::now();
        let mut b = Budget::new(0.10, 100 * MS, t0);
        // 20 failures of 10 us each: 100 ms at 5 ms apiece.
        for i in 0..20 {
            assert!(b.allows(t0), "failure {i}");
            b.spend(Duration::from_micros(10), true);
        }
        assert!(!b.allows(t0));
    }

    #[test]
    fn cheap_calls_at_a_steady_rate_are_never_held_back() {
        // 2,000 calls a second of 40 us each: 8 % of a core.
        let t0 = Instant::now();
        let mut b = Budget::new(0.10, 100 * MS, t0);
        for i in 0..20_000u32 {
            let now = t0 + Duration::from_micros(500) * i;
            assert!(b.allows(now), "call {i}");
            b.spend(Duration::from_micros(40), false);
        }
    }
}
