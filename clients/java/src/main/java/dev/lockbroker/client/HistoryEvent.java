package dev.lockbroker.client;

import java.time.Instant;

/**
 * One event of a lease's history ({@code GET /v1/{kind}/{key}/history}).
 *
 * @param event {@code granted}, {@code released}, {@code expired}, {@code handed_off} or {@code force_released}
 * @param owner the lease's holder
 * @param token the lease's fencing token
 * @param at when, by the database clock
 */
public record HistoryEvent(String event, String owner, long token, Instant at) {
    static HistoryEvent from(Fields f) {
        return new HistoryEvent(f.string("event"), f.string("owner"), f.number("token"), f.instant("at"));
    }
}
