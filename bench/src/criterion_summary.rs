//! Reads criterion's `estimates.json` files and prints the medians (with
//! their 95 % confidence intervals) and criterion's own reported range (the
//! "time: [low estimate high]" line: the slope estimate, or the mean when
//! there is no slope) as a markdown table.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::Value;

/// Every `<bench>/new/` directory under `dir` with both JSON files.
fn bench_dirs(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if !path.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|n| n == "new") {
            if path.join("estimates.json").is_file() && path.join("benchmark.json").is_file() {
                out.push(path);
            }
        } else if path
            .file_name()
            .is_some_and(|n| n != "report" && n != "base")
        {
            bench_dirs(&path, out)?;
        }
    }
    Ok(())
}

/// Nanoseconds with a readable unit.
pub fn duration(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

fn interval(estimate: &Value) -> Option<(f64, f64, f64)> {
    Some((
        estimate["confidence_interval"]["lower_bound"].as_f64()?,
        estimate["point_estimate"].as_f64()?,
        estimate["confidence_interval"]["upper_bound"].as_f64()?,
    ))
}

pub fn markdown(dir: &Path) -> anyhow::Result<String> {
    let mut dirs = Vec::new();
    bench_dirs(dir, &mut dirs).with_context(|| format!("cannot read {}", dir.display()))?;
    let mut rows = Vec::new();
    for d in dirs {
        let read = |name: &str| -> anyhow::Result<Value> {
            let text = std::fs::read_to_string(d.join(name))?;
            Ok(serde_json::from_str(&text)?)
        };
        let (bench, est) = (read("benchmark.json")?, read("estimates.json")?);
        let id = bench["full_id"].as_str().unwrap_or("?").to_owned();
        let Some(median) = interval(&est["median"]) else {
            continue;
        };
        let typical = interval(&est["slope"]).or_else(|| interval(&est["mean"]));
        rows.push((id, median, typical));
    }
    if rows.is_empty() {
        anyhow::bail!("no criterion results under {}", dir.display());
    }
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    let mut out = String::from(
        "| benchmark | median | median 95 % CI | criterion's time [low est high] |\n|---|---:|---|---|\n",
    );
    for (id, (lo, m, hi), typical) in rows {
        let typical = typical.map_or_else(
            || "-".into(),
            |(l, e, h)| format!("[{} {} {}]", duration(l), duration(e), duration(h)),
        );
        out.push_str(&format!(
            "| {id} | {} | {} – {} | {typical} |\n",
            duration(m),
            duration(lo),
            duration(hi)
        ));
    }
    Ok(out)
}
