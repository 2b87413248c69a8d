package dev.lockbroker.client;

import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/**
 * What a lease is asked for: who holds it, for how long, how long to wait.
 * One builder for every kind, from {@link LockbrokerClient#locking},
 * {@link LockbrokerClient#semaphore}, {@link LockbrokerClient#readLock},
 * {@link LockbrokerClient#writeLock}, {@link LockbrokerClient#multiLock},
 * {@link LockbrokerClient#election}, and the {@link Session}'s calls of the
 * same names for a lease held in a session ({@link Session#locking},
 * {@link Session#semaphore}, ...), which take no {@link #ttl}:
 *
 * <pre>{@code
 * try (Permit permit = client.semaphore("encoders", 4).ttl(Duration.ofMinutes(1))
 *         .waitUpTo(Duration.ofSeconds(10)).acquire()) { ... }
 * }</pre>
 *
 * <p>Unless told, each acquire gets an owner of its own ({@code host:pid:n}):
 * the broker treats the same owner acquiring again as re-entry. A builder
 * may be used again; each acquire is a new request.
 *
 * @param <L> the lease it makes
 */
public final class Acquire<L extends Lease> {
    private static final System.Logger LOG = System.getLogger("dev.lockbroker.client");

    /** The longest wait one request may ask for (the broker's limit); longer waits are several requests. */
    static final Duration MAX_WAIT_PER_REQUEST = Duration.ofMinutes(5);

    /** Makes the lease of a grant. */
    @FunctionalInterface
    interface Factory<L extends Lease> {
        L make(Holding holding, Fields grant);
    }

    private final LockbrokerClient client;
    private final String path;
    private final String key;
    private final Map<String, Object> extra;
    private final String ownerField;
    private Holding holding;
    private final Factory<L> factory;
    private String owner;
    private Duration ttl;
    private Duration wait;
    private Integer priority;
    /** The session the lease is held in ({@link #heldIn}); null for a lease of its own. */
    private String session;

    Acquire(LockbrokerClient client, String path, String key, Map<String, Object> extra, String ownerField,
            Holding holding, Factory<L> factory) {
        this.client = client;
        this.path = path;
        this.key = key;
        this.extra = extra;
        this.ownerField = ownerField;
        this.holding = holding;
        this.factory = factory;
    }

    /** Who holds the lease (default: a fresh {@code host:pid:n} per acquire). The same owner asking again re-enters a lock. */
    public Acquire<L> owner(String owner) {
        this.owner = Objects.requireNonNull(owner, "owner");
        return this;
    }

    /** An election's candidate: the same as {@link #owner}. */
    public Acquire<L> candidate(String candidate) {
        return owner(candidate);
    }

    /**
     * The lease length (default: the broker's, 30 s); renewed every third of it while held.
     *
     * @throws IllegalStateException the lease is to be held in a {@link Session}, which sets its length
     */
    public Acquire<L> ttl(Duration ttl) {
        Objects.requireNonNull(ttl, "ttl");
        if (session != null) {
            throw new IllegalStateException("a lease held in session " + session
                    + " lives as long as the session: it takes no TTL of its own");
        }
        this.ttl = ttl;
        return this;
    }

    /**
     * How long {@link #acquire()} waits in the broker's queue before it
     * throws {@link LockHeldException} (default: until granted).
     */
    public Acquire<L> waitUpTo(Duration wait) {
        if (wait.isNegative()) {
            throw new IllegalArgumentException("a wait must not be negative");
        }
        this.wait = wait;
        return this;
    }

    /** The priority the tenant's fairness policy may order waiters by (higher: sooner). */
    public Acquire<L> priority(int priority) {
        this.priority = priority;
        return this;
    }

    /**
     * Waits for the lease (up to {@link #waitUpTo}, else until granted) and
     * holds it. Interrupting the thread while it waits throws
     * {@link CancelledException} and leaves no lease behind.
     *
     * @throws LockHeldException it stayed taken for the whole wait
     * @throws DeadlockException held in a session, the wait would close a cycle of sessions waiting for each
     *     other (refused at once, not retried)
     * @throws CancelledException the thread was interrupted
     * @throws LockbrokerException any other failure
     */
    public L acquire() {
        if (wait != null) {
            return request(wait);
        }
        while (true) {
            try {
                return request(MAX_WAIT_PER_REQUEST);
            } catch (LockHeldException stillTaken) {
                if (Thread.currentThread().isInterrupted()) {
                    throw new CancelledException("interrupted while waiting for " + key, stillTaken);
                }
            }
        }
    }

    /**
     * Tries once, without waiting.
     *
     * @return the lease, or empty when it is taken now
     * @throws LockbrokerException any failure but "taken"
     */
    public Optional<L> tryAcquire() {
        try {
            return Optional.of(request(Duration.ZERO));
        } catch (LockHeldException taken) {
            return Optional.empty();
        }
    }

    /**
     * Holds the lease in {@code session} instead of on its own: the broker
     * is asked with {@code "session": id} in place of {@code ttl_ms}, and
     * the lease is kept by the session ({@link SessionHolding}). Any kind's
     * builder is so turned: the broker holds every kind in sessions.
     */
    Acquire<L> heldIn(Session session) {
        this.holding = new SessionHolding(holding, session);
        this.session = session.id();
        this.ttl = null;
        return this;
    }

    private L request(Duration wait) {
        String who = owner != null ? owner : client.uniqueOwner();
        long waitNanos = wait.toNanos();
        long sent = System.nanoTime();
        long waitEnd = sent + waitNanos;
        Calls.Call call = Calls.Call.post(path, null)
                // A retry (after a 503) asks only for what is left of the wait.
                .body(() -> body(who, Math.max(0, waitEnd - System.nanoTime()) / 1_000_000))
                .waiting(wait)
                .acquire(key, who, this::releaseLateGrant);
        Fields grant = client.calls().json(call);
        long answered = System.nanoTime();
        L lease;
        try {
            lease = factory.make(holding, grant);
        } catch (LockbrokerException notALease) {
            // Granted, but the answer lacks what holding it needs: give it back.
            releaseLateGrant(grant);
            throw notALease;
        }
        lease.start(sent, answered, waitNanos > 0);
        return lease;
    }

    private Map<String, Object> body(String who, long waitMs) {
        Map<String, Object> body = new LinkedHashMap<>(extra);
        body.put(ownerField, who);
        if (session != null) {
            body.put("session", session);
        } else if (ttl != null) {
            body.put("ttl_ms", ttl.toMillis());
        }
        body.put("wait_ms", waitMs);
        if (priority != null) {
            body.put("priority", priority);
        }
        return body;
    }

    /**
     * A grant the caller will not hold (it arrived after its acquire was
     * given up, interrupted or past its deadline; or it could not be read):
     * given back at once, in the background.
     */
    private void releaseLateGrant(Fields grant) {
        Scheduler.WORKERS.execute(() -> {
            try {
                holding.release(grant);
                LOG.log(Level.DEBUG, "lockbroker: released {0}, granted after its acquire was given up",
                        holding.describe(grant));
            } catch (LockbrokerException e) {
                LOG.log(Level.WARNING, "lockbroker: releasing {0}, granted after its acquire was given up, failed "
                        + "(it ends by its TTL): {1}", holding.describe(grant), e.getMessage());
            }
        });
    }
}
