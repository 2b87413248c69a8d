package dev.lockbroker.client;

import java.lang.System.Logger.Level;
import java.time.Duration;
import java.time.Instant;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;

/**
 * A held lease, renewed in the background until released: a lock (this
 * class), a semaphore {@link Permit}, a rwlock's {@link RwLease}, a
 * {@link Leadership}, a {@link MultiLease}. {@link AutoCloseable}, for
 * try-with-resources:
 *
 * <pre>{@code
 * try (Lease lease = client.lock("nightly", Duration.ofSeconds(30))) {
 *     store.write(data, lease.token());
 * }
 * }</pre>
 *
 * <p>It renews every third of its TTL on a daemon thread (Redisson's
 * watchdog); one held in a {@link Session} is never renewed on its own, but
 * lives, and is lost, with its session. {@link #lost()} completes when it can no longer be kept: the
 * broker refused a renewal, or no renewal was confirmed before the lease
 * would have run out, counted from when the last confirmed request was sent
 * (so a slow answer never makes the client believe in a longer lease than
 * the broker's). From then on someone else may hold it: stop the work it
 * guards. Pass {@link #token()} to whatever the lease protects, and have it
 * refuse tokens older than one it has seen (fencing).
 *
 * <p>{@link #close()} releases it and never throws (a failure is logged,
 * and the lease ends by its TTL); {@link #release()} does the same and
 * throws. Both carry on when the calling thread is interrupted, so an
 * interrupted worker still gives its lease back.
 */
public class Lease implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("dev.lockbroker.client");

    private final Holding holding;
    private final Keeper renewal;
    private final CompletableFuture<Void> lost = new CompletableFuture<>();
    private final String key;
    private final String owner;
    private final long token;
    private final Duration ttl;
    private volatile Fields grant;
    private volatile LockbrokerException lostReason;
    private boolean released;

    Lease(Holding holding, Fields grant) {
        this.holding = holding;
        this.grant = grant;
        this.key = holding.key(grant);
        this.owner = holding.owner(grant);
        this.token = holding.token(grant);
        this.ttl = holding.ttl(grant);
        this.renewal = holding.keeper(this);
    }

    /** Starts keeping it alive; see {@link Keeper#start}. */
    final void start(long sent, long answered, boolean waited) {
        renewal.start(sent, answered, waited, ttl);
    }

    /** The key (an election's name; a multi-lock's keys, comma-separated). */
    public String key() {
        return key;
    }

    /** Who holds it (an election's candidate). */
    public String owner() {
        return owner;
    }

    /**
     * The fencing token: strictly greater than every earlier grant's of
     * this key. Pass it to whatever the lease protects.
     */
    public long token() {
        return token;
    }

    /** The lease length the broker granted. */
    public Duration ttl() {
        return ttl;
    }

    /** When the lease ends by the database clock unless renewed again (moves with each renewal). */
    public Instant expiresAt() {
        return holding.expiresAt(grant);
    }

    /**
     * Completes (normally, with null) when the lease is lost; never when it
     * is released. Each call returns a new future, so cancelling one does not
     * affect others: {@code lease.lost().thenRun(worker::stop)}.
     */
    public CompletableFuture<Void> lost() {
        return lost.copy();
    }

    /** True once the lease is known to be lost. */
    public boolean isLost() {
        return lostReason != null;
    }

    /** Why the lease was lost: a {@link LeaseLostException}, its cause the last failure; empty while held. */
    public Optional<LockbrokerException> lostReason() {
        return Optional.ofNullable(lostReason);
    }

    /**
     * Throws {@link LeaseLostException} if the lease was lost: a check to put
     * between steps of long work.
     */
    public void checkHeld() {
        LockbrokerException reason = lostReason;
        if (reason != null) {
            throw new LeaseLostException(0, "lease_lost", "the lease of " + holding.describe(grant) + " was lost",
                    reason);
        }
    }

    /** How many renewals of this lease the broker has confirmed (0 for a lease held in a {@link Session}: its session's keepalives keep it). */
    public int renewals() {
        return renewal.renewals();
    }

    /**
     * Stops renewing and releases the lease (once; later calls do nothing).
     * A lease already lost is released too, as far as it is still held:
     * releases are fenced by the token, so this frees only what is still
     * this lease's (the keys of a multi-lock that were not lost, a lease
     * the client gave up on while the broker kept it) and never touches a
     * later holder's.
     *
     * @throws LeaseLostException the lease was lost before ({@link #isLost()}
     *     was true), or the broker says it no longer holds it (then
     *     {@link #lost()} completes)
     * @throws LockbrokerException the broker could not be asked: the lease
     *     ends by its TTL
     */
    public void release() {
        synchronized (this) {
            if (released) {
                return;
            }
            released = true;
        }
        renewal.stop();
        LockbrokerException lostBefore = lostReason;
        try {
            holding.release(grant);
        } catch (LeaseLostException e) {
            lose(e);
            if (lostBefore == null) {
                throw e;
            }
        } catch (LockbrokerException e) {
            if (lostBefore == null) {
                throw e;
            }
        }
        if (lostBefore != null) {
            throw new LeaseLostException(0, "lease_lost", "the lease of " + holding.describe(grant)
                    + " was lost before it was released", lostBefore);
        }
    }

    /**
     * Releases the lease as {@link #release()} does, but never throws: a
     * lease already lost has nothing to release, and any other failure is
     * logged (the lease then ends by its TTL).
     */
    @Override
    public void close() {
        try {
            release();
        } catch (LeaseLostException e) {
            LOG.log(Level.DEBUG, "lockbroker: {0} was lost before it was closed: nothing to release",
                    holding.describe(grant));
        } catch (LockbrokerException e) {
            LOG.log(Level.WARNING, "lockbroker: releasing {0} failed (it ends by its TTL): {1}",
                    holding.describe(grant), e.getMessage());
        }
    }

    /**
     * Its session was closed by {@link Session#close()}, which released it
     * with every other lease of the session: nothing is left to give back,
     * so a later {@link #close()} or {@link #release()} does nothing.
     */
    final void endedWithSession() {
        synchronized (this) {
            released = true;
        }
        renewal.stop();
    }

    /** When the last request the broker confirmed was sent ({@link System#nanoTime()} scale; for tests). */
    final long confirmedSentNanos() {
        return renewal.confirmedSent();
    }

    /** The latest grant (renewals replace it). */
    final Fields grant() {
        return grant;
    }

    /** A renewal was confirmed. */
    final void renewed(Fields renewed) {
        grant = renewed;
    }

    /** The lease is gone: say so to those who wait on {@link #lost()}. */
    final synchronized void lose(LockbrokerException reason) {
        if (lostReason == null) {
            lostReason = reason;
            LOG.log(Level.WARNING, "lockbroker: lease of {0} lost: {1}", holding.describe(grant),
                    reason.getMessage());
        }
        // Not on this thread: the waiters' callbacks must not hold up renewals.
        Scheduler.WORKERS.execute(() -> lost.complete(null));
    }

    @Override
    public String toString() {
        return getClass().getSimpleName() + "[" + holding.describe(grant) + ", owner=" + owner
                + (isLost() ? ", lost" : "") + "]";
    }
}
