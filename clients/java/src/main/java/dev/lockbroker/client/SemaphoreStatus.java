package dev.lockbroker.client;

import java.time.Instant;
import java.util.List;
import java.util.stream.Collectors;

/**
 * A semaphore now ({@code GET /v1/semaphores/{key}}, and each item of a listing).
 *
 * @param key the key as sent (in a listing, the storage key)
 * @param storageKey the key the tenant's naming policy mapped it to
 * @param permits its size; null when no semaphore of this key exists
 * @param holders the unexpired leases, by slot
 * @param waiters requests waiting for a slot
 */
public record SemaphoreStatus(String key, String storageKey, Integer permits, List<Holder> holders, long waiters) {

    /**
     * One held slot.
     *
     * @param slot 0 to permits - 1
     * @param owner the holder
     * @param token the grant's fencing token
     * @param expiresAt when the lease ends unless renewed (one held in a session: the session's expiry)
     * @param session the {@link Session} the lease is held in; null when held on its own
     */
    public record Holder(int slot, String owner, long token, Instant expiresAt, String session) {
    }

    static SemaphoreStatus from(Fields f) {
        String storageKey = f.string("storage_key");
        Long permits = f.optNumber("permits");
        List<Holder> holders = f.objects("holders").stream()
                .map(h -> new Holder((int) h.number("slot"), h.string("owner"), h.number("token"),
                        h.optInstant("expires_at"), h.optString("session")))
                .collect(Collectors.toUnmodifiableList());
        return new SemaphoreStatus(f.optString("key") != null ? f.optString("key") : storageKey, storageKey,
                permits == null ? null : permits.intValue(), holders,
                f.optNumber("waiters") == null ? 0 : f.number("waiters"));
    }
}
