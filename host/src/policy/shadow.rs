//! Shadow mode: a candidate policy that runs beside the one in force, on
//! live traffic, and decides nothing.
//!
//! Each naming, fairness, backoff (and, while the policy in force exports
//! it, timing) call that the policy in force answers is also put to the
//! candidate, with the same input (the same random seed for backoff), and
//! the two answers are compared: agree, disagree, or the candidate failed.
//! The latest disagreements are kept as examples, inputs and both answers
//! in words.
//!
//! Nothing of this is on a request's path: a request hands its call to a
//! bounded queue ([`QUEUE`]) and goes on with the answer of the policy in
//! force; one thread per shadow, at the lowest scheduling priority, puts
//! the calls to the candidate. When the candidate falls behind (it is slow,
//! it loops until its deadline on every call, or the machine is busy) the
//! queue fills and further calls are dropped, counted. The candidate was
//! loaded as any version is (validated, self-checked) and runs under the
//! tenant's limits (deadline, memory), so a trap or an overrun costs only
//! its own thread's time, and counts as `failed`.
//!
//! A shadow lives in its tenant's [`super::TenantPolicy`]: it survives
//! reloads, uploads and rollbacks of the policy in force, and ends when it
//! is promoted, dropped or replaced, when a config reload changes the
//! tenant's policy file or limits, or when the broker stops (it is not
//! recorded on disk: after a restart there is none).

use std::{
    collections::VecDeque,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc::{self, Receiver, SyncSender, TrySendError},
        Arc, Mutex,
    },
};

use super::{
    checked_index, checked_naming, now_rfc3339, Contention, Decision, Loaded, Policy, PolicyFault,
    Timing, Waiter,
};
use crate::metrics::Metrics;

/// Calls waiting for the candidate, at most; more are dropped (counted).
pub const QUEUE: usize = 1024;

/// Disagreements kept as examples, the latest.
pub const EXAMPLES: usize = 10;

/// Bytes of a key (or storage key) an example shows; longer ones are cut.
pub const KEY_BYTES: usize = 64;

/// Bytes of any other text of an example (a rejection's reason, a list of
/// waiters).
const TEXT_BYTES: usize = 256;

/// The metric that counts the candidates' answers.
const METRIC: &str = "lockbroker_policy_shadow_total";

/// An export of the policy world, as the shadow counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Export {
    Naming,
    Fairness,
    Backoff,
    Timing,
}

impl Export {
    /// Every export, in the order reports list them.
    pub const ALL: [Export; 4] = [
        Export::Naming,
        Export::Fairness,
        Export::Backoff,
        Export::Timing,
    ];

    /// The export's name (the `export` label of the metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            Export::Naming => "naming",
            Export::Fairness => "fairness",
            Export::Backoff => "backoff",
            Export::Timing => "timing",
        }
    }
}

/// What became of one call put to (or meant for) the candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Agree,
    Disagree,
    Failed,
    Dropped,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Agree => "agree",
            Outcome::Disagree => "disagree",
            Outcome::Failed => "failed",
            Outcome::Dropped => "dropped",
        }
    }
}

/// How one export's calls went so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub agree: u64,
    pub disagree: u64,
    pub failed: u64,
    pub dropped: u64,
}

/// One disagreement: its input and both answers, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Example {
    pub export: Export,
    /// When the candidate answered, RFC 3339.
    pub at: String,
    pub input: String,
    pub active: String,
    pub candidate: String,
}

/// A call the policy in force answered, with its answer: what the
/// candidate is asked in turn.
#[derive(Debug, Clone)]
pub(crate) enum Call {
    Naming {
        key: String,
        active: Result<String, String>,
    },
    Fairness {
        key: String,
        waiters: Vec<Waiter>,
        active: usize,
    },
    Backoff {
        contention: Contention,
        active: Decision,
    },
    Timing {
        storage_key: String,
        active: Timing,
    },
}

