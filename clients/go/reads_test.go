package lockbroker_test

// Reads: C17–C19 of clients/CONFORMANCE.md.

import (
	"sort"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

func TestC17History(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	key := keyFor(t, "job")
	lease, err := c.TryLock(ctx, key)
	must(t, err, "TryLock")
	must(t, lease.Release(ctx), "Release")

	events, err := c.History(ctx, key, 10)
	must(t, err, "History")
	if len(events) != 2 {
		t.Fatalf("a grant and a release: %+v", events)
	}
	released, granted := events[0], events[1]
	if released.Event != lockbroker.EventReleased || granted.Event != lockbroker.EventGranted {
		t.Fatalf("newest first: %+v", events)
	}
	for _, e := range events {
		if e.Owner != lease.Owner() || e.Token != lease.Token() || e.At.IsZero() {
			t.Fatalf("each names the owner %s and token %d: %+v", lease.Owner(), lease.Token(), e)
		}
	}
	if released.At.Before(granted.At) {
		t.Fatalf("released after granted: %+v", events)
	}
}

func TestC18Listing(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	prefix := keyFor(t, "jobs") + "/"
	var want []string
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		key := prefix + name
		lease, err := c.TryLock(ctx, key)
		must(t, err, "TryLock "+key)
		defer lease.Release(ctx)
		want = append(want, key)
	}
	// A lock outside the prefix is not listed.
	outside, err := c.TryLock(ctx, keyFor(t, "elsewhere"))
	must(t, err, "TryLock")
	defer outside.Release(ctx)

	var got []string
	pages := 0
	opts := lockbroker.ListOptions{Limit: 2}
	for {
		page, err := c.ListLocks(ctx, prefix, opts)
		must(t, err, "ListLocks")
		pages++
		if len(page.Items) > 2 {
			t.Fatalf("at most the limit a page: %d", len(page.Items))
		}
		for _, item := range page.Items {
			if item.Owner == "" || item.Token == 0 {
				t.Fatalf("a listed lock is held: %+v", item)
			}
			got = append(got, item.StorageKey)
		}
		if page.Next == "" {
			break
		}
		opts.Cursor = page.Next
	}
	if pages < 3 {
		t.Fatalf("five locks two a page take three pages, got %d", pages)
	}
	sort.Strings(got)
	if len(got) != len(want) {
		t.Fatalf("each lock under the prefix once: %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("each lock under the prefix once: %v, want %v", got, want)
		}
	}
	all, err := c.AllLocks(ctx, prefix, 2)
	must(t, err, "AllLocks")
	if len(all) != len(want) {
		t.Fatalf("AllLocks follows the cursors: %d of %d", len(all), len(want))
	}

	other := clientOf(t, need(t, "LOCKBROKER_URL"), need(t, "LOCKBROKER_OTHER_API_KEY"))
	theirs, err := other.AllLocks(ctx, prefix, 0)
	must(t, err, "the other tenant's listing")
	if len(theirs) != 0 {
		t.Fatalf("a tenant never lists another's leases: %+v", theirs)
	}
}

func TestC19Events(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 60*time.Second)
	prefix := keyFor(t, "watched") + "/"
	stream, err := c.Events(ctx, prefix, 0)
	must(t, err, "Events")

	first := prefix + "first"
	lease, err := c.TryLock(ctx, first)
	must(t, err, "TryLock")
	must(t, lease.Release(ctx), "Release")
	granted := nextChange(t, stream)
	released := nextChange(t, stream)
	if granted.Event != lockbroker.EventGranted || released.Event != lockbroker.EventReleased {
		t.Fatalf("the grant, then the release: %+v, %+v", granted, released)
	}
	for _, e := range []lockbroker.Event{granted, released} {
		if e.StorageKey != first || e.Kind != "lock" || e.Owner != lease.Owner() || e.Token != lease.Token() {
			t.Fatalf("the key's change: %+v", e)
		}
	}
	if granted.ID == 0 || released.ID <= granted.ID {
		t.Fatalf("increasing ids: %d, %d", granted.ID, released.ID)
	}
	last := stream.LastID()
	if last != released.ID {
		t.Fatalf("LastID is the last delivered: %d, want %d", last, released.ID)
	}
	stream.Close()

	// Reopened after the last id: nothing already seen.
	again, err := c.Events(ctx, prefix, last)
	must(t, err, "Events after the last id")
	defer again.Close()
	second := prefix + "second"
	lease, err = c.TryLock(ctx, second)
	must(t, err, "TryLock")
	must(t, lease.Release(ctx), "Release")
	if e := nextChange(t, again); e.ID <= last || e.StorageKey != second || e.Event != lockbroker.EventGranted {
		t.Fatalf("the first event after %d is the new grant: %+v", last, e)
	}
	if e := nextChange(t, again); e.StorageKey != second || e.Event != lockbroker.EventReleased {
		t.Fatalf("then its release: %+v", e)
	}

	// A stream whose connection breaks resumes by itself, after the last id.
	var cut cutter
	resuming, err := newClient(t, lockbroker.WithHTTPClient(cut.client())).Events(ctx, prefix, 0)
	must(t, err, "Events")
	defer resuming.Close()
	third := prefix + "third"
	lease, err = c.TryLock(ctx, third)
	must(t, err, "TryLock")
	seen := nextChange(t, resuming)
	cut.cut()
	must(t, lease.Release(ctx), "Release")
	if e := nextChange(t, resuming); e.ID <= seen.ID || e.StorageKey != third || e.Event != lockbroker.EventReleased {
		t.Fatalf("after the break, the release and nothing already seen: %+v after %+v", e, seen)
	}
}

// nextChange is the stream's next event, which must come within 10 s.
func nextChange(t *testing.T, s *lockbroker.EventStream) lockbroker.Event {
	t.Helper()
	select {
	case e, ok := <-s.C:
		if !ok {
			t.Fatalf("the stream ended: %v", s.Err())
		}
		if e.Reset {
			t.Fatal("no reset: the history reaches back")
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatal("an event within 10 s")
	}
	return lockbroker.Event{}
}
