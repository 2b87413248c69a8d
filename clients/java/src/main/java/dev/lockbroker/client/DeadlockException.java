package dev.lockbroker.client;

import java.time.Duration;
import java.util.List;

/**
 * The broker refused a session's waiting acquire because its wait would
 * close a cycle of sessions waiting for each other: {@code 409 deadlock}.
 * Nothing was queued or granted, and it is not retried (waiting again
 * would deadlock again): release a lease of one of the cycle's sessions,
 * or acquire in another order. {@link #cycle()} names the cycle, the
 * refused wait first.
 */
public class DeadlockException extends LockbrokerException {
    private static final long serialVersionUID = 1L;

    private final transient List<CycleStep> cycle;

    DeadlockException(int status, String code, String message, Duration retryAfter, List<CycleStep> cycle) {
        super(status, code, message, retryAfter, null);
        this.cycle = cycle == null ? List.of() : List.copyOf(cycle);
    }

    /**
     * The cycle the wait would have closed: each step a session (as an
     * owner) waiting for a key the next step's session holds; the last
     * step's key is held by the first's. The first step is the refused
     * wait.
     */
    public List<CycleStep> cycle() {
        return cycle == null ? List.of() : cycle;
    }
}
