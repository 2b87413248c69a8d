package dev.lockbroker.client;

import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.NoRouteToHostException;
import java.net.URI;
import java.net.UnknownHostException;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.channels.UnresolvedAddressException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLException;

/**
 * One HTTP exchange with the broker over {@code java.net.http}: build the
 * request, send it, hand back the status and the body (or the open body of
 * a stream). Deadlines, retries and the meaning of statuses are the
 * caller's ({@link Calls}). Also what a failure means for a retry
 * ({@link #failure}): whether the request may have reached the broker.
 */
final class Transport {
    static final String USER_AGENT = "lockbroker-java/" + LockbrokerClient.VERSION;

    /** {@code scheme://authority[/prefix]}, without a trailing slash. */
    private final String base;
    private final HttpClient http;

    /**
     * @param url the broker's base URL: {@code http(s)://host[:port][/prefix]}
     * @param ssl the TLS settings for https (null: the JDK's defaults)
     * @param connectTimeout how long making a connection may take
     */
    Transport(String url, SSLContext ssl, Duration connectTimeout) {
        this.base = checkUrl(url);
        HttpClient.Builder builder = HttpClient.newBuilder()
                // HTTP/1.1 only: the broker speaks it, and the JDK would
                // otherwise try an h2c upgrade on plain http.
                .version(HttpClient.Version.HTTP_1_1)
                .followRedirects(HttpClient.Redirect.NEVER)
                .connectTimeout(connectTimeout);
        if (ssl != null) {
            builder.sslContext(ssl);
        }
        this.http = builder.build();
    }

    /** The base URL, normalised. */
    String base() {
        return base;
    }

    /** What an exchange answered: its status, its body and its {@code Retry-After} header. */
    static final class Answer {
        final int status;
        final byte[] body;
        final String retryAfterHeader;

        Answer(int status, byte[] body, String retryAfterHeader) {
            this.status = status;
            this.body = body;
            this.retryAfterHeader = retryAfterHeader;
        }

        String text() {
            return new String(body, StandardCharsets.UTF_8);
        }
    }

    /**
     * Sends one request; completes with the whole answer, or exceptionally
     * with what {@link #failure} classifies. {@code timeout} bounds the
     * whole exchange (the JDK cancels it past that).
     */
    CompletableFuture<Answer> send(String method, String path, String bearer, byte[] body,
            Map<String, String> headers, Duration timeout) {
        HttpRequest request = request(method, path, bearer, body, headers, timeout);
        return http.sendAsync(request, HttpResponse.BodyHandlers.ofByteArray())
                .thenApply(r -> new Answer(r.statusCode(), r.body(),
                        r.headers().firstValue("retry-after").orElse(null)));
    }

    /**
     * Opens a streaming GET (Server-Sent Events): completes once the status
     * and headers are in; the body is the caller's to read and close.
     * {@code timeout} bounds only the wait for the headers.
     */
    CompletableFuture<HttpResponse<InputStream>> stream(String path, String bearer, Map<String, String> headers,
            Duration timeout) {
        HttpRequest request = request("GET", path, bearer, null, headers, null);
        CompletableFuture<HttpResponse<InputStream>> opened =
                http.sendAsync(request, HttpResponse.BodyHandlers.ofInputStream());
        return opened.orTimeout(Math.max(1, timeout.toMillis()), java.util.concurrent.TimeUnit.MILLISECONDS)
                .whenComplete((response, error) -> {
                    if (error != null) {
                        opened.cancel(true);
                    }
                });
    }

    private HttpRequest request(String method, String path, String bearer, byte[] body, Map<String, String> headers,
            Duration timeout) {
        HttpRequest.Builder builder = HttpRequest.newBuilder(URI.create(base + path))
                .header("Accept", "application/json, text/event-stream")
                .header("User-Agent", USER_AGENT);
        if (timeout != null) {
            builder.timeout(timeout.isZero() || timeout.isNegative() ? Duration.ofMillis(1) : timeout);
        }
        if (bearer != null) {
            builder.header("Authorization", "Bearer " + bearer);
        }
        headers.forEach(builder::header);
        if (body != null) {
            builder.header("Content-Type", "application/json");
            builder.method(method, HttpRequest.BodyPublishers.ofByteArray(body));
        } else {
            builder.method(method, HttpRequest.BodyPublishers.noBody());
        }
        return builder.build();
    }

