package dev.lockbroker.client;

/**
 * One step of a deadlock's cycle ({@link DeadlockException#cycle()}): a
 * session that, as an owner, waits (or would wait, for the first step) for
 * a key the next step's session holds; the last step's key is held by the
 * first step's session.
 *
 * @param session the waiting session's id
 * @param owner its owner of that wait
 * @param kind {@code lock}, {@code election}, {@code semaphore} or {@code rwlock}
 * @param storageKey the key it waits for (its storage key)
 */
public record CycleStep(String session, String owner, String kind, String storageKey) {
    static CycleStep from(Fields f) {
        return new CycleStep(f.string("session"), f.string("owner"), f.string("kind"), f.string("storage_key"));
    }
}
