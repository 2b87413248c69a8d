package dev.lockbroker.client;

import java.util.List;
import java.util.Optional;

/**
 * One page of a listing: live leases in storage-key order. A page may hold
 * fewer than the limit asked (the broker examines a bounded stretch of keys
 * per page): follow {@link #next()} until it is empty, or use
 * {@link LockbrokerClient#listAll}.
 *
 * @param items the page's items
 * @param cursor the next page's cursor (opaque); null after the last page
 * @param <T> the kind's status type
 */
public record Page<T>(List<T> items, String cursor) {
    /** The cursor of the next page; empty after the last. */
    public Optional<String> next() {
        return Optional.ofNullable(cursor);
    }
}
