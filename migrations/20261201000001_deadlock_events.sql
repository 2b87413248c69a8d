-- An event per refused wait (issue #33): a session's wait that would have
-- closed a cycle is recorded as a `deadlock` event (event 7) in
-- `lock_events`, with `kind` 5 (not a change of the key's leases, so not
-- in the key's history; a tenant's refusals are one range of
-- `lock_events_by_key`), the key waited for as `lock_key`, the refused
-- session and owner, and the cycle here as JSON: an array of
-- {session, owner, kind, storage_key}, the first step the refused wait.
-- NULL for every other event. ADD COLUMN of a nullable column at the end is
-- instant on MariaDB 10.3+ and MySQL 8.0.
ALTER TABLE lock_events ADD COLUMN cycle MEDIUMBLOB NULL;
