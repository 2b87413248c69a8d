package dev.lockbroker.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.security.KeyPairGenerator;
import java.security.PrivateKey;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.junit.jupiter.api.Test;

/** The pure parts, without a broker: JSON, SSE, backoff, error mapping, keys, URLs, PEM keys. */
class UnitTest {
    @Test
    void jsonRoundTripsWhatTheApiSends() throws Exception {
        String text = "{\"key\":\"a/b \\\"q\\\" \\u00e9\\ud83d\\ude00\",\"token\":42,\"big\":18446744073709551615,"
                + "\"f\":30000.0,\"ok\":true,\"none\":null,\"list\":[1,{\"x\":[]}],\"e\":-1.5e3}";
        @SuppressWarnings("unchecked")
        Map<String, Object> parsed = (Map<String, Object>) Json.parse(text);
        assertEquals("a/b \"q\" \u00e9\ud83d\ude00", parsed.get("key"));
        assertEquals(42L, parsed.get("token"));
        assertEquals(new BigInteger("18446744073709551615"), parsed.get("big"));
        assertEquals(-1500.0, parsed.get("e"));
        assertNull(parsed.get("none"));
        assertEquals(List.of("key", "token", "big", "f", "ok", "none", "list", "e"), new ArrayList<>(parsed.keySet()));
        assertEquals(30000L, Fields.of(parsed).number("f"), "whole-number floats are numbers");
        assertEquals(parsed, Json.parse(Json.write(parsed)));

        Map<String, Object> body = new LinkedHashMap<>();
        body.put("owner", "w\n\t\u0001");
        body.put("wait_ms", 0L);
        body.put("keys", List.of("a", "b"));
        assertEquals("{\"owner\":\"w\\n\\t\\u0001\",\"wait_ms\":0,\"keys\":[\"a\",\"b\"]}", Json.write(body));

        for (String bad : new String[] {"", "{", "{\"a\":}", "[1,]", "01", "{\"a\":1}x", "\"\u0001\"", "tru",
            "[".repeat(Json.MAX_DEPTH + 2)}) {
            assertThrows(Json.JsonException.class, () -> Json.parse(bad), bad);
        }
    }

    @Test
    void fieldsRefuseAnswersThatAreNotTheApi() throws Exception {
        Fields f = Fields.of(Json.parse("{\"token\":\"7\",\"at\":\"yesterday\"}"));
        assertThrows(UnexpectedResponseException.class, () -> f.number("token"));
        assertThrows(UnexpectedResponseException.class, () -> f.string("missing"));
        assertThrows(UnexpectedResponseException.class, () -> f.optInstant("at"));
        assertThrows(UnexpectedResponseException.class, () -> Fields.of(List.of()));
    }

    @Test
    void sseEventsSplitAnywhereAreReassembled() throws Exception {
        byte[] wire = (": keep-alive\n\nid: 7\nevent: granted\ndata: {\"a\":1}\n\nevent: leader\r\ndata: x\r\n"
                + "data: y\r\n\r\ndata: plain\r\r").getBytes(StandardCharsets.UTF_8);
        for (int split = 0; split < wire.length; split++) {
            SseParser parser = new SseParser();
            List<SseParser.RawEvent> got = new ArrayList<>(parser.feed(Arrays.copyOfRange(wire, 0, split), split));
            byte[] rest = Arrays.copyOfRange(wire, split, wire.length);
            got.addAll(parser.feed(rest, rest.length));
            assertEquals(3, got.size(), "split at " + split);
            assertEquals("granted", got.get(0).name);
            assertEquals("7", got.get(0).id);
            assertEquals("{\"a\":1}", got.get(0).data);
            assertEquals("leader", got.get(1).name);
            assertNull(got.get(1).id, "an id is its own event's");
            assertEquals("x\ny", got.get(1).data);
            assertEquals("message", got.get(2).name);
            assertEquals("plain", got.get(2).data);
        }
        SseParser parser = new SseParser();
        byte[] huge = new byte[SseParser.MAX_EVENT_BYTES + 10];
        Arrays.fill(huge, (byte) 'x');
        assertThrows(SseParser.TooLongException.class, () -> parser.feed(huge, huge.length));
    }

