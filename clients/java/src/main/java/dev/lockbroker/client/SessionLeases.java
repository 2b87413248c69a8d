package dev.lockbroker.client;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

/**
 * The leases held in one {@link Session} now, so that the session's one
 * lost signal reaches each of them, and its close marks each as released.
 * A lease that joins after the session was lost or closed is lost at once:
 * the broker ended it with the session, or will.
 */
final class SessionLeases {
    private final String session;
    private final Set<Lease> held = new LinkedHashSet<>();
    private LockbrokerException lost;
    private boolean closed;

    SessionLeases(String session) {
        this.session = session;
    }

    void add(Lease lease) {
        LockbrokerException gone;
        synchronized (this) {
            gone = lost != null ? lost
                    : closed ? new LeaseLostException(0, "lease_lost", "session " + session + " was closed", null)
                    : null;
            if (gone == null) {
                held.add(lease);
                return;
            }
        }
        lease.lose(memberLost(lease, gone));
    }

    synchronized void remove(Lease lease) {
        held.remove(lease);
    }

    /** The leases held now. */
    synchronized List<Lease> snapshot() {
        return List.copyOf(held);
    }

    /** The session was lost: so is every lease of it. */
    void loseAll(LockbrokerException reason) {
        List<Lease> leases;
        synchronized (this) {
            if (lost != null) {
                return;
            }
            lost = reason;
            leases = new ArrayList<>(held);
            held.clear();
        }
        // Outside the lock: a lease's lose() takes the lease's own lock, which its release holds while it removes.
        for (Lease lease : leases) {
            lease.lose(memberLost(lease, reason));
        }
    }

    /** The session was closed, which released every lease of it. */
    void endAll() {
        List<Lease> leases;
        synchronized (this) {
            closed = true;
            leases = new ArrayList<>(held);
            held.clear();
        }
        for (Lease lease : leases) {
            lease.endedWithSession();
        }
    }

    private LockbrokerException memberLost(Lease lease, LockbrokerException sessionLost) {
        return new LeaseLostException(sessionLost.status(), "lease_lost", "the lease of " + lease.key()
                + " ended with its session " + session + ": " + sessionLost.getMessage(), sessionLost);
    }
}
