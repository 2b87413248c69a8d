-- The built-in (FIFO) policy's path for locks, server-side: what the engine
-- otherwise does in 6 to 8 statements per acquire and release (read the row,
-- count the tenant's waiters, enqueue and count; pick the oldest eligible
-- waiter, write its lease, record its grant, count) in one CALL each. A
-- contended handoff then costs 4 round trips (CALL + COMMIT for the release
-- that hands on, CALL + COMMIT for the next enqueue) instead of 15.
--
-- Both procedures decide by the database clock read with the row (`v_now`),
-- as the engine does with the rows it reads, and keep the queue's
-- invariants: the header row (the lock's own row) is locked first, then the
-- waiters are read and written; `queued` counts pending waiters. A tenant
-- whose fairness policy is not the built-in FIFO never calls them (the
-- engine's general path asks its policy).
--
-- Each CALL answers one row: `outcome`, and the columns that outcome fills
-- (the others NULL), so one decoder reads both procedures.
--
-- They need CREATE ROUTINE and ALTER ROUTINE (the migrating user) and
-- EXECUTE (the broker's user): README, "Database privileges".
-- SQL SECURITY INVOKER: they run with the caller's rights on the tables.
-- NOWAIT is not allowed inside a routine (error 1314): the one-try acquire,
-- `wait_ms` 0, keeps its own statements.

-- lockbroker_lock_acquire: a waiting acquire (`wait_ms` > 0) of a lock.
-- Starts a transaction, locks the row and LEAVES THE TRANSACTION OPEN: the
-- engine registers a new waiter before it commits (so a handoff right after
-- the commit finds it), and commits or rolls back itself (so a lost COMMIT
-- answer is settled as for every transaction). Outcomes:
--   'granted'  a new grant (token + 1, `fresh` 1) or a re-entry (same
--              token, hold_count + 1); `token`, `hold_count`, `expires_at`
--   'queued'   held by another owner: a waiter row was inserted and
--              counted; `waiter_id`, `remaining_ms`, `queued` (before it)
--   'too_many' the tenant has `p_max_waiters` eligible waiters (429)
--   'general'  the row is missing, or free with waiters still counted
--              (they must be handed the lease or cleared out): the engine
--              rolls back and takes its general path
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
    COMMENT 'lockbroker: a waiting acquire on the built-in FIFO path; leaves the transaction open'
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
    COMMENT 'lockbroker: a release on the built-in FIFO path; may leave the transaction open'
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

    -- Alone: one autocommitted statement, no transaction left open.
    UPDATE locks SET owner = NULL, hold_count = 0, expires_at = NULL,
                     released_by = p_mark
     WHERE tenant = p_tenant AND kind = p_kind AND lock_key = p_key
       AND owner = p_owner AND token = p_token AND hold_count = 1 AND queued = 0
       AND expires_at > NOW(6) AND NOT (released_by <=> p_mark);
    IF ROW_COUNT() = 1 THEN
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
