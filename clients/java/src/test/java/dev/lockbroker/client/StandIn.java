package dev.lockbroker.client;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * A small HTTP server a test owns in front of the broker, of the kinds
 * CONFORMANCE.md allows (C09, C10, C11): for each request it is told what
 * to do by a {@link Script}: answer {@code 503 unavailable}, close the
 * connection after reading the request without answering, or forward it to
 * the real broker and hand back its answer; and it counts and timestamps
 * the requests. One request per connection ({@code Connection: close}).
 */
final class StandIn implements AutoCloseable {
    /** What to do with one request. */
    enum Act {
        UNAVAILABLE,
        CLOSE,
        FORWARD
    }

    /** Decides the {@link Act} for the {@code n}-th request (1-based). */
    @FunctionalInterface
    interface Script {
        Act act(int n, String method, String path);
    }

    /** One request as it arrived. */
    static final class Seen {
        final String method;
        final String path;
        final long at;

        Seen(String method, String path, long at) {
            this.method = method;
            this.path = path;
            this.at = at;
        }
    }

    private final ServerSocket server;
    private final String broker;
    private final Script script;
    private final List<Seen> seen = new ArrayList<>();
    private final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
    private volatile boolean closed;

    StandIn(String brokerUrl, Script script) throws IOException {
        this.broker = brokerUrl;
        this.script = script;
        this.server = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        Thread acceptor = new Thread(this::accept, "stand-in-accept");
        acceptor.setDaemon(true);
        acceptor.start();
    }

    String url() {
        return "http://127.0.0.1:" + server.getLocalPort();
    }

    /** The requests so far, in arrival order. */
    synchronized List<Seen> seen() {
        return List.copyOf(seen);
    }

    /** How many requests so far whose path contains {@code part}. */
    synchronized long count(String part) {
        return seen.stream().filter(s -> s.path.contains(part)).count();
    }

    @Override
    public void close() throws IOException {
        closed = true;
        server.close();
    }

    private void accept() {
        while (!closed) {
            try {
                Socket socket = server.accept();
                Thread thread = new Thread(() -> serve(socket), "stand-in-serve");
                thread.setDaemon(true);
                thread.start();
            } catch (IOException e) {
                return;
            }
        }
    }

    private void serve(Socket socket) {
        try (socket) {
            InputStream in = socket.getInputStream();
            String head = readHead(in);
            if (head == null) {
                return;
            }
            String[] lines = head.split("\r\n");
            String[] requestLine = lines[0].split(" ");
            Map<String, String> headers = new LinkedHashMap<>();
            for (int i = 1; i < lines.length; i++) {
                int colon = lines[i].indexOf(':');
                if (colon > 0) {
                    headers.put(lines[i].substring(0, colon).trim().toLowerCase(Locale.ROOT),
                            lines[i].substring(colon + 1).trim());
                }
            }
            int length = Integer.parseInt(headers.getOrDefault("content-length", "0"));
            byte[] body = in.readNBytes(length);
            String method = requestLine[0];
            String path = requestLine[1];
            int n;
            synchronized (this) {
                seen.add(new Seen(method, path, System.nanoTime()));
                n = seen.size();
            }
            OutputStream out = socket.getOutputStream();
            switch (script.act(n, method, path)) {
                case CLOSE:
                    return;
                case UNAVAILABLE:
                    answer(out, 503, "{\"error\":{\"code\":\"unavailable\",\"message\":\"stand-in says 503\"}}");
                    return;
                case FORWARD:
                default:
                    forward(out, method, path, headers, body);
            }
        } catch (IOException | InterruptedException e) {
            // the client went away
        }
    }

    private void forward(OutputStream out, String method, String path, Map<String, String> headers, byte[] body)
            throws IOException, InterruptedException {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(broker + path))
                .timeout(Duration.ofSeconds(30))
                .method(method, body.length == 0 ? HttpRequest.BodyPublishers.noBody()
                        : HttpRequest.BodyPublishers.ofByteArray(body));
        for (String name : new String[] {"authorization", "content-type", "last-event-id"}) {
            if (headers.containsKey(name)) {
                request.header(name, headers.get(name));
            }
        }
        HttpResponse<String> response = http.send(request.build(), HttpResponse.BodyHandlers.ofString());
        answer(out, response.statusCode(), response.body());
    }

    private static void answer(OutputStream out, int status, String json) throws IOException {
        byte[] body = json.getBytes(StandardCharsets.UTF_8);
        String head = "HTTP/1.1 " + status + " X\r\nContent-Type: application/json\r\nContent-Length: " + body.length
                + "\r\nConnection: close\r\n\r\n";
        out.write(head.getBytes(StandardCharsets.US_ASCII));
        out.write(body);
        out.flush();
    }

    /** The request's head up to its blank line; null when the connection closed first. */
    private static String readHead(InputStream in) throws IOException {
        ByteArrayOutputStream head = new ByteArrayOutputStream();
        int matched = 0;
        byte[] end = {'\r', '\n', '\r', '\n'};
        while (matched < 4) {
            int b = in.read();
            if (b < 0) {
                return null;
            }
            head.write(b);
            matched = b == end[matched] ? matched + 1 : (b == '\r' ? 1 : 0);
        }
        return head.toString(StandardCharsets.ISO_8859_1).trim();
    }
}
