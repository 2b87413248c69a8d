-- Sessions (issue #30): one keepalive keeps every lease of a session, and
-- the session's end (closed, or expired by the database clock) ends them
-- all. A session's id is 32 random hex characters chosen by the broker.
-- `name` is '' when the client gave none (so the listing's index range
-- needs no NULL handling). `ending`: 0 live, 1 closed, 2 expired; set by
-- the one transaction that ends the session (which also sets `expires_at`
-- to that moment), before its leases are released in chunks and the row
-- deleted. A row left ending long after (its broker died mid-pass) is
-- ended again by any broker's reaper.
CREATE TABLE IF NOT EXISTS sessions (
    tenant VARBINARY(64) NOT NULL,
    id VARBINARY(64) NOT NULL,
    name VARBINARY(512) NOT NULL DEFAULT '',
    ttl_ms BIGINT UNSIGNED NOT NULL,
    lock_delay_ms BIGINT UNSIGNED NOT NULL DEFAULT 0,
    created_at DATETIME(6) NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    ending TINYINT UNSIGNED NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id),
    KEY sessions_by_expiry (expires_at),
    KEY sessions_by_name (tenant, name, id)
) ENGINE = InnoDB;

-- The session a lease is held in (NULL: a plain lease); written by every
-- lease write, cleared when the row is freed.
ALTER TABLE locks ADD COLUMN session VARBINARY(64) NULL,
    ADD KEY locks_by_session (tenant, session);

-- The session a waiter asks to hold its lease in: its handoff checks the
-- session is live and writes a session lease.
ALTER TABLE waiters ADD COLUMN session VARBINARY(64) NULL,
    ADD KEY waiters_by_session (session);
