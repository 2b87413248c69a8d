package dev.lockbroker.client;

import java.util.List;
import java.util.function.Function;

/**
 * A kind of lease the broker serves: {@link #LOCK}, {@link #SEMAPHORE},
 * {@link #RWLOCK}, {@link #ELECTION}. Every kind is read through the same
 * calls ({@link LockbrokerClient#status(Kind, String)},
 * {@link LockbrokerClient#list}, {@link LockbrokerClient#listAll},
 * {@link LockbrokerClient#history(Kind, String, int)}), and held through the
 * same {@link Lease}, as kube-rs serves every Kubernetes kind through one
 * {@code Api<K>}: a kind adds only what is its own (its URL segment, its
 * status type, the names of its fields).
 *
 * @param <S> the kind's status type
 */
public final class Kind<S> {
    /** Locks: one holder at a time, re-entrant for the same owner. */
    public static final Kind<LockStatus> LOCK = new Kind<>("locks", "acquire", "release", "key", "owner", "owner",
            "token", List.of(), "lock_held", true, LockStatus::from);
    /** Semaphores: up to {@code permits} holders at once, each in its own slot. */
    public static final Kind<SemaphoreStatus> SEMAPHORE = new Kind<>("semaphores", "acquire", "release", "key",
            "owner", "owner", "token", List.of("slot"), "semaphore_full", true, SemaphoreStatus::from);
    /** Reader-writer locks: many readers or one writer. */
    public static final Kind<RwLockStatus> RWLOCK = new Kind<>("rwlocks", "acquire", "release", "key", "owner",
            "owner", "token", List.of(), "lock_held", true, RwLockStatus::from);
    /** Leader elections: one leader at a time; its token is the term. */
    public static final Kind<ElectionStatus> ELECTION = new Kind<>("elections", "campaign", "resign", "name",
            "candidate", "leader", "term", List.of(), "lock_held", false, ElectionStatus::from);

    /** The URL segment: {@code /v1/{path}/{key}}. */
    final String path;
    final String acquireVerb;
    final String releaseVerb;
    /** The grant's field naming the key. */
    final String grantKey;
    /** The request's field naming the holder. */
    final String ownerField;
    /** The grant's field naming the holder. */
    final String grantOwner;
    /** The field of the fencing token, in grants and requests. */
    final String tokenField;
    /** Further fields of a grant that name it in renewals and releases (a semaphore's slot). */
    final List<String> idFields;
    /** The refusal that means "taken now". */
    final String busyCode;
    final boolean recorded;
    final Function<Fields, S> status;

    private Kind(String path, String acquireVerb, String releaseVerb, String grantKey, String ownerField,
            String grantOwner, String tokenField, List<String> idFields, String busyCode, boolean recorded,
            Function<Fields, S> status) {
        this.path = path;
        this.acquireVerb = acquireVerb;
        this.releaseVerb = releaseVerb;
        this.grantKey = grantKey;
        this.ownerField = ownerField;
        this.grantOwner = grantOwner;
        this.tokenField = tokenField;
        this.idFields = idFields;
        this.busyCode = busyCode;
        this.recorded = recorded;
        this.status = status;
    }

    /** The kind's URL segment ({@code locks}, {@code semaphores}, {@code rwlocks}, {@code elections}). */
    public String path() {
        return path;
    }

    /** Whether the broker keeps a history of this kind's leases (all but elections). */
    public boolean recorded() {
        return recorded;
    }

    /** {@code /v1/{kind}/{key}{action}}. */
    String keyPath(String key, String action) {
        return "/v1/" + path + "/" + Transport.segment(key) + action;
    }

    @Override
    public String toString() {
        return "Kind[" + path + "]";
    }
}
