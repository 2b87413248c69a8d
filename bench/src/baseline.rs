//! Baselines without the broker, from Rust, on the same database server:
//! `GET_LOCK`, the raw lease-row transaction, a `SKIP LOCKED` slot claim,
//! and Redis `SET NX PX` with a compare-and-delete script.

use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use chrono::NaiveDateTime;
use sqlx::{
    mysql::{MySqlConnectOptions, MySqlPoolOptions},
    pool::PoolConnection,
    ConnectOptions, Connection, Executor, MySql, MySqlPool,
};

use crate::{
    report::Row,
    run::{merge, micros, run_clients, Run, Tally},
};

const TTL_MS: i64 = 30_000;

/// The baseline database: its URL and a prefix that keeps runs apart.
pub struct Baseline {
    pub url: String,
    pub run: String,
}

/// Creates the database if missing and the baseline tables.
pub async fn prepare(url: &str) -> anyhow::Result<MySqlPool> {
    use sqlx::migrate::MigrateDatabase;
    if !MySql::database_exists(url)
        .await
        .context("cannot reach the baseline database server")?
    {
        MySql::create_database(url)
            .await
            .context("cannot create the baseline database")?;
    }
    let pool = pool(url, 2).await?;
    pool.execute(
        "CREATE TABLE IF NOT EXISTS bench_locks (\
           k VARBINARY(255) PRIMARY KEY, owner VARBINARY(128) NULL, \
           token BIGINT UNSIGNED NOT NULL DEFAULT 0, expires_at DATETIME(6) NULL\
         ) ENGINE=InnoDB",
    )
    .await?;
    pool.execute(
        "CREATE TABLE IF NOT EXISTS bench_slots (\
           sem VARBINARY(255) NOT NULL, slot INT UNSIGNED NOT NULL, \
           owner VARBINARY(128) NULL, token BIGINT UNSIGNED NOT NULL DEFAULT 0, \
           expires_at DATETIME(6) NULL, PRIMARY KEY (sem, slot)\
         ) ENGINE=InnoDB",
    )
    .await?;
    pool.execute(
        "CREATE TABLE IF NOT EXISTS bench_commits (\
           id INT UNSIGNED PRIMARY KEY, n BIGINT UNSIGNED NOT NULL DEFAULT 0\
         ) ENGINE=InnoDB",
    )
    .await?;
    pool.execute("INSERT IGNORE INTO bench_commits (id) VALUES (1)")
        .await?;
    Ok(pool)
}

/// A pool whose connections run at READ COMMITTED, like the broker's.
pub async fn pool(url: &str, max: u32) -> anyhow::Result<MySqlPool> {
    pool_with(url, max, true).await
}

/// A pool; `ping`: sqlx's `test_before_acquire` (a COM_PING round trip each
/// time a connection is taken from the pool; sqlx's default).
async fn pool_with(url: &str, max: u32, ping: bool) -> anyhow::Result<MySqlPool> {
    let options: MySqlConnectOptions = url
        .parse::<MySqlConnectOptions>()?
        .disable_statement_logging();
    let pool = MySqlPoolOptions::new()
        .max_connections(max)
        .min_connections(0)
        .test_before_acquire(ping)
        .acquire_timeout(Duration::from_secs(30))
        .after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
                    .await?;
                Ok(())
            })
        })
        .connect_with(options)
        .await
        .context("cannot connect to the baseline database")?;
    Ok(pool)
}

/// The MySQL error number of a failed statement.
fn errno(err: &sqlx::Error) -> Option<u16> {
    err.as_database_error()
        .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .map(sqlx::mysql::MySqlDatabaseError::number)
}

/// Row-locked by another transaction (NOWAIT on MariaDB: 1205; MySQL: 3572).
fn row_locked(err: &sqlx::Error) -> bool {
    matches!(errno(err), Some(1205 | 3572))
}

