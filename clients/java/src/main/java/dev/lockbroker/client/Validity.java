package dev.lockbroker.client;

/**
 * Whether a token is the live grant of a lock ({@code POST /v1/locks/{key}/validate}):
 * a sequencer check before a protected write. The answer may be stale on
 * arrival; the protected resource should also refuse tokens older than the
 * newest it has seen.
 *
 * @param valid true when the token is the current grant and its lease has not expired
 * @param token the live grant's token; null when nobody holds the lock
 */
public record Validity(boolean valid, Long token) {
    static Validity from(Fields f) {
        return new Validity(f.bool("valid"), f.optNumber("token"));
    }
}
