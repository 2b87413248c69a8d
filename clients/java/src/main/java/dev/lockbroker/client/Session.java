package dev.lockbroker.client;

import java.lang.System.Logger.Level;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;

/**
 * A session of the broker ({@code POST /v1/sessions}): one keepalive keeps
 * every lease held in it, and when it ends every lease of it ends at once.
 * Many leases then cost one request per third of a TTL instead of one each,
 * and share one lost signal. {@link AutoCloseable}, for try-with-resources:
 *
 * <pre>{@code
 * try (Session session = client.session(Duration.ofSeconds(10))) {
 *     session.lost().thenRun(worker::stop);
 *     Lease orders = session.lock("orders");
 *     Lease invoices = session.lock("invoices");
 *     worker.run(orders.token(), invoices.token());
 * } // closed: both released
 * }</pre>
 *
 * <p>It keeps itself alive on the client's daemon timer, a keepalive every
 * third of its TTL, by the same rules as a lease's renewal ({@link Lease},
 * whose machinery it uses): {@link #lost()} completes when the broker says
 * the session ended ({@code 404 session_not_found}: closed from elsewhere,
 * or expired), or when no keepalive was confirmed before the session would
 * have run out, counted from when the last confirmed one was sent, less a
 * tenth of the TTL; so never after the broker may have ended it. Every
 * lease of it is then lost too ({@link Lease#isLost()}, {@link Lease#lost()}).
 *
 * <p>Every kind is held in it through the calls the client has for that
 * kind, with the same names and the same {@link Acquire} builder (less its
 * {@link Acquire#ttl ttl}: the session sets how long): locks
 * ({@link #lock}, {@link #tryLock}, {@link #locking}), semaphore permits
 * ({@link #semaphore}), reader-writer leases ({@link #readLock},
 * {@link #writeLock}), multi-locks ({@link #multiLock}), leaderships
 * ({@link #election}) and campaigns that stand in an election while the
 * session lives ({@link #campaign}):
 *
 * <pre>{@code
 * try (Session session = client.session(Duration.ofSeconds(10))) {
 *     Permit encoder = session.semaphore("encoders", 4).acquire();
 *     RwLease catalog = session.readLock("catalog").acquire();
 *     MultiLease accounts = session.multiLock("acct/1", "acct/2").acquire();
 *     ...
 * } // closed: all released
 * }</pre>
 *
 * <p>None of those leases is renewed on its own: each lives as long as
 * the session, and is lost with it. Each is released as any lease
 * ({@link Lease#release()}, {@link Lease#close()}), or with the rest when
 * the session is closed.
 *
 * <p>Each lease gets an owner of its own ({@code host:pid:n}) unless told
 * ({@link Acquire#owner}): two threads sharing a session exclude each
 * other as two sessions would. (Name the session's {@link #id()} as owner
 * for Consul's behaviour, where the same session locking again re-enters.)
 */
