package dev.lockbroker.client;

/**
 * The lease an admin force-release ended.
 *
 * @param tenant the tenant
 * @param key the key as sent
 * @param storageKey its storage key
 * @param owner the holder whose lease was ended
 * @param token the ended lease's token (the next grant's is greater)
 * @param handedOff true when the key went straight to a queued waiter
 */
public record ForceReleased(String tenant, String key, String storageKey, String owner, long token,
        boolean handedOff) {
    static ForceReleased from(Fields f) {
        return new ForceReleased(f.string("tenant"), f.string("key"), f.string("storage_key"), f.string("owner"),
                f.number("token"), f.bool("handed_off"));
    }
}
