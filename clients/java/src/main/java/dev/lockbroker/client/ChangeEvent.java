package dev.lockbroker.client;

import java.time.Instant;

/**
 * One event of {@link LockbrokerClient#events}: a change of one of the
 * tenant's locks, semaphores or rwlocks, or a reset.
 *
 * @param id the event's id: increasing; a stream resumes after the last one it received
 * @param type {@code granted}, {@code released}, {@code expired}, {@code handed_off},
 *     {@code force_released}; or {@code reset}: the broker's history no longer reached
 *     back to where the stream resumed, so changes were missed (the other fields are
 *     then empty)
 * @param kind {@code lock}, {@code semaphore} or {@code rwlock}
 * @param storageKey the lease's storage key
 * @param owner the lease's holder
 * @param token the lease's fencing token
 * @param at when, by the database clock
 */
public record ChangeEvent(long id, String type, String kind, String storageKey, String owner, long token,
        Instant at) {
    /** The type of the reset event. */
    public static final String RESET = "reset";

    /** True for a reset: changes were missed. */
    public boolean isReset() {
        return RESET.equals(type);
    }

    static ChangeEvent from(String name, String sseId, Fields f) {
        if (RESET.equals(name)) {
            return new ChangeEvent(id(sseId), RESET, null, null, null, 0, null);
        }
        Long id = f.optNumber("id");
        return new ChangeEvent(id != null ? id : id(sseId),
                f.optString("event") != null ? f.optString("event") : name, f.string("kind"),
                f.string("storage_key"), f.string("owner"), f.number("token"), f.optInstant("at"));
    }

    /** An SSE {@code id:} field as a number; 0 when there is none. */
    private static long id(String sseId) {
        if (sseId == null || sseId.isBlank()) {
            return 0;
        }
        try {
            return Long.parseLong(sseId.trim());
        } catch (NumberFormatException e) {
            throw new UnexpectedResponseException(200, "an event id that is not a number: " + sseId);
        }
    }
}
