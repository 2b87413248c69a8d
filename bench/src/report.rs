//! Result rows, the ratios with their targets, and how both are printed.

use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::{
    cpu::Usage,
    run::{Handoffs, Merged},
};

/// One measured run: a scenario at a client count.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub scenario: String,
    pub clients: usize,
    /// Completed operations (the scenario's unit) per second.
    pub ops_per_s: f64,
    pub ops: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub p999_ms: Option<f64>,
    /// Refused tries / all tries (409s, empty claims), when there were any.
    pub refused_share: Option<f64>,
    pub errors: u64,
    pub handoff: Option<Handoffs>,
    /// The release request alone.
    pub release_p50_ms: Option<f64>,
    /// CPU used during the timed part (seconds per process).
    pub cpu: Option<Usage>,
    /// Operations the CPU is divided by (all clients' when several kinds of
    /// clients shared the run).
    pub cpu_ops: u64,
    /// Scenario-specific numbers.
    pub extra: Map<String, Value>,
    /// The table's "extra" column.
    pub note: String,
}

impl Row {
    pub fn new(scenario: &str, clients: usize, duration: Duration, m: &Merged) -> Row {
        let tries = m.ops + m.refused;
        let mut row = Row {
            scenario: scenario.to_owned(),
            clients,
            ops_per_s: m.ops as f64 / duration.as_secs_f64(),
            ops: m.ops,
            p50_ms: m.lat.map(|p| p.p50_ms),
            p99_ms: m.lat.map(|p| p.p99_ms),
            p999_ms: m.lat.map(|p| p.p999_ms),
            refused_share: (m.refused > 0).then(|| m.refused as f64 / tries as f64),
            errors: m.errors,
            handoff: m.handoff,
            release_p50_ms: m.release.map(|p| p.p50_ms),
            cpu: m.cpu,
            cpu_ops: m.ops,
            extra: Map::new(),
            note: String::new(),
        };
        if let Some(share) = row.refused_share {
            row.add_note(format!("refused {:.1} %", share * 100.0));
        }
        if let Some(h) = m.handoff {
            row.add_note(format!(
                "handoff p50 {:.2} / p99 {:.2} ms",
                h.p50_ms, h.p99_ms
            ));
            for (what, split) in [("same-broker", h.same), ("cross-broker", h.cross)] {
                if let Some(s) = split {
                    row.add_note(format!(
                        "{what} {} pairs: p50 {:.2} / p99 {:.2} ms",
                        s.pairs, s.p50_ms, s.p99_ms
                    ));
                }
            }
        }
        if m.errors > 0 {
            row.add_note(format!("{} errors", m.errors));
        }
        row
    }

    pub fn add_note(&mut self, note: impl Into<String>) {
        if !self.note.is_empty() {
            self.note.push_str("; ");
        }
        self.note.push_str(&note.into());
    }

    pub fn set(&mut self, name: &str, value: impl Into<Value>) {
        self.extra.insert(name.to_owned(), value.into());
    }

    /// CPU µs per operation of a process.
    pub fn per_op(&self, seconds: Option<f64>) -> Option<f64> {
        (self.cpu_ops > 0).then_some(())?;
        Some(seconds? * 1e6 / self.cpu_ops as f64)
    }

    /// One line for stderr.
    pub fn progress(&self) -> String {
        format!(
            "{} c={}: {:.0} ops/s, p50 {} ms, p99 {} ms{}{}",
            self.scenario,
            self.clients,
            self.ops_per_s,
            ms(self.p50_ms),
            ms(self.p99_ms),
            if self.note.is_empty() { "" } else { "; " },
            self.note
        )
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"))
}

/// A ratio or threshold, with its target and whether it was met.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub name: String,
    pub value: Option<f64>,
    /// The value as shown (with its unit).
    pub shown: String,
    pub target: String,
    /// `None` when the inputs were not measured in this run.
    pub met: Option<bool>,
    pub detail: String,
}

impl Ratio {
    pub fn verdict(&self) -> &'static str {
        match self.met {
            Some(true) => "MET",
            Some(false) => "MISSED",
            // Measured, reported without a target.
            None if self.value.is_some() => "-",
            None => "NOT MEASURED",
        }
    }
}

/// The markdown results table and the ratios.
pub fn markdown(header: &str, rows: &[Row], ratios: &[Ratio]) -> String {
    let mut out = String::new();
    out.push_str(header);
    out.push_str("\n\n| scenario | clients | ops/s | p50 ms | p99 ms | p999 ms | extra |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---|\n");
    for r in rows {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {} | {} | {} | {} |\n",
            r.scenario,
            r.clients,
            r.ops_per_s,
            ms(r.p50_ms),
            ms(r.p99_ms),
            ms(r.p999_ms),
            r.note
        ));
    }
    if rows.iter().any(|r| r.cpu.is_some()) {
        out.push_str(
            "\n### CPU per operation (timed part of each run; /proc, 10 ms ticks)\n\n\
             | scenario | clients | broker µs/op | MariaDB µs/op | redis-server µs/op | lockbench µs/op | machine busy | others |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for r in rows {
            let Some(cpu) = r.cpu else { continue };
            let us = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
            let share = |v: Option<f64>| {
                v.zip(cpu.machine_total_s)
                    .filter(|(_, t)| *t > 0.0)
                    .map_or_else(
                        || "-".to_owned(),
                        |(v, t)| format!("{:.0} %", v / t * 100.0),
                    )
            };
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r.scenario,
                r.clients,
                us(r.per_op(cpu.broker_s)),
                us(r.per_op(cpu.db_s)),
                us(r.per_op(cpu.redis_s)),
                us(r.per_op(cpu.bench_s)),
                share(cpu.machine_busy_s),
                share(cpu.others_s()),
            ));
        }
    }
    out.push_str(
        "\n### Ratios\n\n| ratio | value | target | result | from |\n|---|---:|---|---|---|\n",
    );
    for r in ratios {
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            r.name,
            r.shown,
            r.target,
            r.verdict(),
            r.detail
        ));
    }
    out
}
