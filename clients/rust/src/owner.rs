//! Who holds a lease. The broker treats the same owner acquiring a lock it
//! holds as re-entry, so two tasks of one process must not share an owner
//! by accident: guards get a fresh owner each (`host:pid:n`) unless the
//! caller names one.

use std::sync::atomic::{AtomicU64, Ordering};

/// This machine's name: the kernel's host name, else `$HOSTNAME`, else
/// `localhost`.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// `host:pid`, the default identity of a client.
pub(crate) fn default_identity() -> String {
    format!("{}:{}", host_name(), std::process::id())
}

/// `{identity}:{n}`, with `n` unique in this process.
pub(crate) fn unique(identity: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("{identity}:{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_unique_and_carry_the_identity() {
        let a = unique("host:1");
        let b = unique("host:1");
        assert_ne!(a, b);
        assert!(a.starts_with("host:1:"), "{a}");
        assert!(!host_name().is_empty());
    }
}
