//! `lockctl events [PREFIX] [--after ID]`: follow the changes of the
//! tenant's locks, semaphores and rwlocks under PREFIX, one line each, as
//! they happen (`--json`: the API's event, one JSON object per line).
//! When the connection ends, the client opens it again after the last
//! event printed (`Last-Event-ID`), so nothing the broker keeps is missed;
//! once following, lockctl waits for an unreachable broker rather than
//! exit.

use std::process::ExitCode;

use lockbroker_client::{api::StreamEvent, Client, Event};
use serde::Serialize;

use crate::output::Output;

pub async fn events(
    client: &Client,
    out: Output,
    prefix: &str,
    after: Option<u64>,
    count: Option<u64>,
) -> ExitCode {
    let mut events = match client.events(prefix, after).await {
        Ok(events) => events,
        Err(err) => return out.fail("cannot follow the events", &err, false),
    };
    let from = after.map_or_else(|| "from now on".into(), |id| format!("after {id}"));
    eprintln!("lockctl: following the events under {prefix:?} {from}");
    let mut printed = 0;
    // Bounded by `count` when given; otherwise until interrupted or the
    // stream cannot be opened again.
    while count.is_none_or(|count| printed < count) {
        match events.next().await {
            Ok(Event::Change(change)) if out.json_flag => out.json(&change),
            Ok(Event::Change(change)) => out.human(&describe(&change)),
            Ok(Event::Reset) if out.json_flag => out.json(&serde_json::json!({"event": "reset"})),
            Ok(Event::Reset) => out.human(
                "reset: events were missed (the broker's history no longer reaches back that far)",
            ),
            // Once following, an unreachable broker is waited for (each
            // try backs off): the stream resumes where it left off.
            Err(err) if err.is_unreachable() => {
                eprintln!("lockctl: {err}; trying again");
                continue;
            }
            Err(err) => return out.fail("the event stream broke", &err, false),
        }
        printed += 1;
    }
    ExitCode::SUCCESS
}

/// One line for people: `42 granted lock job-1 owner=w token=9 at=...`.
fn describe(change: &StreamEvent) -> String {
    format!(
        "{} {} {} {} owner={} token={} at={}",
        change.id,
        wire_name(&change.event),
        wire_name(&change.kind),
        change.storage_key,
        change.owner,
        change.token,
        change.at
    )
}

/// The wire name of an enum value, as the API writes it (`handed_off`).
fn wire_name(value: &impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        other => format!("{other:?}"),
    }
}
