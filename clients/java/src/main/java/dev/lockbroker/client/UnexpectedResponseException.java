package dev.lockbroker.client;

/**
 * The broker (or something in between: a proxy's error page, a truncated
 * body) answered something that is not the API's JSON (code
 * {@code unexpected_response}).
 */
public class UnexpectedResponseException extends LockbrokerException {
    private static final long serialVersionUID = 1L;

    UnexpectedResponseException(int status, String message) {
        super(status, "unexpected_response", message, null, null);
    }
}
