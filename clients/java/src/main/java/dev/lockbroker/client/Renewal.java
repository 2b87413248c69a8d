package dev.lockbroker.client;

import java.time.Duration;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * Keeps one lease alive (or a {@link Session}, kept as a lease of itself by
 * {@link KeepaliveHolding}: its keepalives are these renewals), on {@link Scheduler#TIMER}: a renewal every third
 * of the TTL, each an asynchronous exchange, so that no thread waits on
 * the broker.
 *
 * <p>The broker judges expiry by the database clock, which this machine
 * cannot read. What it can know is when it <em>sent</em> the request that
 * the broker answered with a grant or a renewal: the lease began no earlier
 * than that, so it lives at least until that instant plus the TTL. That,
 * less a safety margin of a tenth of the TTL (for clocks that run at
 * slightly different rates, and for this process's own delays), is the
 * local deadline. A renewal that fails for a passing reason (503, 429,
 * connection trouble) is tried again until the deadline, and each try is
 * given only until the deadline to answer; a timer of its own fires at the
 * deadline, so that a late timeout of the HTTP layer never lets the lease
 * outlive it. The lease is declared lost when
 * <ul>
 * <li>the broker refuses a renewal ({@code lease_lost}, or any other 4xx
 * but 429): the lease is gone, force-released or re-granted; or</li>
 * <li>the deadline passes without a confirmed renewal: from then on another
 * owner may hold it, so the work must not go on as if it were alone. This
 * fires before the lease's TTL has passed since its last confirmed renewal
 * was sent, never after.</li>
 * </ul>
 */
final class Renewal implements Keeper {
    /** Renewals are never closer together than this, whatever the TTL. */
    static final long MIN_EVERY = TimeUnit.MILLISECONDS.toNanos(20);

    private final Lease lease;
    private final Holding holding;
    /** Local deadline, {@link System#nanoTime()} scale. */
    private long deadline;
    private boolean stopped;
    private ScheduledFuture<?> timer;
    /** Fires at the deadline: lost unless a renewal moved it meanwhile. */
    private ScheduledFuture<?> watchdog;
    private LockbrokerException lastError;
    private long confirmedSent;
    private int renewals;

    Renewal(Lease lease, Holding holding) {
        this.lease = lease;
        this.holding = holding;
    }

    /**
     * Starts keeping a grant asked for at {@code sent} and answered at
     * {@code answered} (after waiting in the queue if {@code waited}).
     *
     * <p>A request that did not wait was granted after {@code sent}, so
     * {@code sent + ttl} is a safe end. One that may have waited was
     * granted at some unknown time before {@code answered}: the lease is
     * assumed to have begun a tenth of the TTL before the answer arrived
     * (never before {@code sent}), and is renewed at once to replace that
     * assumption with a measured bound.
     */
    @Override
    public synchronized void start(long sent, long answered, boolean waited, Duration ttl) {
        long ttlNanos = ttl.toNanos();
        long began = sent;
        long first = sent + every(ttlNanos);
        if (waited && answered - ttlNanos / 10 - sent > 0) {
            began = answered - ttlNanos / 10;
            first = answered;
        }
        confirmedSent = began;
        deadline = began + safe(ttlNanos);
        armWatchdog();
        schedule(first);
    }

    /** Stops renewing (a renewal in flight is ignored when it answers). */
    @Override
    public synchronized void stop() {
        stopped = true;
        if (timer != null) {
            timer.cancel(false);
        }
        if (watchdog != null) {
            watchdog.cancel(false);
        }
    }

    /** How many renewals the broker confirmed. */
    @Override
    public synchronized int renewals() {
        return renewals;
    }

    /** When the last request the broker confirmed was sent ({@link System#nanoTime()} scale). */
    @Override
    public synchronized long confirmedSent() {
        return confirmedSent;
    }

    private static long every(long ttlNanos) {
        return Math.max(ttlNanos / 3, MIN_EVERY);
    }

    private static long safe(long ttlNanos) {
        return ttlNanos - ttlNanos / 10;
    }

    private void schedule(long at) {
        long delay = Math.max(0, at - System.nanoTime());
        timer = Scheduler.TIMER.schedule(this::renew, delay, TimeUnit.NANOSECONDS);
    }

    private void armWatchdog() {
        if (watchdog != null) {
            watchdog.cancel(false);
        }
        watchdog = Scheduler.TIMER.schedule(this::expire, Math.max(0, deadline - System.nanoTime()),
                TimeUnit.NANOSECONDS);
    }

    private synchronized void expire() {
        if (!stopped && System.nanoTime() - deadline >= 0) {
            lose(unconfirmed());
        }
    }

    private LockbrokerException unconfirmed() {
        return new LeaseLostException(0, "lease_lost", "no renewal of " + holding.describe(lease.grant())
                + " was confirmed before it would have run out (last failure: "
                + (lastError == null ? "none" : lastError.getMessage()) + ")", lastError);
    }

    private void renew() {
        long sent;
        long timeout;
        Fields grant;
        synchronized (this) {
            if (stopped) {
                return;
            }
            sent = System.nanoTime();
            timeout = deadline - sent;
            if (timeout <= 0) {
                lose(unconfirmed());
                return;
            }
            grant = lease.grant();
        }
        holding.renew(grant, Duration.ofNanos(timeout)).whenComplete((renewed, error) -> answered(sent, renewed,
                error));
    }

    private synchronized void answered(long sent, Fields renewed, Throwable error) {
        if (stopped) {
            return;
        }
        if (error == null) {
            long ttl;
            try {
                ttl = holding.ttl(renewed).toNanos();
            } catch (LockbrokerException notALease) {
                retryLater(notALease);
                return;
            }
            deadline = sent + safe(ttl);
            confirmedSent = sent;
            renewals++;
            lastError = null;
            lease.renewed(renewed);
            armWatchdog();
            schedule(sent + every(ttl));
            return;
        }
        Throwable cause = error instanceof CompletionException && error.getCause() != null ? error.getCause() : error;
        LockbrokerException failure = cause instanceof LockbrokerException ? (LockbrokerException) cause
                : new ConnectionException("renewal failed: " + cause, cause);
        int status = failure.status();
        if (status >= 400 && status < 500 && status != 429 && status != 408) {
            lose(failure instanceof LeaseLostException ? failure
                    : new LeaseLostException(status, "lease_lost", "the broker refused the renewal of "
                            + holding.describe(lease.grant()) + ": " + failure.getMessage(), failure));
            return;
        }
        retryLater(failure);
    }

    /** A renewal failed for a passing reason: try again soon, and at the latest at the deadline (where it is lost). */
    private void retryLater(LockbrokerException failure) {
        lastError = failure;
        long now = System.nanoTime();
        long ttl = holding.ttl(lease.grant()).toNanos();
        long wait = Math.max(every(ttl) / 4, MIN_EVERY);
        if (failure.retryAfter().isPresent()) {
            wait = Math.max(wait, failure.retryAfter().get().toNanos());
        }
        schedule(Math.min(now + wait, deadline));
    }

    private void lose(LockbrokerException reason) {
        stop();
        lease.lose(reason);
    }
}
