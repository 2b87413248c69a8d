-- Every kind in sessions (issue #30): a semaphore's permit and a rwlock's
-- read or write lease can be held in a session too. The column names the
-- session (NULL: a plain lease), written with the lease and cleared when
-- it ends, as `locks.session` is; the indexes let a session's end (and
-- `GET /v1/sessions/{id}`) find its leases of each kind without a scan.
ALTER TABLE semaphore_slots ADD COLUMN session VARBINARY(64) NULL,
    ADD KEY slots_by_session (tenant, session);

ALTER TABLE rwlocks ADD COLUMN writer_session VARBINARY(64) NULL,
    ADD KEY rwlocks_by_session (tenant, writer_session);

ALTER TABLE rwlock_readers ADD COLUMN session VARBINARY(64) NULL,
    ADD KEY readers_by_session (tenant, session);
