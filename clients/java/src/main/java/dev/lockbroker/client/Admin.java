package dev.lockbroker.client;

/**
 * The admin calls ({@code /v1/admin}), with the broker's admin token; from
 * {@link LockbrokerClient#admin(String)}.
 */
public final class Admin {
    private final Calls calls;

    Admin(Calls calls) {
        this.calls = calls;
    }

    /**
     * Ends the live lease of {@code tenant}'s lock {@code key}, whoever holds
     * it ({@code POST /v1/admin/tenants/{tenant}/locks/{key}/release}). The
     * next grant gets a new token; a queued waiter gets the lock at once.
     *
     * @return the lease that was ended
     * @throws NotFoundException nobody holds it, or no such tenant
     * @throws AuthenticationException not the admin token
     */
    public ForceReleased forceRelease(String tenant, String key) {
        String path = "/v1/admin/tenants/" + Transport.segment(tenant) + "/locks/" + Transport.segment(key)
                + "/release";
        Calls.Call call = Calls.Call.post(path, null).release(key, null);
        return ForceReleased.from(calls.json(call));
    }

    /**
     * One page of {@code tenant}'s live leases of {@code kind}
     * ({@code GET /v1/admin/tenants/{tenant}/{kind}}), as
     * {@link LockbrokerClient#list} lists one's own.
     */
    public <S> Page<S> list(String tenant, Kind<S> kind, String prefix, Integer limit, String cursor) {
        return Listing.page(calls, "/v1/admin/tenants/" + Transport.segment(tenant) + "/" + kind.path, kind, prefix,
                limit, cursor);
    }
}
