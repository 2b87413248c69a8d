-- One row per (tenant, storage key). The row outlives every lease of its key
-- so that `token` (the fencing token) never goes back: rows are never deleted.
-- Keys and owners are VARBINARY: they compare byte for byte (no case folding,
-- no trailing-space padding), unlike MySQL's default and `_bin` collations.
CREATE TABLE IF NOT EXISTS locks (
    tenant VARBINARY(64) NOT NULL,
    lock_key VARBINARY(512) NOT NULL,
    owner VARBINARY(128) NULL,
    token BIGINT UNSIGNED NOT NULL DEFAULT 0,
    hold_count INT UNSIGNED NOT NULL DEFAULT 0,
    expires_at DATETIME(6) NULL,
    PRIMARY KEY (tenant, lock_key),
    KEY locks_by_expiry (expires_at)
) ENGINE = InnoDB;
