package dev.lockbroker.client;

import static dev.lockbroker.client.TestEnv.client;
import static dev.lockbroker.client.TestEnv.key;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.stream.Collectors;
import org.junit.jupiter.api.Test;

/** Other kinds: CONFORMANCE.md C13 (semaphores), C14 (rwlocks), C15 (multi-locks). */
class KindsConformanceTest {
    private static final Duration TTL = Duration.ofSeconds(30);

    /** C13: a semaphore of 2 admits two holders; a third try is refused, then granted after a release. */
    @Test
    void c13Semaphores() {
        LockbrokerClient client = client();
        String key = key("c13");
        Permit first = client.semaphore(key, 2).ttl(TTL).tryAcquire().orElseThrow();
        Permit second = client.semaphore(key, 2).ttl(TTL).tryAcquire().orElseThrow();
        assertEquals(Set.of(0, 1), Set.of(first.slot(), second.slot()), "two distinct slots");
        assertEquals(2, first.permits());
        assertTrue(first.token() > 0 && second.token() > 0, "tokens exposed");

        assertTrue(client.semaphore(key, 2).ttl(TTL).tryAcquire().isEmpty(), "a third is refused");
        LockHeldException full = assertThrows(LockHeldException.class,
                () -> client.semaphore(key, 2).ttl(TTL).waitUpTo(Duration.ZERO).acquire());
        assertEquals("semaphore_full", full.code());

        SemaphoreStatus status = client.status(Kind.SEMAPHORE, key);
        assertEquals(2, status.permits());
        assertEquals(Set.of(first.owner(), second.owner()),
                status.holders().stream().map(SemaphoreStatus.Holder::owner).collect(Collectors.toSet()));

        first.release();
        try (Permit third = client.semaphore(key, 2).ttl(TTL).tryAcquire().orElseThrow()) {
            assertEquals(first.slot(), third.slot(), "the freed slot");
            // The broker counts tokens per slot (each slot is a lease row of its own).
            assertTrue(third.token() > first.token(), "the slot's token moved on");
        } finally {
            second.release();
        }
        assertTrue(client.status(Kind.SEMAPHORE, key).holders().isEmpty());
    }

    /** C14: two readers at once; a writer is refused while they hold, granted after both release. */
    @Test
    void c14ReaderWriterLocks() {
        LockbrokerClient client = client();
        String key = key("c14");
        RwLease reader1 = client.readLock(key).ttl(TTL).tryAcquire().orElseThrow();
        RwLease reader2 = client.readLock(key).ttl(TTL).tryAcquire().orElseThrow();
        assertTrue(reader1.isRead() && reader2.isRead());
        RwLockStatus reading = client.status(Kind.RWLOCK, key);
        assertNull(reading.writer());
        assertEquals(2, reading.readers().size());

        assertTrue(client.writeLock(key).ttl(TTL).tryAcquire().isEmpty(), "no writer while readers hold");
        reader1.release();
        assertTrue(client.writeLock(key).ttl(TTL).tryAcquire().isEmpty(), "nor while one still does");
        reader2.release();

        try (RwLease writer = client.writeLock(key).ttl(TTL).tryAcquire().orElseThrow()) {
            assertEquals("write", writer.mode());
            assertTrue(writer.token() > Math.max(reader1.token(), reader2.token()), "one token counter per key");
            RwLockStatus writing = client.status(Kind.RWLOCK, key);
            assertEquals(writer.owner(), writing.writer().owner());
            assertTrue(writing.readers().isEmpty());
            assertTrue(client.readLock(key).ttl(TTL).tryAcquire().isEmpty(), "no reader while a writer holds");
        }
        assertNull(client.status(Kind.RWLOCK, key).writer());
    }

    /** C15: a multi-lock takes all its keys or none: with one held elsewhere, none is taken. */
    @Test
    void c15MultiLocksAllOrNone() {
        LockbrokerClient client = client();
        String prefix = key("c15");
        List<String> keys = List.of(prefix + "/a", prefix + "/b", prefix + "/c");
        Lease other = client.lock(keys.get(1), TTL);

        assertTrue(client.multiLock(keys).ttl(TTL).tryAcquire().isEmpty(), "refused while b is held");
        assertThrows(LockHeldException.class,
                () -> client.multiLock(keys).ttl(TTL).waitUpTo(Duration.ofMillis(300)).acquire());
        assertFalse(client.status(keys.get(0)).held(), "a was not taken");
        assertFalse(client.status(keys.get(2)).held(), "c was not taken");
        assertEquals(other.owner(), client.status(keys.get(1)).owner());

        other.release();
        try (MultiLease all = client.multiLock(keys).ttl(TTL).tryAcquire().orElseThrow()) {
            assertEquals(Set.copyOf(keys), all.tokens().keySet());
            for (String key : keys) {
                LockStatus status = client.status(key);
                assertEquals(all.owner(), status.owner());
                assertEquals(all.tokenOf(key), status.token());
            }
            assertTrue(all.tokenOf(keys.get(1)) > other.token(), "b's token moved on");
        }
        for (String key : keys) {
            assertFalse(client.status(key).held(), key + " released with the others");
        }
    }

    /** A multi-lock one of whose keys was force-released is lost; releasing it still gives back the keys it held. */
    @Test
    void multiLockLostInPartStillGivesBackTheRest() throws Exception {
        LockbrokerClient client = client();
        String prefix = key("multi-lost");
        String kept = prefix + "/kept";
        String taken = prefix + "/taken";
        MultiLease lease = client.multiLock(kept, taken).ttl(Duration.ofSeconds(6)).tryAcquire().orElseThrow();
        client.admin(TestEnv.adminToken()).forceRelease("default", taken);
        lease.lost().get(6, java.util.concurrent.TimeUnit.SECONDS); // renewed all or none: refused
        assertEquals(lease.owner(), client.status(kept).owner(), "the other key is still held, until its TTL");
        assertThrows(LeaseLostException.class, lease::release);
        assertFalse(client.status(kept).held(), "given back at once, not left to run out");
    }
}
