//! Logging setup: one subscriber for the process, writing to stderr as
//! text or as one JSON object per line (`--log-format`, `log_format`,
//! `LOCKBROKER_LOG_FORMAT`), filtered by `LOCKBROKER_LOG`.
//!
//! What is logged is chosen where it is logged; nothing here adds fields.
//! The one line per HTTP request is written by `http::access` (target
//! `lockbroker::access`, so `LOCKBROKER_LOG=info,lockbroker::access=off`
//! silences it). Secrets never reach a log line: requests are logged by
//! route, tenant name and key, never by header, and database URLs only
//! redacted.

use tracing_subscriber::EnvFilter;

pub use crate::config::LogFormat;

/// The filter when `LOCKBROKER_LOG` is unset or invalid.
const DEFAULT_FILTER: &str = "info,sqlx=warn";

/// Installs the process's subscriber. Call once, early in `main`.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_env("LOCKBROKER_LOG")
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Text => builder.init(),
        // Event fields at the top level of each object (`request_id`,
        // `status`, ...), next to `timestamp`, `level`, `target`, `message`.
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
