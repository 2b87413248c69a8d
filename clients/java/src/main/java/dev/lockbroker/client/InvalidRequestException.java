package dev.lockbroker.client;

/**
 * The broker refused the request itself: {@code 400 bad_request} (a value
 * out of range, a malformed cursor), {@code 422 invalid_key} (the tenant's
 * naming policy rejected the key), {@code 413}, {@code 414}, {@code 431},
 * {@code 405}. Asking again gets the same answer: never retried.
 */
public class InvalidRequestException extends LockbrokerException {
    private static final long serialVersionUID = 1L;

    InvalidRequestException(int status, String code, String message) {
        super(status, code, message, null, null);
    }
}
