package dev.lockbroker.client;

/**
 * The TLS handshake failed (code {@code tls}): the broker's certificate is
 * not trusted (no or the wrong CA file), or the broker refused this
 * client's certificate (none, or one of a CA it does not trust). Never
 * retried: asking again fails the same way.
 */
public class TlsException extends ConnectionException {
    private static final long serialVersionUID = 1L;

    TlsException(String message, Throwable cause) {
        super("tls", message, cause);
    }
}
