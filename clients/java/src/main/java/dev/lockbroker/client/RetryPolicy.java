package dev.lockbroker.client;

import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.ThreadLocalRandom;

/**
 * How a failed call is tried again: on {@code 503 unavailable} (nothing was
 * granted) and on a connection that could not be made (nothing was sent),
 * at most {@link #attempts()} tries in all, with exponential backoff and
 * jitter; after a {@code 429} when the broker's hint fits the call's
 * deadline. Never on any other answer: a 4xx is the broker's decision, not
 * a hiccup. Every wait stays within the call's deadline: a retry that
 * could not start before it is not made, and the last failure is thrown.
 *
 * <p>Immutable; {@link #defaults()} is 4 tries, 100 ms doubling, at most 2 s
 * apart: a broker restart or a database failover of a second or two is
 * ridden out.
 */
public final class RetryPolicy {
    private final int attempts;
    private final Duration baseDelay;
    private final Duration maxDelay;

    /**
     * @param attempts tries in all, the first included (1: never retry)
     * @param baseDelay the delay before the first retry; it doubles with each one
     * @param maxDelay no backoff delay is longer
     */
    public RetryPolicy(int attempts, Duration baseDelay, Duration maxDelay) {
        if (attempts < 1) {
            throw new IllegalArgumentException("attempts must be at least 1");
        }
        this.attempts = attempts;
        this.baseDelay = Objects.requireNonNull(baseDelay, "baseDelay");
        this.maxDelay = Objects.requireNonNull(maxDelay, "maxDelay");
        if (baseDelay.isNegative() || maxDelay.isNegative()) {
            throw new IllegalArgumentException("delays must not be negative");
        }
    }

    /** 4 tries, 100 ms doubling, at most 2 s apart. */
    public static RetryPolicy defaults() {
        return new RetryPolicy(4, Duration.ofMillis(100), Duration.ofSeconds(2));
    }

    /** One try, no retries. */
    public static RetryPolicy never() {
        return new RetryPolicy(1, Duration.ofMillis(100), Duration.ofSeconds(2));
    }

    public int attempts() {
        return attempts;
    }

    public Duration baseDelay() {
        return baseDelay;
    }

    public Duration maxDelay() {
        return maxDelay;
    }

    /**
     * The backoff before retry number {@code retry} (1 for the first):
     * {@code baseDelay * 2^(retry-1)}, capped at {@code maxDelay}, then
     * jittered to between half and all of it, so that clients that failed
     * together do not come back together.
     */
    public Duration delay(int retry) {
        long base = baseDelay.toNanos();
        int shift = Math.min(Math.max(retry - 1, 0), 30);
        long doubled = base > (Long.MAX_VALUE >> shift) ? Long.MAX_VALUE : base << shift;
        long capped = Math.min(doubled, maxDelay.toNanos());
        long half = capped / 2;
        return Duration.ofNanos(half + (half > 0 ? ThreadLocalRandom.current().nextLong(half + 1) : 0));
    }

    @Override
    public String toString() {
        return "RetryPolicy[attempts=" + attempts + ", baseDelay=" + baseDelay + ", maxDelay=" + maxDelay + "]";
    }
}
