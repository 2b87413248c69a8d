-- Lock history (issue #12): every grant, release, expiry, handoff and
-- force-release of a lock, appended by the transaction that makes the
-- change (one multi-row INSERT per transaction), so an event exists exactly
-- when its change does. Read newest first per key
-- (`GET /v1/locks/{key}/history`), pruned by age in bounded batches by the
-- reaper (`history_retention_hours`).
--
-- Few indexes, as it is written on every handoff: the primary key (insert
-- order, the order of events of one key since each key's changes are
-- serialized on its row), one for the history of a key, one for pruning.
CREATE TABLE IF NOT EXISTS lock_events (
    id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    tenant VARBINARY(64) NOT NULL,
    -- 0 = lock (as `locks.kind`; only locks are recorded today).
    kind TINYINT UNSIGNED NOT NULL,
    lock_key VARBINARY(512) NOT NULL,
    -- 1 granted, 2 released, 3 expired, 4 handed_off, 5 force_released.
    event TINYINT UNSIGNED NOT NULL,
    owner VARBINARY(128) NOT NULL,
    token BIGINT UNSIGNED NOT NULL,
    -- By the database clock: the decision's NOW(6); for `expired`, the
    -- moment the lease ran out (its `expires_at`).
    at DATETIME(6) NOT NULL,
    PRIMARY KEY (id),
    KEY lock_events_by_key (tenant, kind, lock_key, id),
    KEY lock_events_by_age (at)
) ENGINE = InnoDB;

-- Lock-delay and minimum hold: no new grant of the key before this moment
-- (database clock). A grant under `min_hold_ms` sets it to its grant time +
-- `min_hold_ms`; freeing a lease that expired under `lock_delay_ms` sets it
-- to at least its expiry + `lock_delay_ms` (an expired lease still in its
-- row is judged by its `expires_at` directly). NULL or past: no delay.
ALTER TABLE locks ADD COLUMN not_before DATETIME(6) NULL;