/// Runs `clients` tasks, each holding its own connection of a fresh pool.
async fn with_connections<F, Fut>(
    url: &str,
    clients: usize,
    duration: Duration,
    body: F,
) -> anyhow::Result<Run>
where
    F: Fn(usize, PoolConnection<MySql>, Instant) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Tally> + Send + 'static,
{
    let pool = pool(url, u32::try_from(clients)?).await?;
    let body = Arc::new(body);
    let run = run_clients(clients, duration, |c, gate| {
        let (pool, body) = (pool.clone(), body.clone());
        async move {
            let conn = pool.acquire().await;
            let deadline = gate.ready().await;
            match conn {
                Ok(mut conn) => {
                    let _ = conn.ping().await;
                    body(c, conn, deadline).await
                }
                Err(e) => {
                    let mut t = Tally::default();
                    t.error(|| format!("no connection: {e}"));
                    t
                }
            }
        }
    })
    .await;
    pool.close().await;
    Ok(run)
}

fn finish(name: &str, clients: usize, duration: Duration, run: Run) -> Row {
    let m = merge(run);
    if let Some(e) = &m.first_error {
        eprintln!("lockbench: {name} c={clients}: first error: {e}");
    }
    let mut row = Row::new(name, clients, duration, &m);
    if let Some(aux) = m.aux {
        row.set("acquire_p50_ms", aux.p50_ms);
    }
    row
}

/// One connection committing a one-row `UPDATE` (autocommit) in a loop:
/// the ceiling of a chain of durable handoffs of one key that needs one
/// commit each, measured beside the contended runs (`contended` handoffs/s
/// are reported as a share of it).
pub async fn commit_rate(b: &Baseline, duration: Duration) -> anyhow::Result<Row> {
    let run = with_connections(
        &b.url,
        1,
        duration,
        move |_, mut conn, deadline| async move {
            let mut t = Tally::default();
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let done = sqlx::query("UPDATE bench_commits SET n = n + 1 WHERE id = 1")
                    .execute(&mut *conn)
                    .await;
                let end = Instant::now();
                match done {
                    Ok(d) if d.rows_affected() == 1 => {}
                    Ok(_) => t.error(|| "the commit row is missing".into()),
                    Err(e) => t.error(|| e.to_string()),
                }
                if end <= deadline {
                    t.ops += 1;
                    t.lat_us.push(micros(end - t0));
                }
            }
            t
        },
    )
    .await?;
    Ok(finish("mysql-commit (1 conn)", 1, duration, run))
}

