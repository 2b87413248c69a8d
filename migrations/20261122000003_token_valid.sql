-- lockbroker_token_valid(tenant, storage_key, token): 1 when `token` is the
-- live (unexpired by this server's clock) grant of that lock, else 0; for
-- writers in the same MySQL/MariaDB server that fence their writes inside
-- their own transaction:
--
--   UPDATE orders SET ... WHERE id = 42
--     AND lockbroker.lockbroker_token_valid('team-a', 'orders/42', 17);
--
-- `storage_key` is the key as the tenant's naming policy stored it (the
-- `storage_key` of an acquire's answer), not necessarily the client's key.
--
-- The read is a locking read (LOCK IN SHARE MODE): until the writer's
-- transaction ends, no other transaction can grant, renew or release that
-- lease, so a write made under a valid token commits before any later
-- grant. Keep such transactions short: the broker's tries on that key wait
-- for them (or answer 409 for NOWAIT).
--
-- NOT DETERMINISTIC (it reads the clock and the table) and READS SQL DATA:
-- declared so, MySQL 8 with binary logging accepts it without
-- log_bin_trust_function_creators (error 1418 otherwise). A user without
-- SUPER on a server that logs binaries still gets error 1419: run
-- `lockbroker migrate` once as a user with SUPER, or set
-- log_bin_trust_function_creators = 1 (README, "Multi-locks, fencing and
-- force-release").
-- SQL SECURITY DEFINER: a writer needs only EXECUTE on the function, not
-- SELECT on `locks`.
DROP FUNCTION IF EXISTS lockbroker_token_valid;
CREATE FUNCTION lockbroker_token_valid(
    p_tenant VARBINARY(64),
    p_key VARBINARY(512),
    p_token BIGINT UNSIGNED
) RETURNS TINYINT
    NOT DETERMINISTIC
    READS SQL DATA
    SQL SECURITY DEFINER
    COMMENT 'lockbroker: 1 when the token is the live grant of the lock'
RETURN (
    SELECT COUNT(*) FROM locks
    WHERE tenant = p_tenant AND kind = 0 AND lock_key = p_key
      AND owner IS NOT NULL AND token = p_token AND expires_at > NOW(6)
    LOCK IN SHARE MODE
);
