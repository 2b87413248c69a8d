package dev.lockbroker.client;

import java.time.Duration;
import java.time.Instant;

/**
 * A live session as the broker lists it ({@code GET /v1/sessions}), by the
 * database clock.
 *
 * @param id the broker's id (what an acquire names as {@code session})
 * @param name its name; null when it has none
 * @param ttl how long it lives without a keepalive
 * @param lockDelay how long its keys stay ungranted after it expires
 * @param createdAt when it was opened; null when the broker does not say
 * @param expiresAt when it expires without a keepalive
 */
public record SessionInfo(String id, String name, Duration ttl, Duration lockDelay, Instant createdAt,
        Instant expiresAt) {

    static SessionInfo from(Fields f) {
        String name = f.optString("name");
        Long delay = f.optNumber("lock_delay_ms");
        return new SessionInfo(f.string("id"), name == null || name.isEmpty() ? null : name,
                Duration.ofMillis(f.number("ttl_ms")), Duration.ofMillis(delay == null ? 0 : delay),
                f.optInstant("created_at"), f.optInstant("expires_at"));
    }
}
