package dev.lockbroker.client;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

/**
 * A held lease of one key of any {@link Kind}: renewed at
 * {@code /v1/{kind}/{key}/renew} and released at {@code .../release}
 * (elections: {@code resign}), with a body made of the grant's owner,
 * token and ids (a semaphore's slot).
 */
final class KindHolding implements Holding {
    private final Calls calls;
    private final Kind<?> kind;

    KindHolding(Calls calls, Kind<?> kind) {
        this.calls = calls;
        this.kind = kind;
    }

    @Override
    public String describe(Fields grant) {
        return kind.path + " " + key(grant);
    }

    @Override
    public String key(Fields grant) {
        return grant.string(kind.grantKey);
    }

    @Override
    public String owner(Fields grant) {
        return grant.string(kind.grantOwner);
    }

    @Override
    public long token(Fields grant) {
        return grant.number(kind.tokenField);
    }

    @Override
    public Duration ttl(Fields grant) {
        return Duration.ofMillis(grant.number("ttl_ms"));
    }

    /** The fields that name this grant: its owner, token and ids. */
    private Map<String, Object> naming(Fields grant) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put(kind.ownerField, owner(grant));
        body.put(kind.tokenField, token(grant));
        for (String id : kind.idFields) {
            body.put(id, grant.number(id));
        }
        return body;
    }

    @Override
    public CompletableFuture<Fields> renew(Fields grant, Duration timeout) {
        Map<String, Object> body = naming(grant);
        body.put("ttl_ms", grant.number("ttl_ms"));
        return calls.once("POST", kind.keyPath(key(grant), "/renew"), body, timeout);
    }

    @Override
    public void release(Fields grant) {
        calls.json(Calls.Call.post(kind.keyPath(key(grant), "/" + kind.releaseVerb), naming(grant))
                .release(key(grant), owner(grant)));
    }
}
