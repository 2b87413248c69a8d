package dev.lockbroker.client;

import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.Optional;

/**
 * A candidate standing in an election until it resigns, from
 * {@link LockbrokerClient#campaign}: a daemon thread waits to be elected,
 * tells the {@link LeadershipListener}, holds the leadership (renewing it)
 * until it is lost, tells the listener again, and stands again; Curator's
 * {@code LeaderSelector} with {@code autoRequeue}.
 *
 * <pre>{@code
 * try (Campaign campaign = client.campaign("scheduler", Duration.ofSeconds(10), listener)) {
 *     ... // leads whenever elected, until closed
 * }
 * }</pre>
 *
 * <p>{@link #resign()} (or {@link #close()}) leaves the election: it steps
 * down if leading (the next candidate waiting is elected) and stops
 * standing; a wait in progress is abandoned without leaving a leadership
 * behind.
 *
 * <p>One from {@link Session#campaign} holds each leadership in its
 * session instead (never renewed on its own), and stands only while the
 * session lives: when the session is lost, so is the leadership (the
 * listener is told {@code revoked}) and the campaign stops standing; the
 * session's close resigns it first.
 */
public final class Campaign implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("dev.lockbroker.client");

    private final LockbrokerClient client;
    private final String name;
    private final String candidate;
    /** The leadership's TTL; null in a session, which sets it. */
    private final Duration ttl;
    /** The session each leadership is held in; null for leaderships of their own. */
    private final Session session;
    private final LeadershipListener listener;
    private final Thread thread;
    private volatile boolean stopped;
    private volatile Leadership current;
    private volatile LockbrokerException resignFailure;

    Campaign(LockbrokerClient client, String name, String candidate, Duration ttl, LeadershipListener listener) {
        this(client, null, name, candidate, ttl, listener);
    }

    /** A campaign whose leaderships are held in {@code session}. */
    Campaign(LockbrokerClient client, Session session, String name, String candidate, LeadershipListener listener) {
        this(client, session, name, candidate, null, listener);
    }

    private Campaign(LockbrokerClient client, Session session, String name, String candidate, Duration ttl,
            LeadershipListener listener) {
        this.client = client;
        this.session = session;
        this.name = name;
        this.candidate = candidate;
        this.ttl = ttl;
        this.listener = listener;
        this.thread = new Thread(this::stand, "lockbroker-campaign-" + name);
        this.thread.setDaemon(true);
    }

    Campaign start() {
        thread.start();
        return this;
    }

    /** The election's name. */
    public String name() {
        return name;
    }

    /** This candidate's name. */
    public String candidate() {
        return candidate;
    }

    /** The leadership while this candidate leads. */
    public Optional<Leadership> leadership() {
        Leadership now = current;
        return now == null || now.isLost() ? Optional.empty() : Optional.of(now);
    }

    /** True while this candidate leads. */
    public boolean isLeader() {
        return leadership().isPresent();
    }

    /**
     * Leaves the election: steps down if leading and stops standing (once;
     * waits for the campaign's thread to finish, at most the client's
     * timeout).
     *
     * @throws LockbrokerException stepping down failed (the leadership then ends by its TTL)
     */
    public void resign() {
        stopped = true;
        if (thread != Thread.currentThread()) {
            thread.interrupt();
            try {
                thread.join(client.timeout().plusSeconds(1).toMillis());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        if (session != null) {
            session.resigned(this);
        }
        LockbrokerException failure = resignFailure;
        resignFailure = null;
        if (failure != null) {
            throw failure;
        }
    }

    /** {@link #resign()}, logging rather than throwing a failure. */
    @Override
    public void close() {
        try {
            resign();
        } catch (LockbrokerException e) {
            LOG.log(Level.WARNING, "lockbroker: resigning from {0} failed (the leadership ends by its TTL): {1}",
                    name, e.getMessage());
        }
    }

    /** The campaign's thread. */
    private void stand() {
        int failures = 0;
        while (!stopped && !sessionEnded()) {
            Leadership won;
            try {
                won = ballot().candidate(candidate).acquire();
                failures = 0;
            } catch (CancelledException e) {
                return;
            } catch (IllegalStateException sessionClosed) {
                return;
            } catch (LockbrokerException e) {
                if (session != null && (sessionEnded() || "session_not_found".equals(e.code()))) {
                    LOG.log(Level.DEBUG, "lockbroker: campaign in {0} stops: its session {1} has ended", name,
                            session.id());
                    return;
                }
                LOG.log(Level.WARNING, "lockbroker: campaigning in {0} failed, trying again: {1}", name,
                        e.getMessage());
                if (!pause(++failures)) {
                    return;
                }
                continue;
            }
            current = won;
            if (stopped) {
                stepDown(won);
                return;
            }
            tell(true, won);
            try {
                won.lost().get();
            } catch (InterruptedException e) {
                // resign() stops us: step down below
            } catch (java.util.concurrent.ExecutionException impossible) {
                // lost() completes normally
            }
            if (!won.isLost()) {
                stepDown(won);
                return;
            }
            current = null;
            tell(false, won);
        }
    }

    /** What one try to be elected asks for: a leadership of its own, or one held in the session. */
    private Acquire<Leadership> ballot() {
        return session != null ? session.election(name) : client.election(name).ttl(ttl);
    }

    /** The campaign's session was lost or closed: standing again in it cannot succeed. */
    private boolean sessionEnded() {
        return session != null && (session.isLost() || session.isClosed());
    }

    /**
     * Resigns: the listener is told first, so that the leader's work stops
     * before the next candidate can be elected and start its own.
     */
    private void stepDown(Leadership won) {
        current = null;
        tell(false, won);
        try {
            won.resign();
        } catch (LeaseLostException lostMeanwhile) {
            // nothing to give back
        } catch (LockbrokerException e) {
            resignFailure = e;
        }
    }

    private void tell(boolean elected, Leadership leadership) {
        try {
            if (elected) {
                listener.elected(leadership);
            } else {
                listener.revoked(leadership);
            }
        } catch (RuntimeException e) {
            LOG.log(Level.WARNING, "lockbroker: the leadership listener of {0} threw: {1}", name, e);
        }
    }

    /** Waits before standing again after a failure; false when resigned meanwhile. */
    private boolean pause(int failures) {
        try {
            Thread.sleep(client.retryPolicy().delay(Math.min(failures, 8)).toMillis());
            return !stopped;
        } catch (InterruptedException e) {
            return false;
        }
    }
}