    @Test
    void backoffGrowsWithJitterWithinBounds() {
        RetryPolicy policy = new RetryPolicy(10, Duration.ofMillis(100), Duration.ofSeconds(1));
        Set<Duration> firsts = new HashSet<>();
        for (int i = 0; i < 200; i++) {
            Duration first = policy.delay(1);
            assertTrue(first.toMillis() >= 50 && first.toMillis() <= 100, first.toString());
            firsts.add(first);
            Duration third = policy.delay(3);
            assertTrue(third.toMillis() >= 200 && third.toMillis() <= 400, third.toString());
            for (int retry = 1; retry <= 64; retry++) {
                assertTrue(policy.delay(retry).compareTo(Duration.ofSeconds(1)) <= 0);
            }
        }
        assertTrue(firsts.size() > 50, "jittered: " + firsts.size() + " distinct delays of 200");
        assertThrows(IllegalArgumentException.class, () -> new RetryPolicy(0, Duration.ZERO, Duration.ZERO));
    }

    @Test
    void errorAnswersBecomeTypedExceptions() {
        assertRefusal(409, "{\"error\":{\"code\":\"lock_held\",\"message\":\"m\",\"retry_after_ms\":120}}",
                LockHeldException.class, "lock_held", Duration.ofMillis(120));
        assertRefusal(409, "{\"error\":{\"code\":\"semaphore_full\",\"message\":\"m\"}}", LockHeldException.class,
                "semaphore_full", null);
        assertRefusal(409, "{\"error\":{\"code\":\"lease_lost\",\"message\":\"m\"}}", LeaseLostException.class,
                "lease_lost", null);
        assertRefusal(409, "{\"error\":{\"code\":\"permits_mismatch\",\"message\":\"m\"}}", ConflictException.class,
                "permits_mismatch", null);
        assertRefusal(429, "{\"error\":{\"code\":\"rate_limited\",\"message\":\"m\",\"retry_after_ms\":500}}",
                RateLimitedException.class, "rate_limited", Duration.ofMillis(500));
        assertRefusal(422, "{\"error\":{\"code\":\"invalid_key\",\"message\":\"m\"}}",
                InvalidRequestException.class, "invalid_key", null);
        assertRefusal(401, "{\"error\":{\"code\":\"unauthenticated\",\"message\":\"m\"}}",
                AuthenticationException.class, "unauthenticated", null);
        assertRefusal(500, "{\"error\":{\"code\":\"policy_error\",\"message\":\"m\"}}", ServerException.class,
                "policy_error", null);
        // Not the envelope: by the status; Retry-After in whole seconds.
        assertRefusal(503, "<html>busy</html>", UnavailableException.class, "unavailable", null);
        LockbrokerException proxy = Calls.refusal(429, "nope".getBytes(StandardCharsets.UTF_8), "2");
        assertInstanceOf(RateLimitedException.class, proxy);
        assertEquals(Duration.ofSeconds(2), proxy.retryAfter().orElseThrow());
        // A deadlock carries its cycle, typed.
        assertRefusal(409, "{\"error\":{\"code\":\"deadlock\",\"message\":\"m\",\"cycle\":["
                + "{\"session\":\"s1\",\"owner\":\"o1\",\"kind\":\"lock\",\"storage_key\":\"k1\"},"
                + "{\"session\":\"s2\",\"owner\":\"o2\",\"kind\":\"semaphore\",\"storage_key\":\"k2\"}]}}",
                DeadlockException.class, "deadlock", null);
        DeadlockException deadlock = (DeadlockException) Calls.refusal(409, ("{\"error\":{\"code\":\"deadlock\","
                + "\"message\":\"m\",\"cycle\":[{\"session\":\"s1\",\"owner\":\"o1\",\"kind\":\"lock\","
                + "\"storage_key\":\"k1\"}]}}").getBytes(StandardCharsets.UTF_8), null);
        assertEquals(List.of(new CycleStep("s1", "o1", "lock", "k1")), deadlock.cycle());
        // A code this client does not know still gets its status's class.
        assertRefusal(404, "{\"error\":{\"code\":\"gone_fishing\",\"message\":\"m\"}}", NotFoundException.class,
                "gone_fishing", null);
    }

