package dev.lockbroker.client;

import java.time.Duration;
import java.util.List;
import java.util.Optional;

/**
 * Every failure of a client call. Unchecked, like the JDK's own
 * {@code UncheckedIOException}: a caller catches the subclass it can act
 * on ({@link LockHeldException}, {@link DeadlockException}, {@link LeaseLostException},
 * {@link RateLimitedException}, {@link UnavailableException},
 * {@link ConnectionException}, ...) and lets the rest propagate.
 *
 * <p>{@link #code()} is the broker's stable error code when the broker
 * answered ({@code lock_held}, {@code lease_lost}, ...; see the API's
 * {@code ErrorCode}), or one of this client's own when it did not
 * ({@code unreachable}, {@code tls}, {@code timeout},
 * {@code outcome_unknown}, {@code cancelled}, {@code unexpected_response}).
 * Match on codes and types, never on messages. A code this client does not
 * know (added by a newer broker) still gets the class its HTTP status
 * implies.
 */
public class LockbrokerException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String code;
    private final transient Duration retryAfter;

    /**
     * @param status the HTTP status, 0 when no answer came
     * @param code the broker's error code, or this client's own
     * @param message what happened, for people
     * @param retryAfter the broker's hint of when to try again, or null
     * @param cause the underlying failure, or null
     */
    public LockbrokerException(int status, String code, String message, Duration retryAfter, Throwable cause) {
        super(message, cause);
        this.status = status;
        this.code = code;
        this.retryAfter = retryAfter;
    }

    /** The HTTP status of the broker's answer; 0 when there was no answer. */
    public int status() {
        return status;
    }

    /** The stable error code (the broker's, or this client's own when the broker did not answer). */
    public String code() {
        return code;
    }

    /**
     * The broker's {@code retry_after_ms} (or {@code Retry-After}) hint: when
     * trying again may succeed ({@code lock_held}, {@code semaphore_full},
     * {@code rate_limited}, {@code unavailable}, ...).
     */
    public Optional<Duration> retryAfter() {
        return Optional.ofNullable(retryAfter);
    }

    /** True when the broker answered (and refused); false when no answer came. */
    public boolean answered() {
        return status != 0;
    }

    @Override
    public String getMessage() {
        String base = code + (status != 0 ? " (" + status + ")" : "") + ": " + super.getMessage();
        return retryAfter == null ? base : base + " [retry after " + retryAfter.toMillis() + " ms]";
    }

    /**
     * The exception for an error answer of the broker, by its code, else by
     * its status.
     */
    static LockbrokerException fromAnswer(int status, String code, String message, Duration retryAfter) {
        return fromAnswer(status, code, message, retryAfter, List.of());
    }

    /** {@link #fromAnswer(int, String, String, Duration)}, with a {@code deadlock}'s cycle. */
    static LockbrokerException fromAnswer(int status, String code, String message, Duration retryAfter,
            List<CycleStep> cycle) {
        switch (code) {
            case "lock_held":
            case "semaphore_full":
                return new LockHeldException(status, code, message, retryAfter);
            case "lease_lost":
                return new LeaseLostException(status, code, message, null);
            case "deadlock":
                return new DeadlockException(status, code, message, retryAfter, cycle);
            default:
                break;
        }
        switch (status) {
            case 400: case 405: case 413: case 414: case 422: case 431:
                return new InvalidRequestException(status, code, message);
            case 401: case 403:
                return new AuthenticationException(status, code, message);
            case 404:
                return new NotFoundException(status, code, message);
            case 409:
                return new ConflictException(status, code, message, retryAfter);
            case 429:
                return new RateLimitedException(status, code, message, retryAfter);
            case 503:
                return new UnavailableException(status, code, message, retryAfter, null);
            default:
                return status >= 500
                        ? new ServerException(status, code, message, retryAfter)
                        : new LockbrokerException(status, code, message, retryAfter, null);
        }
    }
}
