package dev.lockbroker.client;

/**
 * The leadership of an election, held: a {@link Lease} whose token is the
 * {@link #term()}. {@link #resign()} (or {@link #close()}) steps down, and
 * the next candidate waiting is elected.
 */
public final class Leadership extends Lease {
    Leadership(Holding holding, Fields grant) {
        super(holding, grant);
    }

    /** The election's name. */
    public String name() {
        return key();
    }

    /** The leading candidate: this one. */
    public String candidate() {
        return owner();
    }

    /** The term: the election's fencing token, greater than every earlier leadership's. */
    public long term() {
        return token();
    }

    /** Steps down now (once); throws as {@link #release()}. */
    public void resign() {
        release();
    }
}
