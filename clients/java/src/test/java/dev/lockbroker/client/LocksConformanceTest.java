package dev.lockbroker.client;

import static dev.lockbroker.client.TestEnv.client;
import static dev.lockbroker.client.TestEnv.eventually;
import static dev.lockbroker.client.TestEnv.key;
import static dev.lockbroker.client.TestEnv.millisSince;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Optional;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Test;

/** Locks: CONFORMANCE.md C01 to C08, against the plain broker (C06 through a forwarder of its own). */
class LocksConformanceTest {
    private static final ScheduledExecutorService LATER = Executors.newSingleThreadScheduledExecutor();

    @AfterAll
    static void stop() {
        LATER.shutdownNow();
    }

    /** C01: granted with a positive fencing token; status shows the holder, then free after release. */
    @Test
    void c01AcquireAndRelease() {
        TestEnv.url(); // fail clearly, not with the default URL, when run outside the harness
        TestEnv.apiKey();
        LockbrokerClient client = LockbrokerClient.fromEnv();
        String key = key("c01");
        Lease lease = client.lock(key, Duration.ofSeconds(30));
        assertTrue(lease.token() > 0, "a positive fencing token");
        assertEquals(key, lease.key());

        LockStatus held = client.status(key);
        assertTrue(held.held());
        assertEquals(lease.owner(), held.owner());
        assertEquals(lease.token(), held.token());

        lease.release();
        LockStatus free = client.status(key);
        assertFalse(free.held());
        assertNull(free.owner());
        assertNull(free.token());
    }

    /** C02: while another owner holds the key, a try answers "not acquired" at once. */
    @Test
    void c02TryWhileHeldReturnsEmptyAtOnce() {
        LockbrokerClient client = client();
        String key = key("c02");
        try (Lease holder = client.lock(key, Duration.ofSeconds(30))) {
            long start = System.nanoTime();
            Optional<Lease> tried = client.tryLock(key, Duration.ofSeconds(30));
            assertTrue(tried.isEmpty(), "not acquired while held");
            assertTrue(millisSince(start) < 2000, "answered without waiting: " + millisSince(start) + " ms");
            // The acquire form with no wait says the same with the typed error.
            LockHeldException held = assertThrows(LockHeldException.class,
                    () -> client.lock(key, Duration.ofSeconds(30), Duration.ZERO));
            assertEquals("lock_held", held.code());
            assertEquals(409, held.status());
            assertEquals(holder.owner(), client.status(key).owner(), "the holder kept it");
        }
    }

    /** C03: a waiting acquire is granted when the holder releases; one whose wait runs out gets "held" with retry_after. */
    @Test
    void c03WaitIsGrantedOnReleaseAndTimesOutTyped() throws Exception {
        LockbrokerClient client = client();
        String key = key("c03");
        Lease holder = client.lock(key, Duration.ofSeconds(30));
        LATER.schedule(holder::release, 300, TimeUnit.MILLISECONDS);
        long start = System.nanoTime();
        try (Lease waited = client.lock(key, Duration.ofSeconds(30), Duration.ofSeconds(10))) {
            assertTrue(millisSince(start) >= 250, "granted only once the holder released");
            assertTrue(waited.token() > holder.token(), "a new grant, a greater token");
            assertEquals(waited.owner(), client.status(key).owner());

            long waitStart = System.nanoTime();
            LockHeldException held = assertThrows(LockHeldException.class,
                    () -> client.lock(key, Duration.ofSeconds(30), Duration.ofMillis(300)));
            long waitedMs = millisSince(waitStart);
            assertTrue(waitedMs >= 250 && waitedMs < 5000, "waited about 300 ms: " + waitedMs);
            assertEquals("lock_held", held.code());
            assertTrue(held.retryAfter().isPresent(), "retry_after_ms is carried");
        }
    }

    /** C04: a lease of 1 s held for 3.5 s is still held: it renewed at about a third of its TTL. */
    @Test
    void c04RenewsPastSeveralTtls() throws Exception {
        LockbrokerClient client = client();
        String key = key("c04");
        try (Lease lease = client.lock(key, Duration.ofSeconds(1))) {
            Thread.sleep(3500); // time is what is tested here
            LockStatus status = client.status(key);
            assertTrue(status.held());
            assertEquals(lease.owner(), status.owner());
            assertEquals(lease.token(), status.token());
            assertFalse(lease.isLost());
            assertFalse(lease.lost().isDone());
            assertTrue(lease.renewals() >= 6, "renewed every ~333 ms: " + lease.renewals() + " renewals");
        }
        assertFalse(client.status(key).held());
    }

