-- Sessions in the history (issue #30): the session a lease was held in
-- (NULL: a plain lease), and why a session's end released it (`reason`:
-- 1 the session was closed, 2 it expired; NULL otherwise). A session's
-- end also appends one `session_ended` event (event 6) whose `kind` is 4
-- (a session, not a key) and whose `lock_key` is the session's id.
ALTER TABLE lock_events ADD COLUMN session VARBINARY(64) NULL,
    ADD COLUMN reason TINYINT UNSIGNED NULL;
