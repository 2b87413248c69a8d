-- Reader-writer locks: many readers or one writer per key, in their own
-- namespace (a rwlock and a plain lock of the same name are unrelated).
--
-- The header row serializes everything about its key: every grant,
-- release, renewal and handoff locks it first (`FOR UPDATE`), then reads
-- or writes the readers below, in one short READ COMMITTED transaction.
-- It is never deleted, so `token` never goes back.
CREATE TABLE IF NOT EXISTS rwlocks (
    tenant VARBINARY(64) NOT NULL,
    rw_key VARBINARY(512) NOT NULL,
    -- The last fencing token granted: +1 for every grant, read or write,
    -- so tokens strictly increase per key across both modes.
    token BIGINT UNSIGNED NOT NULL DEFAULT 0,
    -- The writer's lease, if any (live while writer_expires_at > NOW(6)).
    writer VARBINARY(128) NULL,
    writer_token BIGINT UNSIGNED NULL,
    writer_expires_at DATETIME(6) NULL,
    -- Pending waiters (kind 3 in `waiters`); changed only under this row's lock.
    queued INT UNSIGNED NOT NULL DEFAULT 0,
    -- The mark of the last transaction that changed this key: a random
    -- number per transaction (per request, for a release), written with
    -- the change. A commit whose answer was lost is found out by it (see
    -- release_marks: a release tried again learns whether it committed).
    changed_by BIGINT UNSIGNED NULL,
    PRIMARY KEY (tenant, rw_key)
) ENGINE = InnoDB;

-- One row per reader holding (or having held, until cleared out) a read
-- lease; changed only while the key's `rwlocks` row is locked.
CREATE TABLE IF NOT EXISTS rwlock_readers (
    tenant VARBINARY(64) NOT NULL,
    rw_key VARBINARY(512) NOT NULL,
    owner VARBINARY(128) NOT NULL,
    token BIGINT UNSIGNED NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    PRIMARY KEY (tenant, rw_key, owner)
) ENGINE = InnoDB;

-- What a waiter of a rwlock (kind 3) asks for: 0 = read, 1 = write;
-- NULL for every other kind.
ALTER TABLE waiters ADD COLUMN mode TINYINT UNSIGNED NULL;
