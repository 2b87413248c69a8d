package dev.lockbroker.client;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.function.Consumer;
import java.util.stream.Collectors;
import javax.net.ssl.SSLContext;

/**
 * A client of one lockbroker with one API key. Thread-safe; clients made by
 * {@link #withApiKey} and {@link #withTimeout} share its connections.
 *
 * <pre>{@code
 * LockbrokerClient client = LockbrokerClient.fromEnv(); // LOCKBROKER_URL, LOCKBROKER_API_KEY, ...
 * try (Lease lease = client.lock("nightly", Duration.ofSeconds(30))) {
 *     runReport(lease.token());
 * }
 * }</pre>
 *
 * <p>Every call has a deadline: its wait (a waiting acquire) plus the
 * client's {@link Builder#timeout timeout} (10 s by default). Within it,
 * {@code 503} answers and connections that could not be made are retried
 * with jittered exponential backoff ({@link RetryPolicy}), {@code 429} after
 * the broker's hint; a 4xx is never retried; an acquire whose connection
 * broke after it was sent is never sent again ({@link OutcomeUnknownException}).
 * Failures are {@link LockbrokerException}s, one class per kind of failure.
 *
 * <p>Held leases ({@link Lease} and its kinds) renew themselves every third
 * of their TTL on a daemon thread until released; {@link Lease#lost()}
 * completes if one cannot be kept.
 */
public final class LockbrokerClient {
    /** This client's version. */
    public static final String VERSION = "0.1.0";
    /** The broker's address when {@code LOCKBROKER_URL} is unset. */
    public static final String DEFAULT_URL = "http://127.0.0.1:7420";
    /** How long an answer may take beyond the request's own wait, unless told. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofSeconds(10);

    private final Calls calls;
    private final String identity;

    private LockbrokerClient(Calls calls, String identity) {
        this.calls = calls;
        this.identity = identity;
    }

    /** A builder for the broker at {@code url} ({@code http(s)://host[:port]}). */
    public static Builder builder(String url) {
        return new Builder(url);
    }

    /**
     * A client from the environment, as {@code lockctl} reads it:
     * {@code LOCKBROKER_URL} (default {@value #DEFAULT_URL}),
     * {@code LOCKBROKER_API_KEY}, and for https {@code LOCKBROKER_CA_FILE}
     * (PEM CAs to trust instead of the JDK's), {@code LOCKBROKER_CLIENT_CERT}
     * and {@code LOCKBROKER_CLIENT_KEY} (a PEM client certificate and its key,
     * for mutual TLS).
     *
     * @throws IllegalArgumentException a variable is malformed, or a TLS file cannot be loaded
     */
    public static LockbrokerClient fromEnv() {
        return fromEnv(System.getenv());
    }

    /** {@link #fromEnv()} reading {@code env} instead of the process's environment. */
    public static LockbrokerClient fromEnv(Map<String, String> env) {
        String url = nonEmpty(env.get("LOCKBROKER_URL"));
        Builder builder = builder(url != null ? url : DEFAULT_URL);
        String key = nonEmpty(env.get("LOCKBROKER_API_KEY"));
        if (key != null) {
            builder.apiKey(key);
        }
        String ca = nonEmpty(env.get("LOCKBROKER_CA_FILE"));
        String cert = nonEmpty(env.get("LOCKBROKER_CLIENT_CERT"));
        String certKey = nonEmpty(env.get("LOCKBROKER_CLIENT_KEY"));
        if (ca != null || cert != null || certKey != null) {
            builder.sslContext(Tls.context(ca == null ? null : Path.of(ca), cert == null ? null : Path.of(cert),
                    certKey == null ? null : Path.of(certKey)));
        }
        return builder.build();
    }

