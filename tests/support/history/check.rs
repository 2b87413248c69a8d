//! The history checker: mutual exclusion and fencing-token order, judged
//! only from what clients saw.
//!
//! A *hold* is one grant — one (key, owner, token) — as its owner may use
//! it: from the first `200` acquire answer with that token to the earlier
//! of
//! - the sending of the first release after its last acquire answer that
//!   was answered `200` or not answered at all (the client stops using the
//!   lock before it asks to release; a release whose answer was lost may
//!   have committed at once). A release *answered* with another status is
//!   taken at its word: it did not happen, the client still holds; and
//! - its lease end as the client must reckon it: the latest send time of a
//!   `200` acquire or renew of that token, plus its `ttl_ms`. The broker
//!   reads its clock after the request was sent, so the real lease ends
//!   no earlier; a lease renewed is extended.
//!
//! Whether a `503` answer to a release is the broker's word is a rule of
//! its own, [`Release503`]: a broker that loses its database connection
//! during `COMMIT` cannot know whether the release committed, yet answers
//! `503`. The default takes the answer at its word, as a client would.
//!
//! Re-entrant acquires (`hold_count` > 1) carry the same token and belong
//! to the same hold. Holds with different tokens must not overlap, except
//! two *shared* holds (the read leases of a rwlock, checked with
//! [`History::check_shared`]): a shared hold may overlap other shared
//! holds, never an exclusive one.
//!
//! Token order is checked on fresh grants (`hold_count` 1: the request
//! itself created the grant, between its send and its answer): when one
//! fresh grant's answer arrived before another's request was sent, the
//! later one's token is greater. Overlapping request windows prove no
//! order, so they are not compared. And one token of a key never belongs
//! to two owners.

use std::{
    collections::BTreeMap,
    fmt,
    time::{Duration, Instant},
};

use super::{History, Op, Outcome, Request};

/// How much the database clock (which ends leases) may drift from the
/// test's monotonic clock over one lease: holds that end by their lease are
/// shortened by this much, so that slewing cannot fake an overlap.
const CLOCK_TOLERANCE: Duration = Duration::from_millis(5);

/// Violations listed by [`Report::assert_clean`]; the rest are counted.
const SHOWN: usize = 20;

/// What a `503` answer to a release means to the checker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Release503 {
    /// The release did not happen, as the broker says: the hold lasts
    /// until its lease ends. A broker that answers `503` to a release that
    /// committed fails this.
    #[default]
    NothingHappened,
    /// The release may have committed (the answer was lost with the
    /// database connection): like a release with no answer, it ends the
    /// hold when sent.
    MayHaveCommitted,
}

/// A hold, with times relative to the start of the history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldSeen {
    pub owner: String,
    pub token: u64,
    pub from: Duration,
    pub until: Duration,
    /// True when the lease, not a release, ends the hold.
    pub by_lease: bool,
    /// A shared (read) hold: it may overlap other shared holds.
    pub shared: bool,
    /// The grant's acquires, renewals and releases, one line each, to
    /// explain a violation.
    pub story: Vec<String>,
}

/// A fresh grant: when its request was sent and its answer arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantSeen {
    pub owner: String,
    pub token: u64,
    pub sent: Duration,
    pub answered: Duration,
}

/// Something no correct broker lets a client see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Two grants of one key were held at the same time.
    Overlap {
        key: String,
        first: HoldSeen,
        second: HoldSeen,
    },
    /// A grant observed later got a token no greater than an earlier one.
    TokenRegression {
        key: String,
        earlier: GrantSeen,
        later: GrantSeen,
    },
    /// One token of a key was granted to several owners.
    SharedToken {
        key: String,
        token: u64,
        owners: Vec<String>,
    },
    /// A release answered `200 released: true`, yet the database still
    /// shows that lease live.
    ReleaseNotCommitted {
        key: String,
        owner: String,
        token: u64,
        expires_at: String,
    },
}