    /** How an exchange failed, as far as a retry is concerned. */
    enum FailureKind {
        /** The connection could not be made: nothing was sent, any call may be retried. */
        NOT_SENT,
        /** The connection broke after the request may have gone out. */
        BROKEN,
        /** No answer within the exchange's timeout; the request may have gone out. */
        TIMEOUT,
        /** The TLS handshake failed: retrying fails the same way. */
        TLS
    }

    /** A failed exchange: its kind and the JDK's exception. */
    static final class Failure {
        final FailureKind kind;
        final Throwable cause;

        Failure(FailureKind kind, Throwable cause) {
            this.kind = kind;
            this.cause = cause;
        }

        String describe() {
            StringBuilder out = new StringBuilder();
            Throwable t = cause;
            for (int i = 0; t != null && i < 6; i++, t = t.getCause()) {
                String message = t.getMessage();
                if (message != null && !message.isEmpty() && out.indexOf(message) >= 0) {
                    continue; // a wrapper repeating its cause
                }
                if (out.length() > 0) {
                    out.append(": ");
                }
                out.append(t.getClass().getSimpleName());
                if (message != null) {
                    out.append(' ').append(message);
                }
            }
            return out.toString();
        }
    }

    /** What a failed exchange's exception means (the wrappers of futures unwrapped). */
    static Failure failure(Throwable error) {
        Throwable t = unwrap(error);
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (c instanceof SSLException) {
                return new Failure(FailureKind.TLS, t);
            }
        }
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (c instanceof HttpConnectTimeoutException || c instanceof ConnectException
                    || c instanceof UnresolvedAddressException || c instanceof UnknownHostException
                    || c instanceof NoRouteToHostException) {
                return new Failure(FailureKind.NOT_SENT, t);
            }
        }
        if (t instanceof HttpTimeoutException || t instanceof java.util.concurrent.TimeoutException) {
            return new Failure(FailureKind.TIMEOUT, t);
        }
        return new Failure(FailureKind.BROKEN, t);
    }

    private static Throwable unwrap(Throwable t) {
        while ((t instanceof CompletionException || t instanceof ExecutionException) && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    /** True for an exception an exchange's future may fail with ({@link IOException} and its wrappers). */
    static boolean isIo(Throwable t) {
        return unwrap(t) instanceof IOException;
    }

    /**
     * {@code key} as one path segment: every byte of its UTF-8 but RFC 3986's
     * unreserved {@code A-Z a-z 0-9 - . _ ~} percent-encoded, so that
     * {@code a/b} is the key {@code a/b}, not a path.
     */
    static String segment(String key) {
        StringBuilder out = new StringBuilder();
        for (byte b : key.getBytes(StandardCharsets.UTF_8)) {
            int c = b & 0xff;
            if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
                    || c == '-' || c == '.' || c == '_' || c == '~') {
                out.append((char) c);
            } else {
                out.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
                        .append(Character.toUpperCase(Character.forDigit(c & 15, 16)));
            }
        }
        return out.toString();
    }

    /** {@code url} checked ({@code http}/{@code https}, a host, no query or fragment) and without a trailing slash. */
    static String checkUrl(String url) {
        URI uri;
        try {
            uri = new URI(url);
        } catch (Exception e) {
            throw new IllegalArgumentException("not a URL: " + url, e);
        }
        String scheme = uri.getScheme();
        if (scheme == null || !(scheme.equals("http") || scheme.equals("https")) || uri.getHost() == null
                || uri.getRawQuery() != null || uri.getRawFragment() != null) {
            throw new IllegalArgumentException("not an http(s)://host[:port] URL: " + url);
        }
        String trimmed = url;
        while (trimmed.endsWith("/")) {
            trimmed = trimmed.substring(0, trimmed.length() - 1);
        }
        return trimmed;
    }
}
