package dev.lockbroker.client;

import java.time.Duration;

/**
 * What keeps one {@link Lease} alive, and says when it is lost. A lease of
 * its own is kept by its {@link Renewal}; a lease held in a {@link Session}
 * by its {@link SessionMember}, since the session's keepalive keeps it and
 * the session's loss is its loss. {@link Holding#keeper} chooses, so that
 * {@link Lease} and every kind's lease class stay the same either way.
 */
interface Keeper {
    /**
     * Starts keeping a grant asked for at {@code sent} and answered at
     * {@code answered} ({@link System#nanoTime()} scale; after waiting in
     * the queue if {@code waited}).
     */
    void start(long sent, long answered, boolean waited, Duration ttl);

    /** Stops keeping it (released, or lost). */
    void stop();

    /** How many renewals of this lease the broker confirmed. */
    int renewals();

    /** When the last request the broker confirmed was sent ({@link System#nanoTime()} scale). */
    long confirmedSent();
}
