package dev.lockbroker.client;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Who holds a lease. The broker treats the same owner acquiring a lock it
 * holds as re-entry, so two threads of one process must not share an owner
 * by accident: each acquire gets a fresh owner ({@code host:pid:n}) unless
 * the caller names one.
 */
final class Owners {
    private static final AtomicLong NEXT = new AtomicLong(1);

    private Owners() {
    }

    /** This machine's name: the kernel's host name, else {@code $HOSTNAME}, else {@code localhost}. */
    static String hostName() {
        try {
            String name = Files.readString(Path.of("/proc/sys/kernel/hostname"), StandardCharsets.UTF_8).trim();
            if (!name.isEmpty()) {
                return name;
            }
        } catch (IOException | RuntimeException notLinux) {
            // fall through
        }
        String env = System.getenv("HOSTNAME");
        if (env != null && !env.trim().isEmpty()) {
            return env.trim();
        }
        try {
            return java.net.InetAddress.getLocalHost().getHostName();
        } catch (IOException e) {
            return "localhost";
        }
    }

    /** {@code host:pid}, the default identity of a client. */
    static String defaultIdentity() {
        return hostName() + ":" + ProcessHandle.current().pid();
    }

    /** {@code identity:n}, with {@code n} unique in this process. */
    static String unique(String identity) {
        return identity + ":" + NEXT.getAndIncrement();
    }
}