/// Outcome counts of one kind of operation, by label: the status (`"409"`),
/// `"200 released"` or `"200 still held"` for releases, `"timeout"`,
/// `"failed"`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally(pub BTreeMap<String, usize>);

impl Tally {
    pub fn get(&self, label: &str) -> usize {
        self.0.get(label).copied().unwrap_or(0)
    }

    pub fn total(&self) -> usize {
        self.0.values().sum()
    }

    fn add(&mut self, label: String) {
        *self.0.entry(label).or_default() += 1;
    }
}

/// What a check found: counts to judge that the run did something, and
/// the violations.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub ops: usize,
    /// Distinct grants (key, owner, token) that some client received.
    pub grants: usize,
    pub acquires: Tally,
    pub releases: Tally,
    pub renews: Tally,
    /// `503` answers, any operation.
    pub unavailable: usize,
    /// `409` answers, any operation.
    pub conflicts: usize,
    pub timeouts: usize,
    /// Requests that got no answer for another reason (refused, reset).
    pub failures: usize,
    pub violations: Vec<Violation>,
}

impl Report {
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// # Panics
    /// With the counts and the first violations, when there are any.
    pub fn assert_clean(&self) {
        assert!(self.is_clean(), "the history is not linearizable:\n{self}");
    }
}

impl History {
    /// Checks holds and token order per key, taking `503` answers to
    /// releases at their word.
    pub fn check(&self) -> Report {
        self.check_with(Release503::default())
    }

    /// [`check`](Self::check) with another reading of `503` releases.
    pub fn check_with(&self, release_503: Release503) -> Report {
        check_ops(&self.ops(), self.origin, release_503, &|_| false)
    }

    /// [`check`](Self::check) for reader-writer locks: a grant whose
    /// acquire `shared` says is a read may overlap other reads, never a
    /// write; tokens are ordered across both.
    pub fn check_shared(&self, shared: impl Fn(&Op) -> bool) -> Report {
        check_ops(&self.ops(), self.origin, Release503::default(), &shared)
    }
}

/// One grant's evidence, gathered from the ops.
#[derive(Default)]
struct Evidence<'a> {
    acquires: Vec<&'a Op>,
    renews: Vec<&'a Op>,
    releases: Vec<&'a Op>,
}

fn check_ops(
    ops: &[Op],
    origin: Instant,
    release_503: Release503,
    shared: &dyn Fn(&Op) -> bool,
) -> Report {
    let at = |t: Instant| t.saturating_duration_since(origin);
    let mut report = Report {
        ops: ops.len(),
        ..Report::default()
    };
    // key -> (owner, token) -> evidence
    let mut keys: BTreeMap<&str, BTreeMap<(&str, u64), Evidence>> = BTreeMap::new();
    for op in ops {
        count(&mut report, op);
        let (token, slot) = match (op.request, op.outcome.granted()) {
            (Request::Acquire { .. }, Some(token)) => (token, 0),
            (Request::Renew { token, .. }, Some(_)) => (token, 1),
            (Request::Release { token }, _) => (token, 2),
            _ => continue,
        };
        let evidence = keys
            .entry(&op.key)
            .or_default()
            .entry((&op.owner, token))
            .or_default();
        match slot {
            0 => evidence.acquires.push(op),
            1 => evidence.renews.push(op),
            _ => evidence.releases.push(op),
        }
    }
    for (key, grants) in keys {
        let mut holds = Vec::new();
        let mut fresh = Vec::new();
        let mut owners_of: BTreeMap<u64, Vec<&str>> = BTreeMap::new();
        for ((owner, token), evidence) in &grants {
            if evidence.acquires.is_empty() {
                continue; // renews or releases of a grant never seen
            }
            report.grants += 1;
            owners_of.entry(*token).or_default().push(*owner);
            let mut seen = hold(owner, *token, evidence, release_503, at);
            seen.shared = evidence.acquires.iter().all(|op| shared(op));
            holds.push(seen);
            for op in &evidence.acquires {
                if matches!(op.outcome, Outcome::Reply { hold_count: Some(n), .. } if n > 1) {
                    continue; // re-entry: the grant was made before
                }
                fresh.push(GrantSeen {
                    owner: (*owner).to_owned(),
                    token: *token,
                    sent: at(op.sent),
                    answered: at(op.answered),
                });
            }
        }
        for (token, owners) in owners_of {
            if owners.len() > 1 {
                report.violations.push(Violation::SharedToken {
                    key: key.to_owned(),
                    token,
                    owners: owners.into_iter().map(str::to_owned).collect(),
                });
            }
        }
        overlaps(key, holds, &mut report.violations);
        regressions(key, fresh, &mut report.violations);
    }
    report
}

