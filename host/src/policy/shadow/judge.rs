//! What a shadow candidate makes of one call ([`judge`]): the call is put
//! to it, its answer is checked as an answer of a policy in force is
//! (a storage key in range, an index of a waiter, delays under a day), and
//! compared with the answer in force; a disagreement is put in words, keys
//! cut to [`KEY_BYTES`] (an example of the report, read by people).

use super::Export;
use crate::policy::{
    checked_index, checked_naming, Contention, Decision, Policy, PolicyFault, Timing, Waiter,
};

/// Bytes of a key (or storage key) an example shows; longer ones are cut.
pub const KEY_BYTES: usize = 64;

/// Bytes of any other text of an example (a rejection's reason, a list of
/// waiters).
const TEXT_BYTES: usize = 256;

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
    Deadlocks {
        storage_key: String,
        active: bool,
    },
}

impl Call {
    pub(super) fn export(&self) -> Export {
        match self {
            Call::Naming { .. } => Export::Naming,
            Call::Fairness { .. } => Export::Fairness,
            Call::Backoff { .. } => Export::Backoff,
            Call::Timing { .. } => Export::Timing,
            Call::Deadlocks { .. } => Export::Deadlocks,
        }
    }
}

/// A disagreement in words.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Words {
    pub(super) input: String,
    pub(super) active: String,
    pub(super) candidate: String,
}

/// What the candidate made of one call.
#[derive(Debug)]
pub(super) enum Verdict {
    Agree,
    Disagree(Words),
    Failed(PolicyFault),
}

/// Puts `call` to `candidate` (a policy of `tenant`) and compares its
/// answer, checked as the answer of a policy in force is, with the active
/// one.
pub(super) fn judge(tenant: &str, candidate: &dyn Policy, call: Call) -> Verdict {
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
        Call::Deadlocks {
            storage_key,
            active,
        } => {
            // A candidate without `deadlocks` checks every key.
            let detect = if candidate.has_deadlocks() {
                candidate.detects_deadlocks(&storage_key)
            } else {
                Ok(true)
            };
            match detect {
                Err(fault) => Verdict::Failed(fault),
                Ok(detect) => verdict(detect == active, &|| Words {
                    input: format!("storage key {}", quoted(&storage_key)),
                    active: checked(active),
                    candidate: checked(detect),
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

fn checked(detect: bool) -> String {
    if detect { "checked" } else { "not checked" }.to_owned()
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::policy::{Builtin, Descriptor};

    /// The built-in policy, but keys with `x` are named upper-case, keys
    /// with `trap` trap, a waiter owned by `last` is picked last, and
    /// backoff always says 7 ms; `timing` gives a one-second hold;
    /// `deadlocks` leaves keys with `plain` unchecked and traps on keys
    /// with `trap`.
    pub(crate) struct Candidate;
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
        fn has_deadlocks(&self) -> bool {
            true
        }
        fn detects_deadlocks(&self, k: &str) -> Result<bool, PolicyFault> {
            if k.contains("trap") {
                return Err(PolicyFault::Trap("boom".into()));
            }
            Ok(!k.contains("plain"))
        }
    }

    pub(crate) fn naming_call(key: &str) -> Call {
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
        assert!(
            words.input.len() <= "key \"\"…".len() + KEY_BYTES,
            "{}",
            words.input
        );
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
        assert!(
            words.input.contains("\"last\" (priority 0"),
            "{}",
            words.input
        );

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

    #[test]
    fn deadlocks_agree_disagree_or_fail() {
        let deadlocks = |key: &str, active| Call::Deadlocks {
            storage_key: key.into(),
            active,
        };
        assert!(matches!(
            judge("t", &Candidate, deadlocks("job", true)),
            Verdict::Agree
        ));
        assert!(matches!(
            judge("t", &Candidate, deadlocks("plain-job", false)),
            Verdict::Agree
        ));
        let Verdict::Disagree(words) = judge("t", &Candidate, deadlocks("plain-job", true)) else {
            panic!("the candidate does not check plain keys")
        };
        assert_eq!(
            words,
            Words {
                input: "storage key \"plain-job\"".into(),
                active: "checked".into(),
                candidate: "not checked".into(),
            }
        );
        let Verdict::Disagree(words) = judge("t", &Candidate, deadlocks("job", false)) else {
            panic!("the candidate checks other keys")
        };
        assert_eq!(
            (words.active.as_str(), words.candidate.as_str()),
            ("not checked", "checked")
        );
        assert!(matches!(
            judge("t", &Candidate, deadlocks("trap", true)),
            Verdict::Failed(PolicyFault::Trap(_))
        ));
        // A candidate without `deadlocks` checks every key.
        assert!(matches!(
            judge("t", &Builtin, deadlocks("plain-job", true)),
            Verdict::Agree
        ));
        let Verdict::Disagree(words) = judge("t", &Builtin, deadlocks("plain-job", false)) else {
            panic!("the built-in policy checks every key")
        };
        assert_eq!(words.candidate, "checked");
    }
}
