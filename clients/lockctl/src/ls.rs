//! `lockctl ls [--semaphores|--rwlocks|--elections] [PREFIX] [--limit N]`:
//! the tenant's live leases of one kind whose storage key starts with
//! PREFIX, following the listing's cursor up to `--limit`: a table for
//! people (key, holders, token, expiry, waiters), or with `--json` one
//! JSON object per lease per line (the API's item).

use std::process::ExitCode;

use lockbroker_client::{
    api::{ElectionStatus, LockStatus, RwLockStatus, SemaphoreStatus},
    Client, Kind,
};
use serde::Serialize;

use crate::output::Output;

/// One lease as a row of the table.
pub trait Row {
    /// The heading of the holders' column.
    const HOLDERS: &'static str;
    /// Key, holders, tokens, expiry, waiters.
    fn row(&self) -> [String; 5];
}

pub async fn ls<K>(client: &Client, out: Output, prefix: &str, limit: usize) -> ExitCode
where
    K: Kind<Status: Row + Serialize>,
{
    let items = match client.leases::<K>().list_all(prefix, limit).await {
        Ok(items) => items,
        Err(err) => return out.fail("cannot list", &err, false),
    };
    if out.json_flag {
        for item in &items {
            out.json(item);
        }
    } else {
        let head = ["KEY", K::Status::HOLDERS, "TOKEN", "EXPIRES", "WAITERS"].map(String::from);
        for line in table(std::iter::once(head).chain(items.iter().map(Row::row))) {
            out.human(&line);
        }
    }
    ExitCode::SUCCESS
}

/// Rows as lines of aligned columns.
fn table(rows: impl Iterator<Item = [String; 5]>) -> Vec<String> {
    let rows: Vec<_> = rows.collect();
    let mut widths = [0; 5];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    rows.iter()
        .map(|row| {
            let cells: Vec<_> = row
                .iter()
                .zip(widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            cells.join("  ").trim_end().to_owned()
        })
        .collect()
}

/// `items` each as `f` says, comma-separated; `-` for none.
fn each<T>(items: &[T], f: impl Fn(&T) -> String) -> String {
    if items.is_empty() {
        return "-".into();
    }
    items.iter().map(f).collect::<Vec<_>>().join(",")
}

/// An optional value, or `-`.
fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".into(), |v| v.to_string())
}

/// The row of a resource one holds at a time: its holder, token and
/// expiry, if held.
fn single(
    key: &str,
    (holder, token, expires): (Option<&String>, Option<u64>, Option<&String>),
    waiters: String,
) -> [String; 5] {
    [
        key.to_owned(),
        or_dash(holder),
        or_dash(token),
        or_dash(expires),
        waiters,
    ]
}

impl Row for LockStatus {
    const HOLDERS: &'static str = "OWNER";

    fn row(&self) -> [String; 5] {
        let lease = (self.owner.as_ref(), self.token, self.expires_at.as_ref());
        single(&self.storage_key, lease, self.waiters.to_string())
    }
}

impl Row for SemaphoreStatus {
    const HOLDERS: &'static str = "HOLDERS";

    fn row(&self) -> [String; 5] {
        let holders = self.holders.iter().map(|h| {
            let who = format!("{}#{}", h.owner, h.slot);
            (who, h.token, h.expires_at.as_str())
        });
        shared(&self.storage_key, holders.collect(), self.waiters)
    }
}

impl Row for RwLockStatus {
    const HOLDERS: &'static str = "HOLDERS";

    fn row(&self) -> [String; 5] {
        let (mode, holders) = match &self.writer {
            Some(writer) => ("write", std::slice::from_ref(writer)),
            None => ("read", self.readers.as_slice()),
        };
        let holders = holders.iter().map(|h| {
            let who = format!("{}({mode})", h.owner);
            (who, h.token, h.expires_at.as_str())
        });
        shared(&self.storage_key, holders.collect(), self.waiters)
    }
}

/// The row of a resource several may hold: each holder's name, token and
/// expiry, comma-separated.
fn shared(key: &str, holders: Vec<(String, u64, &str)>, waiters: u64) -> [String; 5] {
    [
        key.to_owned(),
        each(&holders, |h| h.0.clone()),
        each(&holders, |h| h.1.to_string()),
        each(&holders, |h| h.2.to_owned()),
        waiters.to_string(),
    ]
}

impl Row for ElectionStatus {
    const HOLDERS: &'static str = "LEADER";

    fn row(&self) -> [String; 5] {
        let lease = (self.leader.as_ref(), self.term, self.expires_at.as_ref());
        single(&self.storage_key, lease, "-".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let rows = [
            ["KEY", "OWNER", "TOKEN", "EXPIRES", "WAITERS"].map(String::from),
            ["a-long-key", "me", "7", "2026-11-21T10:00:00.000Z", "0"].map(String::from),
        ];
        let lines = table(rows.into_iter());
        assert_eq!(lines[0].find("OWNER"), lines[1].find("me"));
        assert_eq!(lines[0].find("WAITERS"), lines[1].find(" 0").map(|i| i + 1));
    }
}
