-- Locks and elections: one row per (tenant, kind, storage key). The row
-- outlives every lease of its key so that `token` (the fencing token, or an
-- election's term) never goes back: rows are never deleted.
-- Keys and owners are VARBINARY: they compare byte for byte (no case folding,
-- no trailing-space padding), unlike MySQL's default and `_bin` collations.
CREATE TABLE IF NOT EXISTS locks (
    tenant VARBINARY(64) NOT NULL,
    -- 0 = lock, 1 = election: the same name is a different row in each.
    kind TINYINT UNSIGNED NOT NULL,
    lock_key VARBINARY(512) NOT NULL,
    owner VARBINARY(128) NULL,
    token BIGINT UNSIGNED NOT NULL DEFAULT 0,
    hold_count INT UNSIGNED NOT NULL DEFAULT 0,
    expires_at DATETIME(6) NULL,
    -- Pending waiters of this key; changed only under this row's lock.
    queued INT UNSIGNED NOT NULL DEFAULT 0,
    -- No index on expires_at: nothing scans locks by expiry (the reaper
    -- starts from `waiters`), and every grant would have to rewrite it.
    PRIMARY KEY (tenant, kind, lock_key)
) ENGINE = InnoDB;

-- Semaphores: a header row (size and queue) and one row per slot.
CREATE TABLE IF NOT EXISTS semaphores (
    tenant VARBINARY(64) NOT NULL,
    sem_key VARBINARY(512) NOT NULL,
    permits INT UNSIGNED NOT NULL,
    -- Pending waiters; changed only under this row's lock.
    queued INT UNSIGNED NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, sem_key)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS semaphore_slots (
    tenant VARBINARY(64) NOT NULL,
    sem_key VARBINARY(512) NOT NULL,
    slot INT UNSIGNED NOT NULL,
    owner VARBINARY(128) NULL,
    token BIGINT UNSIGNED NOT NULL DEFAULT 0,
    expires_at DATETIME(6) NULL,
    PRIMARY KEY (tenant, sem_key, slot)
) ENGINE = InnoDB;

-- The durable wait queue of locks, elections and semaphores. A row is
-- inserted, granted (handoff) and removed only while the key's header row
-- (`locks` or `semaphores`) is locked, so `queued` there stays exact.
CREATE TABLE IF NOT EXISTS waiters (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    tenant VARBINARY(64) NOT NULL,
    -- 0 = lock, 1 = election, 2 = semaphore.
    kind TINYINT UNSIGNED NOT NULL,
    lock_key VARBINARY(512) NOT NULL,
    owner VARBINARY(128) NOT NULL,
    priority INT NOT NULL DEFAULT 0,
    ttl_ms BIGINT UNSIGNED NOT NULL,
    -- The broker process that waits for this row (to wake it).
    broker VARBINARY(64) NOT NULL,
    enqueued_at DATETIME(6) NOT NULL,
    deadline DATETIME(6) NOT NULL,
    -- Times a handoff passed this waiter over for a later one.
    attempts INT UNSIGNED NOT NULL DEFAULT 0,
    -- Set by the handoff that grants this waiter its lease.
    granted_token BIGINT UNSIGNED NULL,
    granted_slot INT UNSIGNED NULL,
    granted_expires_at DATETIME(6) NULL,
    PRIMARY KEY (id),
    KEY waiters_by_key (tenant, kind, lock_key, granted_token, id),
    KEY waiters_by_priority (tenant, kind, lock_key, granted_token, priority, id),
    KEY waiters_by_tenant (tenant, granted_token),
    KEY waiters_by_broker (broker, granted_token),
    KEY waiters_by_deadline (granted_token, deadline)
) ENGINE = InnoDB;

-- Every term of every election, written by the transaction that grants it,
-- so observers (on any broker) see each change of leader, even one that
-- lasted less than their polling interval.
CREATE TABLE IF NOT EXISTS election_terms (
    tenant VARBINARY(64) NOT NULL,
    name VARBINARY(512) NOT NULL,
    term BIGINT UNSIGNED NOT NULL,
    leader VARBINARY(128) NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    PRIMARY KEY (tenant, name, term)
) ENGINE = InnoDB;
