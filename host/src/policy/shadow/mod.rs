//! Shadow mode: a candidate policy that runs beside the one in force, on
//! live traffic, and decides nothing.
//!
//! Each naming, fairness, backoff (and, while the policy in force exports
//! them, timing and deadlocks) call that the policy in force answers is
//! also put to the candidate, with the same input (the same random seed
//! for backoff), and the two answers are compared: agree, disagree, or the
//! candidate failed.
//! The latest disagreements are kept as examples, inputs and both answers
//! in words.
//!
//! Nothing of this is on a request's path: a request hands its call to a
//! bounded queue ([`QUEUE`]) and goes on with the answer of the policy in
//! force; one thread per shadow, at the lowest scheduling priority, puts
//! the calls to the candidate. When the candidate falls behind (it is slow,
//! it loops until its deadline on every call, or the machine is busy) the
//! queue fills and further calls are dropped, counted; and the thread
//! takes at most a tenth of a core on average ([`budget`]): calls met
//! while its budget is overdrawn are dropped, counted. The candidate was
//! loaded as any version is (validated, self-checked) and runs under the
//! tenant's limits (deadline, memory), so a trap or an overrun costs only
//! its own thread's time, and counts as `failed`.
//!
//! A shadow lives in its tenant's [`super::TenantPolicy`]: it survives
//! reloads, uploads and rollbacks of the policy in force, and ends when it
//! is promoted, dropped or replaced, when a config reload changes the
//! tenant's policy file or limits, or when the broker stops (it is not
//! recorded on disk: after a restart there is none).

pub mod budget;
mod judge;

use std::{
    collections::VecDeque,
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        mpsc::{self, Receiver, SyncSender, TrySendError},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use budget::Budget;

pub(crate) use judge::Call;
pub use judge::KEY_BYTES;
use judge::{judge, Verdict};

use super::{now_rfc3339, Loaded};
use crate::metrics::Metrics;

/// Calls waiting for the candidate, at most; more are dropped (counted).
pub const QUEUE: usize = 1024;

/// Disagreements kept as examples, the latest.
pub const EXAMPLES: usize = 10;

/// The metric that counts the candidates' answers.
const METRIC: &str = "lockbroker_policy_shadow_total";

/// An export of the policy world, as the shadow counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Export {
    Naming,
    Fairness,
    Backoff,
    Timing,
    Deadlocks,
}

impl Export {
    /// Every export, in the order reports list them.
    pub const ALL: [Export; 5] = [
        Export::Naming,
        Export::Fairness,
        Export::Backoff,
        Export::Timing,
        Export::Deadlocks,
    ];

    /// The export's name (the `export` label of the metrics).
    pub fn as_str(self) -> &'static str {
        match self {
            Export::Naming => "naming",
            Export::Fairness => "fairness",
            Export::Backoff => "backoff",
            Export::Timing => "timing",
            Export::Deadlocks => "deadlocks",
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

/// The counts and examples of a shadow, shared with its thread.
#[derive(Default)]
struct Tally {
    /// By export, then outcome (the order of `Export::ALL` and `Outcome`).
    counts: [[AtomicU64; 4]; Export::ALL.len()],
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
        Shadow::start_budgeted(
            tenant,
            candidate,
            bytes,
            metrics,
            (budget::SHARE, budget::BURST),
        )
    }

    /// [`Shadow::start`] with a CPU budget of `(share, burst)` (tests use
    /// small ones).
    fn start_budgeted(
        tenant: &str,
        candidate: Loaded,
        bytes: Vec<u8>,
        metrics: Arc<Metrics>,
        (share, burst): (f64, Duration),
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
            budget: Budget::new(share, burst, Instant::now()),
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
    budget: Budget,
}

impl Worker {
    /// Until the shadow ends (its queue's sender is dropped, or it says
    /// so): each call judged, counted, and kept as an example if the
    /// answers differ; or, while the budget is overdrawn, dropped.
    fn run(mut self, queued: Receiver<Call>) {
        lowest_priority();
        while let Ok(call) = queued.recv() {
            if self.tally.ended.load(Ordering::Relaxed) {
                return;
            }
            let export = call.export();
            let started = Instant::now();
            if !self.budget.allows(started) {
                self.tally.add(export, Outcome::Dropped);
                count(&self.metrics, &self.tenant, export, Outcome::Dropped);
                continue;
            }
            let verdict = judge(&self.tenant, &*self.candidate.policy, call);
            let failed = matches!(verdict, Verdict::Failed(_));
            self.budget.spend(started.elapsed(), failed);
            let outcome = match verdict {
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

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{
        judge::tests::{naming_call, Candidate},
        *,
    };
    use crate::policy::{Builtin, Contention, Decision, Descriptor, Policy, PolicyFault, Waiter};

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

    /// A candidate whose naming takes `took` of CPU (spinning).
    struct Slow {
        took: Duration,
    }
    impl Policy for Slow {
        fn describe(&self) -> Result<Descriptor, PolicyFault> {
            Builtin.describe()
        }
        fn storage_key(&self, t: &str, k: &str) -> Result<Result<String, String>, PolicyFault> {
            let started = Instant::now();
            while started.elapsed() < self.took {
                std::hint::spin_loop();
            }
            Builtin.storage_key(t, k)
        }
        fn pick_next(&self, k: &str, w: &[Waiter]) -> Result<u32, PolicyFault> {
            Builtin.pick_next(k, w)
        }
        fn next_delay(&self, c: &Contention) -> Result<Decision, PolicyFault> {
            Builtin.next_delay(c)
        }
    }

    #[test]
    fn a_shadow_past_its_cpu_budget_drops_calls_and_counts_them() {
        let metrics = Arc::new(Metrics::default());
        let candidate = Loaded {
            policy: Arc::new(Slow {
                took: Duration::from_millis(20),
            }),
            ..Loaded::builtin()
        };
        // 30 ms at once, then a tenth of wall time: two 20 ms calls, then
        // (the ten offered at once) nothing until 10 ms more are back.
        let budget = (0.10, Duration::from_millis(30));
        let shadow =
            Shadow::start_budgeted("t", candidate, Vec::new(), metrics.clone(), budget).unwrap();
        for n in 0..10 {
            shadow.offer(naming_call(&format!("job{n}")));
        }
        wait_until("every call is judged or dropped", || {
            let c = shadow.counts(Export::Naming);
            c.agree + c.dropped == 10
        });
        let c = shadow.counts(Export::Naming);
        // Two, or three if this machine stalled the thread for 100 ms.
        assert!((2..=3).contains(&c.agree), "{c:?}");
        assert_eq!(c.failed + c.disagree, 0, "{c:?}");
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
