package dev.lockbroker.client;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Several locks held together (taken all or none, renewed and released as
 * one). {@link #token()} is the first key's in storage-key order; each
 * key's own is {@link #tokenOf(String)}: pass each to what that key protects.
 */
public final class MultiLease extends Lease {
    private final Map<String, Long> tokens;

    MultiLease(Holding holding, Fields grant) {
        super(holding, grant);
        Map<String, Long> byKey = new LinkedHashMap<>();
        for (Fields lock : grant.objects("locks")) {
            byKey.put(lock.string("key"), lock.number("token"));
        }
        this.tokens = Collections.unmodifiableMap(byKey);
    }

    /** The keys, in storage-key order. */
    public List<String> keys() {
        return List.copyOf(tokens.keySet());
    }

    /** Each key (as named) with its fencing token, in storage-key order. */
    public Map<String, Long> tokens() {
        return tokens;
    }

    /** The fencing token of {@code key}. */
    public long tokenOf(String key) {
        Long token = tokens.get(key);
        if (token == null) {
            throw new IllegalArgumentException("not a key of this multi-lock: " + key);
        }
        return token;
    }
}
