package dev.lockbroker.client;

import static dev.lockbroker.client.TestEnv.client;
import static dev.lockbroker.client.TestEnv.eventually;
import static dev.lockbroker.client.TestEnv.key;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

/** The README's examples ({@link Examples}) run against the broker, as two instances of a service would. */
class ExamplesTest {
    /** A cron job guarded by a lock: two instances fire together, one builds the report, the other skips. */
    @Test
    void cronJobRunsOnOneInstance() throws Exception {
        LockbrokerClient instanceA = client();
        LockbrokerClient instanceB = client();
        String key = key("cron");
        AtomicInteger builds = new AtomicInteger();
        CountDownLatch otherSkipped = new CountDownLatch(1);
        Runnable buildReport = () -> {
            builds.incrementAndGet();
            try {
                // Still building when the other instance fires.
                assertTrue(otherSkipped.await(10, TimeUnit.SECONDS));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        };
        CompletableFuture<Boolean> a = CompletableFuture.supplyAsync(
                () -> Examples.nightlyReport(instanceA, key, buildReport));
        eventually(Duration.ofSeconds(10), "instance A builds", () -> builds.get() == 1);
        boolean bRan = Examples.nightlyReport(instanceB, key, buildReport);
        otherSkipped.countDown();
        assertFalse(bRan, "B skipped: A holds the lock");
        assertTrue(a.get(10, TimeUnit.SECONDS), "A ran");
        assertEquals(1, builds.get());
        assertFalse(instanceA.status(key).held(), "released when the job ended");
        assertTrue(Examples.nightlyReport(instanceB, key, builds::incrementAndGet), "the next night, B may run");
    }

    /** A leader loop: one instance works at a time, fenced by its term; when it stops, the other takes over. */
    @Test
    void leaderLoopHandsOver() throws Exception {
        LockbrokerClient client = client();
        String name = key("leader");
        List<String> work = new CopyOnWriteArrayList<>();
        AtomicBoolean runningA = new AtomicBoolean(true);
        AtomicBoolean runningB = new AtomicBoolean(true);
        Thread a = loop(client, name, runningA, term -> work.add("A:" + term));
        eventually(Duration.ofSeconds(10), "A leads and works", () -> !work.isEmpty());
        Thread b = loop(client, name, runningB, term -> work.add("B:" + term));
        eventually(Duration.ofSeconds(5), "A keeps working", () -> work.size() >= 3);
        assertTrue(work.stream().allMatch(w -> w.startsWith("A:")), "only the leader works: " + work);

        runningA.set(false);
        a.join(10_000);
        eventually(Duration.ofSeconds(10), "B takes over", () -> work.get(work.size() - 1).startsWith("B:"));
        long termA = Long.parseLong(work.get(0).substring(2));
        long termB = Long.parseLong(work.get(work.size() - 1).substring(2));
        assertTrue(termB > termA, "a new term fences the new leader's work");

        runningB.set(false);
        b.join(10_000);
        assertFalse(a.isAlive() || b.isAlive());
        assertFalse(client.status(Kind.ELECTION, name).led(), "both resigned");
    }

    private static Thread loop(LockbrokerClient client, String name, AtomicBoolean running,
            java.util.function.LongConsumer work) {
        Thread thread = new Thread(() -> {
            try {
                Examples.leaderLoop(client, name, running, work);
            } catch (InterruptedException | CancelledException stopped) {
                Thread.currentThread().interrupt();
            }
        }, "leader-loop");
        thread.setDaemon(true);
        thread.start();
        return thread;
    }

    /** A campaign in the background: the listener starts the work when elected; resigning hands it to the other. */
    @Test
    void campaignListenerStartsAndStopsTheWork() throws Exception {
        LockbrokerClient client = client();
        String name = key("campaign");
        List<String> told = new CopyOnWriteArrayList<>();
        try (Campaign a = Examples.standForScheduler(client, name, term -> told.add("A starts " + term),
                () -> told.add("A stops"))) {
            eventually(Duration.ofSeconds(10), "A is elected", () -> told.size() == 1);
            try (Campaign b = Examples.standForScheduler(client, name, term -> told.add("B starts " + term),
                    () -> told.add("B stops"))) {
                assertTrue(a.isLeader() && !b.isLeader());
                a.resign();
                eventually(Duration.ofSeconds(10), "B is elected", () -> told.size() == 3);
                assertEquals("A stops", told.get(1));
                assertTrue(told.get(2).startsWith("B starts "), told.toString());
                assertTrue(b.isLeader());
            }
            assertEquals("B stops", told.get(3));
        }
        assertEquals(4, told.size(), told.toString());
    }

    /** Shards locked in one session: each held in it while the worker runs, all free when it ends. */
    @Test
    void shardsLockedInOneSession() {
        LockbrokerClient client = client();
        List<String> shards = List.of(key("shard"), key("shard"), key("shard"));
        List<String> owned = new CopyOnWriteArrayList<>();
        AtomicBoolean stopped = new AtomicBoolean();
        Examples.processShards(client, shards, new Examples.ShardWorker() {
            @Override
            public void own(String shard, long token) {
                assertTrue(token > 0);
                owned.add(shard);
            }

            @Override
            public void run() {
                String session = client.status(shards.get(0)).session();
                assertTrue(session != null, "held in a session");
                for (String shard : shards) {
                    LockStatus status = client.status(shard);
                    assertTrue(status.held());
                    assertEquals(session, status.session(), "one session holds every shard");
                }
            }

            @Override
            public void stop() {
                stopped.set(true);
            }
        });
        assertEquals(shards, owned);
        for (String shard : shards) {
            assertFalse(client.status(shard).held(), "released when the session closed");
        }
        assertFalse(stopped.get(), "closing is not losing");
    }

    /** A fenced write: a holder whose lease was taken away cannot overwrite its successor's write. */
    @Test
    void fencedWriteRefusesAStaleHolder() {
        LockbrokerClient client = client();
        String key = key("fenced");
        Examples.FencedStore store = new Examples.FencedStore();
        Lease paused = client.lock(key, Duration.ofSeconds(30));
        // The holder stalls (a long GC pause); an operator ends its lease; another instance writes.
        client.admin(TestEnv.adminToken()).forceRelease("default", key);
        Examples.updateConfig(client, store, key, "new");
        assertThrows(Examples.StaleTokenException.class, () -> store.write("old", paused.token()));
        assertEquals("new", store.value());
        assertFalse(client.validate(key, paused.token()).valid(), "validate says so too");
        paused.close();
    }
}
