package dev.lockbroker.client;

import java.time.Duration;

/**
 * The lease stayed taken for the whole wait: {@code 409 lock_held} (for a
 * lock, a rwlock, a multi-lock, an election) or {@code semaphore_full}.
 * {@link #retryAfter()} carries the tenant's backoff hint. The try forms
 * ({@code tryLock}, {@code tryAcquire}) return an empty {@code Optional}
 * instead of throwing it.
 */
public class LockHeldException extends LockbrokerException {
    private static final long serialVersionUID = 1L;

    LockHeldException(int status, String code, String message, Duration retryAfter) {
        super(status, code, message, retryAfter, null);
    }
}
