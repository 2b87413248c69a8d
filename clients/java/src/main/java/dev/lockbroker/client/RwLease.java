package dev.lockbroker.client;

/** A held read or write lease of a reader-writer lock. */
public final class RwLease extends Lease {
    private final String mode;

    RwLease(Holding holding, Fields grant) {
        super(holding, grant);
        this.mode = grant.string("mode");
    }

    /** {@code read} or {@code write}. */
    public String mode() {
        return mode;
    }

    /** True for a read (shared) lease. */
    public boolean isRead() {
        return "read".equals(mode);
    }
}