fn count(report: &mut Report, op: &Op) {
    let label = match (&op.outcome, op.request) {
        (Outcome::Reply { status: 200, .. }, Request::Release { .. }) if op.outcome.freed() => {
            "200 released".to_owned()
        }
        (Outcome::Reply { status: 200, .. }, Request::Release { .. }) => {
            "200 still held".to_owned()
        }
        (Outcome::Reply { status, .. }, _) => status.to_string(),
        (Outcome::Timeout, _) => "timeout".to_owned(),
        (Outcome::Failed(_), _) => "failed".to_owned(),
    };
    match op.outcome {
        Outcome::Reply { status: 503, .. } => report.unavailable += 1,
        Outcome::Reply { status: 409, .. } => report.conflicts += 1,
        Outcome::Timeout => report.timeouts += 1,
        Outcome::Failed(_) => report.failures += 1,
        Outcome::Reply { .. } => {}
    }
    match op.request {
        Request::Acquire { .. } => report.acquires.add(label),
        Request::Release { .. } => report.releases.add(label),
        Request::Renew { .. } => report.renews.add(label),
    }
}

/// The hold of one grant (see the module doc).
fn hold(
    owner: &str,
    token: u64,
    e: &Evidence,
    release_503: Release503,
    at: impl Fn(Instant) -> Duration,
) -> HoldSeen {
    let from = e
        .acquires
        .iter()
        .map(|op| op.answered)
        .min()
        .expect("acquired");
    let last_answer = e
        .acquires
        .iter()
        .map(|op| op.answered)
        .max()
        .expect("acquired");
    let release = e
        .releases
        .iter()
        .filter(|op| ends_hold(&op.outcome, release_503))
        .map(|op| op.sent)
        .filter(|sent| *sent >= last_answer)
        .min();
    let lease_end = e
        .acquires
        .iter()
        .chain(&e.renews)
        .filter(|op| release.is_none_or(|r| op.sent < r))
        .map(|op| op.sent + ttl(op.request))
        .max()
        .expect("acquired");
    let (until, by_lease) = match release {
        Some(release) if release <= lease_end => (release, false),
        _ => (lease_end - CLOCK_TOLERANCE, true),
    };
    let mut ops: Vec<&Op> = e
        .acquires
        .iter()
        .chain(&e.renews)
        .chain(&e.releases)
        .copied()
        .collect();
    ops.sort_by_key(|op| op.sent);
    HoldSeen {
        owner: owner.to_owned(),
        token,
        from: at(from),
        until: at(until),
        by_lease,
        shared: false,
        story: ops.iter().map(|op| line(op, &at)).collect(),
    }
}

/// One op as a line of a violation's story.
fn line(op: &Op, at: impl Fn(Instant) -> Duration) -> String {
    let what = match op.request {
        Request::Acquire { ttl_ms, wait_ms } => format!("acquire ttl {ttl_ms} wait {wait_ms}"),
        Request::Renew { ttl_ms, .. } => format!("renew ttl {ttl_ms}"),
        Request::Release { .. } => "release".to_owned(),
    };
    let answer = match &op.outcome {
        Outcome::Reply {
            status,
            token,
            hold_count,
            released,
        } => {
            let mut answer = status.to_string();
            if let Some(token) = token {
                answer += &format!(" token {token}");
            }
            if let Some(n) = hold_count {
                answer += &format!(" hold_count {n}");
            }
            if let Some(released) = released {
                answer += &format!(" released {released}");
            }
            answer
        }
        Outcome::Timeout => "timeout".to_owned(),
        Outcome::Failed(why) => format!("failed: {why}"),
    };
    format!(
        "{what}: sent {:?}, answered {:?}: {answer}",
        at(op.sent),
        at(op.answered)
    )
}

