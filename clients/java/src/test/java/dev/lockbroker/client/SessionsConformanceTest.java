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

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/** Sessions: CONFORMANCE.md C22 to C25, against the plain broker. */
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
     * C24: one lease of every kind in a session of 3 s (a permit of a
     * semaphore of 2, a read lease and a write lease of two rwlocks, a
     * multi-lock of two keys, a campaign that wins an election), each
     * through the session's call for its kind: all six listed by the
     * session, held 10 s by its keepalives alone, all freed by its close at
     * scope exit.
     */
    @Test
    void c24EveryKindInASession() throws Exception {
        LockbrokerClient client = client();
        String semaphore = key("c24-sem");
        String reading = key("c24-read");
        String writing = key("c24-write");
        String prefix = key("c24-multi");
        List<String> multiKeys = List.of(prefix + "/a", prefix + "/b");
        String election = key("c24-election");
        ElectionsConformanceTest.Recorder told = new ElectionsConformanceTest.Recorder();
        String id;
        long term;
        Campaign campaign;
        Permit permit;
        RwLease read;
        RwLease write;
        MultiLease multi;
        Leadership leadership;
        try (Session session = client.session(Duration.ofSeconds(3))) {
            id = session.id();
            permit = session.semaphore(semaphore, 2).acquire(); // waiting
            read = session.readLock(reading).tryAcquire().orElseThrow(); // not waiting
            write = session.writeLock(writing).acquire();
            multi = session.multiLock(multiKeys).acquire();
            campaign = session.campaign(election, told);
            String elected = told.next();
            leadership = campaign.leadership().orElseThrow();
            term = leadership.term();
            assertEquals("elected:" + term, elected, "the campaign won the election");

            // Each granted, with a fencing token, for as long as the session lives.
            assertEquals(2, permit.permits());
            assertTrue(permit.slot() == 0 || permit.slot() == 1);
            assertTrue(read.isRead());
            assertEquals("write", write.mode());
            assertEquals(Set.copyOf(multiKeys), multi.tokens().keySet());
            assertEquals(campaign.candidate(), leadership.candidate());
            List<Lease> all = List.of(permit, read, write, multi, leadership);
            for (Lease lease : all) {
                assertTrue(lease.token() > 0, lease + " granted with a fencing token");
                assertEquals(session.ttl(), lease.ttl(), lease + " lives as long as the session");
            }
            assertEquals(Set.copyOf(all), Set.copyOf(session.leases()), "the session keeps each of them");
            assertThrows(IllegalStateException.class, () -> session.semaphore(semaphore, 2).ttl(Duration.ofSeconds(1)),
                    "a lease in a session takes no TTL of its own, whatever its kind");

            // The session lists all six leases, with the permit's slot and the rwlock leases' modes.
            SessionStatus shown = session.status();
            assertEquals(id, shown.id());
            assertEquals(expectedLeases(client, permit, read, write, multi, leadership, semaphore, reading,
                    writing, multiKeys, election), Set.copyOf(shown.leases()));
            assertEquals(6, shown.leases().size(), "six leases: " + shown.leases());
            assertHeld(client, id, permit, read, write, multi, leadership, campaign, semaphore, reading, writing,
                    election);

            Thread.sleep(10_000); // time is what is tested here: more than three TTLs without a call of ours

            assertHeld(client, id, permit, read, write, multi, leadership, campaign, semaphore, reading, writing,
                    election);
            for (Lease lease : all) {
                assertFalse(lease.isLost(), lease + " not lost");
                assertEquals(0, lease.renewals(), lease + " was not renewed on its own");
            }
            assertFalse(session.isLost());
            assertFalse(session.lost().isDone());
            assertTrue(session.keepalives() >= 6, "a keepalive about every second: " + session.keepalives());
            assertTrue(told.told.isEmpty(), "the campaign still leads: " + told.told);
            assertEquals(6, session.status().leases().size(), "the broker still holds all six in the session");
        } // scope exit: closed

        // Every one of them freed.
        SemaphoreStatus sem = client.status(Kind.SEMAPHORE, semaphore);
        assertTrue(sem.holders().isEmpty(), "the semaphore has no holder: " + sem);
        for (String rw : List.of(reading, writing)) {
            RwLockStatus status = client.status(Kind.RWLOCK, rw);
            assertNull(status.writer(), rw + " has no writer");
            assertTrue(status.readers().isEmpty(), rw + " has no reader");
        }
        for (String key : multiKeys) {
            assertFalse(client.status(key).held(), key + " of the multi-lock is free");
        }
        ElectionStatus led = client.status(Kind.ELECTION, election);
        assertTrue(!led.led() || !campaign.candidate().equals(led.leader()), "the election has no leader: " + led);
        assertEquals("revoked:" + term, told.next(), "the campaign was told before its session closed");
        assertFalse(campaign.isLeader());
        NotFoundException gone = assertThrows(NotFoundException.class, () -> client.sessionStatus(id));
        assertEquals("session_not_found", gone.code());
        for (Lease lease : List.of(permit, read, write, multi, leadership)) {
            assertFalse(lease.isLost(), lease + " released with the session, not lost");
            assertDoesNotThrow(lease::release, "released already: nothing to do");
        }
        assertDoesNotThrow(campaign::resign, "resigned already by the session's close");
    }

    /** What {@code GET /v1/sessions/{id}} should list for C24's leases. */
    private static Set<SessionStatus.Held> expectedLeases(LockbrokerClient client, Permit permit, RwLease read,
            RwLease write, MultiLease multi, Leadership leadership, String semaphore, String reading, String writing,
            List<String> multiKeys, String election) {
        String semStorage = client.status(Kind.SEMAPHORE, semaphore).storageKey();
        String readStorage = client.status(Kind.RWLOCK, reading).storageKey();
        String writeStorage = client.status(Kind.RWLOCK, writing).storageKey();
        String electionStorage = client.status(Kind.ELECTION, election).storageKey();
        Set<SessionStatus.Held> expected = new java.util.HashSet<>(Set.of(
                new SessionStatus.Held("semaphore", semStorage, semStorage, permit.token(), permit.slot(), null),
                new SessionStatus.Held("rwlock", readStorage, readStorage, read.token(), null, "read"),
                new SessionStatus.Held("rwlock", writeStorage, writeStorage, write.token(), null, "write"),
                new SessionStatus.Held("election", electionStorage, electionStorage, leadership.term(), null,
                        null)));
        for (String key : multiKeys) {
            String storage = client.status(key).storageKey();
            expected.add(new SessionStatus.Held("lock", storage, storage, multi.tokenOf(key), null, null));
        }
        return expected;
    }

    /** C24's leases as their keys' statuses show them: held in session {@code id}, by the same grants. */
    private static void assertHeld(LockbrokerClient client, String id, Permit permit, RwLease read, RwLease write,
            MultiLease multi, Leadership leadership, Campaign campaign, String semaphore, String reading,
            String writing, String election) {
        SemaphoreStatus sem = client.status(Kind.SEMAPHORE, semaphore);
        assertEquals(List.of(new SemaphoreStatus.Holder(permit.slot(), permit.owner(), permit.token(),
                sem.holders().get(0).expiresAt(), id)), sem.holders(), "the permit, held in the session");
        RwLockStatus readStatus = client.status(Kind.RWLOCK, reading);
        assertNull(readStatus.writer());
        assertEquals(List.of(new RwLockStatus.Holder(read.owner(), read.token(),
                readStatus.readers().get(0).expiresAt(), id)), readStatus.readers(), "the read lease");
        RwLockStatus writeStatus = client.status(Kind.RWLOCK, writing);
        assertEquals(new RwLockStatus.Holder(write.owner(), write.token(), writeStatus.writer().expiresAt(), id),
                writeStatus.writer(), "the write lease");
        assertTrue(writeStatus.readers().isEmpty());
        for (String key : multi.keys()) {
            LockStatus status = client.status(key);
            assertTrue(status.held(), key + " of the multi-lock held");
            assertEquals(multi.owner(), status.owner());
            assertEquals(multi.tokenOf(key), status.token(), "the same grant of " + key);
            assertEquals(id, status.session());
        }
        ElectionStatus led = client.status(Kind.ELECTION, election);
        assertEquals(leadership.candidate(), led.leader(), "the campaign leads");
        assertEquals(leadership.term(), led.term(), "in the same term");
        assertTrue(campaign.isLeader());
    }

    /**
     * C25: session A holds {@code k1}, session B holds {@code k2}; A's
     * waiting acquire of {@code k2} waits in the background, and B's
     * waiting acquire of {@code k1} is refused at once with
     * {@link DeadlockException} (not retried) naming the cycle: B waiting
     * for {@code k1}, then A waiting for {@code k2}. A's acquire still
     * waits, and closing B grants it {@code k2}.
     */
    @Test
    void c25DeadlockIsRefusedWithItsCycle() throws Exception {
        AtomicInteger retries = new AtomicInteger();
        LockbrokerClient client = LockbrokerClient.builder(TestEnv.url()).apiKey(TestEnv.apiKey())
                .retryListener((method, path, retry, failure, delay) -> retries.incrementAndGet()).build();
        String k1 = key("c25-k1");
        String k2 = key("c25-k2");
        String ownerA = "java-c25-a-" + UUID.randomUUID();
        String ownerB = "java-c25-b-" + UUID.randomUUID();
        Duration ttl = Duration.ofSeconds(10);
        Duration wait = Duration.ofSeconds(10);
        ExecutorService background = Executors.newSingleThreadExecutor();
        Session a = client.session(ttl);
        Session b = client.session(ttl);
        try {
            Lease heldByA = a.lock(k1);
            Lease heldByB = b.lock(k2);
            assertEquals(a.id(), client.status(k1).session());
            assertEquals(b.id(), client.status(k2).session());
            Future<Lease> aWaits = background.submit(() -> a.locking(k2).owner(ownerA).waitUpTo(wait).acquire());
            eventually(Duration.ofSeconds(5), "A's acquire of k2 is listed by GET /v1/locks/k2/waiters",
                    () -> waiters(k2).stream().anyMatch(w -> ownerA.equals(w.optString("owner"))
                            && a.id().equals(w.optString("session"))));

            long started = System.nanoTime();
            DeadlockException refused = assertThrows(DeadlockException.class,
                    () -> b.locking(k1).owner(ownerB).waitUpTo(wait).acquire());
            long took = millisSince(started);
            assertTrue(took < 2_000, "refused at once, not after the wait: " + took + " ms");
            assertInstanceOf(LockbrokerException.class, refused);
            assertEquals(409, refused.status());
            assertEquals("deadlock", refused.code());
            assertEquals(0, retries.get(), "not retried");
            assertEquals(List.of(
                    new CycleStep(b.id(), ownerB, "lock", client.status(k1).storageKey()),
                    new CycleStep(a.id(), ownerA, "lock", client.status(k2).storageKey())), refused.cycle(),
                    "B waiting for k1, then A waiting for k2");
            assertTrue(client.status(k1).held() && a.id().equals(client.status(k1).session()),
                    "k1 stays A's: nothing was queued for B");
            assertFalse(b.isLost(), "B's session lives on");
            assertEquals(List.of(heldByB), b.leases());

            assertFalse(aWaits.isDone(), "A's acquire still waits");
            b.close();
            Lease granted = aWaits.get(5, TimeUnit.SECONDS);
            assertEquals(k2, granted.key());
            assertEquals(ownerA, granted.owner());
            LockStatus status = client.status(k2);
            assertTrue(status.held());
            assertEquals(a.id(), status.session(), "closing B's session granted k2 to A's");
            assertEquals(granted.token(), status.token());
            assertTrue(granted.token() > heldByB.token(), "a later grant");
            assertFalse(heldByA.isLost());
        } finally {
            background.shutdownNow();
            b.close();
            a.close();
        }
    }

    /** {@code GET /v1/locks/{key}/waiters}' waiters (this client has no call for it). */
    private static List<Fields> waiters(String key) {
        try {
            HttpResponse<String> answer = HttpClient.newHttpClient().send(
                    HttpRequest.newBuilder(URI.create(TestEnv.url() + "/v1/locks/" + Transport.segment(key) + "/waiters"))
                            .header("Authorization", "Bearer " + TestEnv.apiKey()).GET().build(),
                    HttpResponse.BodyHandlers.ofString());
            assertEquals(200, answer.statusCode(), answer.body());
            return Fields.of(Json.parse(answer.body())).objects("waiters");
        } catch (Json.JsonException e) {
            throw new AssertionError("the waiters are not JSON", e);
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CancelledException("interrupted", e);
        }
    }

    /**
     * Beyond C24: each kind's lease in a session is released through its
     * own handle (the key free at once, the session alive and holding the
     * rest), and a campaign in a session resigns through its own.
     */
    @Test
    void everyKindInASessionIsReleasedThroughItsOwnHandle() throws Exception {
        LockbrokerClient client = client();
        String semaphore = key("session-kinds-sem");
        String rw = key("session-kinds-rw");
        String prefix = key("session-kinds-multi");
        String election = key("session-kinds-election");
        String standing = key("session-kinds-campaign");
        try (Session session = client.session(Duration.ofSeconds(5))) {
            Permit permit = session.semaphore(semaphore, 1).tryAcquire().orElseThrow();
            assertTrue(client.semaphore(semaphore, 1).ttl(Duration.ofSeconds(5)).tryAcquire().isEmpty(),
                    "the one permit is the session's");
            permit.release();
            assertTrue(client.status(Kind.SEMAPHORE, semaphore).holders().isEmpty(), "the permit is free at once");

            RwLease read1 = session.readLock(rw).acquire();
            RwLease read2 = session.readLock(rw).acquire(); // an owner of its own: a second reader
            assertEquals(2, client.status(Kind.RWLOCK, rw).readers().size());
            read1.release();
            assertEquals(List.of(read2.owner()), client.status(Kind.RWLOCK, rw).readers().stream()
                    .map(RwLockStatus.Holder::owner).collect(Collectors.toList()), "one reader released");
            read2.release();
            RwLease write = session.writeLock(rw).tryAcquire().orElseThrow();
            assertEquals(write.owner(), client.status(Kind.RWLOCK, rw).writer().owner());
            write.release();
            assertNull(client.status(Kind.RWLOCK, rw).writer(), "the writer is gone at once");

            MultiLease multi = session.multiLock(prefix + "/a", prefix + "/b").acquire();
            multi.release();
            for (String key : multi.keys()) {
                assertFalse(client.status(key).held(), key + " free at once");
            }

            Leadership leadership = session.election(election).acquire();
            assertEquals(List.of(leadership.term()), client.sessionStatus(session.id()).leases().stream()
                    .filter(l -> l.kind().equals("election")).map(SessionStatus.Held::token)
                    .collect(Collectors.toList()), "the leadership is the session's");
            leadership.resign();
            assertFalse(client.status(Kind.ELECTION, election).led(), "resigned at once");

            ElectionsConformanceTest.Recorder told = new ElectionsConformanceTest.Recorder();
            Campaign campaign = session.campaign(standing, "candidate-in-session", told);
            long term = Long.parseLong(told.next().substring("elected:".length()));
            assertEquals("candidate-in-session", client.status(Kind.ELECTION, standing).leader());
            campaign.resign();
            assertEquals("revoked:" + term, told.next());
            assertFalse(client.status(Kind.ELECTION, standing).led(), "the campaign stepped down");

            assertTrue(session.leases().isEmpty(), "released leases leave the session: " + session.leases());
            assertTrue(session.status().leases().isEmpty(), "the broker holds nothing in it");
            assertFalse(session.isLost());
        }
    }

    /**
     * Beyond C23: the one lost signal of a session covers a lease of every
     * kind: closed from outside, each of them reports lost, its campaign is
     * told revoked and stops standing, and closing them afterwards raises
     * nothing.
     */
    @Test
    void everyKindInASessionIsLostWithIt() throws Exception {
        LockbrokerClient client = client();
        LockbrokerClient outside = client();
        String semaphore = key("session-lost-sem");
        String rw = key("session-lost-rw");
        String prefix = key("session-lost-multi");
        String election = key("session-lost-election");
        Duration ttl = Duration.ofSeconds(3);
        Session session = client.session(ttl);
        Permit permit = session.semaphore(semaphore, 2).acquire();
        RwLease write = session.writeLock(rw).acquire();
        MultiLease multi = session.multiLock(prefix + "/a", prefix + "/b").acquire();
        ElectionsConformanceTest.Recorder told = new ElectionsConformanceTest.Recorder();
        Campaign campaign = session.campaign(election, told);
        long term = Long.parseLong(told.next().substring("elected:".length()));
        Leadership leadership = campaign.leadership().orElseThrow();
        AtomicInteger fired = new AtomicInteger();
        session.lost().thenRun(fired::incrementAndGet);

        assertEquals(5, outside.closeSession(session.id()), "the close released all five leases");
        long closed = System.nanoTime();
        session.lost().get(ttl.toMillis(), TimeUnit.MILLISECONDS);
        assertTrue(millisSince(closed) <= ttl.toMillis(), "lost within one TTL: " + millisSince(closed) + " ms");
        for (Lease lease : List.of(permit, write, multi, leadership)) {
            lease.lost().get(1, TimeUnit.SECONDS);
            assertTrue(lease.isLost(), lease + " reports lost");
            assertInstanceOf(LeaseLostException.class, lease.lostReason().orElseThrow());
        }
        assertEquals("revoked:" + term, told.next(), "the campaign was told");
        assertFalse(campaign.isLeader());
        eventually(Duration.ofSeconds(1), "the lost callback ran", () -> fired.get() == 1);

        try (Permit other = outside.semaphore(semaphore, 2).ttl(Duration.ofSeconds(30)).tryAcquire().orElseThrow();
                Permit another = outside.semaphore(semaphore, 2).ttl(Duration.ofSeconds(30)).tryAcquire()
                        .orElseThrow()) {
            assertEquals(Set.of(0, 1), Set.of(other.slot(), another.slot()), "both slots free again");
            assertDoesNotThrow(session::close, "closing the lost session does not raise");
            assertDoesNotThrow(campaign::resign, "nor resigning its campaign");
            for (Lease lease : List.of(permit, write, multi, leadership)) {
                assertDoesNotThrow(lease::close, "nor closing " + lease);
            }
            assertEquals(Set.of(other.owner(), another.owner()), client.status(Kind.SEMAPHORE, semaphore).holders()
                    .stream().map(SemaphoreStatus.Holder::owner).collect(Collectors.toSet()),
                    "the new holders keep their permits");
        }
        assertFalse(client.status(Kind.ELECTION, election).led(), "the campaign did not stand again");
        assertEquals(1, fired.get(), "the lost signal fired once");
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
