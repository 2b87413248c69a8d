package dev.lockbroker.client;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.LongConsumer;

/**
 * The README's examples, as code that compiles and that {@link ExamplesTest}
 * runs against the broker. {@link ReadmeTest} checks that the README shows
 * each region between {@code // README: name} and {@code // README: end}
 * exactly as it is here.
 */
final class Examples {
    private Examples() {
    }

    // README: cron-job
    /**
     * Every instance of a service calls this on the same schedule (a cron
     * trigger, a ScheduledExecutorService): the one that gets the lock
     * builds the report, the others skip it.
     */
    static boolean nightlyReport(LockbrokerClient client, String key, Runnable buildReport) {
        boolean ran = client.runLocked(key, Duration.ofMinutes(10), buildReport);
        if (!ran) {
            System.out.println("another instance is building the report");
        }
        return ran;
    }
    // README: end

    // README: leader-loop
    /**
     * Leads the election {@code name} whenever this instance is elected, and
     * does the leader's work meanwhile, fenced by the term. Stops when
     * {@code running} is cleared or the thread is interrupted.
     */
    static void leaderLoop(LockbrokerClient client, String name, AtomicBoolean running, LongConsumer work)
            throws InterruptedException {
        while (running.get()) {
            // Waits until elected; an interrupt ends the wait (CancelledException).
            try (Leadership leader = client.election(name).ttl(Duration.ofSeconds(10)).acquire()) {
                while (running.get() && !leader.isLost()) {
                    work.accept(leader.term());
                    Thread.sleep(100);
                }
            } // resigns: the next candidate is elected
        }
    }
    // README: end

    // README: campaign
    /**
     * Stands in the election {@code name} in the background until resigned:
     * the listener starts the leader's work when elected and stops it when
     * the leadership ends.
     */
    static Campaign standForScheduler(LockbrokerClient client, String name, LongConsumer start, Runnable stop) {
        return client.campaign(name, Duration.ofSeconds(10), new LeadershipListener() {
            @Override
            public void elected(Leadership leadership) {
                start.accept(leadership.term());
            }

            @Override
            public void revoked(Leadership leadership) {
                stop.run();
            }
        });
    }
    // README: end

    // README: fenced-write
    /** A store that refuses writes fenced by a token older than the newest it has seen. */
    static final class FencedStore {
        private long newest;
        private String value;

        synchronized void write(String value, long token) {
            if (token < newest) {
                throw new StaleTokenException(token, newest);
            }
            newest = token;
            this.value = value;
        }

        synchronized String value() {
            return value;
        }
    }

    static void updateConfig(LockbrokerClient client, FencedStore store, String key, String value) {
        try (Lease lease = client.lock(key, Duration.ofSeconds(30))) {
            store.write(value, lease.token());
        }
    }
    // README: end

    // README: session
    /**
     * Works on several shards at once, each locked in one session: one
     * keepalive keeps every lock, and one signal stops the work if the
     * session is lost.
     */
    static void processShards(LockbrokerClient client, List<String> shards, ShardWorker worker) {
        try (Session session = client.session(Duration.ofSeconds(15))) {
            session.lost().thenRun(worker::stop); // one signal for every lock
            for (String shard : shards) {
                worker.own(shard, session.lock(shard).token());
            }
            worker.run();
        } // closed: every lock released
    }
    // README: end

    /** Works on the shards it owns, fencing its writes to each by the token of the shard's lock. */
    interface ShardWorker {
        void own(String shard, long token);

        void run();

        /** Called when the locks are lost (on another thread): stop writing. */
        void stop();
    }

    /** A write fenced by a token older than one the store has seen. */
    static final class StaleTokenException extends RuntimeException {
        private static final long serialVersionUID = 1L;

        StaleTokenException(long token, long newest) {
            super("token " + token + " is older than " + newest);
        }
    }
}