    private static void assertRefusal(int status, String body, Class<? extends LockbrokerException> type,
            String code, Duration retryAfter) {
        LockbrokerException e = Calls.refusal(status, body.getBytes(StandardCharsets.UTF_8), null);
        assertInstanceOf(type, e, body);
        assertEquals(status, e.status());
        assertEquals(code, e.code());
        assertEquals(retryAfter, e.retryAfter().orElse(null));
    }

    @Test
    void keysAreOneSegmentAndUrlsAreChecked() {
        assertEquals("a%2Fb%20c", Transport.segment("a/b c"));
        assertEquals("job-1_x.y~", Transport.segment("job-1_x.y~"));
        assertEquals("%E2%9C%93", Transport.segment("\u2713"));
        assertEquals("http://h:1", Transport.checkUrl("http://h:1/"));
        assertEquals("https://h/prefix", Transport.checkUrl("https://h/prefix/"));
        for (String bad : new String[] {"ftp://x", "127.0.0.1:7420", "http://", "http://h?x=1", ""}) {
            assertThrows(IllegalArgumentException.class, () -> Transport.checkUrl(bad), bad);
        }
    }

    @Test
    void ownersAreUniqueAndCarryTheIdentity() {
        String a = Owners.unique("host:1");
        String b = Owners.unique("host:1");
        assertTrue(a.startsWith("host:1:") && !a.equals(b));
        assertTrue(!Owners.hostName().isEmpty());
    }

    /** PKCS#1 (OpenSSL 1.x's genrsa) is wrapped into the PKCS#8 the JDK reads: the same key as its own PKCS#8. */
    @Test
    void rsaPkcs1KeysAreWrappedIntoPkcs8() throws Exception {
        KeyPairGenerator generator = KeyPairGenerator.getInstance("RSA");
        generator.initialize(2048);
        PrivateKey key = generator.generateKeyPair().getPrivate();
        byte[] pkcs8 = key.getEncoded();
        // PKCS#8 = SEQUENCE { version, algorithm, OCTET STRING pkcs1 }: the PKCS#1 key is its last element.
        byte[] pkcs1 = lastOctetString(pkcs8);
        assertArrayEquals(pkcs8, Pem.rsaPkcs1ToPkcs8(pkcs1));

        java.nio.file.Path file = java.nio.file.Files.createTempFile("lb-key", ".pem");
        try {
            String pem = "-----BEGIN RSA PRIVATE KEY-----\n"
                    + java.util.Base64.getMimeEncoder(64, "\n".getBytes(StandardCharsets.US_ASCII))
                            .encodeToString(pkcs1)
                    + "\n-----END RSA PRIVATE KEY-----\n";
            java.nio.file.Files.writeString(file, pem);
            assertArrayEquals(pkcs8, Pem.privateKey(file).getEncoded());
        } finally {
            java.nio.file.Files.delete(file);
        }
    }

    /** The content of the last OCTET STRING of a DER SEQUENCE's top level. */
    private static byte[] lastOctetString(byte[] der) {
        int at = 1;
        at += lengthBytes(der, at);
        byte[] last = null;
        while (at < der.length) {
            int tag = der[at] & 0xff;
            int lenAt = at + 1;
            int len = length(der, lenAt);
            int start = lenAt + lengthBytes(der, lenAt);
            if (tag == 0x04) {
                last = Arrays.copyOfRange(der, start, start + len);
            }
            at = start + len;
        }
        return last;
    }

    private static int lengthBytes(byte[] der, int at) {
        int first = der[at] & 0xff;
        return first < 0x80 ? 1 : 1 + (first & 0x7f);
    }

    private static int length(byte[] der, int at) {
        int first = der[at] & 0xff;
        if (first < 0x80) {
            return first;
        }
        int n = 0;
        for (int i = 1; i <= (first & 0x7f); i++) {
            n = (n << 8) | (der[at + i] & 0xff);
        }
        return n;
    }
}