    /** Builds a {@link LockbrokerClient}. */
    public static final class Builder {
        private final String url;
        private String apiKey;
        private Duration timeout = DEFAULT_TIMEOUT;
        private Duration connectTimeout = Duration.ofSeconds(5);
        private RetryPolicy retry = RetryPolicy.defaults();
        private RetryListener retryListener = RetryListener.NONE;
        private String identity;
        private SSLContext ssl;

        private Builder(String url) {
            this.url = Objects.requireNonNull(url, "url");
        }

        /** The bearer token: a tenant's API key (or the admin token). */
        public Builder apiKey(String apiKey) {
            this.apiKey = apiKey;
            return this;
        }

        /**
         * How long an answer may take beyond the request's own wait: with the
         * wait, every call's deadline, retries included (default 10 s).
         */
        public Builder timeout(Duration timeout) {
            if (timeout.isNegative() || timeout.isZero()) {
                throw new IllegalArgumentException("a timeout must be positive");
            }
            this.timeout = timeout;
            return this;
        }

        /** How long making a connection may take (default 5 s, and never more than the call's deadline). */
        public Builder connectTimeout(Duration connectTimeout) {
            this.connectTimeout = Objects.requireNonNull(connectTimeout, "connectTimeout");
            return this;
        }

        /** How 503s and failed connections are retried (default {@link RetryPolicy#defaults()}). */
        public Builder retry(RetryPolicy retry) {
            this.retry = Objects.requireNonNull(retry, "retry");
            return this;
        }

        /** Told of every retry (for metrics and logs). */
        public Builder retryListener(RetryListener listener) {
            this.retryListener = Objects.requireNonNull(listener, "listener");
            return this;
        }

        /** The prefix of the owners acquires make up ({@code identity:n}); default {@code host:pid}. */
        public Builder identity(String identity) {
            this.identity = Objects.requireNonNull(identity, "identity");
            return this;
        }

        /** The TLS settings for https (see {@link Tls#context}); default: the JDK's. */
        public Builder sslContext(SSLContext ssl) {
            this.ssl = ssl;
            return this;
        }

        /** {@link Tls#context} of these PEM files (any may be null). */
        public Builder tls(Path caFile, Path clientCert, Path clientKey) {
            return sslContext(Tls.context(caFile, clientCert, clientKey));
        }

        /**
         * The client.
         *
         * @throws IllegalArgumentException the URL is not {@code http(s)://host[:port][/prefix]}
         */
        public LockbrokerClient build() {
            Transport transport = new Transport(url, ssl, connectTimeout);
            return new LockbrokerClient(new Calls(transport, apiKey, retry, timeout, retryListener),
                    identity != null ? identity : Owners.defaultIdentity());
        }
    }

    /** The same broker and connections with another bearer token (another tenant's key). */
    public LockbrokerClient withApiKey(String apiKey) {
        return new LockbrokerClient(calls.with(apiKey, calls.timeout), identity);
    }

    /** The same broker and connections with another {@link Builder#timeout timeout}. */
    public LockbrokerClient withTimeout(Duration timeout) {
        if (timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("a timeout must be positive");
        }
        return new LockbrokerClient(calls.with(bearerOf(), timeout), identity);
    }

    /** The admin calls, with the broker's admin token. */
    public Admin admin(String adminToken) {
        return new Admin(calls.with(adminToken, calls.timeout));
    }

    /** The broker's base URL. */
    public String url() {
        return calls.transport.base();
    }

    /** The client's timeout: how long an answer may take beyond the request's own wait. */
    public Duration timeout() {
        return calls.timeout;
    }

    /** How calls are retried. */
    public RetryPolicy retryPolicy() {
        return calls.retry;
    }

    /** A fresh owner name: {@code identity:n}. */
    public String uniqueOwner() {
        return Owners.unique(identity);
    }

    // ---- locks ----

    /**
     * Waits until the lock {@code key} is granted and holds it, renewed every
     * third of {@code ttl}. Interrupting the thread stops the wait
     * ({@link CancelledException}) and leaves no lease behind.
     */
    public Lease lock(String key, Duration ttl) {
        return locking(key).ttl(ttl).acquire();
    }

