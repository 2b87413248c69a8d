package dev.lockbroker.client;

/** {@code 401 unauthenticated} or {@code 403 forbidden}: the API key (or admin token) was not accepted. */
public class AuthenticationException extends LockbrokerException {
    private static final long serialVersionUID = 1L;

    AuthenticationException(int status, String code, String message) {
        super(status, code, message, null, null);
    }
}
