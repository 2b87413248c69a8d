package dev.lockbroker.client;

import java.time.Instant;
import java.util.List;
import java.util.stream.Collectors;

/**
 * A reader-writer lock now ({@code GET /v1/rwlocks/{key}}, and each item of a listing).
 *
 * @param key the key as sent (in a listing, the storage key)
 * @param storageKey the key the tenant's naming policy mapped it to
 * @param writer the writer's lease; null when nobody writes
 * @param readers the unexpired read leases, oldest first
 * @param waiters requests waiting (readers and writers)
 */
public record RwLockStatus(String key, String storageKey, Holder writer, List<Holder> readers, long waiters) {

    /**
     * One unexpired lease.
     *
     * @param owner the holder
     * @param token the grant's fencing token
     * @param expiresAt when the lease ends unless renewed (one held in a session: the session's expiry)
     * @param session the {@link Session} the lease is held in; null when held on its own
     */
    public record Holder(String owner, long token, Instant expiresAt, String session) {
        static Holder from(Fields f) {
            return new Holder(f.string("owner"), f.number("token"), f.optInstant("expires_at"),
                    f.optString("session"));
        }
    }

    static RwLockStatus from(Fields f) {
        String storageKey = f.string("storage_key");
        Fields writer = f.optObject("writer");
        List<Holder> readers = f.objects("readers").stream().map(Holder::from)
                .collect(Collectors.toUnmodifiableList());
        return new RwLockStatus(f.optString("key") != null ? f.optString("key") : storageKey, storageKey,
                writer == null ? null : Holder.from(writer), readers,
                f.optNumber("waiters") == null ? 0 : f.number("waiters"));
    }
}
