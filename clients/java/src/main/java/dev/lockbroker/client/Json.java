package dev.lockbroker.client;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The little JSON this client needs, so that it has no runtime dependency:
 * {@link #parse} reads a document into {@code Map<String, Object>} (objects,
 * in order), {@code List<Object>}, {@code String}, {@code Long} (integers;
 * {@code BigInteger} beyond a long), {@code Double}, {@code Boolean} and
 * {@code null}; {@link #write} writes those (any {@code Number},
 * {@code Iterable}, {@code Map} with string keys) back. RFC 8259, strict:
 * no comments, no trailing commas, no leading zeros.
 */
final class Json {
    /** Objects and arrays nested deeper than this are refused, so a hostile body cannot overflow the stack. */
    static final int MAX_DEPTH = 128;

    private final String text;
    private int at;

    private Json(String text) {
        this.text = text;
    }

    /** The document in {@code text}. */
    static Object parse(String text) throws JsonException {
        Json json = new Json(text);
        json.skipSpace();
        Object value = json.value(0);
        json.skipSpace();
        if (json.at != text.length()) {
            throw json.error("trailing characters");
        }
        return value;
    }

    /** {@code value} as compact JSON. */
    static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value);
        return out.toString();
    }

    /** A document that is not JSON (or not the JSON expected). */
    static final class JsonException extends Exception {
        private static final long serialVersionUID = 1L;

        JsonException(String message) {
            super(message);
        }
    }

    private Object value(int depth) throws JsonException {
        if (at >= text.length()) {
            throw error("unexpected end");
        }
        char c = text.charAt(at);
        switch (c) {
            case '{':
                return object(depth + 1);
            case '[':
                return array(depth + 1);
            case '"':
                return string();
            case 't':
                return literal("true", Boolean.TRUE);
            case 'f':
                return literal("false", Boolean.FALSE);
            case 'n':
                return literal("null", null);
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw error("unexpected character '" + c + "'");
        }
    }

    private Map<String, Object> object(int depth) throws JsonException {
        if (depth > MAX_DEPTH) {
            throw error("nested too deep");
        }
        at++; // {
        Map<String, Object> map = new LinkedHashMap<>();
        skipSpace();
        if (peek() == '}') {
            at++;
            return map;
        }
        while (true) {
            skipSpace();
            if (peek() != '"') {
                throw error("expected a member name");
            }
            String name = string();
            skipSpace();
            expect(':');
            skipSpace();
            map.put(name, value(depth));
            skipSpace();
            char c = next();
            if (c == '}') {
                return map;
            }
            if (c != ',') {
                throw error("expected ',' or '}'");
            }
        }
    }

    private List<Object> array(int depth) throws JsonException {
        if (depth > MAX_DEPTH) {
            throw error("nested too deep");
        }
        at++; // [
        List<Object> list = new ArrayList<>();
        skipSpace();
        if (peek() == ']') {
            at++;
            return list;
        }
        while (true) {
            skipSpace();
            list.add(value(depth));
            skipSpace();
            char c = next();
            if (c == ']') {
                return list;
            }
            if (c != ',') {
                throw error("expected ',' or ']'");
            }
        }
    }

    private String string() throws JsonException {
        at++; // "
        StringBuilder out = new StringBuilder();
        while (true) {
            char c = next();
            if (c == '"') {
                return out.toString();
            }
            if (c < 0x20) {
                throw error("control character in a string");
            }
            if (c != '\\') {
                out.append(c);
                continue;
            }
            char e = next();
            switch (e) {
                case '"': out.append('"'); break;
                case '\\': out.append('\\'); break;
                case '/': out.append('/'); break;
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'n': out.append('\n'); break;
                case 'r': out.append('\r'); break;
                case 't': out.append('\t'); break;
                case 'u':
                    if (at + 4 > text.length()) {
                        throw error("short \\u escape");
                    }
                    try {
                        out.append((char) Integer.parseInt(text.substring(at, at + 4), 16));
                    } catch (NumberFormatException ex) {
                        throw error("bad \\u escape");
                    }
                    at += 4;
                    break;
                default:
                    throw error("bad escape '\\" + e + "'");
            }
        }
    }

    private Object number() throws JsonException {
        int start = at;
        if (peek() == '-') {
            at++;
        }
        if (peek() == '0') {
            at++;
        } else if (peek() >= '1' && peek() <= '9') {
            while (peek() >= '0' && peek() <= '9') {
                at++;
            }
        } else {
            throw error("bad number");
        }
        boolean integral = true;
        if (peek() == '.') {
            integral = false;
            at++;
            digits();
        }
        if (peek() == 'e' || peek() == 'E') {
            integral = false;
            at++;
            if (peek() == '+' || peek() == '-') {
                at++;
            }
            digits();
        }
        String literal = text.substring(start, at);
        if (!integral) {
            return Double.parseDouble(literal);
        }
        try {
            return Long.parseLong(literal);
        } catch (NumberFormatException tooBig) {
            return new BigInteger(literal);
        }
    }

    private void digits() throws JsonException {
        if (!(peek() >= '0' && peek() <= '9')) {
            throw error("expected a digit");
        }
        while (peek() >= '0' && peek() <= '9') {
            at++;
        }
    }

    private Object literal(String word, Object value) throws JsonException {
        if (!text.startsWith(word, at)) {
            throw error("expected " + word);
        }
        at += word.length();
        return value;
    }

    private void skipSpace() {
        while (at < text.length()) {
            char c = text.charAt(at);
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                return;
            }
            at++;
        }
    }

    /** The next character, or NUL at the end (never valid where it is looked at). */
    private char peek() {
        return at < text.length() ? text.charAt(at) : '\0';
    }

    private char next() throws JsonException {
        if (at >= text.length()) {
            throw error("unexpected end");
        }
        return text.charAt(at++);
    }

    private void expect(char c) throws JsonException {
        if (next() != c) {
            throw error("expected '" + c + "'");
        }
    }

    private JsonException error(String what) {
        return new JsonException(what + " at offset " + at);
    }

    private static void write(StringBuilder out, Object value) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof String) {
            quote(out, (String) value);
        } else if (value instanceof Boolean || value instanceof Long || value instanceof Integer
                || value instanceof Short || value instanceof Byte || value instanceof BigInteger) {
            out.append(value);
        } else if (value instanceof Number) {
            double d = ((Number) value).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) {
                throw new IllegalArgumentException("JSON has no " + d);
            }
            out.append(value);
        } else if (value instanceof Map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) value).entrySet()) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                quote(out, String.valueOf(e.getKey()));
                out.append(':');
                write(out, e.getValue());
            }
            out.append('}');
        } else if (value instanceof Iterable) {
            out.append('[');
            boolean first = true;
            for (Object item : (Iterable<?>) value) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                write(out, item);
            }
            out.append(']');
        } else {
            throw new IllegalArgumentException("not a JSON value: " + value.getClass().getName());
        }
    }

    private static void quote(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        out.append('"');
    }
}
