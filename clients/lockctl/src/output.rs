//! What lockctl prints and the exit codes it ends with: one place, so every
//! command tells success, refusal and an unreachable broker apart the same
//! way.
//!
//! JSON output (the default of `acquire`, `release`, `renew` and `status`,
//! and of every command with `--json`) puts exactly one JSON document per
//! result on stdout, errors included (`{"error": {"code", "message"}}`);
//! `watch --json` prints one per line. Human output goes to stdout, errors
//! to stderr.

use std::{io::Write, process::ExitCode};

use lockbroker_client::Error;
use serde::Serialize;

/// The broker refused (the JSON error is printed), or answered nonsense.
/// A 429 too: it is waited out within the calls' deadline first, and then
/// printed with how long to wait.
pub const EXIT_REFUSED: u8 = 1;
/// Bad usage (clap uses 2 too), a bad URL or TLS file.
pub const EXIT_USAGE: u8 = 2;
/// The broker could not be reached (TLS with it failed), or did not answer
/// in time.
pub const EXIT_UNREACHABLE: u8 = 3;
/// `validate`: the token is not the live grant.
pub const EXIT_INVALID: u8 = 4;
/// `run` could not get the lock within `--wait-ms`.
pub const EXIT_NOT_ACQUIRED: u8 = 75;
/// `run` lost the lease while the command ran (the command was stopped).
pub const EXIT_LEASE_LOST: u8 = 76;

/// How results are printed.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// `--json` was given: lockctl's own errors are JSON on stdout too.
    pub json_flag: bool,
}

impl Output {
    /// Prints `value` as one line of JSON on stdout.
    pub fn json(self, value: &impl Serialize) {
        let line = serde_json::to_string(value).expect("JSON values serialize");
        let mut stdout = std::io::stdout().lock();
        // A closed stdout (`lockctl watch | head -1`) is not our failure.
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    }

    /// Prints a line for people on stdout.
    pub fn human(self, line: &str) {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{line}");
        let _ = stdout.flush();
    }

    /// Reports `err` and gives its exit code. `json_result`: this command's
    /// result is JSON (so a refusal's envelope goes to stdout as its
    /// result); lockctl's own errors are JSON only with `--json`. A
    /// refusal that says when to try again (a 429, `lock_held`) says it on
    /// stderr too: `...; retry after N ms`.
    pub fn fail(self, what: &str, err: &Error, json_result: bool) -> ExitCode {
        let json = json_result || self.json_flag;
        let code = exit_code(err);
        let retry_after_ms = err
            .retry_after()
            .map(|wait| u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
        match err.api() {
            Some(api) if json => self.json(&envelope_with(
                api.code.as_str(),
                &api.message,
                retry_after_ms,
            )),
            _ if self.json_flag => self.json(&envelope(own_code(err), &err.to_string())),
            _ => {}
        }
        if !self.json_flag {
            match retry_after_ms {
                Some(ms) => eprintln!("lockctl: {what}: {err}; retry after {ms} ms"),
                None => eprintln!("lockctl: {what}: {err}"),
            }
        }
        ExitCode::from(code)
    }
}

/// `{"error": {"code", "message"}}`, the API's envelope.
pub fn envelope(code: &str, message: &str) -> serde_json::Value {
    envelope_with(code, message, None)
}

/// The API's envelope, with its `retry_after_ms` when there is one.
fn envelope_with(code: &str, message: &str, retry_after_ms: Option<u64>) -> serde_json::Value {
    let mut error = serde_json::json!({"code": code, "message": message});
    if let Some(ms) = retry_after_ms {
        error["retry_after_ms"] = ms.into();
    }
    serde_json::json!({ "error": error })
}

/// The exit code of a failed call.
pub fn exit_code(err: &Error) -> u8 {
    match err {
        Error::Connect(_) | Error::OutcomeUnknown(_) | Error::Tls(_) | Error::Timeout(_) => {
            EXIT_UNREACHABLE
        }
        Error::Url(_) | Error::TlsFile { .. } => EXIT_USAGE,
        Error::LeaseLost(_) => EXIT_LEASE_LOST,
        Error::Api(_) | Error::Deadlock { .. } | Error::Unexpected { .. } => EXIT_REFUSED,
    }
}

/// The code lockctl prints for failures that are not the broker's.
fn own_code(err: &Error) -> &'static str {
    match err {
        Error::Api(api) | Error::Deadlock { refusal: api, .. } => api.code.as_str(),
        Error::Connect(_) | Error::Timeout(_) => "unreachable",
        Error::OutcomeUnknown(_) => "outcome_unknown",
        Error::Tls(_) => "tls",
        Error::Url(_) | Error::TlsFile { .. } => "usage",
        Error::LeaseLost(_) => "lease_lost",
        Error::Unexpected { .. } => "unexpected",
    }
}
