//! `lockctl watch ELECTION`: print each change of leader as it streams in
//! (the first line is the leadership now), until `--count` changes were
//! printed, the stream cannot be opened again after it ended or broke
//! (exit 3; the client reconnects a few times first, printing no change
//! twice) or lockctl is interrupted.

use std::process::ExitCode;

use lockbroker_client::{Client, ElectionEvent};

use crate::output::{Output, EXIT_UNREACHABLE};

pub async fn watch(client: &Client, out: Output, name: &str, count: Option<u64>) -> ExitCode {
    let mut events = match client.elections().observe(name).await {
        Ok(events) => events,
        Err(err) => return out.fail("cannot observe", &err, false),
    };
    let mut printed = 0;
    // Bounded by `count` when given; otherwise by the stream, which fails
    // once it cannot be opened again.
    while count.is_none_or(|count| printed < count) {
        match events.next().await {
            Some(Ok(event)) => {
                if out.json_flag {
                    out.json(&event);
                } else {
                    out.human(&describe(&event));
                }
                printed += 1;
            }
            Some(Err(err)) => return out.fail("the event stream broke", &err, false),
            None => {
                eprintln!("lockctl: the broker ended the event stream");
                return ExitCode::from(EXIT_UNREACHABLE);
            }
        }
    }
    ExitCode::SUCCESS
}

/// One line for people: `term 7: node-2 leads (until ...)` or `no leader`.
fn describe(event: &ElectionEvent) -> String {
    let ElectionEvent::Leader(now) = event;
    match (&now.leader, now.term) {
        (Some(leader), Some(term)) => format!(
            "{}: term {term}: {leader} leads (until {})",
            now.name,
            now.expires_at.as_deref().unwrap_or("?")
        ),
        _ => format!("{}: no leader", now.name),
    }
}
