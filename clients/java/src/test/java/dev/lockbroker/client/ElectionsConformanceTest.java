package dev.lockbroker.client;

import static dev.lockbroker.client.TestEnv.client;
import static dev.lockbroker.client.TestEnv.eventually;
import static dev.lockbroker.client.TestEnv.key;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.time.Duration;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Elections: CONFORMANCE.md C16; observe goes through a forwarder of the test's own, which cuts its connection. */
class ElectionsConformanceTest {
    private static final Duration TTL = Duration.ofSeconds(5);
    private static final Duration WITHIN = Duration.ofSeconds(10);

    /** Records what a campaign's listener is told: {@code elected:TERM} and {@code revoked:TERM}. */
    static final class Recorder implements LeadershipListener {
        final BlockingQueue<String> told = new LinkedBlockingQueue<>();

        @Override
        public void elected(Leadership leadership) {
            told.add("elected:" + leadership.term());
        }

        @Override
        public void revoked(Leadership leadership) {
            told.add("revoked:" + leadership.term());
        }

        String next() throws InterruptedException {
            String event = told.poll(WITHIN.toMillis(), TimeUnit.MILLISECONDS);
            if (event == null) {
                fail("the listener was told nothing within " + WITHIN);
            }
            return event;
        }
    }

    /** C16: a campaign leads with a term, a second candidate waits, resign hands over, observe follows (and reconnects). */
    @Test
    void c16Elections() throws Exception {
        LockbrokerClient client = client();
        String name = key("c16");
        try (Forwarder forwarder = new Forwarder(TestEnv.url())) {
            LockbrokerClient watcher = LockbrokerClient.builder(forwarder.url()).apiKey(TestEnv.apiKey()).build();
            try (EventStream<ElectionStatus> observed = watcher.observe(name)) {
                ElectionStatus now = observed.poll(WITHIN).orElseThrow(() -> new AssertionError("no first event"));
                assertFalse(now.led(), "nobody leads yet");

                Recorder first = new Recorder();
                Campaign campaign1 = client.campaign(name, "candidate-1", TTL, first);
                String elected = first.next();
                assertTrue(elected.startsWith("elected:"), elected);
                Leadership leadership1 = campaign1.leadership().orElseThrow();
                long term1 = leadership1.term();
                assertTrue(term1 > 0);
                assertEquals("elected:" + term1, elected);
                ElectionStatus status = client.status(Kind.ELECTION, name);
                assertEquals("candidate-1", status.leader());
                assertEquals(term1, status.term());
                awaitLeader(observed, "candidate-1", term1);

                // A second candidate waits while the first leads.
                LockHeldException waiting = assertThrows(LockHeldException.class, () -> client.election(name)
                        .candidate("candidate-2").ttl(TTL).waitUpTo(Duration.ofMillis(300)).acquire());
                assertEquals("lock_held", waiting.code());
                Recorder second = new Recorder();
                try (Campaign campaign2 = client.campaign(name, "candidate-2", TTL, second)) {
                    assertTrue(second.told.isEmpty() && campaign1.isLeader(), "the first still leads");

                    campaign1.resign();
                    assertEquals("revoked:" + term1, first.next());
                    String handedOver = second.next();
                    long term2 = Long.parseLong(handedOver.substring("elected:".length()));
                    assertTrue(term2 > term1, "a new term: " + term1 + " then " + term2);
                    assertTrue(campaign2.isLeader());
                    assertFalse(campaign1.isLeader());
                    awaitLeader(observed, "candidate-2", term2);

                    // The observing connection breaks: the stream reconnects and goes on.
                    forwarder.cut();
                    eventually(WITHIN, "observe reconnected", () -> observed.reconnects() >= 1);
                    campaign2.resign();
                    assertEquals("revoked:" + term2, second.next());
                    Recorder third = new Recorder();
                    try (Campaign campaign3 = client.campaign(name, "candidate-3", TTL, third)) {
                        long term3 = Long.parseLong(third.next().substring("elected:".length()));
                        assertTrue(term3 > term2);
                        awaitLeader(observed, "candidate-3", term3);
                    }
                }
                assertFalse(client.status(Kind.ELECTION, name).led(), "everyone resigned");
            }
        }
    }

    /** Reads the stream until it says {@code leader} leads in {@code term}; fails if that does not come within {@link #WITHIN}. */
    private static void awaitLeader(EventStream<ElectionStatus> observed, String leader, long term) {
        long end = System.nanoTime() + WITHIN.toNanos();
        while (System.nanoTime() < end) {
            Optional<ElectionStatus> event = observed.poll(Duration.ofNanos(Math.max(1, end - System.nanoTime())));
            if (event.isPresent() && Objects.equals(event.get().leader(), leader)
                    && Objects.equals(event.get().term(), term)) {
                return;
            }
        }
        fail("observe did not yield " + leader + " in term " + term + " within " + WITHIN);
    }
}
