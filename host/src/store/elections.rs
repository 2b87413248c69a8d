//! The `election_terms` table: the log of an election's leaders.

use chrono::NaiveDateTime;
use sqlx::mysql::MySqlQueryResult;

use super::pool::Conn;

/// One term of an election.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TermRow {
    pub term: u64,
    pub leader: Vec<u8>,
    pub expires_at: NaiveDateTime,
}

/// Records a new term (in the transaction that grants it).
pub async fn record(
    conn: &mut Conn,
    tenant: &str,
    name: &str,
    term: u64,
    leader: &str,
    expires_at: NaiveDateTime,
) -> sqlx::Result<MySqlQueryResult> {
    conn.execute("INSERT INTO election_terms (tenant, name, term, leader, expires_at) VALUES (?, ?, ?, ?, ?)", (tenant, name, term, leader, expires_at)).await
}

/// Terms after `after`, oldest first.
pub async fn since(
    conn: &mut Conn,
    tenant: &str,
    name: &str,
    after: u64,
) -> sqlx::Result<Vec<TermRow>> {
    conn.fetch_all(
        r#"
SELECT term, leader, expires_at FROM election_terms
WHERE tenant = ? AND name = ? AND term > ?
ORDER BY term LIMIT 1000
"#,
        (tenant, name, after),
    )
    .await
}
