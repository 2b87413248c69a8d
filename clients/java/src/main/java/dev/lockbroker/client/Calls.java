package dev.lockbroker.client;

import java.io.IOException;
import java.io.InputStream;
import java.lang.System.Logger.Level;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Consumer;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * The one place where a call is timed, retried and its answer decoded.
 *
 * <p>Each call has a deadline: its wait (a waiting acquire's
 * {@code wait_ms}) plus the client's timeout. Within it:
 * <ul>
 * <li>{@code 503} and a connection that could not be made (nothing was
 * sent) are tried again after the {@link RetryPolicy}'s jittered,
 * growing delays, at most its attempts;</li>
 * <li>{@code 429} is tried again after the broker's
 * {@code retry_after_ms} (or {@code Retry-After}) when that fits;</li>
 * <li>a connection that broke after the request may have gone out is
 * tried again only for calls that are safe to repeat (reads, renewals); an
 * acquire is never re-sent blindly: its outcome is unknown
 * ({@link OutcomeUnknownException});</li>
 * <li>every other answer is returned or thrown at once: a 4xx is the
 * broker's decision.</li>
 * </ul>
 * A retry that could not start before the deadline is not made: the last
 * failure is thrown by the deadline, not after.
 *
 * <p>An acquire the caller gives up on while it is in flight (the thread
 * was interrupted, or the deadline passed) is not forgotten: its answer is
 * still read, and a grant in it is released ({@link Call#onLateGrant}).
 */
final class Calls {
    private static final System.Logger LOG = System.getLogger("dev.lockbroker.client");

    /** How much longer than the caller waits an acquire's exchange may last, so that a late grant still arrives (and is released). */
    static final Duration LATE_GRANT_GRACE = Duration.ofSeconds(10);

    /** The shortest wait after a 429, whatever its hint says (a hint of 0 must not make a busy loop). */
    static final Duration MIN_RATE_LIMITED_DELAY = Duration.ofMillis(10);

    final Transport transport;
    private final String bearer;
    final RetryPolicy retry;
    final Duration timeout;
    private final RetryListener listener;

    Calls(Transport transport, String bearer, RetryPolicy retry, Duration timeout, RetryListener listener) {
        this.transport = transport;
        this.bearer = bearer;
        this.retry = retry;
        this.timeout = timeout;
        this.listener = listener;
    }

    /** The bearer token sent (never logged). */
    String bearer() {
        return bearer;
    }

    /** The same transport with another bearer token or timeout. */
    Calls with(String bearer, Duration timeout) {
        return new Calls(transport, bearer, retry, timeout, listener);
    }

    /** One call to make: what to send and how it may be repeated. */
    static final class Call {
        final String method;
        final String path;
        Supplier<Object> body;
        Duration wait = Duration.ZERO;
        boolean idempotent = true;
        boolean interruptible = true;
        Consumer<Fields> onLateGrant;
        String key;
        String owner;

        private Call(String method, String path) {
            this.method = method;
            this.path = path;
        }

        static Call get(String path) {
            return new Call("GET", path);
        }

        static Call delete(String path) {
            return new Call("DELETE", path);
        }

        static Call post(String path, Object body) {
            Call call = new Call("POST", path);
            call.body = () -> body;
            return call;
        }

        /** The body made afresh for each try (a waiting acquire asks each time only for what is left of its wait). */
        Call body(Supplier<Object> body) {
            this.body = body;
            return this;
        }

        /** How long the broker may hold the request (a waiting acquire): added to the deadline. */
        Call waiting(Duration wait) {
            this.wait = wait;
            return this;
        }

        /**
         * An acquire: never re-sent once it may have reached the broker, and
         * {@code release} is given a grant that arrives after the caller gave up.
         */
        Call acquire(String key, String owner, Consumer<Fields> release) {
            this.idempotent = false;
            this.key = key;
            this.owner = owner;
            this.onLateGrant = release;
            return this;
        }

        /** A release: not re-sent after a broken connection, and carried out even by an interrupted thread. */
        Call release(String key, String owner) {
            this.idempotent = false;
            this.interruptible = false;
            this.key = key;
            this.owner = owner;
            return this;
        }
    }

    /** Makes {@code call}; its 2xx answer as a JSON object. */
    Fields json(Call call) {
        return decode(exchange(call));
    }

    /** Makes {@code call}; its 2xx answer. */
    Transport.Answer exchange(Call call) {
        long deadline = System.nanoTime() + call.wait.toNanos() + timeout.toNanos();
        return retrying(call, deadline, remaining -> {
            Object body = call.body == null ? null : call.body.get();
            byte[] bytes = body == null ? null : Json.write(body).getBytes(StandardCharsets.UTF_8);
            Duration httpTimeout = call.onLateGrant != null ? remaining.plus(LATE_GRANT_GRACE) : remaining;
            return transport.send(call.method, call.path, bearer, bytes, Map.of(), httpTimeout);
        }, answer -> answer.status / 100 == 2 ? null : refusal(answer.status, answer.body, answer.retryAfterHeader));
    }

    /**
     * Opens a stream ({@code GET}, Server-Sent Events): its 2xx response,
     * whose body the caller reads and closes. Opening is retried as a read
     * is, within the client's timeout.
     */
    HttpResponse<InputStream> openStream(String path, Map<String, String> headers) {
        Call call = Call.get(path);
        long deadline = System.nanoTime() + timeout.toNanos();
        return retrying(call, deadline, remaining -> transport.stream(path, bearer, headers, remaining), response -> {
            if (response.statusCode() / 100 == 2) {
                return null;
            }
            byte[] body;
            try (InputStream in = response.body()) {
                body = in.readNBytes(64 * 1024);
            } catch (IOException e) {
                body = new byte[0];
            }
            return refusal(response.statusCode(), body, response.headers().firstValue("retry-after").orElse(null));
        });
    }

    /**
     * One try, not retried, without blocking: a renewal, whose retries are
     * its lease's to schedule. Completes with the 2xx answer's JSON object,
     * or exceptionally with a {@link LockbrokerException}.
     */
    CompletableFuture<Fields> once(String method, String path, Object body, Duration timeout) {
        byte[] bytes = body == null ? null : Json.write(body).getBytes(StandardCharsets.UTF_8);
        return transport.send(method, path, bearer, bytes, Map.of(), timeout).handle((answer, error) -> {
            if (error != null) {
                Transport.Failure failure = Transport.failure(error);
                throw new CompletionException(unanswered(failure, method, path, true, null, null));
            }
            if (answer.status / 100 != 2) {
                throw new CompletionException(refusal(answer.status, answer.body, answer.retryAfterHeader));
            }
            return decode(answer);
        });
    }

    /**
     * The retry loop of every blocking call: sends with {@code send} (given
     * the time left), judges the answer with {@code refusal} (null: a
     * success), and tries again as the class comment says.
     */
    private <T> T retrying(Call call, long deadline, Function<Duration, CompletableFuture<T>> send,
            Function<T, LockbrokerException> refusal) {
        int failures = 0;
        LockbrokerException previous = null;
        while (true) {
            long remaining = deadline - System.nanoTime();
            if (remaining <= 0) {
                throw previous != null ? previous : new DeadlineExceededException(call.method + " " + call.path
                        + ": no answer within the deadline", null);
            }
            CompletableFuture<T> inFlight = send.apply(Duration.ofNanos(remaining));
            LockbrokerException failure;
            Duration delay;
            try {
                T answer = await(inFlight, remaining, call.interruptible);
                LockbrokerException refused = refusal.apply(answer);
                if (refused == null) {
                    return answer;
                }
                failure = refused;
                if (refused.status() == 503) {
                    failures++;
                    if (failures >= retry.attempts()) {
                        throw refused;
                    }
                    delay = retry.delay(failures);
                    Duration hint = refused.retryAfter().orElse(null);
                    if (hint != null) {
                        delay = max(delay, min(hint, retry.maxDelay()));
                    }
                } else if (refused.status() == 429 && refused.retryAfter().isPresent()) {
                    delay = max(refused.retryAfter().get(), MIN_RATE_LIMITED_DELAY);
                } else {
                    throw refused;
                }
            } catch (InterruptedException e) {
                abandon(inFlight, call);
                Thread.currentThread().interrupt();
                throw new CancelledException(call.method + " " + call.path + " was interrupted"
                        + (call.onLateGrant != null ? " (a grant arriving later is released)" : ""), e);
            } catch (TimeoutException e) {
                abandon(inFlight, call);
                if (previous != null) {
                    // A retry that ran out of time: what made it retry is the news.
                    previous.addSuppressed(e);
                    throw previous;
                }
                throw new DeadlineExceededException(call.method + " " + call.path + ": no answer within the deadline"
                        + (call.onLateGrant != null ? " (a grant arriving later is released)" : ""), e);
            } catch (ExecutionException e) {
                Transport.Failure what = Transport.failure(e);
                failure = unanswered(what, call.method, call.path, call.idempotent, call.key, call.owner);
                if (what.kind == Transport.FailureKind.TIMEOUT && previous != null) {
                    previous.addSuppressed(failure);
                    throw previous;
                }
                boolean repeatable = what.kind == Transport.FailureKind.NOT_SENT
                        || (what.kind == Transport.FailureKind.BROKEN && call.idempotent);
                failures++;
                if (!repeatable || failures >= retry.attempts()) {
                    throw failure;
                }
                delay = retry.delay(failures);
            }
            if (System.nanoTime() + delay.toNanos() >= deadline) {
                throw failure;
            }
            previous = failure;
            listener.retrying(call.method, call.path, failures, failure, delay);
            sleep(delay, call.interruptible);
        }
    }

    /** Waits for {@code future} up to {@code nanos}; an uninterruptible wait sets the interrupt flag again after. */
    private static <T> T await(CompletableFuture<T> future, long nanos, boolean interruptible)
            throws InterruptedException, TimeoutException, ExecutionException {
        if (interruptible) {
            return future.get(nanos, TimeUnit.NANOSECONDS);
        }
        long end = System.nanoTime() + nanos;
        boolean interrupted = false;
        try {
            while (true) {
                try {
                    return future.get(Math.max(0, end - System.nanoTime()), TimeUnit.NANOSECONDS);
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static void sleep(Duration delay, boolean interruptible) {
        long end = System.nanoTime() + delay.toNanos();
        boolean interrupted = false;
        try {
            while (true) {
                long left = end - System.nanoTime();
                if (left <= 0) {
                    return;
                }
                try {
                    TimeUnit.NANOSECONDS.sleep(left);
                } catch (InterruptedException e) {
                    if (interruptible) {
                        Thread.currentThread().interrupt();
                        throw new CancelledException("interrupted while waiting to retry", e);
                    }
                    interrupted = true;
                }
            }
        } finally {
            if (interrupted) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /**
     * The caller stopped waiting for {@code inFlight}: an acquire's answer is
     * still read and a grant in it released; anything else is cancelled.
     */
    private static <T> void abandon(CompletableFuture<T> inFlight, Call call) {
        if (call.onLateGrant == null) {
            inFlight.cancel(true);
            return;
        }
        inFlight.whenComplete((answer, error) -> {
            if (!(answer instanceof Transport.Answer)) {
                return;
            }
            Transport.Answer a = (Transport.Answer) answer;
            if (a.status / 100 != 2) {
                return;
            }
            try {
                call.onLateGrant.accept(decode(a));
            } catch (RuntimeException e) {
                LOG.log(Level.WARNING, "lockbroker: releasing a grant that arrived after its acquire was given up "
                        + "failed (it ends by its TTL): {0}", e.getMessage());
            }
        });
    }

    /** The exception for an exchange that got no answer. */
    private static LockbrokerException unanswered(Transport.Failure failure, String method, String path,
            boolean idempotent, String key, String owner) {
        String what = method + " " + path + ": " + failure.describe();
        switch (failure.kind) {
            case TLS:
                return new TlsException(what, failure.cause);
            case TIMEOUT:
                return new DeadlineExceededException(what, failure.cause);
            case BROKEN:
                if (!idempotent) {
                    return new OutcomeUnknownException(key, owner,
                            what + " (the connection broke after the request was sent; not sent again)",
                            failure.cause);
                }
                return new ConnectionException(what, failure.cause);
            case NOT_SENT:
            default:
                return new ConnectionException(what, failure.cause);
        }
    }

    /** A 2xx body as a JSON object. */
    static Fields decode(Transport.Answer answer) {
        try {
            return Fields.of(Json.parse(answer.text()));
        } catch (Json.JsonException | UnexpectedResponseException e) {
            throw new UnexpectedResponseException(answer.status, "the answer is not the API's JSON: "
                    + e.getMessage() + ": " + clip(answer.text()));
        }
    }

    /** An error answer as an exception: the API's envelope when it is one, else by its status. */
    static LockbrokerException refusal(int status, byte[] body, String retryAfterHeader) {
        String text = new String(body, StandardCharsets.UTF_8);
        String code = status == 503 ? "unavailable" : "http_" + status;
        String message = clip(text);
        Duration retryAfter = null;
        List<CycleStep> cycle = List.of();
        try {
            Fields error = Fields.of(Json.parse(text)).optObject("error");
            if (error != null) {
                if (error.optString("code") != null) {
                    code = error.optString("code");
                }
                message = error.optString("message") != null ? error.optString("message") : "";
                Long ms = error.optNumber("retry_after_ms");
                if (ms != null) {
                    retryAfter = Duration.ofMillis(ms);
                }
                cycle = cycle(error);
            }
        } catch (Json.JsonException | UnexpectedResponseException notTheEnvelope) {
            // Not the API's JSON (a proxy's page): go by the status.
        }
        if (retryAfter == null && retryAfterHeader != null && retryAfterHeader.trim().matches("\\d{1,9}")) {
            retryAfter = Duration.ofSeconds(Long.parseLong(retryAfterHeader.trim()));
        }
        return LockbrokerException.fromAnswer(status, code, message, retryAfter, cycle);
    }

    /** A {@code deadlock}'s cycle; empty when absent or not readable (the code still says deadlock). */
    private static List<CycleStep> cycle(Fields error) {
        try {
            List<CycleStep> steps = new ArrayList<>();
            for (Fields step : error.objects("cycle")) {
                steps.add(CycleStep.from(step));
            }
            return steps;
        } catch (UnexpectedResponseException unreadable) {
            return List.of();
        }
    }

    private static String clip(String text) {
        return text.length() <= 200 ? text : text.substring(0, 200) + "...";
    }

    private static Duration max(Duration a, Duration b) {
        return a.compareTo(b) >= 0 ? a : b;
    }

    private static Duration min(Duration a, Duration b) {
        return a.compareTo(b) <= 0 ? a : b;
    }
}
