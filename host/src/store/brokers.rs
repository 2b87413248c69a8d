//! The `brokers` table: who shares the database, and when each was last
//! alive (by the database clock).

use super::pool::Conn;

/// A broker heard from within this many microseconds (by the database
/// clock) is alive: its waiters count, and its mark on a key
/// (`locks.waiting_at`) holds the key for them.
pub const ALIVE_US: u64 = 1_000_000;

/// Where a broker takes push wake-ups: its advertised internal URL and
/// the bearer token it accepts there.
#[derive(Debug, Clone, Copy)]
pub struct Contact<'a> {
    pub url: &'a str,
    pub secret: &'a str,
}

/// Says `name` is alive now, writing through `server`, reachable at
/// `contact` (`None`: it takes no push wake-ups).
pub async fn heartbeat(
    conn: &mut Conn,
    name: &str,
    server: &str,
    contact: Option<Contact<'_>>,
) -> sqlx::Result<()> {
    conn.execute(
        r#"
INSERT INTO brokers (name, started_at, heartbeat_at, server, url, secret)
VALUES (?, NOW(6), NOW(6), ?, ?, ?)
ON DUPLICATE KEY UPDATE heartbeat_at = NOW(6), server = VALUES(server),
  url = VALUES(url), secret = VALUES(secret)
"#,
        (
            name,
            server,
            contact.map(|c| c.url),
            contact.map(|c| c.secret),
        ),
    )
    .await?;
    Ok(())
}

/// A live broker and where it takes push wake-ups (`None`: it does not).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct PeerRow {
    pub name: Vec<u8>,
    pub url: Option<Vec<u8>>,
    pub secret: Option<Vec<u8>>,
}

/// The brokers heard from within `alive_us` microseconds, this one
/// included.
pub async fn peers(conn: &mut Conn, alive_us: u64) -> sqlx::Result<Vec<PeerRow>> {
    conn.fetch_all(
        r#"
SELECT name, url, secret FROM brokers WHERE heartbeat_at > NOW(6) - INTERVAL ? MICROSECOND
"#,
        (alive_us,),
    )
    .await
}

/// Broker `name`, if it is heard from within `alive_us` microseconds.
pub async fn peer(conn: &mut Conn, name: &[u8], alive_us: u64) -> sqlx::Result<Option<PeerRow>> {
    conn.fetch_optional(
        r#"
SELECT name, url, secret FROM brokers
WHERE name = ? AND heartbeat_at > NOW(6) - INTERVAL ? MICROSECOND
"#,
        (name, alive_us),
    )
    .await
}

/// Removes a broker that says it is gone.
pub async fn remove(conn: &mut Conn, name: &str) -> sqlx::Result<()> {
    conn.execute("DELETE FROM brokers WHERE name = ?", (name,))
        .await?;
    Ok(())
}

/// Removes up to `limit` brokers not heard from for `after_s` seconds.
pub async fn forget_departed(conn: &mut Conn, after_s: u64, limit: u32) -> sqlx::Result<u64> {
    let done = conn
        .execute(
            "DELETE FROM brokers WHERE heartbeat_at < NOW(6) - INTERVAL ? SECOND LIMIT ?",
            (after_s, limit),
        )
        .await?;
    Ok(done.rows_affected())
}

/// The longest-running broker heard from within `alive_us` microseconds,
/// with the server it writes through.
pub async fn oldest_alive(
    conn: &mut Conn,
    alive_us: u64,
) -> sqlx::Result<Option<(Vec<u8>, Option<Vec<u8>>)>> {
    conn.fetch_optional(
        r#"
SELECT name, server FROM brokers WHERE heartbeat_at > NOW(6) - INTERVAL ? MICROSECOND
ORDER BY started_at, name LIMIT 1
"#,
        (alive_us,),
    )
    .await
}