/// `GET_LOCK(k, 0)` + `RELEASE_LOCK(k)` on own keys, or `GET_LOCK(k, 5)`
/// on one shared key (`contended`).
pub async fn get_lock(
    b: &Baseline,
    contended: bool,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Row> {
    let run = b.run.clone();
    // Sequence numbers taken while holding the lock order the grants, so
    // handoffs pair up as with fencing tokens.
    let seq = Arc::new(AtomicU64::new(1));
    let run = with_connections(&b.url, clients, duration, move |c, mut conn, deadline| {
        let (run, seq) = (run.clone(), seq.clone());
        async move {
            let mut t = Tally::default();
            let mut n = 0u64;
            let wait = if contended { 5 } else { 0 };
            while Instant::now() < deadline {
                let key = if contended {
                    format!("lbc{run}-{clients}")
                } else {
                    format!("lb{run}-{c}-{}", n % 16)
                };
                n += 1;
                let t0 = Instant::now();
                let got: Result<(Option<i64>,), _> = sqlx::query_as("SELECT GET_LOCK(?, ?)")
                    .bind(&key)
                    .bind(wait)
                    .fetch_one(&mut *conn)
                    .await;
                let granted_at = Instant::now();
                match got {
                    Ok((Some(1),)) => {}
                    Ok(_) => {
                        t.refused += 1;
                        continue;
                    }
                    Err(e) => {
                        t.error(|| e.to_string());
                        continue;
                    }
                }
                let token = seq.fetch_add(1, Ordering::SeqCst);
                if granted_at <= deadline {
                    t.grants.push((token, granted_at));
                }
                let release_at = Instant::now();
                let released: Result<(Option<i64>,), _> = sqlx::query_as("SELECT RELEASE_LOCK(?)")
                    .bind(&key)
                    .fetch_one(&mut *conn)
                    .await;
                match released {
                    Ok((Some(1),)) => {}
                    Ok(other) => t.error(|| format!("RELEASE_LOCK returned {other:?}")),
                    Err(e) => t.error(|| e.to_string()),
                }
                let done = Instant::now();
                if done <= deadline {
                    t.releases.push((token, done));
                    t.release_us.push(micros(done - release_at));
                    t.ops += 1;
                    t.lat_us.push(micros(done - t0));
                    t.aux_us.push(micros(granted_at - t0));
                }
            }
            t
        }
    })
    .await?;
    let name = if contended {
        "mysql-get-lock contended"
    } else {
        "mysql-get-lock"
    };
    let mut row = finish(name, clients, duration, run);
    if !contended {
        row.handoff = None;
        row.note.clear();
        if row.errors > 0 {
            row.add_note(format!("{} errors", row.errors));
        }
    }
    Ok(row)
}

/// A lease row as the acquire reads it: owner, token, expiry, NOW(6).
type LeaseRow = (Option<Vec<u8>>, u64, Option<NaiveDateTime>, NaiveDateTime);

/// One lease-row acquire: BEGIN; SELECT ... FOR UPDATE NOWAIT; UPDATE;
/// COMMIT. `Ok(Some(token))` granted, `Ok(None)` busy or held.
async fn row_acquire(
    conn: &mut sqlx::MySqlConnection,
    key: &str,
    owner: &str,
) -> Result<Option<u64>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let row: Result<Option<LeaseRow>, _> = sqlx::query_as(
        "SELECT owner, token, expires_at, NOW(6) FROM bench_locks WHERE k = ? FOR UPDATE NOWAIT",
    )
    .bind(key)
    .fetch_optional(&mut *tx)
    .await;
    let (holder, token, expires_at, now) = match row {
        Ok(Some(row)) => row,
        Ok(None) => {
            tx.rollback().await?;
            return Err(sqlx::Error::RowNotFound);
        }
        Err(e) if row_locked(&e) => {
            tx.rollback().await?;
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let live = holder.is_some() && expires_at.is_some_and(|e| e > now);
    if live {
        tx.rollback().await?;
        return Ok(None);
    }
    let token = token + 1;
    sqlx::query("UPDATE bench_locks SET owner = ?, token = ?, expires_at = ? WHERE k = ?")
        .bind(owner)
        .bind(token)
        .bind(now + chrono::Duration::milliseconds(TTL_MS))
        .bind(key)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Some(token))
}

/// The release: one autocommit UPDATE.
async fn row_release(
    conn: &mut sqlx::MySqlConnection,
    key: &str,
    owner: &str,
    token: u64,
) -> Result<bool, sqlx::Error> {
    let done = sqlx::query(
        "UPDATE bench_locks SET owner = NULL, expires_at = NULL WHERE k = ? AND owner = ? AND token = ?",
    )
    .bind(key)
    .bind(owner)
    .bind(token)
    .execute(&mut *conn)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// The broker's lease-row transaction without HTTP: own keys (pairs), or
/// one key retried with NOWAIT at once (`storm`).
pub async fn lease_row_tx(
    b: &Baseline,
    storm: bool,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Row> {
    let run = b.run.clone();
    let run = with_connections(&b.url, clients, duration, move |c, mut conn, deadline| {
        let run = run.clone();
        async move {
            let mut t = Tally::default();
            let owner = format!("bench-{c}");
            let keys: Vec<String> = if storm {
                vec![format!("rs{run}-{clients}")]
            } else {
                (0..16).map(|i| format!("r{run}-{c}-{i}")).collect()
            };
            let mut n = 0usize;
            while Instant::now() < deadline {
                let key = &keys[n % keys.len()];
                n += 1;
                let t0 = Instant::now();
                let got = row_acquire(&mut conn, key, &owner).await;
                let granted_at = Instant::now();
                let in_time = granted_at <= deadline;
                if storm && in_time {
                    t.lat_us.push(micros(granted_at - t0));
                }
                let token = match got {
                    Ok(Some(token)) => token,
                    Ok(None) => {
                        if in_time {
                            t.refused += 1;
                        }
                        continue;
                    }
                    Err(sqlx::Error::RowNotFound) => {
                        let _ = sqlx::query("INSERT IGNORE INTO bench_locks (k) VALUES (?)")
                            .bind(key)
                            .execute(&mut *conn)
                            .await;
                        continue;
                    }
                    Err(e) => {
                        t.error(|| e.to_string());
                        continue;
                    }
                };
                if in_time {
                    t.grants.push((token, granted_at));
                }
                let release_at = Instant::now();
                match row_release(&mut conn, key, &owner, token).await {
                    Ok(true) => {}
                    Ok(false) => t.error(|| "release matched no row".into()),
                    Err(e) => t.error(|| e.to_string()),
                }
                let done = Instant::now();
                if done <= deadline {
                    t.releases.push((token, done));
                    t.release_us.push(micros(done - release_at));
                    t.ops += 1;
                    if !storm {
                        t.lat_us.push(micros(done - t0));
                        t.aux_us.push(micros(granted_at - t0));
                    }
                }
            }
            t
        }
    })
    .await?;
    let name = if storm {
        "lease-row-tx nowait-storm"
    } else {
        "lease-row-tx"
    };
    let mut row = finish(name, clients, duration, run);
    if !storm {
        row.handoff = None;
        row.note.clear();
        if row.errors > 0 {
            row.add_note(format!("{} errors", row.errors));
        }
    }
    Ok(row)
}

/// The lease-row pairs on own keys as the broker runs them: each
/// transaction (and the release) takes a connection from one shared pool of
/// at most `pool_max` connections, with or without sqlx's ping on acquire.
/// Not in `all`: `--scenarios lease-row-tx-pooled`.
pub async fn lease_row_tx_pooled(
    b: &Baseline,
    ping: bool,
    pool_max: u32,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Row> {
    let pool = pool_with(&b.url, pool_max, ping).await?;
    let run = run_clients(clients, duration, |c, gate| {
        let (pool, run) = (pool.clone(), b.run.clone());
        async move {
            let mut t = Tally::default();
            let owner = format!("bench-{c}");
            let keys: Vec<String> = (0..16).map(|i| format!("r{run}-{c}-{i}")).collect();
            if let Ok(mut conn) = pool.acquire().await {
                for key in &keys {
                    let _ = sqlx::query("INSERT IGNORE INTO bench_locks (k) VALUES (?)")
                        .bind(key)
                        .execute(&mut *conn)
                        .await;
                }
            }
            let deadline = gate.ready().await;
            let mut n = 0usize;
            while Instant::now() < deadline {
                let key = &keys[n % keys.len()];
                n += 1;
                let t0 = Instant::now();
                let got = match pool.acquire().await {
                    Ok(mut conn) => row_acquire(&mut conn, key, &owner).await,
                    Err(e) => Err(e),
                };
                let token = match got {
                    Ok(Some(token)) => token,
                    Ok(None) => {
                        t.refused += 1;
                        continue;
                    }
                    Err(e) => {
                        t.error(|| e.to_string());
                        continue;
                    }
                };
                let released = match pool.acquire().await {
                    Ok(mut conn) => row_release(&mut conn, key, &owner, token).await,
                    Err(e) => Err(e),
                };
                match released {
                    Ok(true) => {}
                    Ok(false) => t.error(|| "release matched no row".into()),
                    Err(e) => t.error(|| e.to_string()),
                }
                let done = Instant::now();
                if done <= deadline {
                    t.ops += 1;
                    t.lat_us.push(micros(done - t0));
                }
            }
            t
        }
    })
    .await;
    pool.close().await;
    let name = if ping {
        "lease-row-tx pooled (ping on acquire)"
    } else {
        "lease-row-tx pooled (no ping)"
    };
    Ok(finish(name, clients, duration, run))
}

/// Claims one of 8 slot rows with `FOR UPDATE SKIP LOCKED`, releases it
/// with an autocommit UPDATE. With no free slot the claim is retried at once.
pub async fn skip_locked(
    b: &Baseline,
    setup: &MySqlPool,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Row> {
    let sem = format!("sk{}-{clients}", b.run);
    for slot in 0..8 {
        sqlx::query("INSERT IGNORE INTO bench_slots (sem, slot) VALUES (?, ?)")
            .bind(&sem)
            .bind(slot)
            .execute(setup)
            .await?;
    }
    let run = with_connections(&b.url, clients, duration, move |c, mut conn, deadline| {
        let sem = sem.clone();
        async move {
            let mut t = Tally::default();
            let owner = format!("bench-{c}");
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let claimed: Result<Option<u32>, sqlx::Error> = async {
                    let mut tx = conn.begin().await?;
                    let slot: Option<(u32,)> = sqlx::query_as(
                        "SELECT slot FROM bench_slots WHERE sem = ? AND owner IS NULL \
                         LIMIT 1 FOR UPDATE SKIP LOCKED",
                    )
                    .bind(&sem)
                    .fetch_optional(&mut *tx)
                    .await?;
                    let Some((slot,)) = slot else {
                        tx.rollback().await?;
                        return Ok(None);
                    };
                    sqlx::query(
                        "UPDATE bench_slots SET owner = ?, token = token + 1, \
                         expires_at = NOW(6) + INTERVAL 30 SECOND WHERE sem = ? AND slot = ?",
                    )
                    .bind(&owner)
                    .bind(&sem)
                    .bind(slot)
                    .execute(&mut *tx)
                    .await?;
                    tx.commit().await?;
                    Ok(Some(slot))
                }
                .await;
                let granted_at = Instant::now();
                let slot = match claimed {
                    Ok(Some(slot)) => slot,
                    Ok(None) => {
                        if granted_at <= deadline {
                            t.refused += 1;
                        }
                        tokio::task::yield_now().await;
                        continue;
                    }
                    Err(e) => {
                        t.error(|| e.to_string());
                        continue;
                    }
                };
                let released = sqlx::query(
                    "UPDATE bench_slots SET owner = NULL, expires_at = NULL \
                     WHERE sem = ? AND slot = ? AND owner = ?",
                )
                .bind(&sem)
                .bind(slot)
                .bind(&owner)
                .execute(&mut *conn)
                .await;
                match released {
                    Ok(r) if r.rows_affected() == 1 => {}
                    Ok(_) => t.error(|| "release matched no row".into()),
                    Err(e) => t.error(|| e.to_string()),
                }
                let done = Instant::now();
                if done <= deadline {
                    t.ops += 1;
                    t.lat_us.push(micros(done - t0));
                    t.aux_us.push(micros(granted_at - t0));
                }
            }
            t
        }
    })
    .await?;
    Ok(finish("skip-locked-claim", clients, duration, run))
}

const COMPARE_AND_DELETE: &str =
    "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

/// True when Redis answers a PING within 2 s.
pub async fn redis_reachable(url: &str) -> Result<(), String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let ping = async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut conn).await
    };
    match tokio::time::timeout(Duration::from_secs(2), ping).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("no answer within 2 s".into()),
    }
}

