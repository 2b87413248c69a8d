package dev.lockbroker.client;

import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

/**
 * A {@link Session} seen as a lease of nothing but itself: kept alive at
 * {@code POST /v1/sessions/{id}/keepalive} and ended by
 * {@code DELETE /v1/sessions/{id}}. So the session's keepalives, their
 * local deadline and its lost signal are those of every lease
 * ({@link Renewal}, {@link Lease#lost()}), not a second copy of them.
 *
 * <p>The grant is the session as {@code POST /v1/sessions} answered it; a
 * keepalive answers only {@code {id, expires_at}}, which replaces those
 * fields of it. A {@code 404 session_not_found} means the session ended
 * (closed, expired) and every lease of it with it: lost, at once.
 */
final class KeepaliveHolding implements Holding {
    private static final System.Logger LOG = System.getLogger("dev.lockbroker.client");

    private final Calls calls;

    KeepaliveHolding(Calls calls) {
        this.calls = calls;
    }

    static String path(String id) {
        return "/v1/sessions/" + Transport.segment(id);
    }

    @Override
    public String describe(Fields grant) {
        String name = grant.optString("name");
        return "session " + grant.string("id") + (name == null || name.isEmpty() ? "" : " (" + name + ")");
    }

    @Override
    public String key(Fields grant) {
        return grant.string("id");
    }

    /** A session has no owner of its own: its name, else its id. */
    @Override
    public String owner(Fields grant) {
        String name = grant.optString("name");
        return name == null || name.isEmpty() ? grant.string("id") : name;
    }

    /** A session is not fenced: no token. */
    @Override
    public long token(Fields grant) {
        return 0;
    }

    @Override
    public Duration ttl(Fields grant) {
        return Duration.ofMillis(grant.number("ttl_ms"));
    }

    @Override
    public CompletableFuture<Fields> renew(Fields grant, Duration timeout) {
        return calls.once("POST", path(grant.string("id")) + "/keepalive", null, timeout).thenApply(answer -> {
            Map<String, Object> merged = new LinkedHashMap<>(grant.raw());
            merged.putAll(answer.raw());
            return Fields.of(merged);
        });
    }

    /** Closes the session; one that had already ended is {@link LeaseLostException} (there was nothing left to close). */
    @Override
    public void release(Fields grant) {
        String id = grant.string("id");
        try {
            calls.json(Calls.Call.delete(path(id)).release(id, owner(grant)));
        } catch (NotFoundException ended) {
            throw new LeaseLostException(ended.status(), "lease_lost", describe(grant)
                    + " had already ended (closed or expired): " + ended.getMessage(), ended);
        }
    }

    /**
     * A session the caller will not have (it was opened after the caller
     * gave up, or its answer could not be read): closed at once, in the
     * background, so that it holds no quota until its TTL.
     */
    void closeLate(Fields grant) {
        Scheduler.WORKERS.execute(() -> {
            try {
                release(grant);
            } catch (LockbrokerException e) {
                LOG.log(Level.DEBUG, "lockbroker: closing a session opened after its caller gave up failed "
                        + "(it ends by its TTL): {0}", e.getMessage());
            }
        });
    }
}
