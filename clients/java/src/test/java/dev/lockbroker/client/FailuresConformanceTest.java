package dev.lockbroker.client;

import static dev.lockbroker.client.TestEnv.client;
import static dev.lockbroker.client.TestEnv.key;
import static dev.lockbroker.client.TestEnv.millisSince;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.InetAddress;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;

/**
 * Failures and retries: CONFORMANCE.md C09 to C12. C09 to C11 go through a
 * {@link StandIn} of the test's own in front of the real broker (answering
 * 503, closing connections, counting requests); C12 meets the real
 * broker's rate limit.
 */
class FailuresConformanceTest {
    /** One retry as a {@link RetryListener} saw it. */
    private static final class Retry {
        final LockbrokerException failure;
        final Duration delay;

        Retry(LockbrokerException failure, Duration delay) {
            this.failure = failure;
            this.delay = delay;
        }
    }

    private static LockbrokerClient.Builder via(String url, List<Retry> retries) {
        return LockbrokerClient.builder(url).apiKey(TestEnv.apiKey())
                .retryListener((method, path, n, failure, delay) -> retries.add(new Retry(failure, delay)));
    }

    /** C09: two 503s then the broker: retried with growing, jittered delays; success on the third try. */
    @Test
    void c09RetriesOn503AndConnectionFailures() throws Exception {
        String key = key("c09");
        Duration base = Duration.ofMillis(200);
        try (StandIn standIn = new StandIn(TestEnv.url(),
                (n, method, path) -> n <= 2 ? StandIn.Act.UNAVAILABLE : StandIn.Act.FORWARD)) {
            List<Retry> retries = new CopyOnWriteArrayList<>();
            LockbrokerClient client = via(standIn.url(), retries)
                    .retry(new RetryPolicy(4, base, Duration.ofSeconds(2))).build();
            // An acquire too: a 503 never hides a grant, so it is safe to send again.
            try (Lease lease = client.tryLock(key, Duration.ofSeconds(30)).orElseThrow()) {
                assertEquals(lease.owner(), client().status(key).owner());
            }
            List<StandIn.Seen> seen = standIn.seen();
            assertEquals("POST", seen.get(2).method);
            assertTrue(seen.get(2).path.endsWith("/acquire"));
            assertEquals(2, retries.size(), "two retries: success on the third try");
            for (Retry retry : retries) {
                assertInstanceOf(UnavailableException.class, retry.failure);
            }
            Duration first = retries.get(0).delay;
            Duration second = retries.get(1).delay;
            assertBetween(first, base.dividedBy(2), base, "first delay: half to all of the base");
            assertBetween(second, base, base.multipliedBy(2), "second delay: half to all of twice the base");
            long gap1 = (seen.get(1).at - seen.get(0).at) / 1_000_000;
            long gap2 = (seen.get(2).at - seen.get(1).at) / 1_000_000;
            assertTrue(gap1 >= first.toMillis() - 5 && gap2 >= second.toMillis() - 5,
                    "the client waited between tries: " + gap1 + " ms, " + gap2 + " ms");
            assertTrue(gap2 > gap1 / 2, "delays grow: " + gap1 + " ms then " + gap2 + " ms");
        }

        // A deadline shorter than the retries would take: the typed "unavailable" error by the deadline.
        try (StandIn alwaysDown = new StandIn(TestEnv.url(), (n, method, path) -> StandIn.Act.UNAVAILABLE)) {
            List<Retry> retries = new CopyOnWriteArrayList<>();
            LockbrokerClient client = via(alwaysDown.url(), retries).timeout(Duration.ofMillis(800))
                    .retry(new RetryPolicy(20, base, Duration.ofSeconds(2))).build();
            long start = System.nanoTime();
            UnavailableException down = assertThrows(UnavailableException.class, () -> client.status(key));
            long took = millisSince(start);
            assertTrue(took <= 800 + 250, "failed by the deadline (800 ms), not after: " + took + " ms");
            assertEquals(503, down.status());
            assertEquals("unavailable", down.code());
            assertTrue(alwaysDown.seen().size() >= 2, "it did retry before giving up");
        }

        // A port nothing listens on: retried, then the typed connection error by the deadline.
        int port;
        try (ServerSocket probe = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            port = probe.getLocalPort();
        }
        List<Retry> retries = new CopyOnWriteArrayList<>();
        LockbrokerClient nowhere = via("http://127.0.0.1:" + port, retries).timeout(Duration.ofSeconds(1))
                .retry(new RetryPolicy(20, Duration.ofMillis(50), Duration.ofMillis(400))).build();
        long start = System.nanoTime();
        ConnectionException refused = assertThrows(ConnectionException.class, () -> nowhere.status(key));
        long took = millisSince(start);
        assertFalse(refused instanceof TlsException);
        assertEquals("unreachable", refused.code());
        assertTrue(took <= 1000 + 250, "failed by the deadline (1 s), not after: " + took + " ms");
        assertTrue(retries.size() >= 2, "connection failures are retried: " + retries.size());
    }

