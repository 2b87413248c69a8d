package dev.lockbroker.client;

import static dev.lockbroker.client.TestEnv.client;
import static dev.lockbroker.client.TestEnv.eventually;
import static dev.lockbroker.client.TestEnv.key;
import static dev.lockbroker.client.TestEnv.millisSince;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

/** Sessions: CONFORMANCE.md C22 and C23, against the plain broker. */
class SessionsConformanceTest {
    /**
     * C22: two locks in a session of 3 s, held 10 s by the session's
     * keepalives alone; one released through its lease, the other by
     * closing the session at scope exit.
     */
    @Test
    void c22SessionKeepsItsLeasesAndReleasesThemOnClose() throws Exception {
        LockbrokerClient client = client();
        String waited = key("c22-a");
        String tried = key("c22-b");
        String id;
        Lease a;
        Lease b;
        try (Session session = client.session(Duration.ofSeconds(3))) {
            id = session.id();
            a = session.lock(waited); // waiting
            b = session.tryLock(tried).orElseThrow(); // not waiting
            assertTrue(a.token() > 0 && b.token() > 0, "granted with fencing tokens");
            for (Lease lease : List.of(a, b)) {
                LockStatus status = client.status(lease.key());
                assertTrue(status.held());
                assertEquals(id, status.session(), "status names the session");
                assertEquals(lease.token(), status.token());
            }
            assertThrows(IllegalStateException.class, () -> session.locking(key("c22-c")).ttl(Duration.ofSeconds(1)),
                    "a lease in a session takes no TTL of its own");

            Thread.sleep(10_000); // time is what is tested here: more than three TTLs without a call of ours

            for (Lease lease : List.of(a, b)) {
                LockStatus status = client.status(lease.key());
                assertTrue(status.held(), lease.key() + " still held");
                assertEquals(lease.token(), status.token(), "the same grant");
                assertEquals(id, status.session());
                assertFalse(lease.isLost());
                assertEquals(0, lease.renewals(), "no lease of the session was renewed on its own");
            }
            assertFalse(session.isLost());
            assertFalse(session.lost().isDone());
            assertTrue(session.keepalives() >= 6, "a keepalive about every second: " + session.keepalives());
            assertEquals(2, session.status().leases().size(), "the broker holds both in the session");

            a.release(); // through the session's lease handle
            assertFalse(client.status(waited).held(), "released at once");
            assertTrue(client.status(tried).held(), "the other stays held");
            assertEquals(List.of(b), session.leases());
        } // scope exit: closed
        assertFalse(client.status(tried).held(), "closing the session released its remaining lease");
        NotFoundException gone = assertThrows(NotFoundException.class, () -> client.sessionStatus(id));
        assertEquals(404, gone.status());
        assertEquals("session_not_found", gone.code());
        assertFalse(b.isLost(), "released with the session, not lost");
        assertDoesNotThrow(b::release, "released already: nothing to do");
    }

    /**
     * C23: the session closed from outside and its key taken by another
     * owner: its lost signal fires once within one TTL, each lease of it is
     * lost, and closing both afterwards harms nobody.
     */
    @Test
    void c23SessionLostWhenClosedFromOutside() throws Exception {
        LockbrokerClient client = client();
        LockbrokerClient outside = client(); // another process's view: not this session's client
        String key = key("c23");
        Duration ttl = Duration.ofSeconds(3);
        Session session = client.session(ttl);
        Lease lease = session.lock(key);
        AtomicInteger fired = new AtomicInteger();
        session.lost().thenRun(fired::incrementAndGet);
        eventually(Duration.ofSeconds(5), "a keepalive is confirmed", () -> session.keepalives() >= 1);

        assertEquals(1, outside.closeSession(session.id()), "the close released the session's lease");
        long closed = System.nanoTime();
        try (Lease next = outside.lock(key, Duration.ofSeconds(30), Duration.ofSeconds(5))) {
            session.lost().get(ttl.toMillis(), TimeUnit.MILLISECONDS);
            assertTrue(millisSince(closed) <= ttl.toMillis(), "lost within one TTL: " + millisSince(closed) + " ms");
            eventually(Duration.ofSeconds(1), "the lost callback ran", () -> fired.get() == 1);
            assertTrue(session.isLost());
            LockbrokerException reason = session.lostReason().orElseThrow();
            assertInstanceOf(LeaseLostException.class, reason);
            assertEquals(404, reason.status(), "the broker said the session had ended");
            assertThrows(LeaseLostException.class, session::checkAlive);

            assertTrue(lease.isLost(), "its lease reports lost");
            assertTrue(lease.lost().isDone() || waitDone(lease));
            assertInstanceOf(LeaseLostException.class, lease.lostReason().orElseThrow());
            assertThrows(LeaseLostException.class, lease::checkHeld);

            assertDoesNotThrow(session::close, "closing the lost session does not raise");
            assertDoesNotThrow(lease::close, "nor closing its lease");
            assertDoesNotThrow(lease::release, "nor releasing it");
            LockStatus status = client.status(key); // ...nor frees the new holder's lease
            assertTrue(status.held());
            assertEquals(next.owner(), status.owner());
            assertEquals(next.token(), status.token());
            assertNull(status.session(), "the new holder's lease is its own");
            assertEquals(1, fired.get(), "the lost signal fired once");
        }
    }

    /**
     * Beyond C22/C23, C06's rule for a session: through a forwarder that
     * goes silent, the session and its lease are lost before the TTL has
     * passed since the last confirmed keepalive was sent.
     */
    @Test
    void sessionLostBeforeItsTtlWithoutConfirmedKeepalives() throws Exception {
        String key = key("session-silent");
        Duration ttl = Duration.ofSeconds(3);
        try (Forwarder forwarder = new Forwarder(TestEnv.url())) {
            // A short timeout: the close at the end goes to the silent forwarder too, and waits it out.
            LockbrokerClient client = LockbrokerClient.builder(forwarder.url()).apiKey(TestEnv.apiKey())
                    .timeout(Duration.ofSeconds(2)).build();
            try (Session session = client.session(ttl)) {
                Lease lease = session.lock(key);
                eventually(Duration.ofSeconds(5), "a keepalive is confirmed through the forwarder",
                        () -> session.keepalives() >= 1);
                AtomicLong lostAt = new AtomicLong();
                session.lost().thenRun(() -> lostAt.set(System.nanoTime()));
                forwarder.silent();
                long silenced = System.nanoTime();

                session.lost().get(ttl.toMillis() * 2, TimeUnit.MILLISECONDS);
                eventually(Duration.ofSeconds(1), "the lost callback ran", () -> lostAt.get() != 0);
                long confirmedSent = session.confirmedSentNanos();
                assertTrue(confirmedSent - silenced <= 0, "the last confirmation was sent before the cut");
                long sinceConfirmed = (lostAt.get() - confirmedSent) / 1_000_000;
                assertTrue(sinceConfirmed < ttl.toMillis(),
                        "lost " + sinceConfirmed + " ms after the last confirmed keepalive was sent: before the TTL");
                assertEquals(0, session.lostReason().orElseThrow().status(), "judged by the client");
                assertTrue(lease.isLost(), "its lease is lost with it");
                assertEquals(confirmedSent, lease.confirmedSentNanos(), "the lease lives by the session's keepalives");
            }
        }
    }

    private static boolean waitDone(Lease lease) throws Exception {
        lease.lost().get(1, TimeUnit.SECONDS);
        return true;
    }
}
