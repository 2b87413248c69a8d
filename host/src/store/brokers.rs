//! The `brokers` table: who shares the database, and when each was last
//! alive (by the database clock).

use super::pool::Conn;

/// Says `name` is alive now, writing through `server`.
pub async fn heartbeat(conn: &mut Conn, name: &str, server: &str) -> sqlx::Result<()> {
    conn.run(|c| {
        sqlx::query(
            r#"
INSERT INTO brokers (name, started_at, heartbeat_at, server) VALUES (?, NOW(6), NOW(6), ?)
ON DUPLICATE KEY UPDATE heartbeat_at = NOW(6), server = VALUES(server)
"#,
        )
        .bind(name)
        .bind(server)
        .execute(c)
    })
    .await?;
    Ok(())
}

/// Removes a broker that says it is gone.
pub async fn remove(conn: &mut Conn, name: &str) -> sqlx::Result<()> {
    conn.run(|c| {
        sqlx::query("DELETE FROM brokers WHERE name = ?")
            .bind(name)
            .execute(c)
    })
    .await?;
    Ok(())
}

/// Removes brokers gone for over a day (their waiters are long gone).
pub async fn forget_departed(conn: &mut Conn) -> sqlx::Result<u64> {
    let done = conn
        .run(|c| {
            sqlx::query(
                "DELETE FROM brokers WHERE heartbeat_at < NOW(6) - INTERVAL 1 DAY LIMIT 100",
            )
            .execute(c)
        })
        .await?;
    Ok(done.rows_affected())
}

/// The longest-running broker heard from within `alive_us` microseconds,
/// with the server it writes through.
pub async fn oldest_alive(
    conn: &mut Conn,
    alive_us: u64,
) -> sqlx::Result<Option<(Vec<u8>, Option<Vec<u8>>)>> {
    conn.run(|c| {
        sqlx::query_as(
            r#"
SELECT name, server FROM brokers WHERE heartbeat_at > NOW(6) - INTERVAL ? MICROSECOND
ORDER BY started_at, name LIMIT 1
"#,
        )
        .bind(alive_us)
        .fetch_optional(c)
    })
    .await
}
