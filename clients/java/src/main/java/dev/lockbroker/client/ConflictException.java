package dev.lockbroker.client;

import java.time.Duration;

/**
 * A {@code 409} other than {@code lock_held}, {@code deadlock} and {@code lease_lost}: for
 * example {@code permits_mismatch} (a semaphore asked with another size than
 * it has).
 */
public class ConflictException extends LockbrokerException {
    private static final long serialVersionUID = 1L;

    ConflictException(int status, String code, String message, Duration retryAfter) {
        super(status, code, message, retryAfter, null);
    }
}
