/**
 * The Java client of lockbroker: locks, semaphores, reader-writer locks,
 * multi-locks and leader elections, held as leases that renew themselves.
 * JDK 17 and nothing else ({@code java.net.http}, a JSON reader of its own).
 *
 * <p>The layout, one job per file:
 * <ul>
 * <li>{@link dev.lockbroker.client.LockbrokerClient}: the front door
 * (built from the environment or a builder): acquires, reads, streams.</li>
 * <li>Held leases: {@link dev.lockbroker.client.Lease} ({@code AutoCloseable};
 * {@code lost()} a {@code CompletableFuture}) and its kinds
 * {@link dev.lockbroker.client.Permit}, {@link dev.lockbroker.client.RwLease},
 * {@link dev.lockbroker.client.Leadership}, {@link dev.lockbroker.client.MultiLease};
 * {@link dev.lockbroker.client.Acquire} asks for any of them. Internals:
 * {@code Renewal} keeps one alive (every third of the TTL, lost judged from
 * when the last confirmed request was sent), one of the {@code Keeper}s;
 * {@code Holding}, {@code KindHolding} and {@code MultiHolding} say how a
 * kind renews and releases.</li>
 * <li>{@link dev.lockbroker.client.Session}: many leases kept alive by one
 * keepalive, with one lost signal. Internals: {@code KeepaliveHolding}
 * makes the session a lease of itself (kept by its {@code Renewal});
 * {@code SessionHolding} wraps any kind's holding for a lease held in a
 * session, kept by a {@code SessionMember} (no renewals of its own);
 * {@code SessionLeases} passes the session's loss or close on to them.</li>
 * <li>{@link dev.lockbroker.client.Kind}: one model for every kind of lease
 * (status, listing, history written once; {@code Listing} follows pages).</li>
 * <li>{@link dev.lockbroker.client.Campaign} and
 * {@link dev.lockbroker.client.LeadershipListener}: standing in an election
 * in the background (each leadership on its own, or held in a session).</li>
 * <li>{@link dev.lockbroker.client.EventStream}: Server-Sent Events that
 * reconnect ({@code events}, {@code observe}); {@code SseParser} the wire
 * format.</li>
 * <li>The HTTP layer: {@code Calls} (deadlines, retries, decoding: the one
 * place), {@code Transport} (one exchange, what a failure means),
 * {@link dev.lockbroker.client.RetryPolicy},
 * {@link dev.lockbroker.client.Tls} (PEM files to an {@code SSLContext}),
 * {@code Json} and {@code Fields}.</li>
 * <li>Failures: {@link dev.lockbroker.client.LockbrokerException} and one
 * subclass per kind of failure.</li>
 * </ul>
 */
package dev.lockbroker.client;