public final class Session implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("dev.lockbroker.client");

    private final LockbrokerClient client;
    private final String id;
    private final String name;
    private final Duration ttl;
    private final Duration lockDelay;
    /** The session kept alive as a lease of itself ({@link KeepaliveHolding}). */
    private final Lease keepalive;
    private final SessionLeases leases;
    private final CompletableFuture<Void> lost = new CompletableFuture<>();
    /** The campaigns standing in it ({@link #campaign}), resigned by its close. */
    private final List<Campaign> campaigns = new ArrayList<>();
    private boolean closed;

    private Session(LockbrokerClient client, KeepaliveHolding holding, Fields grant) {
        this.client = client;
        this.id = grant.string("id");
        String given = grant.optString("name");
        this.name = given == null || given.isEmpty() ? null : given;
        this.ttl = Duration.ofMillis(grant.number("ttl_ms"));
        Long delay = grant.optNumber("lock_delay_ms");
        this.lockDelay = Duration.ofMillis(delay == null ? 0 : delay);
        this.leases = new SessionLeases(id);
        this.keepalive = new Lease(holding, grant);
    }

    /** Opens a session ({@code POST /v1/sessions}) and starts keeping it alive. */
    static Session open(LockbrokerClient client, Duration ttl, String name, Duration lockDelay) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("ttl_ms", ttl.toMillis());
        if (name != null) {
            body.put("name", name);
        }
        if (lockDelay != null) {
            body.put("lock_delay_ms", lockDelay.toMillis());
        }
        KeepaliveHolding holding = new KeepaliveHolding(client.calls());
        long sent = System.nanoTime();
        // Not re-sent blindly (it would open a second session); one answered after the caller gave up is closed.
        Fields grant = client.calls().json(Calls.Call.post("/v1/sessions", body)
                .acquire("session " + (name == null ? "" : name), name, holding::closeLate));
        long answered = System.nanoTime();
        Session session;
        try {
            session = new Session(client, holding, grant);
        } catch (LockbrokerException notASession) {
            holding.closeLate(grant);
            throw notASession;
        }
        session.keepalive.lost().thenRun(session::keepaliveLost);
        session.keepalive.start(sent, answered, false);
        return session;
    }

    /** The broker's id of the session (what an acquire names as {@code session}). */
    public String id() {
        return id;
    }

    /** Its name; empty when it has none. */
    public Optional<String> name() {
        return Optional.ofNullable(name);
    }

    /** How long it lives without a keepalive. */
    public Duration ttl() {
        return ttl;
    }

    /** How long its keys stay ungranted after it expires (0: none). */
    public Duration lockDelay() {
        return lockDelay;
    }

    /** When it expires unless kept alive again (database clock; moves with each keepalive). */
    public Instant expiresAt() {
        return keepalive.expiresAt();
    }

    /** How many keepalives the broker has confirmed. */
    public int keepalives() {
        return keepalive.renewals();
    }

    // ---- leases in it ----

    /**
     * Waits until the lock {@code key} is granted and holds it in this
     * session. Interrupting the thread stops the wait
     * ({@link CancelledException}) and leaves no lease behind.
     *
     * @throws NotFoundException {@code session_not_found}: the session has ended
     * @throws DeadlockException the wait would close a cycle of sessions waiting for each other
     */
    public Lease lock(String key) {
        return locking(key).acquire();
    }

    /**
     * Waits up to {@code wait} for the lock {@code key} and holds it in this session.
     *
     * @throws LockHeldException it stayed held for the whole wait
     * @throws DeadlockException the wait would close a cycle of sessions waiting for each other
     */
    public Lease lock(String key, Duration wait) {
        return locking(key).waitUpTo(wait).acquire();
    }

    /** Tries the lock {@code key} once, without waiting: empty when another owner holds it. */
    public Optional<Lease> tryLock(String key) {
        return locking(key).tryAcquire();
    }

    /**
     * A builder for the lock {@code key} held in this session (its
     * {@link Acquire#ttl ttl} is the session's: setting one is an error).
     *
     * @throws IllegalStateException the session was closed
     */
    public Acquire<Lease> locking(String key) {
        return held(client.locking(key));
    }

    /**
     * A builder for one permit of the semaphore {@code key} of
     * {@code permits} slots, held in this session: the client's
     * {@link LockbrokerClient#semaphore} without a TTL of its own.
     *
     * @throws IllegalStateException the session was closed
     */
    public Acquire<Permit> semaphore(String key, int permits) {
        return held(client.semaphore(key, permits));
    }

    /**
     * A builder for a read (shared) lease of the reader-writer lock
     * {@code key}, held in this session ({@link LockbrokerClient#readLock}).
     *
     * @throws IllegalStateException the session was closed
     */
    public Acquire<RwLease> readLock(String key) {
        return held(client.readLock(key));
    }

    /**
     * A builder for a write (exclusive) lease of the reader-writer lock
     * {@code key}, held in this session ({@link LockbrokerClient#writeLock}).
     *
     * @throws IllegalStateException the session was closed
     */
    public Acquire<RwLease> writeLock(String key) {
        return held(client.writeLock(key));
    }

    /**
     * A builder for several locks taken together, all or none, held in this
     * session as one lease ({@link LockbrokerClient#multiLock(Collection)}).
     *
     * @throws IllegalStateException the session was closed
     */
    public Acquire<MultiLease> multiLock(Collection<String> keys) {
        return held(client.multiLock(keys));
    }

    /** {@link #multiLock(Collection)} of {@code keys}. */
    public Acquire<MultiLease> multiLock(String... keys) {
        return multiLock(List.of(keys));
    }

    /**
     * A builder for leading the election {@code name} once, the leadership
     * held in this session ({@link LockbrokerClient#election}).
     *
     * @throws IllegalStateException the session was closed
     */
    public Acquire<Leadership> election(String name) {
        return held(client.election(name));
    }

    /**
     * Stands in the election {@code name} as a fresh candidate, each
     * leadership held in this session, until resigned or until the session
     * ends: see {@link Campaign} and
     * {@link LockbrokerClient#campaign(String, Duration, LeadershipListener)}.
     * Once the session is lost the leadership is too ({@code revoked}), and
     * the campaign stops standing; closing the session resigns it first.
     *
     * @throws IllegalStateException the session was closed
     */
    public Campaign campaign(String name, LeadershipListener listener) {
        return campaign(name, client.uniqueOwner(), listener);
    }

    /** {@link #campaign(String, LeadershipListener)} as {@code candidate}. */
    public Campaign campaign(String name, String candidate, LeadershipListener listener) {
        Campaign campaign = new Campaign(client, this, name, candidate, listener);
        synchronized (this) {
            checkOpen();
            campaigns.add(campaign);
        }
        return campaign.start();
    }

    /** {@code builder}, which asks for a lease of any kind, turned to hold it in this session. */
    private <L extends Lease> Acquire<L> held(Acquire<L> builder) {
        synchronized (this) {
            checkOpen();
        }
        return builder.heldIn(this);
    }

    private void checkOpen() {
        if (closed) {
            throw new IllegalStateException("session " + id + " was closed");
        }
    }

    /** The leases held in it now (released and lost ones leave). */
    public List<Lease> leases() {
        return leases.snapshot();
    }

    /** The session and its leases as the broker sees them ({@code GET /v1/sessions/{id}}). */
    public SessionStatus status() {
        return client.sessionStatus(id);
    }

    // ---- loss ----

    /**
     * Completes (normally, with null) when the session is lost, and with it
     * every lease of it; never when it is closed. Each call returns a new
     * future: {@code session.lost().thenRun(worker::stop)}.
     */
    public CompletableFuture<Void> lost() {
        return lost.copy();
    }

    /** True once the session is known to be lost. */
    public boolean isLost() {
        return keepalive.isLost();
    }

    /** Why it was lost: a {@link LeaseLostException}, its cause the last failure; empty while alive. */
    public Optional<LockbrokerException> lostReason() {
        return keepalive.lostReason();
    }

    /** Throws {@link LeaseLostException} if the session was lost: a check to put between steps of long work. */
    public void checkAlive() {
        LockbrokerException reason = keepalive.lostReason().orElse(null);
        if (reason != null) {
            throw new LeaseLostException(0, "lease_lost", "session " + id + " was lost", reason);
        }
    }

    /**
     * Stops the keepalives and closes the session ({@code DELETE}), which
     * releases every lease of it at the broker; those leases count as
     * released (their {@code close()} and {@code release()} then do
     * nothing). Once; never throws: a session that had already ended has
     * nothing to close, and any other failure is logged (the session then
     * ends by its TTL).
     */
    @Override
    public void close() {
        List<Campaign> standing;
        synchronized (this) {
            if (closed) {
                return;
            }
            closed = true;
            standing = new ArrayList<>(campaigns);
            campaigns.clear();
        }
        // Its campaigns first: each tells its listener (revoked) before its leadership is given up.
        for (Campaign campaign : standing) {
            campaign.close();
        }
        leases.endAll();
        keepalive.close();
    }

    /** True once {@link #close()} was called. */
    synchronized boolean isClosed() {
        return closed;
    }

    /** {@code campaign} resigned: the session's close has nothing more to do for it. */
    synchronized void resigned(Campaign campaign) {
        campaigns.remove(campaign);
    }

    /** The leases held in it, for their {@link SessionMember}s. */
    SessionLeases members() {
        return leases;
    }

    /** When the last keepalive (or the open) the broker confirmed was sent ({@link System#nanoTime()} scale). */
    long confirmedSentNanos() {
        return keepalive.confirmedSentNanos();
    }

    /** The keepalive lease was lost: so is the session, and every lease of it before the session says so. */
    private void keepaliveLost() {
        LockbrokerException reason = keepalive.lostReason().orElseGet(
                () -> new LeaseLostException(0, "lease_lost", "session " + id + " was lost", null));
        leases.loseAll(reason);
        LOG.log(Level.DEBUG, "lockbroker: session {0} lost with its leases", id);
        lost.complete(null);
    }

    @Override
    public String toString() {
        return "Session[" + id + (name == null ? "" : " (" + name + ")") + ", ttl=" + ttl
                + (isLost() ? ", lost" : "") + "]";
    }
}