/// Whether a release may have ended its hold: answered `200`, or not
/// answered (it may have committed), or `503` if the rule says so. Any
/// other answer says it did not.
fn ends_hold(outcome: &Outcome, release_503: Release503) -> bool {
    match outcome {
        Outcome::Reply { status: 200, .. } | Outcome::Timeout | Outcome::Failed(_) => true,
        Outcome::Reply { status: 503, .. } => release_503 == Release503::MayHaveCommitted,
        Outcome::Reply { .. } => false,
    }
}

fn ttl(request: Request) -> Duration {
    match request {
        Request::Acquire { ttl_ms, .. } | Request::Renew { ttl_ms, .. } => {
            Duration::from_millis(ttl_ms)
        }
        Request::Release { .. } => Duration::ZERO,
    }
}

/// Holds of one key that overlap: a sweep by start time against the hold
/// that reaches furthest so far (any hold, for an exclusive one) and the
/// exclusive hold that reaches furthest (for a shared one, which only
/// exclusive holds may not overlap).
fn overlaps(key: &str, mut holds: Vec<HoldSeen>, out: &mut Vec<Violation>) {
    // A hold whose lease ran out before its answer came was never usable.
    holds.retain(|h| h.until > h.from);
    holds.sort_by_key(|h| h.from);
    let mut reach: Option<HoldSeen> = None;
    let mut reach_exclusive: Option<HoldSeen> = None;
    for hold in holds {
        let against = if hold.shared {
            &reach_exclusive
        } else {
            &reach
        };
        if let Some(prev) = against {
            if prev.until > hold.from && prev.token != hold.token {
                out.push(Violation::Overlap {
                    key: key.to_owned(),
                    first: prev.clone(),
                    second: hold.clone(),
                });
            }
        }
        if !hold.shared
            && reach_exclusive
                .as_ref()
                .is_none_or(|r| hold.until > r.until)
        {
            reach_exclusive = Some(hold.clone());
        }
        if reach.as_ref().is_none_or(|r| hold.until > r.until) {
            reach = Some(hold);
        }
    }
}

/// Fresh grants whose token is not above that of a grant answered before
/// their request was sent.
fn regressions(key: &str, fresh: Vec<GrantSeen>, out: &mut Vec<Violation>) {
    let mut by_answer = fresh.clone();
    by_answer.sort_by_key(|g| g.answered);
    let mut by_send = fresh;
    by_send.sort_by_key(|g| g.sent);
    let mut answered = by_answer.into_iter().peekable();
    // The greatest token among the grants answered so far.
    let mut highest: Option<GrantSeen> = None;
    for later in by_send {
        while let Some(g) = answered.next_if(|g| g.answered < later.sent) {
            if highest.as_ref().is_none_or(|h| g.token > h.token) {
                highest = Some(g);
            }
        }
        if let Some(earlier) = &highest {
            if earlier.token >= later.token {
                out.push(Violation::TokenRegression {
                    key: key.to_owned(),
                    earlier: earlier.clone(),
                    later,
                });
            }
        }
    }
}

impl fmt::Display for Tally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(|(k, n)| format!("{k}: {n}")).collect();
        write!(f, "{}", parts.join(", "))
    }
}

impl fmt::Display for HoldSeen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} token {} held {:?}..{:?} (ended by {})",
            self.owner,
            self.token,
            self.from,
            self.until,
            if self.by_lease { "lease" } else { "release" }
        )?;
        for line in &self.story {
            write!(f, "\n      {line}")?;
        }
        Ok(())
    }
}

