package dev.lockbroker.client;

import java.time.Duration;

/**
 * {@code 503 unavailable}: the broker could not do it now (its database
 * is down or slow, it is shutting down, the tenant's policy is loading).
 * Nothing was granted: the broker never reports a grant its database did
 * not commit. Retried with backoff within the call's deadline; thrown when
 * the retries or the deadline ran out.
 */
public class UnavailableException extends LockbrokerException {
    private static final long serialVersionUID = 1L;

    UnavailableException(int status, String code, String message, Duration retryAfter, Throwable cause) {
        super(status, code, message, retryAfter, cause);
    }
}
