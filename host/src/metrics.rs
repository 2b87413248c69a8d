//! Counters and gauges, rendered as Prometheus text for `GET /metrics`.
//!
//! A plain map behind a mutex: every counted event is one database
//! transaction or more, so the map is never the bottleneck.

use std::{collections::BTreeMap, fmt::Write as _, sync::Mutex};

/// A series: metric name and its labels, rendered once.
type Series = (&'static str, String);

#[derive(Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<Series, u64>>,
    gauges: Mutex<BTreeMap<Series, i64>>,
}

/// Formats labels as `{a="x",b="y"}`, escaping values.
fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let mut out = String::from("{");
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let value = value
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = write!(out, "{name}=\"{value}\"");
    }
    out.push('}');
    out
}

impl Metrics {
    /// Adds one to a counter.
    pub fn inc(&self, name: &'static str, pairs: &[(&str, &str)]) {
        self.add_counter(name, pairs, 1);
    }

    /// Adds `n` to a counter.
    pub fn add_counter(&self, name: &'static str, pairs: &[(&str, &str)], n: u64) {
        *self
            .counters
            .lock()
            .expect("metrics lock")
            .entry((name, labels(pairs)))
            .or_default() += n;
    }

    /// Adds `delta` to a gauge.
    pub fn add_gauge(&self, name: &'static str, pairs: &[(&str, &str)], delta: i64) {
        *self
            .gauges
            .lock()
            .expect("metrics lock")
            .entry((name, labels(pairs)))
            .or_default() += delta;
    }

    /// Sets a gauge.
    pub fn set_gauge(&self, name: &'static str, pairs: &[(&str, &str)], value: i64) {
        self.gauges
            .lock()
            .expect("metrics lock")
            .insert((name, labels(pairs)), value);
    }

    /// The value of a counter (tests and the admin API).
    pub fn counter(&self, name: &'static str, pairs: &[(&str, &str)]) -> u64 {
        let key = (name, labels(pairs));
        self.counters
            .lock()
            .expect("metrics lock")
            .get(&key)
            .copied()
            .unwrap_or(0)
    }

    /// Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut last = "";
        for ((name, labels), value) in self.counters.lock().expect("metrics lock").iter() {
            if *name != last {
                let _ = writeln!(out, "# TYPE {name} counter");
                last = name;
            }
            let _ = writeln!(out, "{name}{labels} {value}");
        }
        for ((name, labels), value) in self.gauges.lock().expect("metrics lock").iter() {
            if *name != last {
                let _ = writeln!(out, "# TYPE {name} gauge");
                last = name;
            }
            let _ = writeln!(out, "{name}{labels} {value}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_gauges() {
        let m = Metrics::default();
        m.inc("a_total", &[("tenant", "x\"y")]);
        m.inc("a_total", &[("tenant", "x\"y")]);
        m.add_gauge("g", &[], 3);
        m.add_gauge("g", &[], -1);
        let text = m.render();
        assert!(text.contains("# TYPE a_total counter\na_total{tenant=\"x\\\"y\"} 2\n"));
        assert!(text.contains("# TYPE g gauge\ng 2\n"));
        assert_eq!(m.counter("a_total", &[("tenant", "x\"y")]), 2);
    }
}
