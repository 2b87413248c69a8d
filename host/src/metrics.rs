//! What the broker counts and times, exposed at `GET /metrics` in the
//! OpenMetrics text format by the official Prometheus client
//! (`prometheus-client`).
//!
//! Every metric is declared once in `metrics.toml` ([`catalogue`]) with its
//! type, label names and help text, and registered when [`Metrics`] is built: a metric
//! without labels shows (at zero) from the first scrape, a labelled family
//! with its first series.
//! Call sites use the small facade (`inc`, `add_counter`, `add_gauge`,
//! `set_gauge`, `observe`) with the metric's full name and its labels; the
//! facade finds the registered family. A name missing from the catalogue is
//! still recorded (registered on first use, with a warning), and a unit
//! test fails while any name used in `host/src` is missing, so the
//! catalogue stays the one list of what `/metrics` shows.
//!
//! Counter names end in `_total` as exposed; the client library adds that
//! suffix itself, so families are registered under the name without it.

use std::{
    collections::{HashMap, HashSet},
    sync::{Mutex, RwLock},
};

use prometheus_client::{
    encoding::text::encode,
    metrics::{
        counter::Counter,
        family::{Family, MetricConstructor},
        gauge::Gauge,
        histogram::Histogram,
    },
    registry::Registry,
};

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Request and operation latencies, in seconds: from a millisecond to the
/// longest wait an acquire may ask for (300 s).
const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
/// Database calls, in seconds: bounded by `db_timeout_ms` (at most 60 s).
const DB_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
];

/// What kind of metric a catalogue entry is.
#[derive(Debug, Clone, Copy)]
pub enum Kind {
    Counter,
    Gauge,
    /// With its bucket upper bounds (seconds).
    Histogram(&'static [f64]),
}

/// One metric as `/metrics` shows it.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    /// The exposed name (counters with their `_total`).
    pub name: &'static str,
    pub kind: Kind,
    /// Label names, in the order call sites pass them.
    pub labels: &'static [&'static str],
    pub help: &'static str,
}

/// Every metric of the broker (`metrics.toml`), parsed once.
pub fn catalogue() -> &'static [Spec] {
    static CATALOGUE: std::sync::OnceLock<Vec<Spec>> = std::sync::OnceLock::new();
    CATALOGUE.get_or_init(|| {
        #[derive(serde::Deserialize)]
        struct File {
            metric: Vec<Entry>,
        }
        #[derive(serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Entry {
            name: String,
            #[serde(rename = "type")]
            kind: String,
            buckets: Option<String>,
            #[serde(default)]
            labels: Vec<String>,
            help: String,
        }
        let file: File = toml::from_str(include_str!("metrics.toml")).expect("metrics.toml");
        // Leaked once: the catalogue lives as long as the process.
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        file.metric
            .into_iter()
            .map(|e| Spec {
                kind: match (e.kind.as_str(), e.buckets.as_deref()) {
                    ("counter", None) => Kind::Counter,
                    ("gauge", None) => Kind::Gauge,
                    ("histogram", Some("latency")) => Kind::Histogram(LATENCY_BUCKETS),
                    ("histogram", Some("database")) => Kind::Histogram(DB_BUCKETS),
                    other => panic!("metrics.toml: {}: bad type {other:?}", e.name),
                },
                name: leak(e.name),
                labels: Vec::leak(e.labels.into_iter().map(leak).collect()),
                help: leak(e.help),
            })
            .collect()
    })
}