    /**
     * Waits up to {@code wait} for the lock {@code key} and holds it.
     *
     * @throws LockHeldException it stayed held for the whole wait ({@code retryAfter} carries the broker's hint)
     */
    public Lease lock(String key, Duration ttl, Duration wait) {
        return locking(key).ttl(ttl).waitUpTo(wait).acquire();
    }

    /** Tries the lock {@code key} once, without waiting: empty when another owner holds it. */
    public Optional<Lease> tryLock(String key, Duration ttl) {
        return locking(key).ttl(ttl).tryAcquire();
    }

    /**
     * Runs {@code job} holding the lock {@code key}, if it is free now; skips
     * it if another owner holds it: the scheduled-job case (ShedLock's
     * {@code @SchedulerLock}), where every instance fires on the same
     * schedule and one of them runs. The lock is renewed while the job runs
     * and released when it ends, also by an exception (which propagates).
     *
     * @return true when the job ran, false when it was skipped
     */
    public boolean runLocked(String key, Duration ttl, Runnable job) {
        return runLocked(key, ttl, lease -> job.run());
    }

    /** {@link #runLocked(String, Duration, Runnable)} handing the job its lease (for its token and {@code lost()}). */
    public boolean runLocked(String key, Duration ttl, Consumer<Lease> job) {
        Optional<Lease> held = tryLock(key, ttl);
        if (held.isEmpty()) {
            return false;
        }
        try (Lease lease = held.get()) {
            job.accept(lease);
        }
        return true;
    }

    /** A builder for the lock {@code key}, for what {@link #lock} does not set (owner, priority). */
    public Acquire<Lease> locking(String key) {
        return new Acquire<>(this, Kind.LOCK.keyPath(key, "/acquire"), key, Map.of(), "owner",
                new KindHolding(calls, Kind.LOCK), Lease::new);
    }

    // ---- other kinds ----

    /** A builder for one permit of the semaphore {@code key} of {@code permits} slots. */
    public Acquire<Permit> semaphore(String key, int permits) {
        return new Acquire<>(this, Kind.SEMAPHORE.keyPath(key, "/acquire"), key, Map.of("permits", permits),
                "owner", new KindHolding(calls, Kind.SEMAPHORE), Permit::new);
    }

    /** A builder for a read (shared) lease of the reader-writer lock {@code key}. */
    public Acquire<RwLease> readLock(String key) {
        return rwLock(key, "read");
    }

    /** A builder for a write (exclusive) lease of the reader-writer lock {@code key}. */
    public Acquire<RwLease> writeLock(String key) {
        return rwLock(key, "write");
    }

    private Acquire<RwLease> rwLock(String key, String mode) {
        return new Acquire<>(this, Kind.RWLOCK.keyPath(key, "/acquire"), key, Map.of("mode", mode), "owner",
                new KindHolding(calls, Kind.RWLOCK), RwLease::new);
    }

    /**
     * A builder for several locks taken together, all or none (1 to 64 keys,
     * taken in storage-key order, so that two multi-locks never deadlock).
     */
    public Acquire<MultiLease> multiLock(Collection<String> keys) {
        List<String> list = new ArrayList<>(keys);
        return new Acquire<>(this, "/v1/multilock/acquire", String.join(",", list), Map.of("keys", list), "owner",
                new MultiHolding(calls), MultiLease::new);
    }

    /** {@link #multiLock(Collection)} of {@code keys}. */
    public Acquire<MultiLease> multiLock(String... keys) {
        return multiLock(List.of(keys));
    }

    /** A builder for leading the election {@code name} once ({@link Acquire#candidate} names the candidate). */
    public Acquire<Leadership> election(String name) {
        return new Acquire<>(this, Kind.ELECTION.keyPath(name, "/campaign"), name, Map.of(), "candidate",
                new KindHolding(calls, Kind.ELECTION), Leadership::new);
    }