impl Call {
    fn export(&self) -> Export {
        match self {
            Call::Naming { .. } => Export::Naming,
            Call::Fairness { .. } => Export::Fairness,
            Call::Backoff { .. } => Export::Backoff,
            Call::Timing { .. } => Export::Timing,
        }
    }
}

/// The counts and examples of a shadow, shared with its thread.
#[derive(Default)]
struct Tally {
    /// By export, then outcome (the order of `Export::ALL` and `Outcome`).
    counts: [[AtomicU64; 4]; 4],
    examples: Mutex<VecDeque<Example>>,
    /// Set when the shadow ends: its thread stops without finishing the
    /// calls still queued.
    ended: AtomicBool,
}

impl Tally {
    fn add(&self, export: Export, outcome: Outcome) {
        self.counts[export as usize][outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn get(&self, export: Export, outcome: Outcome) -> u64 {
        self.counts[export as usize][outcome as usize].load(Ordering::Relaxed)
    }

    fn keep(&self, example: Example) {
        let mut examples = self.examples.lock().expect("shadow examples");
        examples.push_front(example);
        examples.truncate(EXAMPLES);
    }
}

/// A candidate running beside a tenant's policy in force.
pub struct Shadow {
    candidate: Arc<Loaded>,
    /// The component's bytes: a promote writes them as the tenant's file
    /// and keeps them as a version.
    bytes: Vec<u8>,
    tenant: Arc<str>,
    tally: Arc<Tally>,
    calls: SyncSender<Call>,
    metrics: Arc<Metrics>,
}

impl Shadow {
    /// Starts `candidate` (loaded for `tenant`, from `bytes`) as a shadow:
    /// its thread waits for calls.
    ///
    /// # Errors
    /// The thread cannot be started.
    pub fn start(
        tenant: &str,
        candidate: Loaded,
        bytes: Vec<u8>,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Shadow> {
        let candidate = Arc::new(candidate);
        let tenant: Arc<str> = Arc::from(tenant);
        let tally = Arc::new(Tally::default());
        let (calls, queued) = mpsc::sync_channel(QUEUE);
        let worker = Worker {
            tenant: tenant.clone(),
            candidate: candidate.clone(),
            tally: tally.clone(),
            metrics: metrics.clone(),
        };
        std::thread::Builder::new()
            .name(format!("shadow-{tenant}"))
            .spawn(move || worker.run(queued))?;
        Ok(Shadow {
            candidate,
            bytes,
            tenant,
            tally,
            calls,
            metrics,
        })
    }

    /// The candidate.
    pub fn candidate(&self) -> &Arc<Loaded> {
        &self.candidate
    }

    /// The candidate component's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Hands `call` to the candidate's thread, or drops it (counted) when
    /// the queue is full. Never waits.
    pub(crate) fn offer(&self, call: Call) {
        let export = call.export();
        match self.calls.try_send(call) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.tally.add(export, Outcome::Dropped);
                count(&self.metrics, &self.tenant, export, Outcome::Dropped);
            }
        }
    }

    /// How `export`'s calls went so far.
    pub fn counts(&self, export: Export) -> Counts {
        let get = |outcome| self.tally.get(export, outcome);
        Counts {
            agree: get(Outcome::Agree),
            disagree: get(Outcome::Disagree),
            failed: get(Outcome::Failed),
            dropped: get(Outcome::Dropped),
        }
    }

    /// The latest disagreements, newest first.
    pub fn examples(&self) -> Vec<Example> {
        let examples = self.tally.examples.lock().expect("shadow examples");
        examples.iter().cloned().collect()
    }
}

impl Drop for Shadow {
    fn drop(&mut self) {
        self.tally.ended.store(true, Ordering::Relaxed);
    }
}

fn count(metrics: &Metrics, tenant: &str, export: Export, outcome: Outcome) {
    metrics.inc(
        METRIC,
        &[
            ("tenant", tenant),
            ("export", export.as_str()),
            ("outcome", outcome.as_str()),
        ],
    );
}

/// The thread that puts the queued calls to the candidate.
struct Worker {
    tenant: Arc<str>,
    candidate: Arc<Loaded>,
    tally: Arc<Tally>,
    metrics: Arc<Metrics>,
}

impl Worker {
    /// Until the shadow ends (its queue's sender is dropped, or it says
    /// so): each call judged, counted, and kept as an example if the
    /// answers differ.
    fn run(self, queued: Receiver<Call>) {
        lowest_priority();
        while let Ok(call) = queued.recv() {
            if self.tally.ended.load(Ordering::Relaxed) {
                return;
            }
            let export = call.export();
            let outcome = match judge(&self.tenant, &*self.candidate.policy, call) {
                Verdict::Agree => Outcome::Agree,
                Verdict::Disagree(words) => {
                    self.tally.keep(Example {
                        export,
                        at: now_rfc3339(),
                        input: words.input,
                        active: words.active,
                        candidate: words.candidate,
                    });
                    Outcome::Disagree
                }
                Verdict::Failed(fault) => {
                    // The first failure of each export is worth a line; a
                    // candidate that fails every call would flood the log.
                    if self.tally.get(export, Outcome::Failed) == 0 {
                        tracing::warn!(
                            tenant = %self.tenant,
                            export = export.as_str(),
                            %fault,
                            "shadow policy call failed (counted; requests are not affected)"
                        );
                    }
                    Outcome::Failed
                }
            };
            self.tally.add(export, outcome);
            count(&self.metrics, &self.tenant, export, outcome);
        }
    }
}

/// Lowers the calling thread's scheduling priority to the lowest (nice
/// 19): a candidate that runs to its deadline on every call then takes
/// only the CPU that requests leave. On Linux the nice value is per
/// thread. Best effort: if refused, the thread runs at the usual priority.
fn lowest_priority() {
    // SAFETY: `setpriority` reads no memory of ours; with `PRIO_PROCESS`
    // and `who` 0 it changes the calling thread's nice value on Linux.
    let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
}

/// A disagreement in words.
#[derive(Debug, PartialEq, Eq)]
struct Words {
    input: String,
    active: String,
    candidate: String,
}

/// What the candidate made of one call.
#[derive(Debug)]
enum Verdict {
    Agree,
    Disagree(Words),
    Failed(PolicyFault),
}

/// Puts `call` to `candidate` (a policy of `tenant`) and compares its
/// answer, checked as the answer of a policy in force is, with the active
/// one.
fn judge(tenant: &str, candidate: &dyn Policy, call: Call) -> Verdict {
    let verdict = |same: bool, words: &dyn Fn() -> Words| {
        if same {
            Verdict::Agree
        } else {
            Verdict::Disagree(words())
        }
    };
    match call {
        Call::Naming { key, active } => {
            match candidate.storage_key(tenant, &key).and_then(checked_naming) {
                Err(fault) => Verdict::Failed(fault),
                Ok(named) => {
                    // Two rejections agree whatever their reasons.
                    let same = match (&active, &named) {
                        (Ok(a), Ok(b)) => a == b,
                        (Err(_), Err(_)) => true,
                        _ => false,
                    };
                    verdict(same, &|| Words {
                        input: format!("key {}", quoted(&key)),
                        active: naming(&active),
                        candidate: naming(&named),
                    })
                }
            }
        }
        Call::Fairness {
            key,
            waiters,
            active,
        } => {
            let picked = candidate
                .pick_next(&key, &waiters)
                .and_then(|i| checked_index(i, waiters.len()));
            match picked {
                Err(fault) => Verdict::Failed(fault),
                Ok(index) => verdict(index == active, &|| Words {
                    input: clip(
                        &format!("key {}, waiters {}", quoted(&key), waiter_list(&waiters)),
                        TEXT_BYTES,
                    ),
                    active: pick(&waiters, active),
                    candidate: pick(&waiters, index),
                }),
            }
        }
        Call::Backoff { contention, active } => match candidate.next_delay(&contention) {
            Err(fault) => Verdict::Failed(fault),
            Ok(decision) => verdict(decision == active, &|| Words {
                input: contention_words(&contention),
                active: delay(active),
                candidate: delay(decision),
            }),
        },
        Call::Timing {
            storage_key,
            active,
        } => {
            let timing = if candidate.has_timing() {
                candidate.timing(&storage_key).and_then(Timing::checked)
            } else {
                Ok(Timing::default())
            };
            match timing {
                Err(fault) => Verdict::Failed(fault),
                Ok(timing) => verdict(timing == active, &|| Words {
                    input: format!("storage key {}", quoted(&storage_key)),
                    active: delays(active),
                    candidate: delays(timing),
                }),
            }
        }
    }
}

/// `s`, cut to at most `max` bytes (at a character boundary) and marked
/// `…` when cut.
fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A key, cut to [`KEY_BYTES`], quoted with control characters escaped.
fn quoted(key: &str) -> String {
    format!("{:?}", clip(key, KEY_BYTES))
}

fn naming(answer: &Result<String, String>) -> String {
    match answer {
        Ok(storage_key) => quoted(storage_key),
        Err(reason) => format!("rejected: {}", clip(reason, TEXT_BYTES)),
    }
}

fn waiter_list(waiters: &[Waiter]) -> String {
    let each: Vec<String> = waiters
        .iter()
        .map(|w| {
            format!(
                "{} (priority {}, attempts {})",
                quoted(&w.owner),
                w.priority,
                w.attempts
            )
        })
        .collect();
    format!("[{}]", each.join(", "))
}

fn pick(waiters: &[Waiter], index: usize) -> String {
    match waiters.get(index) {
        Some(w) => format!("waiter {index} ({})", quoted(&w.owner)),
        None => format!("waiter {index}"),
    }
}

fn contention_words(c: &Contention) -> String {
    format!(
        "attempt {}, waited {} ms, budget {} ms, {} waiters, lease remaining {} ms, seed {}",
        c.attempt, c.waited_ms, c.budget_ms, c.waiters, c.lease_remaining_ms, c.seed
    )
}

fn delay(decision: Decision) -> String {
    match decision {
        Decision::RetryAfter(ms) => format!("retry after {ms} ms"),
        Decision::GiveUp => "give up".to_owned(),
    }
}

fn delays(timing: Timing) -> String {
    let value = |v: Option<u64>| v.map_or_else(|| "configured".to_owned(), |ms| format!("{ms} ms"));
    format!(
        "lock-delay {}, min-hold {}",
        value(timing.lock_delay_ms),
        value(timing.min_hold_ms)
    )
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::policy::{Builtin, Descriptor};

    /// The built-in policy, but keys with `x` are named upper-case, keys
    /// with `trap` trap, a waiter owned by `last` is picked last, and
    /// backoff always says 7 ms; `timing` gives a one-second hold.
    struct Candidate;
    impl Policy for Candidate {
        fn describe(&self) -> Result<Descriptor, PolicyFault> {
            Builtin.describe()
        }
        fn storage_key(&self, t: &str, k: &str) -> Result<Result<String, String>, PolicyFault> {
            if k.contains("trap") {
                return Err(PolicyFault::Trap("boom".into()));
            }
            if k.contains('x') {
                return Ok(Ok(k.to_uppercase()));
            }
            Builtin.storage_key(t, k)
        }
        fn pick_next(&self, _: &str, w: &[Waiter]) -> Result<u32, PolicyFault> {
            let last = w.iter().position(|w| w.owner == "last").unwrap_or(0);
            Ok(u32::try_from(last).unwrap_or(0))
        }
        fn next_delay(&self, _: &Contention) -> Result<Decision, PolicyFault> {
            Ok(Decision::RetryAfter(7))
        }
        fn has_timing(&self) -> bool {
            true
        }
        fn timing(&self, _: &str) -> Result<Timing, PolicyFault> {
            Ok(Timing {
                lock_delay_ms: None,
                min_hold_ms: Some(1_000),
            })
        }
    }

    fn naming_call(key: &str) -> Call {
        Call::Naming {
            key: key.into(),
            active: Builtin.storage_key("t", key).unwrap(),
        }
    }

    #[test]
    fn naming_agrees_disagrees_or_fails() {
        assert!(matches!(
            judge("t", &Candidate, naming_call("job")),
            Verdict::Agree
        ));
        // Two rejections agree, whatever their reasons.
        let rejected = Call::Naming {
            key: String::new(),
            active: Err("another reason".into()),
        };
        assert!(matches!(judge("t", &Candidate, rejected), Verdict::Agree));
        let Verdict::Disagree(words) = judge("t", &Candidate, naming_call("box")) else {
            panic!("box is named BOX by the candidate")
        };
        assert_eq!(
            words,
            Words {
                input: "key \"box\"".into(),
                active: "\"box\"".into(),
                candidate: "\"BOX\"".into(),
            }
        );
        assert!(matches!(
            judge("t", &Candidate, naming_call("trap")),
            Verdict::Failed(PolicyFault::Trap(_))
        ));
    }

    #[test]
    fn keys_in_examples_are_cut() {
        let long = format!("x{}", "é".repeat(100));
        let Verdict::Disagree(words) = judge("t", &Candidate, naming_call(&long)) else {
            panic!("an x key disagrees")
        };
        // Quoted, cut to 64 bytes at a character boundary, marked.
        assert!(words.input.len() <= "key \"\"…".len() + KEY_BYTES, "{}", words.input);
        assert!(words.input.ends_with("…\""), "{}", words.input);
        assert!(words.candidate.ends_with("…\""), "{}", words.candidate);
        assert_eq!(clip("abc", 3), "abc");
        assert_eq!(clip("abcd", 3), "abc…");
        assert_eq!(clip("aé", 2), "a…");
        assert_eq!(quoted("a\nb"), "\"a\\nb\"");
    }

    #[test]
    fn fairness_backoff_and_timing_are_compared() {
        let waiters = |owners: &[&str]| -> Vec<Waiter> {
            owners
                .iter()
                .map(|o| Waiter {
                    owner: (*o).into(),
                    ..Waiter::default()
                })
                .collect()
        };
        let fair = |owners: &[&str], active| Call::Fairness {
            key: "k".into(),
            waiters: waiters(owners),
            active,
        };
        assert!(matches!(
            judge("t", &Candidate, fair(&["a", "b"], 0)),
            Verdict::Agree
        ));
        let Verdict::Disagree(words) = judge("t", &Candidate, fair(&["a", "last"], 0)) else {
            panic!("the candidate picks `last`")
        };
        assert_eq!(words.active, "waiter 0 (\"a\")");
        assert_eq!(words.candidate, "waiter 1 (\"last\")");
        assert!(words.input.contains("\"last\" (priority 0"), "{}", words.input);

        let backoff = |active| Call::Backoff {
            contention: Contention::default(),
            active,
        };
        assert!(matches!(
            judge("t", &Candidate, backoff(Decision::RetryAfter(7))),
            Verdict::Agree
        ));
        let Verdict::Disagree(words) = judge("t", &Candidate, backoff(Decision::GiveUp)) else {
            panic!("7 ms is not giving up")
        };
        assert_eq!(
            (words.active.as_str(), words.candidate.as_str()),
            ("give up", "retry after 7 ms")
        );

        let timing = Call::Timing {
            storage_key: "k".into(),
            active: Timing::default(),
        };
        let Verdict::Disagree(words) = judge("t", &Candidate, timing) else {
            panic!("a one-second hold is not the configured one")
        };
        assert_eq!(words.candidate, "lock-delay configured, min-hold 1000 ms");
        // A candidate without `timing` answers the configured values.
        let timing = Call::Timing {
            storage_key: "k".into(),
            active: Timing::default(),
        };
        assert!(matches!(judge("t", &Builtin, timing), Verdict::Agree));
    }

    /// A candidate whose naming says it `entered`, then blocks until
    /// `open` is set.
    #[derive(Default)]
    struct Gated {
        entered: AtomicBool,
        open: AtomicBool,
    }
    impl Policy for Arc<Gated> {
        fn describe(&self) -> Result<Descriptor, PolicyFault> {
            Builtin.describe()
        }
        fn storage_key(&self, t: &str, k: &str) -> Result<Result<String, String>, PolicyFault> {
            self.entered.store(true, Ordering::Relaxed);
            wait_until("the gate opens", || self.open.load(Ordering::Relaxed));
            Builtin.storage_key(t, k)
        }
        fn pick_next(&self, k: &str, w: &[Waiter]) -> Result<u32, PolicyFault> {
            Builtin.pick_next(k, w)
        }
        fn next_delay(&self, c: &Contention) -> Result<Decision, PolicyFault> {
            Builtin.next_delay(c)
        }
    }

    fn wait_until(what: &str, check: impl Fn() -> bool) {
        let started = Instant::now();
        while !check() {
            assert!(started.elapsed() < Duration::from_secs(30), "{what}");
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_shadow_that_falls_behind_drops_calls_and_counts_them() {
        let gate = Arc::new(Gated::default());
        let metrics = Arc::new(Metrics::default());
        let candidate = Loaded {
            policy: Arc::new(gate.clone()),
            ..Loaded::builtin()
        };
        let shadow = Shadow::start("t", candidate, Vec::new(), metrics.clone()).unwrap();
        // One call held by the candidate, then QUEUE queued and 5 dropped.
        shadow.offer(naming_call("job"));
        wait_until("the first call is taken", || {
            gate.entered.load(Ordering::Relaxed)
        });
        for _ in 0..QUEUE + 5 {
            shadow.offer(naming_call("job"));
        }
        assert_eq!(shadow.counts(Export::Naming).dropped, 5);
        gate.open.store(true, Ordering::Relaxed);
        wait_until("the queued calls are judged", || {
            shadow.counts(Export::Naming).agree == QUEUE as u64 + 1
        });
        let text = metrics.render();
        assert!(
            text.contains(
                "lockbroker_policy_shadow_total{tenant=\"t\",export=\"naming\",outcome=\"dropped\"} 5"
            ),
            "{text}"
        );
    }

    #[test]
    fn counts_and_examples_of_a_running_shadow() {
        let metrics = Arc::new(Metrics::default());
        let candidate = Loaded {
            policy: Arc::new(Candidate),
            ..Loaded::builtin()
        };
        let shadow = Shadow::start("t", candidate, b"wasm".to_vec(), metrics.clone()).unwrap();
        assert_eq!(shadow.bytes(), b"wasm");
        for n in 0..(EXAMPLES + 5) {
            shadow.offer(naming_call(&format!("x{n}")));
            shadow.offer(naming_call(&format!("job{n}")));
        }
        shadow.offer(naming_call("trap"));
        let total = 2 * (EXAMPLES + 5) as u64 + 1;
        wait_until("every call is judged", || {
            let c = shadow.counts(Export::Naming);
            c.agree + c.disagree + c.failed + c.dropped == total
        });
        let c = shadow.counts(Export::Naming);
        assert_eq!(
            (c.agree, c.disagree, c.failed, c.dropped),
            (15, 15, 1, 0),
            "{c:?}"
        );
        let examples = shadow.examples();
        assert_eq!(examples.len(), EXAMPLES);
        // Newest first.
        assert_eq!(examples[0].input, format!("key \"x{}\"", EXAMPLES + 4));
        assert_eq!(examples[0].export, Export::Naming);
        assert_eq!(shadow.counts(Export::Backoff), Counts::default());
        let text = metrics.render();
        assert!(
            text.contains(
                "lockbroker_policy_shadow_total{tenant=\"t\",export=\"naming\",outcome=\"disagree\"} 15"
            ),
            "{text}"
        );
    }
}
