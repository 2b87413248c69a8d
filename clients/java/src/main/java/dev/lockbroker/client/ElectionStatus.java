package dev.lockbroker.client;

import java.time.Instant;

/**
 * Who leads an election ({@code GET /v1/elections/{name}}, each item of a
 * listing, and each event of {@link LockbrokerClient#observe}).
 *
 * @param name the election's name (in a listing, its storage key)
 * @param storageKey the key the tenant's naming policy mapped it to
 * @param leader the leader; null when nobody leads
 * @param term the current term (the election's fencing token); null when nobody leads
 * @param expiresAt when the leader's lease ends unless renewed; null when nobody leads
 */
public record ElectionStatus(String name, String storageKey, String leader, Long term, Instant expiresAt) {

    static ElectionStatus from(Fields f) {
        String storageKey = f.string("storage_key");
        return new ElectionStatus(f.optString("name") != null ? f.optString("name") : storageKey, storageKey,
                f.optString("leader"), f.optNumber("term"), f.optInstant("expires_at"));
    }

    /** True when somebody leads. */
    public boolean led() {
        return leader != null;
    }
}
