package dev.lockbroker.client;

import static dev.lockbroker.client.TestEnv.client;
import static dev.lockbroker.client.TestEnv.eventually;
import static dev.lockbroker.client.TestEnv.key;
import static dev.lockbroker.client.TestEnv.millisSince;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/** Transport: CONFORMANCE.md C20 (mutual TLS) and C21 (cancellation). */
class TransportConformanceTest {
    private static final Duration TTL = Duration.ofSeconds(30);

    /** C20: with the CA and the client certificate, calls work; without a certificate, with a stranger's, or without the CA, a typed error. */
    @Test
    void c20Tls() {
        String url = TestEnv.tlsUrl();
        Path ca = TestEnv.file("LOCKBROKER_TEST_CA_FILE");
        Path cert = TestEnv.file("LOCKBROKER_TEST_CLIENT_CERT");
        Path certKey = TestEnv.file("LOCKBROKER_TEST_CLIENT_KEY");
        String key = key("c20");

        // As LOCKBROKER_CA_FILE, LOCKBROKER_CLIENT_CERT and LOCKBROKER_CLIENT_KEY name them.
        LockbrokerClient tls = LockbrokerClient.fromEnv(Map.of("LOCKBROKER_URL", url, "LOCKBROKER_API_KEY",
                TestEnv.apiKey(), "LOCKBROKER_CA_FILE", ca.toString(), "LOCKBROKER_CLIENT_CERT", cert.toString(),
                "LOCKBROKER_CLIENT_KEY", certKey.toString()));
        Lease lease = tls.lock(key, TTL);
        assertEquals(lease.owner(), tls.status(key).owner());
        assertEquals(lease.owner(), client().status(key).owner(), "the same database as the plain broker");
        lease.release();
        assertFalse(tls.status(key).held());

        assertRefused("without a client certificate",
                LockbrokerClient.builder(url).apiKey(TestEnv.apiKey()).tls(ca, null, null));
        assertRefused("with a stranger's certificate", LockbrokerClient.builder(url).apiKey(TestEnv.apiKey())
                .tls(ca, TestEnv.file("LOCKBROKER_TEST_STRANGER_CERT"),
                        TestEnv.file("LOCKBROKER_TEST_STRANGER_KEY")));
        ConnectionException untrusted = assertRefused("without the CA file",
                LockbrokerClient.builder(url).apiKey(TestEnv.apiKey()).tls(null, cert, certKey));
        assertInstanceOf(TlsException.class, untrusted, "the broker's certificate is not trusted");
    }

    /** Fails with a typed connection/TLS error, quickly (not a hang). */
    private static ConnectionException assertRefused(String how, LockbrokerClient.Builder builder) {
        LockbrokerClient client = builder.timeout(Duration.ofSeconds(5)).build();
        long start = System.nanoTime();
        ConnectionException refused = assertThrows(ConnectionException.class, () -> client.status(key("c20")),
                how);
        assertTrue(millisSince(start) < 5000, how + ": refused, not hung (" + millisSince(start) + " ms)");
        assertTrue(refused instanceof TlsException || refused.code().equals("unreachable"),
                how + ": " + refused.getMessage());
        return refused;
    }

    /** C21: an acquire interrupted while it waits leaves no lease behind; the key is free shortly after. */
    @Test
    void c21CancellationLeavesNoLease() throws Exception {
        LockbrokerClient client = client();
        String key = key("c21");
        Lease holder = client.lock(key, TTL);
        AtomicReference<Object> outcome = new AtomicReference<>();
        AtomicBoolean interruptKept = new AtomicBoolean();
        Thread waiter = new Thread(() -> {
            try {
                outcome.set(client.lock(key, TTL, Duration.ofSeconds(20)));
            } catch (RuntimeException e) {
                outcome.set(e);
                interruptKept.set(Thread.currentThread().isInterrupted());
            }
        }, "c21-waiter");
        waiter.start();
        eventually(Duration.ofSeconds(10), "the acquire waits in the broker's queue",
                () -> client.status(key).waiters() >= 1);

        long interrupted = System.nanoTime();
        waiter.interrupt();
        waiter.join(5000);
        assertFalse(waiter.isAlive());
        assertTrue(millisSince(interrupted) < 2000, "the interrupt ended the wait at once");
        assertInstanceOf(CancelledException.class, outcome.get());
        assertTrue(interruptKept.get(), "the thread's interrupt flag is set again");

        // The broker may still hand the abandoned request the lock: the client gives it back.
        holder.release();
        eventually(Duration.ofSeconds(10), "the key is free: nothing left behind", () -> {
            LockStatus status = client.status(key);
            return !status.held() && status.waiters() == 0;
        });
        try (Lease next = client.lock(key, TTL, Duration.ofSeconds(5))) {
            assertTrue(next.token() > holder.token());
        }
    }
}
