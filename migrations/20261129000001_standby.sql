-- The broker whose memory holds waiters for this key (in-process
-- handoffs), NULL when none does. While that broker is alive (its
-- heartbeat in `brokers` is recent), every broker treats the key as having
-- waiters: a release through another broker frees the row but leaves the
-- key to that broker, which hands it to its next waiter (or to the
-- database queue, or frees it) within a tick; tries are refused. So a
-- broker's memory never answers for a key against what another broker
-- did. Set by the broker's first waiter in memory for the lease, cleared
-- in the transaction that hands the lease to its last one.
ALTER TABLE locks ADD COLUMN waiting_at VARBINARY(64) NULL;
