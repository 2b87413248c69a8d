package dev.lockbroker.client;

/** A held semaphore permit: a {@link Lease} of one {@link #slot()}, with its own fencing token. */
public final class Permit extends Lease {
    private final int slot;
    private final int permits;

    Permit(Holding holding, Fields grant) {
        super(holding, grant);
        this.slot = (int) grant.number("slot");
        this.permits = (int) grant.number("permits");
    }

    /** The slot held: 0 to {@link #permits()} - 1. */
    public int slot() {
        return slot;
    }

    /** The semaphore's size. */
    public int permits() {
        return permits;
    }
}
