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
pub const EXIT_REFUSED: u8 = 1;
/// Bad usage (clap uses 2 too) or a bad URL.
pub const EXIT_USAGE: u8 = 2;
/// The broker could not be reached or did not answer in time.
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
    /// result); lockctl's own errors are JSON only with `--json`.
    pub fn fail(self, what: &str, err: &Error, json_result: bool) -> ExitCode {
        let json = json_result || self.json_flag;
        let code = exit_code(err);
        match err.api() {
            Some(api) if json => self.json(&envelope(api.code.as_str(), &api.message)),
            _ if self.json_flag => self.json(&envelope(own_code(err), &err.to_string())),
            _ => {}
        }
        if !self.json_flag {
            eprintln!("lockctl: {what}: {err}");
        }
        ExitCode::from(code)
    }
}

/// `{"error": {"code", "message"}}`, the API's envelope.
pub fn envelope(code: &str, message: &str) -> serde_json::Value {
    serde_json::json!({"error": {"code": code, "message": message}})
}

/// The exit code of a failed call.
pub fn exit_code(err: &Error) -> u8 {
    match err {
        Error::Connect(_) | Error::Timeout(_) => EXIT_UNREACHABLE,
        Error::Url(_) => EXIT_USAGE,
        Error::LeaseLost(_) => EXIT_LEASE_LOST,
        Error::Api(_) | Error::Unexpected { .. } => EXIT_REFUSED,
    }
}

/// The code lockctl prints for failures that are not the broker's.
fn own_code(err: &Error) -> &'static str {
    match err {
        Error::Api(api) => api.code.as_str(),
        Error::Connect(_) | Error::Timeout(_) => "unreachable",
        Error::Url(_) => "usage",
        Error::LeaseLost(_) => "lease_lost",
        Error::Unexpected { .. } => "unexpected",
    }
}