    /**
     * Stands in the election {@code name} as a fresh candidate until resigned:
     * see {@link Campaign}.
     */
    public Campaign campaign(String name, Duration ttl, LeadershipListener listener) {
        return campaign(name, uniqueOwner(), ttl, listener);
    }

    /** {@link #campaign(String, Duration, LeadershipListener)} as {@code candidate}. */
    public Campaign campaign(String name, String candidate, Duration ttl, LeadershipListener listener) {
        return new Campaign(this, name, candidate, ttl, listener).start();
    }

    // ---- sessions ----

    /**
     * Opens a session ({@code POST /v1/sessions}) that keeps itself alive,
     * a keepalive every third of {@code ttl} (1 s to 1 h), until closed:
     * leases of every kind taken through it (locks, permits, rwlock leases,
     * multi-locks, leaderships) live as long as it does. See {@link Session}.
     */
    public Session session(Duration ttl) {
        return session(ttl, null, null);
    }

    /**
     * {@link #session(Duration)} with a {@code name} (for people and
     * listings; may be null) and a {@code lockDelay}: how long its keys stay
     * ungranted after it <em>expires</em> (null: none; at most 60 s).
     */
    public Session session(Duration ttl, String name, Duration lockDelay) {
        return Session.open(this, Objects.requireNonNull(ttl, "ttl"), name, lockDelay);
    }

    /**
     * The session {@code id} and its leases now ({@code GET /v1/sessions/{id}}).
     *
     * @throws NotFoundException {@code session_not_found}: it has ended (closed, expired) or never was
     */
    public SessionStatus sessionStatus(String id) {
        return SessionStatus.from(calls.json(Calls.Call.get(KeepaliveHolding.path(id))));
    }

    /**
     * Closes the session {@code id} ({@code DELETE /v1/sessions/{id}}),
     * wherever it was opened (a crashed process's, found by
     * {@link #listSessions}); its leases are released. The process that
     * keeps it alive finds it lost.
     *
     * @return how many leases the close released
     * @throws NotFoundException {@code session_not_found}: it had already ended
     */
    public long closeSession(String id) {
        return calls.json(Calls.Call.delete(KeepaliveHolding.path(id)).release(id, null)).number("released");
    }

    /**
     * One page of the tenant's live sessions whose name starts with
     * {@code prefix} ({@code GET /v1/sessions}).
     *
     * @param limit 1 to 1000, or null for the broker's 100
     * @param cursor the previous page's {@link Page#cursor()}, or null for the first page
     */
    public Page<SessionInfo> listSessions(String prefix, Integer limit, String cursor) {
        return Listing.page(calls, "/v1/sessions", SessionInfo::from, prefix, limit, cursor);
    }

    // ---- reads ----

    /** The lock {@code key} now. */
    public LockStatus status(String key) {
        return status(Kind.LOCK, key);
    }

    /** The lease {@code key} of {@code kind} now ({@code GET /v1/{kind}/{key}}). */
    public <S> S status(Kind<S> kind, String key) {
        return kind.status.apply(calls.json(Calls.Call.get(kind.keyPath(key, ""))));
    }

    /**
     * Whether {@code token} is the live grant of the lock {@code key} now: a
     * sequencer check before a protected write (the answer may be stale on
     * arrival: the protected resource should also refuse older tokens).
     */
    public Validity validate(String key, long token) {
        return Validity.from(calls.json(Calls.Call.post(Kind.LOCK.keyPath(key, "/validate"),
                Map.of("token", token))));
    }

    /** The latest events of the lock {@code key}, newest first ({@code limit} 1 to 1000). */
    public List<HistoryEvent> history(String key, int limit) {
        return history(Kind.LOCK, key, limit);
    }

