-- Policy versions (issue #23): each event of a lock's history names the
-- tenant's policy version that decided it (the id of
-- `GET /v1/admin/tenants/{tenant}/policy/versions`, the first 12 hex digits
-- of the component's sha256): for a grant the version that named the key,
-- for a handoff the one whose fairness picked the waiter. NULL for other
-- events, for the built-in policy, and for events recorded before this.
ALTER TABLE lock_events ADD COLUMN policy VARBINARY(64) NULL;
