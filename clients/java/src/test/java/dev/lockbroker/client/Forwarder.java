package dev.lockbroker.client;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A TCP forwarder to the broker that a test owns (CONFORMANCE.md allows it
 * for C06 and C16): it forwards until told to {@link #cut()} its
 * connections (new ones are forwarded again) or to go {@link #silent()}
 * (connections are held open and nothing is forwarded either way, the way
 * a partition looks to a client).
 */
final class Forwarder implements AutoCloseable {
    private final ServerSocket server;
    private final InetSocketAddress target;
    private final List<Socket> open = new CopyOnWriteArrayList<>();
    private volatile boolean silent;
    private volatile boolean closed;

    /** Forwards a port of its own to the broker at {@code url}. */
    Forwarder(String url) throws IOException {
        URI uri = URI.create(url);
        this.target = new InetSocketAddress(uri.getHost(), uri.getPort());
        this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread acceptor = new Thread(this::accept, "forwarder-accept");
        acceptor.setDaemon(true);
        acceptor.start();
    }

    /** {@code http://127.0.0.1:PORT}: the forwarder. */
    String url() {
        return "http://127.0.0.1:" + server.getLocalPort();
    }

    /** Closes every connection now; later ones are forwarded. */
    void cut() {
        for (Socket socket : open) {
            closeQuietly(socket);
        }
        open.clear();
    }

    /** From now on nothing is forwarded, and connections stay open and silent. */
    void silent() {
        silent = true;
    }

    @Override
    public void close() {
        closed = true;
        closeQuietly(server);
        cut();
    }

    private void accept() {
        while (!closed) {
            try {
                Socket client = server.accept();
                open.add(client);
                if (silent) {
                    continue; // held open, never answered
                }
                Socket broker = new Socket();
                broker.connect(target, 2000);
                open.add(broker);
                pump(client, broker);
                pump(broker, client);
            } catch (IOException e) {
                if (closed) {
                    return;
                }
            }
        }
    }

    private void pump(Socket from, Socket to) {
        Thread thread = new Thread(() -> {
            byte[] buffer = new byte[8192];
            try (InputStream in = from.getInputStream()) {
                OutputStream out = to.getOutputStream();
                int n;
                while ((n = in.read(buffer)) >= 0) {
                    if (silent) {
                        continue; // swallowed
                    }
                    out.write(buffer, 0, n);
                    out.flush();
                }
            } catch (IOException ended) {
                // a side closed
            } finally {
                if (!silent) {
                    closeQuietly(from);
                    closeQuietly(to);
                }
            }
        }, "forwarder-pump");
        thread.setDaemon(true);
        thread.start();
    }

    private static void closeQuietly(java.io.Closeable c) {
        try {
            c.close();
        } catch (IOException ignored) {
            // closing
        }
    }
}
