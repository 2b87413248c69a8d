package dev.lockbroker.client;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * Server-Sent Events, the wire format of {@code observe} and
 * {@code /v1/events}: turns bytes as they arrive into events, per the HTML
 * standard's rules that matter here: {@code event:}, {@code id:} and
 * {@code data:} fields (several {@code data:} lines joined by newlines),
 * {@code :} comments, a blank line ends an event, and {@code \n},
 * {@code \r\n} or {@code \r} end a line, wherever the chunks split.
 */
final class SseParser {
    /** An event longer than this is refused, so that a broken stream cannot grow the buffer without bound. */
    static final int MAX_EVENT_BYTES = 1 << 20;

    /** One dispatched event. */
    static final class RawEvent {
        /** {@code message} when the event named none. */
        final String name;
        /** Its {@code id:} field, or null. */
        final String id;
        final String data;

        RawEvent(String name, String id, String data) {
            this.name = name;
            this.id = id;
            this.data = data;
        }

        @Override
        public String toString() {
            return "RawEvent[" + name + ", id=" + id + ", " + data + "]";
        }
    }

    /** The stream broke the format. */
    static final class TooLongException extends Exception {
        private static final long serialVersionUID = 1L;

        TooLongException() {
            super("an event longer than " + MAX_EVENT_BYTES + " bytes");
        }
    }

    private final ByteArrayOutputStream line = new ByteArrayOutputStream();
    private boolean afterCr;
    private String name;
    private String id;
    private StringBuilder data;
    private int size;

    /** Feeds {@code n} bytes of {@code chunk}; returns the events they completed, in order. */
    List<RawEvent> feed(byte[] chunk, int n) throws TooLongException {
        List<RawEvent> events = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            byte b = chunk[i];
            boolean wasCr = afterCr;
            afterCr = false;
            if (b == '\n' && wasCr) {
                continue;
            }
            if (b == '\n' || b == '\r') {
                afterCr = b == '\r';
                RawEvent event = endLine(line.toString(StandardCharsets.UTF_8));
                line.reset();
                if (event != null) {
                    events.add(event);
                }
                continue;
            }
            line.write(b);
            if (line.size() + size > MAX_EVENT_BYTES) {
                throw new TooLongException();
            }
        }
        return events;
    }

    private RawEvent endLine(String text) {
        if (text.isEmpty()) {
            RawEvent event = data == null ? null
                    : new RawEvent(name == null ? "message" : name, id, data.toString());
            name = null;
            id = null;
            data = null;
            size = 0;
            return event;
        }
        if (text.charAt(0) == ':') {
            return null;
        }
        int colon = text.indexOf(':');
        String field = colon < 0 ? text : text.substring(0, colon);
        String value = colon < 0 ? "" : text.substring(colon + 1);
        if (value.startsWith(" ")) {
            value = value.substring(1);
        }
        size += value.length();
        switch (field) {
            case "event":
                name = value;
                break;
            case "id":
                id = value;
                break;
            case "data":
                if (data == null) {
                    data = new StringBuilder(value);
                } else {
                    data.append('\n').append(value);
                }
                break;
            default:
                break;
        }
        return null;
    }
}