/// A metric's labels as recorded: name and value, in call order.
type Labels = Vec<(String, String)>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// Builds a family's histograms with the catalogue's buckets.
#[derive(Debug, Clone, Copy)]
struct Buckets(&'static [f64]);

impl MetricConstructor<Histogram> for Buckets {
    fn new_metric(&self) -> Histogram {
        Histogram::new(self.0.iter().copied())
    }
}

/// A registered metric: one series without labels, or a family of them.
#[derive(Debug, Clone)]
enum Series<M, F = fn() -> M> {
    Plain(M),
    Labelled(Family<Labels, M, F>),
}

impl<M: Clone, F: MetricConstructor<M>> Series<M, F> {
    fn with<R>(&self, pairs: &[(&str, &str)], f: impl FnOnce(&M) -> R) -> R {
        match self {
            Series::Plain(m) => f(m),
            Series::Labelled(family) => f(&family.get_or_create(&labels(pairs))),
        }
    }

    fn get<R>(&self, pairs: &[(&str, &str)], f: impl FnOnce(&M) -> R) -> Option<R> {
        match self {
            Series::Plain(m) => Some(f(m)),
            Series::Labelled(family) => family.get(&labels(pairs)).map(|m| f(&m)),
        }
    }
}

#[derive(Debug, Clone)]
enum Instrument {
    Counter(Series<Counter>),
    Gauge(Series<Gauge>),
    Histogram(Series<Histogram, Buckets>),
}

/// The broker's metrics: a registry built from [`catalogue`] and the
/// families it holds, by exposed name.
pub struct Metrics {
    registry: RwLock<Registry>,
    instruments: RwLock<HashMap<&'static str, Instrument>>,
    /// Names already warned about (used with the wrong type, or missing
    /// from the catalogue): one warning each.
    warned: Mutex<HashSet<&'static str>>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let metrics = Metrics {
            registry: RwLock::new(Registry::default()),
            instruments: RwLock::new(HashMap::new()),
            warned: Mutex::new(HashSet::new()),
        };
        for spec in catalogue() {
            metrics.register(spec);
        }
        metrics
    }
}

impl Metrics {
    /// Registers `spec`'s family and returns it.
    fn register(&self, spec: &Spec) -> Instrument {
        let plain = spec.labels.is_empty();
        let instrument = match spec.kind {
            Kind::Counter if plain => Instrument::Counter(Series::Plain(Counter::default())),
            Kind::Counter => Instrument::Counter(Series::Labelled(Family::default())),
            Kind::Gauge if plain => Instrument::Gauge(Series::Plain(Gauge::default())),
            Kind::Gauge => Instrument::Gauge(Series::Labelled(Family::default())),
            Kind::Histogram(buckets) if plain => {
                Instrument::Histogram(Series::Plain(Buckets(buckets).new_metric()))
            }
            Kind::Histogram(buckets) => Instrument::Histogram(Series::Labelled(
                Family::new_with_constructor(Buckets(buckets)),
            )),
        };
        let mut registry = self.registry.write().expect("metrics registry");
        match instrument.clone() {
            Instrument::Counter(series) => {
                // The library appends `_total` to counters itself.
                let name = spec.name.strip_suffix("_total").unwrap_or(spec.name);
                match series {
                    Series::Plain(m) => registry.register(name, spec.help, m),
                    Series::Labelled(f) => registry.register(name, spec.help, f),
                }
            }
            Instrument::Gauge(Series::Plain(m)) => registry.register(spec.name, spec.help, m),
            Instrument::Gauge(Series::Labelled(f)) => registry.register(spec.name, spec.help, f),
            Instrument::Histogram(Series::Plain(m)) => {
                registry.register(spec.name, spec.help, m);
            }
            Instrument::Histogram(Series::Labelled(f)) => {
                registry.register(spec.name, spec.help, f);
            }
        }
        self.instruments
            .write()
            .expect("metrics instruments")
            .insert(spec.name, instrument.clone());
        instrument
    }

