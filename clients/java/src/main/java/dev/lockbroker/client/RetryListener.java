package dev.lockbroker.client;

import java.time.Duration;

/**
 * Told of each retry a call makes, before it waits (for metrics and logs;
 * the exceptions carry no secrets). Called on the calling thread: keep it
 * quick.
 */
@FunctionalInterface
public interface RetryListener {
    /**
     * @param method the HTTP method
     * @param path the request path (keys percent-encoded)
     * @param retry 1 for the first retry
     * @param failure why the previous try failed ({@link UnavailableException},
     *     {@link RateLimitedException}, {@link ConnectionException})
     * @param delay how long the call waits before the retry
     */
    void retrying(String method, String path, int retry, LockbrokerException failure, Duration delay);

    /** A listener that does nothing. */
    RetryListener NONE = (method, path, retry, failure, delay) -> { };
}