    /** C05: force-released and taken by another owner: lost within one TTL; releasing it harms nobody. */
    @Test
    void c05LostOnRefusal() throws Exception {
        LockbrokerClient client = client();
        Admin admin = client.admin(TestEnv.adminToken());
        String key = key("c05");
        Duration ttl = Duration.ofMillis(1500);
        Lease lease = client.lock(key, ttl);
        admin.forceRelease("default", key);
        long forced = System.nanoTime();
        try (Lease next = client.lock(key, Duration.ofSeconds(30), Duration.ofSeconds(5))) {
            lease.lost().get(ttl.toMillis(), TimeUnit.MILLISECONDS);
            assertTrue(millisSince(forced) <= ttl.toMillis(), "lost within one TTL");
            assertTrue(lease.isLost());
            assertInstanceOf(LeaseLostException.class, lease.lostReason().orElseThrow());

            lease.close(); // neither raises...
            assertThrows(LeaseLostException.class, lease::checkHeld);
            LockStatus status = client.status(key); // ...nor frees the new holder's lease
            assertTrue(status.held());
            assertEquals(next.owner(), status.owner());
            assertEquals(next.token(), status.token());
        }
    }

    /** C06: through a forwarder that goes silent, lost fires before the TTL has passed since the last confirmed renewal was sent. */
    @Test
    void c06LostWithoutConfirmation() throws Exception {
        String key = key("c06");
        Duration ttl = Duration.ofSeconds(3);
        try (Forwarder forwarder = new Forwarder(TestEnv.url())) {
            LockbrokerClient client = LockbrokerClient.builder(forwarder.url()).apiKey(TestEnv.apiKey()).build();
            Lease lease = client.lock(key, ttl);
            eventually(Duration.ofSeconds(5), "a renewal is confirmed through the forwarder",
                    () -> lease.renewals() >= 1);
            AtomicLong lostAt = new AtomicLong();
            lease.lost().thenRun(() -> lostAt.set(System.nanoTime()));
            forwarder.silent();
            long silenced = System.nanoTime();

            lease.lost().get(ttl.toMillis() * 2, TimeUnit.MILLISECONDS);
            eventually(Duration.ofSeconds(1), "the lost callback ran", () -> lostAt.get() != 0);
            long sinceConfirmed = (lostAt.get() - lease.confirmedSentNanos()) / 1_000_000;
            assertTrue(lease.confirmedSentNanos() - silenced <= 0, "the last confirmation was sent before the cut");
            assertTrue(sinceConfirmed < ttl.toMillis(),
                    "lost " + sinceConfirmed + " ms after the last confirmed renewal was sent: before the TTL");
            LockbrokerException reason = lease.lostReason().orElseThrow();
            assertInstanceOf(LeaseLostException.class, reason);
            assertEquals(0, reason.status(), "judged by the client, not refused by the broker");
        }
    }

    /** C07: a lease taken in try-with-resources is released when the block ends, normally or by an exception. */
    @Test
    void c07ReleaseOnScopeExit() {
        LockbrokerClient client = client();
        String key = key("c07");
        try (Lease lease = client.lock(key, Duration.ofSeconds(30))) {
            assertEquals(lease.owner(), client.status(key).owner());
        }
        assertFalse(client.status(key).held(), "free after a normal end");

        IllegalStateException boom = assertThrows(IllegalStateException.class, () -> {
            try (Lease lease = client.lock(key, Duration.ofSeconds(30))) {
                assertTrue(client.status(key).held());
                throw new IllegalStateException("the job failed");
            }
        });
        assertEquals("the job failed", boom.getMessage(), "the block's exception passes on");
        assertFalse(client.status(key).held(), "free after an exception");

        // runLocked: the same on both paths.
        assertTrue(client.runLocked(key, Duration.ofSeconds(30), () -> assertTrue(client.status(key).held())));
        assertFalse(client.status(key).held());
        assertThrows(IllegalStateException.class, () -> client.runLocked(key, Duration.ofSeconds(30), () -> {
            throw new IllegalStateException("the job failed");
        }));
        assertFalse(client.status(key).held());
    }

    /** C08: tokens of successive grants strictly increase; validate passes the current one and fails an older one. */
    @Test
    void c08Fencing() {
        LockbrokerClient client = client();
        String key = key("c08");
        long first;
        try (Lease lease = client.lock(key, Duration.ofSeconds(30))) {
            first = lease.token();
        }
        long second;
        try (Lease lease = client.lock(key, Duration.ofSeconds(30))) {
            second = lease.token();
            assertTrue(second > first, "tokens strictly increase: " + first + " then " + second);
            Validity current = client.validate(key, second);
            assertTrue(current.valid());
            assertEquals(second, current.token());
            Validity stale = client.validate(key, first);
            assertFalse(stale.valid(), "an older token is stale");
            assertEquals(second, stale.token());

            // A fenced store refuses the older token's write.
            Examples.FencedStore store = new Examples.FencedStore();
            store.write("v2", second);
            assertThrows(Examples.StaleTokenException.class, () -> store.write("v1", first));
            assertEquals("v2", store.value());
        }
        Validity free = client.validate(key, second);
        assertFalse(free.valid(), "not valid once released");
        assertNull(free.token());
    }
}
