//! Where the CPU went during a run: the broker's, MariaDB's, Redis's and
//! this process's CPU time (from /proc/PID/stat), and the whole machine's busy
//! time (from /proc/stat), so the rest is what other processes used. On a
//! 2-core machine shared by the load generator, the broker and the database,
//! CPU per operation is what bounds throughput.

use std::sync::{
    atomic::{AtomicU32, Ordering},
    OnceLock,
};

use serde::Serialize;

/// Clock ticks per second of /proc's counters (USER_HZ, 100 on Linux).
const TICKS_PER_S: f64 = 100.0;

/// Which processes to watch, set once at start.
#[derive(Debug, Clone, Copy, Default)]
pub struct Watch {
    pub broker: Option<u32>,
    pub db: Option<u32>,
    pub redis: Option<u32>,
}

static WATCH: OnceLock<Watch> = OnceLock::new();
/// A second broker's pid while one runs (0: none); its CPU counts as the
/// broker's.
static SECOND_BROKER: AtomicU32 = AtomicU32::new(0);

/// Watches (or, with `None`, stops watching) a second broker process.
pub fn watch_second_broker(pid: Option<u32>) {
    SECOND_BROKER.store(pid.unwrap_or(0), Ordering::Relaxed);
}

/// Sets the processes to watch (the database server is found by name).
pub fn watch(broker: Option<u32>) -> Watch {
    let w = Watch {
        broker,
        db: find_process(&["mariadbd", "mysqld"]),
        redis: find_process(&["redis-server"]),
    };
    let _ = WATCH.set(w);
    w
}

/// A process's user + system time, in ticks.
fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces): state is
    // field 3, utime 14, stime 15.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The machine's (busy, total) ticks over all CPUs.
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .take(8)
        .filter_map(|f| f.parse().ok())
        .collect();
    if v.len() < 5 {
        return None;
    }
    let total: u64 = v.iter().sum();
    let idle = v[3] + v[4];
    Some((total - idle, total))
}

fn find_process(names: &[&str]) -> Option<u32> {
    let entries = std::fs::read_dir("/proc").ok()?;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if let Ok(comm) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
            if names.contains(&comm.trim()) {
                return Some(pid);
            }
        }
    }
    None
}

/// Counters at one instant.
#[derive(Debug, Clone, Copy, Default)]
pub struct Snapshot {
    broker: Option<u64>,
    second_broker: Option<u64>,
    db: Option<u64>,
    redis: Option<u64>,
    me: Option<u64>,
    machine: Option<(u64, u64)>,
}

pub fn snapshot() -> Snapshot {
    let w = WATCH.get().copied().unwrap_or_default();
    Snapshot {
        broker: w.broker.and_then(process_ticks),
        second_broker: Some(SECOND_BROKER.load(Ordering::Relaxed))
            .filter(|&pid| pid != 0)
            .and_then(process_ticks),
        db: w.db.and_then(process_ticks),
        redis: w.redis.and_then(process_ticks),
        me: process_ticks(std::process::id()),
        machine: machine_ticks(),
    }
}

/// CPU used between two snapshots, in seconds (machine: share of all CPUs).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Usage {
    /// The broker's CPU; with a second broker running, both together.
    pub broker_s: Option<f64>,
    /// The second broker's part of `broker_s`, when one ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub second_broker_s: Option<f64>,
    pub db_s: Option<f64>,
    pub redis_s: Option<f64>,
    pub bench_s: Option<f64>,
    /// Busy CPU time of the whole machine, seconds.
    pub machine_busy_s: Option<f64>,
    /// All CPU time available in the interval, seconds.
    pub machine_total_s: Option<f64>,
}

fn delta(a: Option<u64>, b: Option<u64>) -> Option<f64> {
    Some(b?.saturating_sub(a?) as f64 / TICKS_PER_S)
}

pub fn usage(from: Snapshot, to: Snapshot) -> Usage {
    let second_broker_s = delta(from.second_broker, to.second_broker);
    let broker_s = match (delta(from.broker, to.broker), second_broker_s) {
        (Some(a), Some(b)) => Some(a + b),
        (a, b) => a.or(b),
    };
    Usage {
        broker_s,
        second_broker_s,
        db_s: delta(from.db, to.db),
        redis_s: delta(from.redis, to.redis),
        bench_s: delta(from.me, to.me),
        machine_busy_s: delta(from.machine.map(|m| m.0), to.machine.map(|m| m.0)),
        machine_total_s: delta(from.machine.map(|m| m.1), to.machine.map(|m| m.1)),
    }
}

impl Usage {
    /// Adds another interval (pooled runs).
    pub fn add(&mut self, other: &Usage) {
        let sum = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.broker_s = sum(self.broker_s, other.broker_s);
        self.second_broker_s = sum(self.second_broker_s, other.second_broker_s);
        self.db_s = sum(self.db_s, other.db_s);
        self.redis_s = sum(self.redis_s, other.redis_s);
        self.bench_s = sum(self.bench_s, other.bench_s);
        self.machine_busy_s = sum(self.machine_busy_s, other.machine_busy_s);
        self.machine_total_s = sum(self.machine_total_s, other.machine_total_s);
    }

    /// CPU time of everything else on the machine, seconds.
    pub fn others_s(&self) -> Option<f64> {
        let known = self.broker_s.unwrap_or(0.0)
            + self.redis_s.unwrap_or(0.0)
            + self.db_s?
            + self.bench_s?;
        Some((self.machine_busy_s? - known).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_counters() {
        assert!(process_ticks(std::process::id()).is_some());
        let (busy, total) = machine_ticks().unwrap();
        assert!(busy <= total && total > 0);
    }
}
