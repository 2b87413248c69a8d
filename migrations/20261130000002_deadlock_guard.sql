-- Deadlock detection between sessions (issue #33): a session's wait that
-- could close a cycle of the wait-for graph is checked while its
-- transaction holds its tenant's row here (written: on Galera a write,
-- not a locking read, is what certification orders), so two waits that
-- would close one cycle at the same moment through two brokers are
-- checked one after the other, and exactly one of them is refused.
CREATE TABLE IF NOT EXISTS session_wait_guards (
    tenant VARBINARY(64) NOT NULL,
    checks BIGINT UNSIGNED NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant)
) ENGINE = InnoDB;
