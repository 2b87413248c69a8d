package dev.lockbroker.client;

/** {@code 404 not_found}: no such route, tenant, or held lease (an admin force-release of a free key). */
public class NotFoundException extends LockbrokerException {
    private static final long serialVersionUID = 1L;

    NotFoundException(int status, String code, String message) {
        super(status, code, message, null, null);
    }
}
