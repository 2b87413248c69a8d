package dev.lockbroker.client;

import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The client's background threads, shared by every client of the process
 * and all daemons (they never keep a JVM alive):
 * <ul>
 * <li>{@link #TIMER}, one thread that schedules renewals; the renewals
 * themselves are asynchronous HTTP exchanges, so it never blocks and one
 * thread serves any number of leases;</li>
 * <li>{@link #WORKERS}, for the little blocking work done in the background:
 * releasing a grant that arrived after its acquire was given up, reading
 * event streams.</li>
 * </ul>
 */
final class Scheduler {
    static final ScheduledExecutorService TIMER = timer();
    static final ExecutorService WORKERS = Executors.newCachedThreadPool(daemons("lockbroker-worker"));

    private Scheduler() {
    }

    private static ScheduledExecutorService timer() {
        ScheduledThreadPoolExecutor timer = new ScheduledThreadPoolExecutor(1, daemons("lockbroker-renewal"));
        // Cancelled renewals (released leases) leave the queue at once.
        timer.setRemoveOnCancelPolicy(true);
        return timer;
    }

    static ThreadFactory daemons(String name) {
        AtomicInteger n = new AtomicInteger();
        return task -> {
            Thread thread = new Thread(task, name + "-" + n.incrementAndGet());
            thread.setDaemon(true);
            return thread;
        };
    }
}
