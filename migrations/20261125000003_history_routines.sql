-- Lock history (issue #12) on the built-in FIFO policy's stored-procedure
-- path: `lockbroker_lock_acquire` and `lockbroker_lock_release` of
-- 20261124000002_lock_routines.sql, dropped and re-created with the
-- `lock_events` inserts of 20261125000002_lock_history.sql, in the same
-- transaction as the change each records. Nothing else changed, except
-- where an event needs a transaction:
--
-- lockbroker_lock_acquire
--   - a new grant (free or expired, nobody waiting) inserts `granted`
--     (event 1) of the new owner and token at `v_now`, preceded by
--     `expired` (event 3) of the previous owner and token at its
--     `expires_at` when the lease it replaces had expired (one INSERT).
--   - re-entries and enqueues write no event.
-- lockbroker_lock_release
--   - the one-statement release ("alone") runs inside START TRANSACTION
--     ... COMMIT so that its `released` (event 2) is inserted atomically
--     with it; `committed` is still 1 (nothing left open). When it matches
--     no row, the empty transaction is ended by the START TRANSACTION of
--     the full path, as before.
--   - 'freed' inserts `released` of the releaser at `v_now`; 'handed'
--     inserts `released` of the releaser and `handed_off` (event 4) of the
--     waiter with the new token, at `v_now` (one INSERT).
--   - 'held' (one of several holds), 'lost' and 'already' write no event.
--
-- Event codes: 1 granted, 2 released, 3 expired, 4 handed_off,
-- 5 force_released (`store::history::EventKind`).

DROP PROCEDURE IF EXISTS lockbroker_lock_acquire;
CREATE PROCEDURE lockbroker_lock_acquire(
    p_tenant VARBINARY(64),
    p_kind TINYINT UNSIGNED,
    p_key VARBINARY(512),
    p_owner VARBINARY(128),
    p_ttl_ms BIGINT UNSIGNED,
    p_wait_ms BIGINT UNSIGNED,
    p_priority INT,
    p_broker VARBINARY(64),
    p_alive_us BIGINT UNSIGNED,
    p_max_waiters BIGINT UNSIGNED
)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
    COMMENT 'lockbroker: a waiting acquire on the built-in FIFO path (with history); leaves the transaction open'
BEGIN
    DECLARE v_found TINYINT DEFAULT 0;
    DECLARE v_owner VARBINARY(128);
    DECLARE v_token BIGINT UNSIGNED;
    DECLARE v_holds INT UNSIGNED;
    DECLARE v_expires DATETIME(6);
    DECLARE v_queued INT UNSIGNED;
    DECLARE v_now DATETIME(6);
    DECLARE v_until DATETIME(6);
    DECLARE v_pending BIGINT;
    DECLARE r_outcome VARCHAR(16) DEFAULT 'general';
    DECLARE r_token BIGINT UNSIGNED;
    DECLARE r_holds INT UNSIGNED;
    DECLARE r_fresh TINYINT UNSIGNED;
    DECLARE r_waiter BIGINT UNSIGNED;
    DECLARE r_remaining BIGINT UNSIGNED;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;

    START TRANSACTION;
    SELECT 1, owner, token, hold_count, expires_at, queued, NOW(6)
      INTO v_found, v_owner, v_token, v_holds, v_expires, v_queued, v_now
      FROM locks
     WHERE tenant = p_tenant AND kind = p_kind AND lock_key = p_key
       FOR UPDATE;
    SET v_until = v_now + INTERVAL (p_ttl_ms * 1000) MICROSECOND;

    IF v_found = 0 THEN
        SET r_outcome = 'general';
    ELSEIF v_owner IS NOT NULL AND v_expires > v_now AND v_owner = p_owner THEN
        -- Re-entry: the same token, one more hold, a renewed lease.
        UPDATE locks SET hold_count = v_holds + 1, expires_at = v_until
         WHERE tenant = p_tenant AND kind = p_kind AND lock_key = p_key;
        SET r_outcome = 'granted', r_token = v_token, r_holds = v_holds + 1,
            r_fresh = 0;
    ELSEIF v_owner IS NOT NULL AND v_expires > v_now THEN
        -- Held by another owner: join the queue, if the tenant has room.
        SELECT COUNT(*) INTO v_pending FROM waiters w
         WHERE w.tenant = p_tenant AND w.granted_token IS NULL
           AND w.deadline > v_now
           AND w.broker IN (SELECT name FROM brokers
                             WHERE heartbeat_at > v_now - INTERVAL p_alive_us MICROSECOND);
        IF v_pending >= p_max_waiters THEN
            SET r_outcome = 'too_many';
        ELSE
            INSERT INTO waiters (tenant, kind, lock_key, owner, priority, ttl_ms,
                                 broker, enqueued_at, deadline)
            VALUES (p_tenant, p_kind, p_key, p_owner, p_priority, p_ttl_ms,
                    p_broker, v_now, v_now + INTERVAL (p_wait_ms * 1000) MICROSECOND);
            SET r_waiter = LAST_INSERT_ID();
            UPDATE locks SET queued = v_queued + 1
             WHERE tenant = p_tenant AND kind = p_kind AND lock_key = p_key;
            SET r_outcome = 'queued',
                r_remaining = TIMESTAMPDIFF(MICROSECOND, v_now, v_expires) DIV 1000;
        END IF;
    ELSEIF v_queued > 0 THEN
        -- Free, but waiters are counted: they go first, or are cleared out.
        SET r_outcome = 'general';
    ELSE
        -- Free (or expired) and nobody waiting: a new grant, a new token.
        UPDATE locks SET owner = p_owner, token = v_token + 1, hold_count = 1,
                         expires_at = v_until
         WHERE tenant = p_tenant AND kind = p_kind AND lock_key = p_key;
        IF v_owner IS NOT NULL THEN
            -- History: the lease it replaces had expired.
            INSERT INTO lock_events (tenant, kind, lock_key, event, owner, token, at)
            VALUES (p_tenant, p_kind, p_key, 3, v_owner, v_token, v_expires),
                   (p_tenant, p_kind, p_key, 1, p_owner, v_token + 1, v_now);
        ELSE
            INSERT INTO lock_events (tenant, kind, lock_key, event, owner, token, at)
            VALUES (p_tenant, p_kind, p_key, 1, p_owner, v_token + 1, v_now);
        END IF;
        SET r_outcome = 'granted', r_token = v_token + 1, r_holds = 1, r_fresh = 1;
    END IF;

    SELECT CAST(r_outcome AS BINARY) AS outcome,
           CAST(r_token AS UNSIGNED) AS token,
           CAST(r_holds AS UNSIGNED) AS hold_count,
           IF(r_outcome = 'granted', v_until, NULL) AS expires_at,
           CAST(r_fresh AS UNSIGNED) AS fresh,
           CAST(r_waiter AS UNSIGNED) AS waiter_id,
           CAST(NULL AS BINARY) AS waiter_broker,
           CAST(r_remaining AS UNSIGNED) AS remaining_ms,
           CAST(v_queued AS UNSIGNED) AS queued,
           CAST(0 AS UNSIGNED) AS purged,
           CAST(0 AS UNSIGNED) AS committed;
END;

-- lockbroker_lock_release: one hold of `p_owner`'s live lease with
-- `p_token` released. Every write marks the row with `p_mark` (the
-- release's own number, as the general path does: see
-- 20261124000001_release_marks.sql), so that an attempt tried again learns
-- whether an earlier one committed. The common case, a sole hold and
-- nobody queued, is one autocommitted UPDATE ('freed' with `committed` 1:
-- nothing is left open). Otherwise starts a transaction, locks the row,
-- and LEAVES THE TRANSACTION OPEN for the engine to commit (and then
-- deliver the handoff) or roll back. Outcomes:
--   'already'  the row carries `p_mark`: an earlier attempt committed;
--              `hold_count` left if the lease is still live (re-entered),
--              else 0; nothing written
--   'lost'     the lease is not live with that owner and token: nothing
--              written
--   'held'     re-entered: one hold fewer; `token`, `hold_count`,
--              `expires_at` (unchanged), `remaining_ms`
--   'freed'    freed; `purged` stale waiters cleared out on the way
--   'handed'   handed to the oldest eligible waiter (FIFO): `waiter_id`,
--              `waiter_broker`, and its lease's `token` (+ 1), `expires_at`
DROP PROCEDURE IF EXISTS lockbroker_lock_release;
CREATE PROCEDURE lockbroker_lock_release(
    p_tenant VARBINARY(64),
    p_kind TINYINT UNSIGNED,
    p_key VARBINARY(512),
    p_owner VARBINARY(128),
    p_token BIGINT UNSIGNED,
    p_mark BIGINT UNSIGNED,
    p_broker VARBINARY(64),
    p_alive_us BIGINT UNSIGNED
)
    MODIFIES SQL DATA
    SQL SECURITY INVOKER
    COMMENT 'lockbroker: a release on the built-in FIFO path (with history); may leave the transaction open'
BEGIN
    DECLARE v_found TINYINT DEFAULT 0;
    DECLARE v_owner VARBINARY(128);
    DECLARE v_token BIGINT UNSIGNED;
    DECLARE v_holds INT UNSIGNED;
    DECLARE v_expires DATETIME(6);
    DECLARE v_queued INT UNSIGNED;
    DECLARE v_now DATETIME(6);
    DECLARE v_mark BIGINT UNSIGNED;
    DECLARE v_waiter_owner VARBINARY(128);
    DECLARE v_waiter_ttl BIGINT UNSIGNED;
    DECLARE r_outcome VARCHAR(16) DEFAULT 'lost';
    DECLARE r_token BIGINT UNSIGNED;
    DECLARE r_holds INT UNSIGNED;
    DECLARE r_expires DATETIME(6);
    DECLARE r_waiter BIGINT UNSIGNED;
    DECLARE r_broker VARBINARY(64);
    DECLARE r_remaining BIGINT UNSIGNED;
    DECLARE r_purged BIGINT UNSIGNED DEFAULT 0;
    DECLARE r_committed TINYINT UNSIGNED DEFAULT 0;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_found = 0;

    -- Alone: one statement and its history event, committed here, no
    -- transaction left open.
    START TRANSACTION;
    UPDATE locks SET owner = NULL, hold_count = 0, expires_at = NULL,
                     released_by = p_mark
     WHERE tenant = p_tenant AND kind = p_kind AND lock_key = p_key
       AND owner = p_owner AND token = p_token AND hold_count = 1 AND queued = 0
       AND expires_at > NOW(6) AND NOT (released_by <=> p_mark);
    IF ROW_COUNT() = 1 THEN
        INSERT INTO lock_events (tenant, kind, lock_key, event, owner, token, at)
        VALUES (p_tenant, p_kind, p_key, 2, p_owner, p_token, NOW(6));
        COMMIT;
        SET r_outcome = 'freed', r_token = p_token, r_holds = 0, r_committed = 1;
    ELSE
        START TRANSACTION;
        SELECT 1, owner, token, hold_count, expires_at, queued, released_by, NOW(6)
          INTO v_found, v_owner, v_token, v_holds, v_expires, v_queued, v_mark, v_now
          FROM locks
         WHERE tenant = p_tenant AND kind = p_kind AND lock_key = p_key
           FOR UPDATE;
        IF v_found = 1 AND v_mark <=> p_mark THEN
            -- An earlier attempt of this release committed, though it
            -- answered otherwise: nothing more to do.
            SET r_outcome = 'already', r_token = v_token,
                r_holds = IF(v_owner = p_owner AND v_token = p_token AND v_expires > v_now,
                             v_holds, 0);
        ELSEIF v_found = 0 OR v_owner IS NULL OR v_expires <= v_now
           OR v_owner <> p_owner OR v_token <> p_token THEN
            SET r_outcome = 'lost';
        ELSEIF v_holds > 1 THEN
            UPDATE locks SET hold_count = v_holds - 1, released_by = p_mark
             WHERE tenant = p_tenant AND kind = p_kind AND lock_key = p_key;
            SET r_outcome = 'held', r_token = v_token, r_holds = v_holds - 1,
                r_expires = v_expires,
                r_remaining = TIMESTAMPDIFF(MICROSECOND, v_now, v_expires) DIV 1000;
        ELSE
            IF v_queued > 0 THEN
                -- The oldest eligible waiter (FIFO): deadline not passed,
                -- broker alive.
                SELECT w.id, w.owner, w.ttl_ms, w.broker
                  INTO r_waiter, v_waiter_owner, v_waiter_ttl, r_broker
                  FROM waiters w
                 WHERE w.tenant = p_tenant AND w.kind = p_kind AND w.lock_key = p_key
                   AND w.granted_token IS NULL
                   AND w.deadline > v_now
                   AND w.broker IN (SELECT name FROM brokers
                                     WHERE heartbeat_at > v_now - INTERVAL p_alive_us MICROSECOND)
                 ORDER BY w.id
                 LIMIT 1;
            END IF;
            IF r_waiter IS NOT NULL THEN
                SET r_expires = v_now + INTERVAL (v_waiter_ttl * 1000) MICROSECOND;
                UPDATE locks SET owner = v_waiter_owner, token = v_token + 1,
                                 hold_count = 1, expires_at = r_expires,
                                 queued = v_queued - 1, released_by = p_mark
                 WHERE tenant = p_tenant AND kind = p_kind AND lock_key = p_key;
                -- Claimed at once when the waiter is this broker's: it is
                -- delivered in-process after the commit.
                UPDATE waiters SET granted_token = v_token + 1, granted_slot = NULL,
                                   granted_expires_at = r_expires,
                                   claimed = IF(broker = p_broker, 1, 0)
                 WHERE id = r_waiter;
                INSERT INTO lock_events (tenant, kind, lock_key, event, owner, token, at)
                VALUES (p_tenant, p_kind, p_key, 2, p_owner, p_token, v_now),
                       (p_tenant, p_kind, p_key, 4, v_waiter_owner, v_token + 1, v_now);
                SET r_outcome = 'handed', r_token = v_token + 1, r_holds = 1;
            ELSE
                IF v_queued > 0 THEN
                    -- Nobody eligible: clear out the stale ones.
                    DELETE w FROM waiters w
                     WHERE w.tenant = p_tenant AND w.kind = p_kind AND w.lock_key = p_key
                       AND w.granted_token IS NULL
                       AND NOT (w.deadline > v_now
                                AND w.broker IN (SELECT name FROM brokers
                                                  WHERE heartbeat_at > v_now - INTERVAL p_alive_us MICROSECOND));
                    SET r_purged = ROW_COUNT();
                END IF;
                UPDATE locks SET owner = NULL, hold_count = 0, expires_at = NULL,
                                 released_by = p_mark,
                                 queued = GREATEST(CAST(v_queued AS SIGNED) - CAST(r_purged AS SIGNED), 0)
                 WHERE tenant = p_tenant AND kind = p_kind AND lock_key = p_key;
                INSERT INTO lock_events (tenant, kind, lock_key, event, owner, token, at)
                VALUES (p_tenant, p_kind, p_key, 2, p_owner, p_token, v_now);
                SET r_outcome = 'freed', r_token = v_token, r_holds = 0;
            END IF;
        END IF;
    END IF;

    SELECT CAST(r_outcome AS BINARY) AS outcome,
           CAST(r_token AS UNSIGNED) AS token,
           CAST(r_holds AS UNSIGNED) AS hold_count,
           r_expires AS expires_at,
           CAST(r_outcome = 'handed' AS UNSIGNED) AS fresh,
           CAST(r_waiter AS UNSIGNED) AS waiter_id,
           CAST(r_broker AS BINARY) AS waiter_broker,
           CAST(r_remaining AS UNSIGNED) AS remaining_ms,
           CAST(v_queued AS UNSIGNED) AS queued,
           CAST(r_purged AS UNSIGNED) AS purged,
           CAST(r_committed AS UNSIGNED) AS committed;
END;
