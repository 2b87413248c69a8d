package dev.lockbroker.client;

import java.util.List;
import java.util.stream.Collectors;

/**
 * A session and every lease held in it ({@code GET /v1/sessions/{id}}),
 * by the database clock.
 *
 * @param session the session
 * @param leases what it holds, by kind and storage key
 */
public record SessionStatus(SessionInfo session, List<Held> leases) {

    /**
     * A lease held in a session.
     *
     * @param kind {@code lock} (also each key of a multi-lock), {@code semaphore}, {@code rwlock} or
     *     {@code election}
     * @param key the key (the storage key: the broker does not keep the key sent)
     * @param storageKey the storage key
     * @param token its fencing token (an election's term)
     * @param slot a semaphore lease's slot; null otherwise
     * @param mode an rwlock lease's mode; null otherwise
     */
    public record Held(String kind, String key, String storageKey, long token, Integer slot, String mode) {
        static Held from(Fields f) {
            Long slot = f.optNumber("slot");
            return new Held(f.string("kind"), f.string("key"), f.string("storage_key"), f.number("token"),
                    slot == null ? null : slot.intValue(), f.optString("mode"));
        }
    }

    /** The session's id. */
    public String id() {
        return session.id();
    }

    static SessionStatus from(Fields f) {
        return new SessionStatus(SessionInfo.from(f),
                f.objects("leases").stream().map(Held::from).collect(Collectors.toUnmodifiableList()));
    }
}
