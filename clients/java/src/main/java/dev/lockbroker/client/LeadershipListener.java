package dev.lockbroker.client;

/**
 * Told when a {@link Campaign} wins or loses the leadership. Both are
 * called on the campaign's own thread, one at a time and in order; a
 * callback that throws is logged and the campaign goes on.
 */
public interface LeadershipListener {
    /**
     * This candidate leads now. Start the leader's work (on another thread,
     * or by setting a flag the work watches), fenced with
     * {@link Leadership#term()}.
     */
    void elected(Leadership leadership);

    /**
     * This candidate no longer leads: the lease was lost (the campaign then
     * stands again), or the campaign is resigning. Stop the leader's work:
     * on a resignation this is called before the leadership is given up, so
     * the next leader's work never overlaps this one's.
     */
    void revoked(Leadership leadership);
}
