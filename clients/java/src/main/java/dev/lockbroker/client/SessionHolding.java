package dev.lockbroker.client;

import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CompletableFuture;

/**
 * A lease of any kind held in a {@link Session}: read and released as its
 * kind's {@link Holding} does (the broker releases it as any lease), but
 * kept alive by the session ({@link SessionMember}), never renewed on its
 * own. Wrapping the kind's holding, rather than a holding per kind in
 * sessions, is what lets every kind (locks, permits, rwlock leases,
 * multi-locks, leaderships) join sessions with one line each
 * ({@link Acquire#heldIn}, {@link Session#semaphore} and the others).
 */
final class SessionHolding implements Holding {
    private final Holding kind;
    private final Session session;

    SessionHolding(Holding kind, Session session) {
        this.kind = kind;
        this.session = session;
    }

    @Override
    public String describe(Fields grant) {
        return kind.describe(grant) + " in session " + session.id();
    }

    @Override
    public String key(Fields grant) {
        return kind.key(grant);
    }

    @Override
    public String owner(Fields grant) {
        return kind.owner(grant);
    }

    @Override
    public long token(Fields grant) {
        return kind.token(grant);
    }

    /** The session's TTL (the broker answers it as the lease's). */
    @Override
    public Duration ttl(Fields grant) {
        return kind.ttl(grant);
    }

    /** The session's expiry, which moves with each keepalive. */
    @Override
    public Instant expiresAt(Fields grant) {
        Instant at = session.expiresAt();
        return at != null ? at : kind.expiresAt(grant);
    }

    /** Never called ({@link SessionMember} does not renew); the broker would refuse it with 400. */
    @Override
    public CompletableFuture<Fields> renew(Fields grant, Duration timeout) {
        return CompletableFuture.failedFuture(new InvalidRequestException(400, "invalid_request",
                describe(grant) + " lives as long as its session: keep the session alive instead"));
    }

    @Override
    public void release(Fields grant) {
        kind.release(grant);
    }

    @Override
    public Keeper keeper(Lease lease) {
        return new SessionMember(session, lease);
    }
}
