-- The brokers sharing this database, each with the last time it said it
-- was alive, by the database clock. A waiter whose broker has not
-- heartbeated for a few intervals is skipped by handoffs and never counted
-- against a newcomer: its broker died (kill -9, crash, partition) and
-- nobody would collect what it was given.
CREATE TABLE IF NOT EXISTS brokers (
    name VARBINARY(64) NOT NULL,
    started_at DATETIME(6) NOT NULL,
    heartbeat_at DATETIME(6) NOT NULL,
    -- The database server this broker writes through (host:port), so a
    -- misconfiguration that splits brokers over cluster nodes shows.
    server VARBINARY(255) NULL,
    PRIMARY KEY (name)
) ENGINE = InnoDB;

-- A granted waiter row is claimed by its broker before the grant is
-- answered: a claimed grant is the client's; an unclaimed grant of a dead
-- broker was never delivered, so it may be taken back and handed on.
ALTER TABLE waiters ADD COLUMN claimed TINYINT UNSIGNED NOT NULL DEFAULT 0;
