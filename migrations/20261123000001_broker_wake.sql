-- Push wake-ups between brokers. A broker that hands a lease to a waiter
-- queued on another broker tells that broker to look now
-- (`POST /internal/v1/wake`) instead of leaving it to its next poll. The
-- heartbeat row says where the broker answers (`url`, its advertised
-- internal address) and the bearer token it accepts there (`secret`,
-- random per process): whoever can read this table can wake the broker,
-- nobody else can. The push is only a hint: the grant is still claimed
-- through `waiters`, so a row without them just means "poll".
ALTER TABLE brokers
    ADD COLUMN url VARBINARY(255) NULL,
    ADD COLUMN secret VARBINARY(64) NULL;
