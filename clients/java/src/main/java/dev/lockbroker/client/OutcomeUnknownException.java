package dev.lockbroker.client;

/**
 * An acquire (or a release) was sent and its connection broke before the
 * answer came (code {@code outcome_unknown}): the broker may have carried it
 * out. The client does not send it again, since a second acquire of the same
 * owner would re-enter the lease the first one may have got. If it was
 * granted, the lease ends by its TTL; {@link #key()} and {@link #owner()}
 * let the caller look with a status call.
 */
public class OutcomeUnknownException extends ConnectionException {
    private static final long serialVersionUID = 1L;

    private final String key;
    private final String owner;

    OutcomeUnknownException(String key, String owner, String message, Throwable cause) {
        super("outcome_unknown", message, cause);
        this.key = key;
        this.owner = owner;
    }

    /** The key (or keys, comma-separated) that was asked for. */
    public String key() {
        return key;
    }

    /** The owner (or candidate) it was asked for. */
    public String owner() {
        return owner;
    }
}