    /// The instrument called `name`; one of kind `kind` registered on the
    /// spot (with a warning) if the catalogue lacks it.
    fn instrument(&self, name: &'static str, kind: Kind, labelled: bool) -> Instrument {
        if let Some(found) = self.registered(name) {
            return found;
        }
        self.warn_once(name, "is not in metrics.toml; registered without help");
        // Two threads may both get here: the second registration wins the
        // map, and the first family stays registered but unused. Harmless
        // for a name that should not be missing anyway.
        let labels: &'static [&'static str] = if labelled { &["_"] } else { &[] };
        self.register(&Spec {
            name,
            kind,
            labels,
            help: "(not catalogued)",
        })
    }

    fn warn_once(&self, name: &'static str, what: &str) {
        if self.warned.lock().expect("metrics warned").insert(name) {
            tracing::warn!(metric = name, "metric {what}");
        }
    }

    fn with_counter(&self, name: &'static str, pairs: &[(&str, &str)], f: impl FnOnce(&Counter)) {
        match self.instrument(name, Kind::Counter, !pairs.is_empty()) {
            Instrument::Counter(series) => series.with(pairs, f),
            _ => self.warn_once(name, "is not a counter"),
        }
    }

    fn with_gauge(&self, name: &'static str, pairs: &[(&str, &str)], f: impl FnOnce(&Gauge)) {
        match self.instrument(name, Kind::Gauge, !pairs.is_empty()) {
            Instrument::Gauge(series) => series.with(pairs, f),
            _ => self.warn_once(name, "is not a gauge"),
        }
    }

    /// Adds one to a counter.
    pub fn inc(&self, name: &'static str, pairs: &[(&str, &str)]) {
        self.add_counter(name, pairs, 1);
    }

    /// Adds `n` to a counter.
    pub fn add_counter(&self, name: &'static str, pairs: &[(&str, &str)], n: u64) {
        self.with_counter(name, pairs, |c| {
            c.inc_by(n);
        });
    }

    /// Adds `delta` to a gauge.
    pub fn add_gauge(&self, name: &'static str, pairs: &[(&str, &str)], delta: i64) {
        self.with_gauge(name, pairs, |g| {
            g.inc_by(delta);
        });
    }

    /// Sets a gauge.
    pub fn set_gauge(&self, name: &'static str, pairs: &[(&str, &str)], value: i64) {
        self.with_gauge(name, pairs, |g| {
            g.set(value);
        });
    }

    /// Records one observation of a histogram, in seconds.
    pub fn observe(&self, name: &'static str, pairs: &[(&str, &str)], seconds: f64) {
        match self.instrument(name, Kind::Histogram(LATENCY_BUCKETS), !pairs.is_empty()) {
            Instrument::Histogram(series) => series.with(pairs, |h| h.observe(seconds)),
            _ => self.warn_once(name, "is not a histogram"),
        }
    }

    /// The instrument registered as `name`, if any (reading, not recording).
    fn registered(&self, name: &str) -> Option<Instrument> {
        let instruments = self.instruments.read().expect("metrics instruments");
        instruments.get(name).cloned()
    }

    /// The value of a counter (tests and the admin API); 0 if never counted.
    pub fn counter(&self, name: &'static str, pairs: &[(&str, &str)]) -> u64 {
        match self.registered(name) {
            Some(Instrument::Counter(series)) => series.get(pairs, Counter::get).unwrap_or(0),
            _ => 0,
        }
    }

    /// The value of a gauge (tests); 0 if never set.
    pub fn gauge(&self, name: &'static str, pairs: &[(&str, &str)]) -> i64 {
        match self.registered(name) {
            Some(Instrument::Gauge(series)) => series.get(pairs, Gauge::get).unwrap_or(0),
            _ => 0,
        }
    }

    /// The OpenMetrics text exposition of every registered metric
    /// (serve it as [`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry.read().expect("metrics registry"))
            .expect("writing to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_gauges_keep_their_exposed_names_and_labels() {
        let m = Metrics::default();
        m.inc(
            "lockbroker_policy_failures_total",
            &[("tenant", "x\"y"), ("export", "naming")],
        );
        m.inc(
            "lockbroker_policy_failures_total",
            &[("tenant", "x\"y"), ("export", "naming")],
        );
        m.add_gauge("lockbroker_election_pollers", &[], 3);
        m.add_gauge("lockbroker_election_pollers", &[], -1);
        m.add_counter("lockbroker_waiters_purged_total", &[], 5);
        let text = m.render();
        assert!(
            text.contains(
                "lockbroker_policy_failures_total{tenant=\"x\\\"y\",export=\"naming\"} 2\n"
            ),
            "{text}"
        );
        assert!(text.contains("\nlockbroker_election_pollers 2\n"), "{text}");
        assert!(
            text.contains("\nlockbroker_waiters_purged_total 5\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE lockbroker_policy_failures counter\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(
            m.counter(
                "lockbroker_policy_failures_total",
                &[("tenant", "x\"y"), ("export", "naming")]
            ),
            2
        );
        assert_eq!(
            m.counter(
                "lockbroker_policy_failures_total",
                &[("tenant", "z"), ("export", "naming")]
            ),
            0
        );
        assert_eq!(m.gauge("lockbroker_election_pollers", &[]), 2);
    }

    /// The value of the series `name` with exactly `labels` (in any
    /// order) in an exposition.
    fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let mut want: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
        want.sort();
        text.lines().find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, mut got) = match series.split_once('{') {
                Some((n, rest)) => (
                    n,
                    rest.trim_end_matches('}')
                        .split(',')
                        .map(str::to_owned)
                        .collect::<Vec<_>>(),
                ),
                None => (series, Vec::new()),
            };
            got.sort();
            (series_name == name && got == want).then(|| value.parse().ok())?
        })
    }

    #[test]
    fn every_catalogued_metric_is_registered_with_help() {
        let m = Metrics::default();
        // Labelled families show once they have a series; give each one.
        for spec in catalogue() {
            let pairs: Vec<(&str, &str)> = spec.labels.iter().map(|l| (*l, "x")).collect();
            match spec.kind {
                Kind::Counter => m.inc(spec.name, &pairs),
                Kind::Gauge => m.add_gauge(spec.name, &pairs, 1),
                Kind::Histogram(_) => m.observe(spec.name, &pairs, 0.01),
            }
        }
        let text = m.render();
        for spec in catalogue() {
            let family = spec.name.strip_suffix("_total").unwrap_or(spec.name);
            assert!(
                text.contains(&format!("# HELP {family} ")),
                "{} has no HELP:\n{text}",
                spec.name
            );
        }
        // Unlabelled series exist from the start, at zero.
        let fresh = Metrics::default().render();
        assert_eq!(
            sample(&fresh, "lockbroker_handoffs_total", &[]),
            Some(0.0),
            "{fresh}"
        );
        assert_eq!(
            sample(&fresh, "lockbroker_waiters", &[]),
            Some(0.0),
            "{fresh}"
        );
    }

    #[test]
    fn histograms_count_observations_into_buckets() {
        let m = Metrics::default();
        let labels = [("route", "locks"), ("action", "acquire"), ("status", "200")];
        m.observe("lockbroker_http_request_duration_seconds", &labels, 0.003);
        m.observe("lockbroker_http_request_duration_seconds", &labels, 0.2);
        let text = m.render();
        let bucket = |le: &'static str| {
            let mut with_le = labels.to_vec();
            with_le.push(("le", le));
            sample(
                &text,
                "lockbroker_http_request_duration_seconds_bucket",
                &with_le,
            )
        };
        assert_eq!(bucket("0.0025"), Some(0.0), "{text}");
        assert_eq!(bucket("0.005"), Some(1.0), "{text}");
        assert_eq!(bucket("0.25"), Some(2.0), "{text}");
        assert_eq!(bucket("+Inf"), Some(2.0), "{text}");
        assert_eq!(
            sample(
                &text,
                "lockbroker_http_request_duration_seconds_count",
                &labels
            ),
            Some(2.0),
            "{text}"
        );
        let sum = sample(
            &text,
            "lockbroker_http_request_duration_seconds_sum",
            &labels,
        )
        .unwrap();
        assert!((sum - 0.203).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn a_name_missing_from_the_catalogue_is_still_recorded_and_a_wrong_type_ignored() {
        let m = Metrics::default();
        m.inc("lockbroker_something_new_total", &[("a", "b")]);
        assert_eq!(
            m.counter("lockbroker_something_new_total", &[("a", "b")]),
            1
        );
        // A gauge used as a counter: ignored (and warned about), no panic.
        m.inc("lockbroker_election_pollers", &[]);
        assert_eq!(m.gauge("lockbroker_election_pollers", &[]), 0);
    }

    /// Every metric name that a call site in `host/src` passes is in the
    /// catalogue (so it is registered with help text and documented).
    #[test]
    fn every_metric_used_in_the_source_is_catalogued() {
        let catalogued: HashSet<&str> = catalogue().iter().map(|s| s.name).collect();
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut missing = Vec::new();
        let mut stack = vec![root];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") || path.ends_with("metrics.rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, _) in text.match_indices("\"lockbroker_") {
                    let rest = &text[i + 1..];
                    let name = &rest[..rest.find('"').unwrap_or(0)];
                    let is_metric = name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
                    if is_metric && !catalogued.contains(name) {
                        missing.push(format!("{}: {name}", path.display()));
                    }
                }
            }
        }
        assert!(missing.is_empty(), "not in metrics.toml: {missing:?}");
    }
}