    /** The latest events of the lease {@code key} of {@code kind} (not elections), newest first. */
    public List<HistoryEvent> history(Kind<?> kind, String key, int limit) {
        if (!kind.recorded) {
            throw new IllegalArgumentException(kind.path + " keep no history");
        }
        Fields answer = calls.json(Calls.Call.get(kind.keyPath(key, "/history?limit=" + limit)));
        return answer.objects("events").stream().map(HistoryEvent::from).collect(Collectors.toUnmodifiableList());
    }

    /**
     * One page of the tenant's live leases of {@code kind} whose storage key
     * starts with {@code prefix} (bytes, matched literally), in storage-key
     * order.
     *
     * @param limit 1 to 1000, or null for the broker's 100
     * @param cursor the previous page's {@link Page#cursor()}, or null for the first page
     */
    public <S> Page<S> list(Kind<S> kind, String prefix, Integer limit, String cursor) {
        return Listing.page(calls, "/v1/" + kind.path, kind, prefix, limit, cursor);
    }

    /** The first {@code max} live leases of {@code kind} under {@code prefix}, every page followed (each once). */
    public <S> List<S> listAll(Kind<S> kind, String prefix, int max) {
        return Listing.all(calls, "/v1/" + kind.path, kind, prefix, max);
    }

    /**
     * The changes of the tenant's locks, semaphores and rwlocks whose storage
     * key starts with {@code prefix}, made through any broker, after the
     * event {@code after} (null: from now on). Once this returns, every later
     * change is in the stream. It resumes after the last event received when
     * its connection ends ({@code Last-Event-ID}).
     *
     * @throws RateLimitedException {@code too_many_streams}: the tenant has its most streams open
     */
    public EventStream<ChangeEvent> events(String prefix, Long after) {
        String path = "/v1/events?prefix=" + Transport.segment(prefix);
        return new EventStream<>(calls, path, after == null ? null : after.toString(),
                new EventStream.Decoder<ChangeEvent>() {
                    @Override
                    ChangeEvent decode(SseParser.RawEvent raw) {
                        if ("message".equals(raw.name)) {
                            return null;
                        }
                        Fields data = ChangeEvent.RESET.equals(raw.name) ? null : parse(raw);
                        return ChangeEvent.from(raw.name, raw.id, data);
                    }
                }, "events");
    }

    /**
     * The leadership of the election {@code name} now, then each change of
     * leader (every new term, every vacancy). When the connection ends the
     * stream reconnects; the leadership it then reads is yielded only if it
     * changed meanwhile.
     */
    public EventStream<ElectionStatus> observe(String name) {
        return new EventStream<>(calls, Kind.ELECTION.keyPath(name, "/observe"), null,
                new EventStream.Decoder<ElectionStatus>() {
                    private ElectionStatus last;
                    private boolean reconnected;

                    @Override
                    ElectionStatus decode(SseParser.RawEvent raw) {
                        if (!"leader".equals(raw.name)) {
                            return null;
                        }
                        ElectionStatus now = ElectionStatus.from(parse(raw));
                        boolean repeat = reconnected && last != null && Objects.equals(last.leader(), now.leader())
                                && Objects.equals(last.term(), now.term());
                        reconnected = false;
                        last = now;
                        return repeat ? null : now;
                    }

                    @Override
                    void reconnected() {
                        reconnected = true;
                    }
                }, "observe");
    }

    private static Fields parse(SseParser.RawEvent raw) {
        try {
            return Fields.of(Json.parse(raw.data));
        } catch (Json.JsonException | UnexpectedResponseException e) {
            throw new UnexpectedResponseException(200, "a " + raw.name + " event whose data is not the API's JSON: "
                    + e.getMessage());
        }
    }

    Calls calls() {
        return calls;
    }

    private String bearerOf() {
        return calls.bearer();
    }

    private static String nonEmpty(String value) {
        return value == null || value.isBlank() ? null : value.trim();
    }

    @Override
    public String toString() {
        return "LockbrokerClient[" + url() + "]";
    }
}