    /** C10: 400, 401, 404, 409 and 422 answers are typed errors after exactly one request. */
    @Test
    void c10ClientErrorsAreNotRetried() throws Exception {
        String key = key("c10");
        try (StandIn counter = new StandIn(TestEnv.url(), (n, method, path) -> StandIn.Act.FORWARD);
                Lease holder = client().lock(key, Duration.ofSeconds(30))) {
            List<Retry> retries = new CopyOnWriteArrayList<>();
            LockbrokerClient client = via(counter.url(), retries).build();

            assertOneRequest(counter, 400, InvalidRequestException.class, () -> client.history(key, 0));
            assertOneRequest(counter, 401, AuthenticationException.class,
                    () -> client.withApiKey("not-a-key").status(key));
            assertOneRequest(counter, 404, NotFoundException.class,
                    () -> client.admin(TestEnv.adminToken()).forceRelease("default", key("c10-free")));
            LockHeldException held = assertOneRequest(counter, 409, LockHeldException.class,
                    () -> client.lock(key, Duration.ofSeconds(30), Duration.ZERO));
            assertEquals("lock_held", held.code());
            InvalidRequestException invalid = assertOneRequest(counter, 422, InvalidRequestException.class,
                    () -> client.status("bad\u0001key"));
            assertEquals("invalid_key", invalid.code());
            assertTrue(retries.isEmpty(), "nothing was retried");
        }
    }

    private static <E extends LockbrokerException> E assertOneRequest(StandIn counter, int status, Class<E> type,
            Supplier<?> call) {
        int before = counter.seen().size();
        E error = assertThrows(type, call::get);
        assertEquals(status, error.status(), error.getMessage());
        assertEquals(1, counter.seen().size() - before, "exactly one request for the " + status);
        return error;
    }

    /** C11: an acquire whose connection closed after it was read is not sent again; its outcome is reported unknown. */
    @Test
    void c11AcquireNotRepeatedBlindly() throws Exception {
        String key = key("c11");
        try (StandIn dropper = new StandIn(TestEnv.url(), (n, method, path) -> path.endsWith("/acquire")
                ? StandIn.Act.CLOSE : StandIn.Act.FORWARD)) {
            LockbrokerClient client = LockbrokerClient.builder(dropper.url()).apiKey(TestEnv.apiKey())
                    .retry(new RetryPolicy(5, Duration.ofMillis(50), Duration.ofMillis(200))).build();
            OutcomeUnknownException unknown = assertThrows(OutcomeUnknownException.class,
                    () -> client.lock(key, Duration.ofSeconds(30), Duration.ofSeconds(1)));
            assertEquals("outcome_unknown", unknown.code());
            assertEquals(key, unknown.key());
            assertNotNull(unknown.owner(), "names the owner it asked for, to look it up");
            assertEquals(1, dropper.count("/acquire"), "exactly one acquire reached the server");
            assertFalse(client().status(key).held(), "(the stand-in never passed it on)");
        }
    }

    /** C12: the limited tenant's burst meets 429; the client waits the hint and succeeds; with a shorter deadline it fails typed. */
    @Test
    void c12RateLimitHonoured() {
        String key = key("c12");
        List<Retry> retries = new CopyOnWriteArrayList<>();
        LockbrokerClient limited = LockbrokerClient.builder(TestEnv.url()).apiKey(TestEnv.limitedApiKey())
                .retryListener((method, path, n, failure, delay) -> retries.add(new Retry(failure, delay))).build();
        for (int i = 0; i < 6; i++) {
            assertFalse(limited.status(key).held(), "call " + i + " succeeds");
        }
        assertFalse(retries.isEmpty(), "the burst met the rate limit");
        for (Retry retry : retries) {
            RateLimitedException limit = assertInstanceOf(RateLimitedException.class, retry.failure);
            assertEquals(429, limit.status());
            assertEquals("rate_limited", limit.code());
            assertEquals(limit.retryAfter().orElseThrow(), retry.delay, "waited what the broker said");
        }

        LockbrokerClient hurried = limited.withTimeout(Duration.ofMillis(200));
        RateLimitedException refused = null;
        long took = 0;
        for (int i = 0; i < 10 && refused == null; i++) {
            long start = System.nanoTime();
            try {
                hurried.status(key);
            } catch (RateLimitedException e) {
                refused = e;
                took = millisSince(start);
            }
        }
        assertNotNull(refused, "a call whose deadline is shorter than the hint fails");
        assertEquals("rate_limited", refused.code());
        assertTrue(refused.retryAfter().orElseThrow().toMillis() > 0, "carries retry_after_ms");
        assertTrue(took <= 200 + 250, "failed by its deadline: " + took + " ms");
    }

    private static void assertBetween(Duration d, Duration low, Duration high, String what) {
        assertTrue(d.compareTo(low) >= 0 && d.compareTo(high) <= 0, what + ": " + d);
    }
}
