package dev.lockbroker.client;

import static org.junit.jupiter.api.Assertions.fail;

import java.nio.file.Path;
import java.time.Duration;
import java.util.UUID;

/**
 * What the harness ({@code tests/java_client.rs}, which starts the brokers
 * of {@code clients/CONFORMANCE.md}) hands the suite. A variable that is
 * unset fails the test that needs it, saying so: the suite never skips.
 */
final class TestEnv {
    private TestEnv() {
    }

    /** The variable {@code name}, or a failed test. */
    static String require(String name) {
        String value = System.getenv(name);
        if (value == null || value.isBlank()) {
            fail(name + " is unset: run this suite through tests/java_client.rs "
                    + "(cargo test -p lockbroker-tests --test java_client), which starts the brokers it needs");
        }
        return value;
    }

    static String url() {
        return require("LOCKBROKER_URL");
    }

    static String apiKey() {
        return require("LOCKBROKER_API_KEY");
    }

    static String otherApiKey() {
        return require("LOCKBROKER_OTHER_API_KEY");
    }

    static String limitedApiKey() {
        return require("LOCKBROKER_LIMITED_API_KEY");
    }

    static String adminToken() {
        return require("LOCKBROKER_ADMIN_TOKEN");
    }

    static String tlsUrl() {
        return require("LOCKBROKER_TLS_URL");
    }

    static Path file(String name) {
        return Path.of(require(name));
    }

    /** A client of the plain broker with tenant {@code default}'s key. */
    static LockbrokerClient client() {
        return LockbrokerClient.builder(url()).apiKey(apiKey()).build();
    }

    /** A key no other test (nor another run's suite) uses: {@code java/<what>/<random>}. */
    static String key(String what) {
        return "java/" + what + "/" + UUID.randomUUID().toString().substring(0, 8);
    }

    /** Waits until {@code condition} holds, polling; fails saying {@code what} if it does not within {@code limit}. */
    static void eventually(Duration limit, String what, java.util.function.BooleanSupplier condition) {
        long end = System.nanoTime() + limit.toNanos();
        while (true) {
            if (condition.getAsBoolean()) {
                return;
            }
            if (System.nanoTime() > end) {
                fail("not within " + limit + ": " + what);
            }
            try {
                Thread.sleep(20);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                fail("interrupted while waiting for: " + what);
            }
        }
    }

    /** Milliseconds since {@code startNanos}. */
    static long millisSince(long startNanos) {
        return (System.nanoTime() - startNanos) / 1_000_000;
    }
}
