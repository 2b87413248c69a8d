package dev.lockbroker.client;

import java.math.BigInteger;
import java.time.Instant;
import java.time.format.DateTimeParseException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * Typed reads of one parsed JSON object of an answer. A field that is
 * missing or of the wrong type is an {@link UnexpectedResponseException}
 * (the broker answered something that is not the API), never a
 * {@code ClassCastException} or a {@code NullPointerException} in the
 * caller's code. Unknown fields are ignored, as the API asks of clients.
 */
final class Fields {
    private final Map<String, Object> map;

    private Fields(Map<String, Object> map) {
        this.map = map;
    }

    /** {@code value} as an object. */
    @SuppressWarnings("unchecked")
    static Fields of(Object value) {
        if (!(value instanceof Map)) {
            throw new UnexpectedResponseException(200, "expected a JSON object, got " + describe(value));
        }
        return new Fields((Map<String, Object>) value);
    }

    /** The parsed object itself (read-only). */
    Map<String, Object> raw() {
        return Collections.unmodifiableMap(map);
    }

    boolean has(String name) {
        return map.get(name) != null;
    }

    String string(String name) {
        String value = optString(name);
        if (value == null) {
            throw missing(name);
        }
        return value;
    }

    String optString(String name) {
        Object value = map.get(name);
        if (value == null || value instanceof String) {
            return (String) value;
        }
        throw wrong(name, "a string", value);
    }

    long number(String name) {
        Long value = optNumber(name);
        if (value == null) {
            throw missing(name);
        }
        return value;
    }

    /** A whole number (whole-number floats accepted, as the broker does); null when absent. */
    Long optNumber(String name) {
        Object value = map.get(name);
        if (value == null) {
            return null;
        }
        if (value instanceof Long) {
            return (Long) value;
        }
        if (value instanceof Double && ((Double) value) == Math.rint((Double) value)
                && Math.abs((Double) value) < 9.0e15) {
            return ((Double) value).longValue();
        }
        if (value instanceof BigInteger) {
            throw wrong(name, "a number within a long", value);
        }
        throw wrong(name, "a whole number", value);
    }

    boolean bool(String name) {
        Object value = map.get(name);
        if (value instanceof Boolean) {
            return (Boolean) value;
        }
        throw value == null ? missing(name) : wrong(name, "true or false", value);
    }

    /** An RFC 3339 instant; null when absent or null. */
    Instant optInstant(String name) {
        String value = optString(name);
        if (value == null) {
            return null;
        }
        try {
            return Instant.parse(value);
        } catch (DateTimeParseException e) {
            throw wrong(name, "an RFC 3339 instant", value);
        }
    }

    Instant instant(String name) {
        Instant value = optInstant(name);
        if (value == null) {
            throw missing(name);
        }
        return value;
    }

    /** A nested object; null when absent or null. */
    Fields optObject(String name) {
        Object value = map.get(name);
        if (value == null) {
            return null;
        }
        if (value instanceof Map) {
            return of(value);
        }
        throw wrong(name, "an object", value);
    }

    /** An array of objects; empty when absent. */
    List<Fields> objects(String name) {
        Object value = map.get(name);
        if (value == null) {
            return List.of();
        }
        if (!(value instanceof List)) {
            throw wrong(name, "an array", value);
        }
        List<Fields> out = new ArrayList<>();
        for (Object item : (List<?>) value) {
            if (!(item instanceof Map)) {
                throw wrong(name, "an array of objects", item);
            }
            out.add(of(item));
        }
        return out;
    }

    private static UnexpectedResponseException missing(String name) {
        return new UnexpectedResponseException(200, "the answer has no field \"" + name + "\"");
    }

    private static UnexpectedResponseException wrong(String name, String expected, Object got) {
        return new UnexpectedResponseException(200,
                "field \"" + name + "\" is not " + expected + " (" + describe(got) + ")");
    }

    private static String describe(Object value) {
        return value == null ? "null" : value.getClass().getSimpleName();
    }
}
