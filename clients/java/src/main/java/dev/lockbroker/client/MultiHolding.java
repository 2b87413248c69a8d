package dev.lockbroker.client;

import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.stream.Collectors;

/**
 * Several locks held as one lease ({@code /v1/multilock}): renewed all or
 * none, released together. Its token is the first key's (storage-key
 * order); each key's own is in {@link MultiLease#tokens()}.
 */
final class MultiHolding implements Holding {
    private final Calls calls;

    MultiHolding(Calls calls) {
        this.calls = calls;
    }

    @Override
    public String describe(Fields grant) {
        return "multilock " + key(grant);
    }

    /** The keys, comma-separated. */
    @Override
    public String key(Fields grant) {
        return grant.objects("locks").stream().map(l -> l.string("key")).collect(Collectors.joining(","));
    }

    @Override
    public String owner(Fields grant) {
        return grant.string("owner");
    }

    @Override
    public long token(Fields grant) {
        List<Fields> locks = grant.objects("locks");
        return locks.isEmpty() ? 0 : locks.get(0).number("token");
    }

    @Override
    public Duration ttl(Fields grant) {
        return Duration.ofMillis(grant.number("ttl_ms"));
    }

    /** Every key of the grant with its token. */
    static List<Map<String, Object>> held(Fields grant) {
        return grant.objects("locks").stream().map(l -> {
            Map<String, Object> key = new LinkedHashMap<>();
            key.put("key", l.string("key"));
            key.put("token", l.number("token"));
            return key;
        }).collect(Collectors.toList());
    }

    @Override
    public CompletableFuture<Fields> renew(Fields grant, Duration timeout) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("owner", owner(grant));
        body.put("ttl_ms", grant.number("ttl_ms"));
        body.put("locks", held(grant));
        return calls.once("POST", "/v1/multilock/renew", body, timeout);
    }

    @Override
    public void release(Fields grant) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("owner", owner(grant));
        body.put("locks", held(grant));
        Fields answer = calls.json(Calls.Call.post("/v1/multilock/release", body).release(key(grant), owner(grant)));
        // The keys still held were released; a key whose token no longer held
        // it means the work under this lease may have overlapped another holder's.
        List<String> lost = answer.objects("locks").stream().filter(l -> l.has("lost") && l.bool("lost"))
                .map(l -> l.string("key")).collect(Collectors.toList());
        if (!lost.isEmpty()) {
            throw new LeaseLostException(200, "lease_lost", "released, but these keys were no longer held: "
                    + String.join(", ", lost), null);
        }
    }
}
