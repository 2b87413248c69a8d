package dev.lockbroker.client;

import static dev.lockbroker.client.TestEnv.client;
import static dev.lockbroker.client.TestEnv.eventually;
import static dev.lockbroker.client.TestEnv.key;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** Reads: CONFORMANCE.md C17 (history), C18 (listing), C19 (events). */
class ReadsConformanceTest {
    private static final Duration TTL = Duration.ofSeconds(30);
    private static final Duration WITHIN = Duration.ofSeconds(10);

    /** C17: a key's history lists its grant and release, newest first. */
    @Test
    void c17History() {
        LockbrokerClient client = client();
        String key = key("c17");
        Lease lease = client.lock(key, TTL);
        lease.release();
        List<HistoryEvent> history = client.history(key, 10);
        assertEquals(2, history.size(), history.toString());
        HistoryEvent released = history.get(0);
        HistoryEvent granted = history.get(1);
        assertEquals("released", released.event());
        assertEquals("granted", granted.event());
        for (HistoryEvent event : history) {
            assertEquals(lease.owner(), event.owner());
            assertEquals(lease.token(), event.token());
        }
        assertFalse(released.at().isBefore(granted.at()), "newest first");
    }

    /** C18: listing by prefix returns the keys held under it, pages followed by cursor; another tenant sees none. */
    @Test
    void c18Listing() {
        LockbrokerClient client = client();
        String prefix = key("c18") + "/";
        List<Lease> leases = new ArrayList<>();
        Set<String> keys = new HashSet<>();
        try {
            for (int i = 0; i < 5; i++) {
                leases.add(client.lock(prefix + "k" + i, TTL));
                keys.add(prefix + "k" + i);
            }
            try (Lease outside = client.lock(prefix.substring(0, prefix.length() - 1) + "-outside", TTL)) {
                List<String> listed = new ArrayList<>();
                int pages = 0;
                String cursor = null;
                do {
                    Page<LockStatus> page = client.list(Kind.LOCK, prefix, 2, cursor);
                    assertTrue(page.items().size() <= 2);
                    page.items().forEach(item -> listed.add(item.storageKey()));
                    cursor = page.next().orElse(null);
                    pages++;
                } while (cursor != null && pages < 20);
                assertTrue(pages >= 3, "five keys in pages of two: " + pages + " pages");
                assertEquals(5, listed.size(), "each key once: " + listed);
                assertEquals(keys, new HashSet<>(listed));
                List<String> sorted = new ArrayList<>(listed);
                sorted.sort(null);
                assertEquals(sorted, listed, "in storage-key order");

                List<LockStatus> all = client.listAll(Kind.LOCK, prefix, 100);
                assertEquals(5, all.size());
                for (LockStatus item : all) {
                    assertTrue(item.held());
                    assertTrue(item.token() > 0);
                }

                LockbrokerClient other = client.withApiKey(TestEnv.otherApiKey());
                assertTrue(other.list(Kind.LOCK, prefix, null, null).items().isEmpty(),
                        "another tenant sees none of them");
                assertTrue(other.listAll(Kind.LOCK, "java/", 1000).stream()
                        .noneMatch(item -> item.storageKey().startsWith(prefix)), "not even without the prefix");
            }
        } finally {
            leases.forEach(Lease::close);
        }
        assertTrue(client.list(Kind.LOCK, prefix, null, null).items().isEmpty(), "released, none listed");
    }

    /** C19: events yield a grant and release with ids; reopened after the last id, nothing already seen comes again. */
    @Test
    void c19Events() throws Exception {
        LockbrokerClient client = client();
        String prefix = key("c19") + "/";
        String key = prefix + "job";
        long lastId;
        try (EventStream<ChangeEvent> events = client.events(prefix, null)) {
            Lease lease = client.lock(key, TTL);
            lease.release();
            ChangeEvent granted = next(events);
            ChangeEvent released = next(events);
            assertEquals("granted", granted.type());
            assertEquals("released", released.type());
            for (ChangeEvent event : List.of(granted, released)) {
                assertEquals("lock", event.kind());
                assertEquals(key, event.storageKey());
                assertEquals(lease.owner(), event.owner());
                assertEquals(lease.token(), event.token());
            }
            assertTrue(granted.id() > 0 && released.id() > granted.id(), "increasing ids");
            lastId = released.id();
            assertEquals(Optional.of(Long.toString(lastId)), events.lastEventId());
        }

        try (Forwarder forwarder = new Forwarder(TestEnv.url())) {
            LockbrokerClient via = LockbrokerClient.builder(forwarder.url()).apiKey(TestEnv.apiKey()).build();
            try (EventStream<ChangeEvent> resumed = via.events(prefix, lastId)) {
                Lease second = client.lock(key, TTL);
                ChangeEvent first = next(resumed);
                assertEquals("granted", first.type(), "nothing already seen: " + first);
                assertEquals(second.token(), first.token());
                assertTrue(first.id() > lastId);

                // The connection breaks: the stream resumes with Last-Event-ID, without repeating.
                forwarder.cut();
                eventually(WITHIN, "the stream reconnected", () -> resumed.reconnects() >= 1);
                second.release();
                ChangeEvent after = next(resumed);
                assertEquals("released", after.type(), "the next change, not a repeat: " + after);
                assertEquals(second.token(), after.token());
                assertTrue(after.id() > first.id());
            }
        }
    }

    private static ChangeEvent next(EventStream<ChangeEvent> events) {
        return events.poll(WITHIN).orElseGet(() -> fail("no event within " + WITHIN));
    }
}
