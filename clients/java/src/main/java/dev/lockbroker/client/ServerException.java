package dev.lockbroker.client;

import java.time.Duration;

/** A {@code 5xx} other than 503: {@code 500 policy_error} (the tenant's policy trapped or overran its budget). */
public class ServerException extends LockbrokerException {
    private static final long serialVersionUID = 1L;

    ServerException(int status, String code, String message, Duration retryAfter) {
        super(status, code, message, retryAfter, null);
    }
}
