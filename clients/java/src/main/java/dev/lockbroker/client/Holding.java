package dev.lockbroker.client;

import java.time.Duration;
import java.time.Instant;
import java.util.concurrent.CompletableFuture;

/**
 * What a {@link Lease} needs of its kind: how to read its grant, renew it
 * and give it back. {@link KindHolding} serves every {@link Kind};
 * {@link MultiHolding} several locks held as one; {@link SessionHolding}
 * any of these held in a {@link Session}, {@link KeepaliveHolding} the
 * session itself.
 */
interface Holding {
    /** Names the lease in logs and messages (never its token). */
    String describe(Fields grant);

    String key(Fields grant);

    String owner(Fields grant);

    long token(Fields grant);

    /** The lease length the broker granted. */
    Duration ttl(Fields grant);

    /** One renewal try, not retried, answered within {@code timeout}: the renewed grant. */
    CompletableFuture<Fields> renew(Fields grant, Duration timeout);

    /** Gives the lease back (blocking, carried out even by an interrupted thread). */
    void release(Fields grant);

    /** When the lease ends unless kept alive again (database clock); null when the grant does not say. */
    default Instant expiresAt(Fields grant) {
        Instant at = grant.optInstant("expires_at");
        if (at == null && !grant.objects("locks").isEmpty()) {
            at = grant.objects("locks").get(0).optInstant("expires_at");
        }
        return at;
    }

    /** What keeps {@code lease} alive: by default its own {@link Renewal}, every third of its TTL. */
    default Keeper keeper(Lease lease) {
        return new Renewal(lease, this);
    }
}
