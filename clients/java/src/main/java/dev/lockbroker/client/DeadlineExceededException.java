package dev.lockbroker.client;

/**
 * No answer came within the call's deadline (its wait plus the client's
 * timeout; code {@code timeout}). An acquire given up this way is not
 * forgotten: if its grant arrives later, the client releases it.
 */
public class DeadlineExceededException extends ConnectionException {
    private static final long serialVersionUID = 1L;

    DeadlineExceededException(String message, Throwable cause) {
        super("timeout", message, cause);
    }
}