/// `SET k v NX PX 30000` + compare-and-delete, own keys, a connection each.
pub async fn redis(
    url: &str,
    run: &str,
    clients: usize,
    duration: Duration,
) -> anyhow::Result<Row> {
    let client = redis::Client::open(url)?;
    let run = run_clients(clients, duration, |c, gate| {
        let client = client.clone();
        let run = run.to_owned();
        async move {
            let mut t = Tally::default();
            let conn = client.get_multiplexed_async_connection().await;
            let deadline = gate.ready().await;
            let mut conn = match conn {
                Ok(conn) => conn,
                Err(e) => {
                    t.error(|| e.to_string());
                    return t;
                }
            };
            let script = redis::Script::new(COMPARE_AND_DELETE);
            let mut n = 0u64;
            while Instant::now() < deadline {
                let key = format!("lockbench:{run}:{c}:{}", n % 16);
                let value = format!("{c}-{n}");
                n += 1;
                let t0 = Instant::now();
                let set: redis::RedisResult<Option<String>> = redis::cmd("SET")
                    .arg(&key)
                    .arg(&value)
                    .arg("NX")
                    .arg("PX")
                    .arg(TTL_MS)
                    .query_async(&mut conn)
                    .await;
                let granted_at = Instant::now();
                match set {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        t.refused += 1;
                        continue;
                    }
                    Err(e) => {
                        t.error(|| e.to_string());
                        continue;
                    }
                }
                let deleted: redis::RedisResult<i64> =
                    script.key(&key).arg(&value).invoke_async(&mut conn).await;
                match deleted {
                    Ok(1) => {}
                    Ok(other) => t.error(|| format!("compare-and-delete returned {other}")),
                    Err(e) => t.error(|| e.to_string()),
                }
                let done = Instant::now();
                if done <= deadline {
                    t.ops += 1;
                    t.lat_us.push(micros(done - t0));
                    t.aux_us.push(micros(granted_at - t0));
                }
            }
            t
        }
    })
    .await;
    Ok(finish("redis", clients, duration, run))
}
