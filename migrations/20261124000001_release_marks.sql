-- The mark of the release that last ended or handed on a lease in this row:
-- a random number per release request, written in the same statement or
-- transaction as the release itself. A release that must try again (its
-- statement or its COMMIT answered an error) reads it to learn whether an
-- earlier attempt committed after all, so its answer is exact: on Galera a
-- release was once seen to take effect while answering an error, and the
-- retry then found the lease gone and answered 409. Grants leave it as is.
ALTER TABLE locks ADD COLUMN released_by BIGINT UNSIGNED NULL;
ALTER TABLE semaphore_slots ADD COLUMN released_by BIGINT UNSIGNED NULL;
