package dev.lockbroker.client;

import java.time.Duration;

/**
 * Keeps a lease held in a {@link Session}: by doing nothing of its own.
 * The broker ends such a lease only with its session, so the session's
 * keepalives are its renewals and the session's loss is its loss; a
 * renewal of its own would be refused ({@code 400}) anyway. Starting
 * enrols the lease in its session's {@link SessionLeases}, which tells it
 * when the session is lost; stopping (a release) takes it out.
 */
final class SessionMember implements Keeper {
    private final Session session;
    private final Lease lease;

    SessionMember(Session session, Lease lease) {
        this.session = session;
        this.lease = lease;
    }

    @Override
    public void start(long sent, long answered, boolean waited, Duration ttl) {
        session.members().add(lease);
    }

    @Override
    public void stop() {
        session.members().remove(lease);
    }

    /** Never renewed on its own. */
    @Override
    public int renewals() {
        return 0;
    }

    /** The session's last confirmed keepalive: the lease lives at least as long as the session. */
    @Override
    public long confirmedSent() {
        return session.confirmedSentNanos();
    }
}
