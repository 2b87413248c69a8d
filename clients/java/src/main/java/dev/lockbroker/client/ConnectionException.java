package dev.lockbroker.client;

/**
 * No answer came from the broker (code {@code unreachable}, status 0): the
 * connection could not be made, or it broke. Calls that are safe to repeat
 * are retried within their deadline first. See {@link TlsException},
 * {@link OutcomeUnknownException} and {@link DeadlineExceededException}
 * for the particular cases.
 */
public class ConnectionException extends LockbrokerException {
    private static final long serialVersionUID = 1L;

    ConnectionException(String message, Throwable cause) {
        this("unreachable", message, cause);
    }

    ConnectionException(String code, String message, Throwable cause) {
        super(0, code, message, null, cause);
    }
}
