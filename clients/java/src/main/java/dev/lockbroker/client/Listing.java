package dev.lockbroker.client;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;
import java.util.stream.Collectors;

/** Listings: one page of a kind's live leases, and every page followed by cursor. */
final class Listing {
    /** The broker's largest page. */
    static final int MAX_LIMIT = 1000;

    private Listing() {
    }

    static <S> Page<S> page(Calls calls, String base, Kind<S> kind, String prefix, Integer limit, String cursor) {
        return page(calls, base, kind.status, prefix, limit, cursor);
    }

    /** One page of {@code base}'s items, each read by {@code item} (sessions are listed as leases are). */
    static <S> Page<S> page(Calls calls, String base, Function<Fields, S> item, String prefix, Integer limit,
            String cursor) {
        StringBuilder path = new StringBuilder(base).append("?prefix=").append(Transport.segment(prefix));
        if (limit != null) {
            path.append("&limit=").append(limit);
        }
        if (cursor != null) {
            path.append("&cursor=").append(Transport.segment(cursor));
        }
        Fields page = calls.json(Calls.Call.get(path.toString()));
        List<S> items = page.objects("items").stream().map(item).collect(Collectors.toUnmodifiableList());
        return new Page<>(items, page.optString("next"));
    }

    static <S> List<S> all(Calls calls, String base, Kind<S> kind, String prefix, int max) {
        List<S> items = new ArrayList<>();
        String cursor = null;
        while (items.size() < max) {
            Page<S> page = page(calls, base, kind, prefix, Math.min(max - items.size(), MAX_LIMIT), cursor);
            items.addAll(page.items());
            cursor = page.cursor();
            if (cursor == null) {
                break;
            }
        }
        return items.size() > max ? List.copyOf(items.subList(0, max)) : List.copyOf(items);
    }
}
