//! The second broker of `contended-cross`: another broker process on the
//! same database. lockbench starts nothing by itself: either the second
//! broker already runs, or the caller (scripts/bench) passes the commands
//! that start and stop it, run around each `contended-cross` run so that it
//! costs nothing during the other scenarios.

use std::time::{Duration, Instant};

use crate::http::Client;
use anyhow::{bail, Context as _};

use crate::cpu;

/// How long a started second broker has to answer `/readyz`.
const READY_WITHIN: Duration = Duration::from_secs(30);

pub struct SecondBroker {
    pub url: String,
    /// Shell command that starts it and prints its pid (last word of its
    /// output).
    pub start: Option<String>,
    /// Shell command that stops it.
    pub stop: Option<String>,
    /// Its pid, when it runs throughout (for its CPU, counted during
    /// `contended-cross` only).
    pub pid: Option<u32>,
}

async fn shell(cmd: &str) -> anyhow::Result<String> {
    let out = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()
        .await
        .with_context(|| format!("cannot run `{cmd}`"))?;
    if !out.status.success() {
        bail!("`{cmd}` failed ({})", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl SecondBroker {
    /// Starts the second broker (with the start command, if any) and waits
    /// until it is ready; from then on its CPU counts as the broker's.
    pub async fn up(&self) -> anyhow::Result<()> {
        let mut pid = self.pid;
        if let Some(cmd) = &self.start {
            let said = shell(cmd).await?;
            pid = said
                .split_whitespace()
                .last()
                .and_then(|w| w.parse().ok())
                .or(pid);
        }
        let client = Client::new(&self.url, None).map_err(|e| anyhow::anyhow!("{e}"))?;
        let started = Instant::now();
        loop {
            match client.get("/readyz").await {
                Ok(r) if r.status == 200 => break,
                Ok(r) if started.elapsed() > READY_WITHIN => {
                    bail!(
                        "the second broker is not ready: HTTP {} {}",
                        r.status,
                        r.text()
                    )
                }
                Err(e) if started.elapsed() > READY_WITHIN => {
                    bail!("the second broker at {} does not answer: {e}", self.url)
                }
                _ => {}
            }
            if let Some(pid) = pid {
                if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    bail!("the second broker (pid {pid}) exited");
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cpu::watch_second_broker(pid);
        Ok(())
    }

    /// Stops watching it and stops it (with the stop command, if any).
    pub async fn down(&self) {
        cpu::watch_second_broker(None);
        if let Some(cmd) = &self.stop {
            if let Err(e) = shell(cmd).await {
                eprintln!("lockbench: stopping the second broker: {e:#}");
            }
        }
    }
}
