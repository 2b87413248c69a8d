package dev.lockbroker.client;

/**
 * The calling thread was interrupted while it waited for the broker (code
 * {@code cancelled}). The thread's interrupt flag is set again, so the
 * interruption is not lost. An acquire cancelled this way leaves no lease
 * behind: if the broker grants it after all, the client releases it.
 */
public class CancelledException extends LockbrokerException {
    private static final long serialVersionUID = 1L;

    CancelledException(String message, Throwable cause) {
        super(0, "cancelled", message, null, cause);
    }
}
