package dev.lockbroker.client;

import java.time.Duration;

/**
 * {@code 429}: {@code rate_limited} (the tenant's request rate),
 * {@code quota_exceeded}, {@code too_many_waiters} or
 * {@code too_many_streams}. Calls are retried after the broker's
 * {@link #retryAfter()} while the call's deadline allows; this is thrown
 * when it does not (or when no hint came).
 */
public class RateLimitedException extends LockbrokerException {
    private static final long serialVersionUID = 1L;

    RateLimitedException(int status, String code, String message, Duration retryAfter) {
        super(status, code, message, retryAfter, null);
    }
}
