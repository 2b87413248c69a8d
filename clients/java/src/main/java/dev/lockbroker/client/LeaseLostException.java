package dev.lockbroker.client;

/**
 * A lease is gone: the broker answered {@code 409 lease_lost} (the token is
 * not the current grant: expired, force-released, re-granted), or a held
 * {@link Lease} declared itself lost (code {@code lease_lost}, status 0)
 * because no renewal was confirmed before it would have run out; the
 * failure that led there is the cause.
 */
public class LeaseLostException extends LockbrokerException {
    private static final long serialVersionUID = 1L;

    LeaseLostException(int status, String code, String message, Throwable cause) {
        super(status, code, message, null, cause);
    }
}
