-- Deadlock detection between sessions (issue #33), pinned per session
-- instead of per tenant: a session's wait is enqueued, and a check reads a
-- session's waits, only after writing that session's `wait_checks` in the
-- same transaction (a write, not a locking read: on Galera, certification
-- orders writes). Checks of waits that cannot meet no longer queue behind
-- one tenant-wide row. `session_wait_guards` stays for brokers of the
-- earlier version during a rolling upgrade; nothing reads it.
ALTER TABLE sessions ADD COLUMN wait_checks BIGINT UNSIGNED NOT NULL DEFAULT 0;