impl fmt::Display for GrantSeen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} token {} (sent {:?}, answered {:?})",
            self.owner, self.token, self.sent, self.answered
        )
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap { key, first, second } => {
                write!(
                    f,
                    "key {key:?}: overlapping holds: {first}\n    and {second}"
                )
            }
            Violation::TokenRegression {
                key,
                earlier,
                later,
            } => write!(
                f,
                "key {key:?}: token did not increase: {earlier}, then {later}"
            ),
            Violation::SharedToken { key, token, owners } => {
                write!(f, "key {key:?}: token {token} granted to {owners:?}")
            }
            Violation::ReleaseNotCommitted {
                key,
                owner,
                token,
                expires_at,
            } => write!(
                f,
                "key {key:?}: release of {owner} token {token} was answered 200 \
                 released, but the lease is live until {expires_at}"
            ),
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} ops, {} grants; acquires {{{}}}; releases {{{}}}; renews {{{}}}; \
             {} answered 503, {} answered 409, {} timed out, {} failed",
            self.ops,
            self.grants,
            self.acquires,
            self.releases,
            self.renews,
            self.unavailable,
            self.conflicts,
            self.timeouts,
            self.failures
        )?;
        writeln!(f, "{} violations", self.violations.len())?;
        let mut previous: Option<&Violation> = None;
        for v in self.violations.iter().take(SHOWN) {
            // The sweep finds every grant that a long hold overlaps, one
            // after the other: tell that hold's story once.
            match (previous, v) {
                (
                    Some(Violation::Overlap {
                        key: k0, first: f0, ..
                    }),
                    Violation::Overlap { key, first, second },
                ) if k0 == key && f0 == first => {
                    writeln!(f, "    ... it also overlaps {second}")?;
                }
                _ => writeln!(f, "  {v}")?,
            }
            previous = Some(v);
        }
        if self.violations.len() > SHOWN {
            writeln!(f, "  ... and {} more", self.violations.len() - SHOWN)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: u64 = 1_000;

    /// Builds histories with times in milliseconds from `t0`.
    struct Script {
        t0: Instant,
        ops: Vec<Op>,
    }

    impl Script {
        fn new() -> Script {
            Script {
                t0: Instant::now(),
                ops: Vec::new(),
            }
        }

        fn at(&self, ms: u64) -> Instant {
            self.t0 + Duration::from_millis(ms)
        }

        fn push(&mut self, owner: &str, request: Request, ms: (u64, u64), outcome: Outcome) {
            self.ops.push(Op {
                key: "k".into(),
                owner: owner.into(),
                request,
                sent: self.at(ms.0),
                answered: self.at(ms.1),
                outcome,
            });
        }

        fn grant(&mut self, owner: &str, token: u64, hold_count: u32, ms: (u64, u64)) {
            let request = Request::Acquire {
                ttl_ms: TTL,
                wait_ms: 0,
            };
            let outcome = Outcome::Reply {
                status: 200,
                token: Some(token),
                hold_count: Some(hold_count),
                released: None,
            };
            self.push(owner, request, ms, outcome);
        }

        fn busy(&mut self, owner: &str, ms: (u64, u64)) {
            let request = Request::Acquire {
                ttl_ms: TTL,
                wait_ms: 0,
            };
            let outcome = Outcome::Reply {
                status: 409,
                token: None,
                hold_count: None,
                released: None,
            };
            self.push(owner, request, ms, outcome);
        }

        fn release(&mut self, owner: &str, token: u64, ms: (u64, u64), outcome: Outcome) {
            self.push(owner, Request::Release { token }, ms, outcome);
        }

        fn renew(&mut self, owner: &str, token: u64, ms: (u64, u64)) {
            let outcome = Outcome::Reply {
                status: 200,
                token: Some(token),
                hold_count: Some(1),
                released: None,
            };
            let request = Request::Renew { token, ttl_ms: TTL };
            self.push(owner, request, ms, outcome);
        }

        fn check(&self) -> Report {
            check_ops(&self.ops, self.t0, Release503::default(), &|_| false)
        }
    }

    fn freed() -> Outcome {
        Outcome::Reply {
            status: 200,
            token: None,
            hold_count: Some(0),
            released: Some(true),
        }
    }

    fn unavailable() -> Outcome {
        Outcome::Reply {
            status: 503,
            token: None,
            hold_count: None,
            released: None,
        }
    }

    #[test]
    fn a_clean_history_passes_and_is_counted() {
        let mut s = Script::new();
        s.grant("a", 1, 1, (0, 5));
        s.busy("b", (6, 8));
        s.release("a", 1, (20, 25), freed());
        s.grant("b", 2, 1, (26, 30));
        s.renew("b", 2, (40, 42));
        s.release("b", 2, (50, 51), freed());
        // Request windows that overlap prove no order: 3 and 4 may come
        // either way round.
        s.grant("c", 4, 1, (60, 70));
        s.release("c", 4, (75, 76), freed());
        s.grant("a", 5, 1, (77, 80));
        s.release("a", 5, (81, 82), freed());
        let report = s.check();
        report.assert_clean();
        assert_eq!(report.grants, 4);
        assert_eq!(report.acquires.get("200"), 4);
        assert_eq!(report.conflicts, 1);
        assert_eq!(report.releases.get("200 released"), 4);
        assert_eq!(report.renews.get("200"), 1);
    }

    #[test]
    fn overlapping_holds_are_found() {
        let mut s = Script::new();
        s.grant("a", 1, 1, (0, 5));
        s.grant("b", 2, 1, (10, 12)); // a has not released yet
        s.release("a", 1, (20, 21), freed());
        s.release("b", 2, (30, 31), freed());
        let report = s.check();
        assert!(!report.is_clean());
        assert!(
            matches!(&report.violations[..], [Violation::Overlap { first, second, .. }]
                if first.owner == "a" && second.owner == "b"),
            "{report}"
        );
    }

    #[test]
    fn shared_holds_overlap_each_other_but_never_an_exclusive_one() {
        let readers = |op: &Op| op.owner.starts_with('r');
        let mut s = Script::new();
        s.grant("w0", 1, 1, (0, 2));
        s.release("w0", 1, (3, 4), freed());
        s.grant("r1", 2, 1, (5, 6));
        s.grant("r2", 3, 1, (7, 8)); // with r1: both read
        s.release("r1", 2, (20, 21), freed());
        s.release("r2", 3, (22, 23), freed());
        check_ops(&s.ops, s.t0, Release503::default(), &readers).assert_clean();
        // The same reads checked as exclusive holds overlap.
        assert!(!s.check().is_clean());

        // A writer that reaches past a longer read, and a read inside it.
        let mut s = Script::new();
        s.grant("w", 1, 1, (0, 1));
        s.grant("r1", 2, 1, (2, 3)); // overlaps w
        s.grant("r2", 3, 1, (4, 5)); // overlaps w, not r1's concern
        s.release("w", 1, (10, 11), freed());
        s.release("r2", 3, (12, 13), freed());
        s.release("r1", 2, (40, 41), freed());
        let report = check_ops(&s.ops, s.t0, Release503::default(), &readers);
        let second: Vec<&str> = report
            .violations
            .iter()
            .filter_map(|v| match v {
                Violation::Overlap { first, second, .. } if first.owner == "w" => {
                    Some(second.owner.as_str())
                }
                _ => None,
            })
            .collect();
        assert_eq!(second, ["r1", "r2"], "{report}");
    }

    #[test]
    fn token_regressions_are_found() {
        let mut s = Script::new();
        s.grant("a", 7, 1, (0, 5));
        s.release("a", 7, (10, 11), freed());
        s.grant("b", 6, 1, (20, 22)); // after a's grant, yet a lower token
        s.release("b", 6, (30, 31), freed());
        let report = s.check();
        assert!(
            matches!(&report.violations[..], [Violation::TokenRegression { earlier, later, .. }]
                if earlier.token == 7 && later.token == 6),
            "{report}"
        );
        let shown = std::panic::catch_unwind(|| report.assert_clean())
            .expect_err("assert_clean panics")
            .downcast::<String>()
            .expect("a message");
        assert!(shown.contains("token did not increase"), "{shown}");
    }

    #[test]
    fn one_token_for_two_owners_is_found() {
        let mut s = Script::new();
        s.grant("a", 3, 1, (0, 5));
        s.release("a", 3, (10, 11), freed());
        s.grant("b", 3, 1, (20, 22));
        let report = s.check();
        assert!(report
            .violations
            .iter()
            .any(|v| matches!(v, Violation::SharedToken { token: 3, .. })));
    }

    #[test]
    fn a_hold_whose_release_was_refused_ends_with_its_lease() {
        // 503 means the release did not happen: the lease lives until
        // 0 + TTL, and a grant to another owner before then overlaps.
        let mut s = Script::new();
        s.grant("a", 1, 1, (0, 5));
        s.release("a", 1, (10, 40), unavailable());
        s.grant("b", 2, 1, (500, 502));
        let report = s.check();
        assert!(
            matches!(&report.violations[..], [Violation::Overlap { first, .. }] if first.by_lease),
            "{report}"
        );

        let mut s = Script::new();
        s.grant("a", 1, 1, (0, 5));
        s.release("a", 1, (10, 40), unavailable());
        s.grant("b", 2, 1, (TTL + 10, TTL + 12));
        s.check().assert_clean();
    }

    #[test]
    fn a_503_release_may_be_read_as_ambiguous() {
        let mut s = Script::new();
        s.grant("a", 1, 1, (0, 5));
        s.release("a", 1, (10, 40), unavailable());
        s.grant("b", 2, 1, (500, 502));
        check_ops(&s.ops, s.t0, Release503::MayHaveCommitted, &|_| false).assert_clean();
        // Other refusals stay refusals: 409 says "not yours", not "freed".
        let mut s = Script::new();
        s.grant("a", 1, 1, (0, 5));
        let lost = Outcome::Reply {
            status: 409,
            token: None,
            hold_count: None,
            released: None,
        };
        s.release("a", 1, (10, 40), lost);
        s.grant("b", 2, 1, (500, 502));
        let report = check_ops(&s.ops, s.t0, Release503::MayHaveCommitted, &|_| false);
        assert_eq!(report.violations.len(), 1, "{report}");
    }

    #[test]
    fn a_renewal_extends_the_hold() {
        let mut s = Script::new();
        s.grant("a", 1, 1, (0, 5));
        s.renew("a", 1, (500, 502));
        // Renewed at 500: the lease may live until 500 + TTL.
        s.grant("b", 2, 1, (TTL + 10, TTL + 12));
        let report = s.check();
        assert!(
            matches!(&report.violations[..], [Violation::Overlap { first, .. }] if first.by_lease),
            "{report}"
        );
    }

    #[test]
    fn a_release_without_answer_ends_the_hold_when_sent() {
        let mut s = Script::new();
        s.grant("a", 1, 1, (0, 5));
        s.release("a", 1, (10, 500), Outcome::Timeout);
        // The release may have committed at once (its answer got lost).
        s.grant("b", 2, 1, (12, 14));
        s.check().assert_clean();
    }

    #[test]
    fn reentry_keeps_the_token_and_extends_the_hold() {
        let mut s = Script::new();
        s.grant("a", 1, 1, (0, 5));
        s.release("a", 1, (10, 12), unavailable());
        s.grant("a", 1, 2, (20, 22)); // the lease was still there
        s.release("a", 1, (30, 31), freed());
        s.grant("b", 2, 1, (25, 28)); // a still held it until 30
        let report = s.check();
        assert!(
            matches!(&report.violations[..], [Violation::Overlap { first, .. }]
                if first.until == Duration::from_millis(30)),
            "{report}"
        );
    }
}
