package dev.lockbroker.client;

import java.time.Instant;

/**
 * A lock now ({@code GET /v1/locks/{key}}, and each item of a listing), as
 * judged by the database clock.
 *
 * @param key the key as sent (in a listing it may equal the storage key)
 * @param storageKey the key the tenant's naming policy mapped it to
 * @param held true while an unexpired lease exists
 * @param owner the holder; null when free
 * @param token the current fencing token; null when free
 * @param holdCount how many times the holder has it (re-entries); null when free
 * @param acquiredAt when the lease was granted; null when free or unknown
 * @param expiresAt when the lease ends unless renewed; null when free
 * @param waiters requests waiting for it
 * @param session the {@link Session} the lease is held in; null when free or held on its own
 */
public record LockStatus(String key, String storageKey, boolean held, String owner, Long token, Integer holdCount,
        Instant acquiredAt, Instant expiresAt, long waiters, String session) {

    static LockStatus from(Fields f) {
        Long holds = f.optNumber("hold_count");
        String storageKey = f.string("storage_key");
        return new LockStatus(f.optString("key") != null ? f.optString("key") : storageKey, storageKey,
                f.has("held") ? f.bool("held") : f.optString("owner") != null, f.optString("owner"),
                f.optNumber("token"), holds == null ? null : holds.intValue(), f.optInstant("acquired_at"),
                f.optInstant("expires_at"), f.optNumber("waiters") == null ? 0 : f.number("waiters"),
                f.optString("session"));
    }
}
