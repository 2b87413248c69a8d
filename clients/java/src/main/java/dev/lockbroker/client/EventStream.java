package dev.lockbroker.client;

import java.io.IOException;
import java.io.InputStream;
import java.lang.System.Logger.Level;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Optional;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * A stream of Server-Sent Events that reconnects by itself: the changes of
 * {@link LockbrokerClient#events} or the leaders of
 * {@link LockbrokerClient#observe}.
 *
 * <p>A daemon thread reads the stream into a bounded queue; {@link #next()}
 * and {@link #poll(Duration)} take from it. When the connection ends or
 * breaks, or stays silent for three keep-alive periods (45 s), the thread
 * opens it again after a backoff (the client's {@link RetryPolicy} delays),
 * resuming after the last event id it received ({@code Last-Event-ID}),
 * as a browser's {@code EventSource} does; so nothing the broker still
 * keeps is missed. A refusal that asking again cannot change (a 4xx but
 * 429) ends the stream: {@link #next()} throws it.
 *
 * <p>Close it when done ({@link AutoCloseable}); the broker counts open
 * streams per tenant.
 *
 * @param <T> the events' type
 */
public final class EventStream<T> implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("dev.lockbroker.client");
    /** A stream silent for this long is taken for broken (the broker sends a keep-alive every 15 s). */
    static final long SILENT_NANOS = TimeUnit.SECONDS.toNanos(45);
    private static final int QUEUE = 1024;
    private static final Object END = new Object();

    /** Turns the stream's events into items; keeps what it needs across reconnects. */
    abstract static class Decoder<T> {
        /** The item of {@code event}, or null to skip it. */
        abstract T decode(SseParser.RawEvent event);

        /** The stream was opened again. */
        void reconnected() {
        }
    }

    /** An item that is a failure: {@link #next()} throws it. */
    private static final class Failed {
        final LockbrokerException error;

        Failed(LockbrokerException error) {
            this.error = error;
        }
    }

    private final Calls calls;
    private final String path;
    private final Decoder<T> decoder;
    private final BlockingQueue<Object> queue = new LinkedBlockingQueue<>(QUEUE);
    private final Thread reader;
    private final ScheduledFuture<?> watchdog;
    private volatile boolean closed;
    private volatile InputStream body;
    private volatile long lastByte = System.nanoTime();
    private volatile String lastId;
    private volatile int reconnects;

    /**
     * Opens the stream (failures of this first open are thrown) and starts
     * reading it.
     */
    EventStream(Calls calls, String path, String after, Decoder<T> decoder, String what) {
        this.calls = calls;
        this.path = path;
        this.decoder = decoder;
        this.lastId = after;
        this.body = open();
        this.reader = new Thread(this::read, "lockbroker-" + what);
        this.reader.setDaemon(true);
        this.reader.start();
        this.watchdog = Scheduler.TIMER.scheduleWithFixedDelay(this::checkSilence, 15, 15, TimeUnit.SECONDS);
    }

    /**
     * The next item, waiting for it.
     *
     * @throws CancelledException the thread was interrupted
     * @throws NoSuchElementException the stream was closed
     * @throws LockbrokerException the stream ended for good, or sent something that is not an event
     */
    public T next() {
        try {
            return unwrap(queue.take());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CancelledException("interrupted while waiting for an event", e);
        }
    }

    /**
     * The next item if one comes within {@code timeout}.
     *
     * @throws CancelledException the thread was interrupted
     * @throws NoSuchElementException the stream was closed
     * @throws LockbrokerException the stream ended for good, or sent something that is not an event
     */
    public Optional<T> poll(Duration timeout) {
        try {
            Object item = queue.poll(timeout.toNanos(), TimeUnit.NANOSECONDS);
            return item == null ? Optional.empty() : Optional.of(unwrap(item));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new CancelledException("interrupted while waiting for an event", e);
        }
    }

    /** The id of the last event received (where a reconnection resumes); empty before the first. */
    public Optional<String> lastEventId() {
        return Optional.ofNullable(lastId);
    }

    /** How many times the stream was opened again after its connection ended. */
    public int reconnects() {
        return reconnects;
    }

    /** Stops reading and closes the connection. */
    @Override
    public void close() {
        closed = true;
        watchdog.cancel(false);
        reader.interrupt();
        closeBody();
        // Wake a consumer blocked in next().
        queue.clear();
        queue.offer(END);
    }

    @SuppressWarnings("unchecked")
    private T unwrap(Object item) {
        if (item == END) {
            queue.offer(END); // for the next caller too
            if (closed) {
                throw new NoSuchElementException("the event stream is closed");
            }
            throw new NoSuchElementException("the event stream ended");
        }
        if (item instanceof Failed) {
            throw ((Failed) item).error;
        }
        return (T) item;
    }

    private InputStream open() {
        Map<String, String> headers = new HashMap<>();
        if (lastId != null) {
            headers.put("Last-Event-ID", lastId);
        }
        return calls.openStream(path, headers).body();
    }

    /** The reader thread: read, and reconnect when the connection ends, until closed or refused for good. */
    private void read() {
        try {
            while (!closed) {
                readUntilEnd(body);
                closeBody();
                if (closed || !reopen()) {
                    return;
                }
            }
        } catch (InterruptedException e) {
            // closed
        } finally {
            closeBody();
            if (!closed) {
                queue.offer(END);
            }
        }
    }

    private void readUntilEnd(InputStream in) throws InterruptedException {
        SseParser parser = new SseParser();
        byte[] buffer = new byte[8192];
        try {
            int n;
            while (!closed && (n = in.read(buffer)) >= 0) {
                lastByte = System.nanoTime();
                for (SseParser.RawEvent raw : parser.feed(buffer, n)) {
                    deliver(raw);
                }
            }
        } catch (IOException e) {
            if (!closed) {
                LOG.log(Level.DEBUG, "lockbroker: stream {0} broke: {1}", path, e.getMessage());
            }
        } catch (SseParser.TooLongException e) {
            put(new Failed(new UnexpectedResponseException(200, e.getMessage())));
        }
    }

    private void deliver(SseParser.RawEvent raw) throws InterruptedException {
        T item;
        try {
            item = decoder.decode(raw);
        } catch (LockbrokerException e) {
            put(new Failed(e));
            return;
        } catch (RuntimeException e) {
            put(new Failed(new UnexpectedResponseException(200, "a " + raw.name + " event that is not the API's: "
                    + e)));
            return;
        }
        if (raw.id != null && !raw.id.isEmpty()) {
            lastId = raw.id;
        }
        if (item != null) {
            put(item);
        }
    }

    private void put(Object item) throws InterruptedException {
        if (!closed) {
            queue.put(item);
        }
    }

    /** Opens the stream again after a backoff; false when it must end (closed, or refused for good). */
    private boolean reopen() throws InterruptedException {
        int attempt = 0;
        while (!closed) {
            attempt++;
            Thread.sleep(calls.retry.delay(Math.min(attempt, 8)).toMillis());
            try {
                body = open();
                lastByte = System.nanoTime();
                reconnects++;
                decoder.reconnected();
                return true;
            } catch (CancelledException e) {
                return false;
            } catch (LockbrokerException e) {
                int status = e.status();
                if (status >= 400 && status < 500 && status != 429) {
                    put(new Failed(e));
                    return false;
                }
                LOG.log(Level.DEBUG, "lockbroker: reopening stream {0} failed: {1}", path, e.getMessage());
            }
        }
        return false;
    }

    private void checkSilence() {
        if (System.nanoTime() - lastByte > SILENT_NANOS) {
            LOG.log(Level.DEBUG, "lockbroker: stream {0} silent for too long: reconnecting", path);
            closeBody();
        }
    }

    private void closeBody() {
        InputStream in = body;
        if (in != null) {
            try {
                in.close();
            } catch (IOException ignored) {
                // closing what broke
            }
        }
    }
}
