package lockbroker_test

// Other kinds: C13–C16 of clients/CONFORMANCE.md.

import (
	"context"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

func TestC13Semaphores(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	key := keyFor(t, "pool")

	a, err := c.TrySemaphore(ctx, key, 2)
	must(t, err, "the first permit")
	b, err := c.TrySemaphore(ctx, key, 2)
	must(t, err, "the second permit")
	defer b.Release(ctx)
	if a.Slot == b.Slot || a.Slot < 0 || a.Slot > 1 || b.Slot < 0 || b.Slot > 1 {
		t.Fatalf("two slots of 0..1: %d and %d", a.Slot, b.Slot)
	}
	if a.Token() == 0 || b.Token() == 0 || a.Permits != 2 {
		t.Fatalf("tokens and size exposed: %d, %d, permits %d", a.Token(), b.Token(), a.Permits)
	}
	s, err := c.SemaphoreStatus(ctx, key)
	must(t, err, "SemaphoreStatus")
	if len(s.Holders) != 2 || s.Permits != 2 {
		t.Fatalf("two holders of 2 permits: %+v", s)
	}

	_, err = c.TrySemaphore(ctx, key, 2)
	wantIs(t, err, lockbroker.ErrHeld, "a third try")
	wantIs(t, err, lockbroker.ErrSemaphoreFull, "a third try")

	waiter := make(chan *lockbroker.Permit, 1)
	go func() {
		p, err := c.Semaphore(ctx, key, 2, lockbroker.Wait(10*time.Second))
		if err != nil {
			t.Errorf("the third waits for a permit: %v", err)
		}
		waiter <- p
	}()
	eventually(t, 5*time.Second, "the third is queued", func() (bool, error) {
		s, err := c.SemaphoreStatus(ctx, key)
		return err == nil && s.Waiters == 1, err
	})
	freed := a.Slot
	must(t, a.Release(ctx), "Release")
	select {
	case p := <-waiter:
		if p == nil {
			t.FailNow()
		}
		defer p.Release(ctx)
		if p.Slot != freed {
			t.Fatalf("granted the freed slot %d, got %d", freed, p.Slot)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("granted after a release")
	}
}

func TestC14ReaderWriterLocks(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	key := keyFor(t, "table")

	r1, err := c.TryReadLock(ctx, key)
	must(t, err, "the first reader")
	r2, err := c.TryReadLock(ctx, key)
	must(t, err, "the second reader, at once")
	s, err := c.RWLockStatus(ctx, key)
	must(t, err, "RWLockStatus")
	if len(s.Readers) != 2 || s.Writer != nil {
		t.Fatalf("two readers: %+v", s)
	}
	_, err = c.TryWriteLock(ctx, key)
	wantIs(t, err, lockbroker.ErrHeld, "a writer while they read")

	must(t, r1.Release(ctx), "Release")
	_, err = c.TryWriteLock(ctx, key)
	wantIs(t, err, lockbroker.ErrHeld, "a writer while one reads")
	must(t, r2.Release(ctx), "Release")

	w, err := c.TryWriteLock(ctx, key)
	must(t, err, "the writer once both released")
	s, err = c.RWLockStatus(ctx, key)
	must(t, err, "RWLockStatus")
	if s.Writer == nil || s.Writer.Owner != w.Owner() || len(s.Readers) != 0 {
		t.Fatalf("one writer: %+v", s)
	}
	_, err = c.TryReadLock(ctx, key)
	wantIs(t, err, lockbroker.ErrHeld, "a reader while it writes")
	must(t, w.Release(ctx), "Release")
}

func TestC15MultiLocks(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	keys := []string{keyFor(t, "a"), keyFor(t, "b"), keyFor(t, "c")}

	other, err := c.TryLock(ctx, keys[1])
	must(t, err, "another owner takes one key")
	_, err = c.TryMultiLock(ctx, keys)
	wantIs(t, err, lockbroker.ErrHeld, "the multi-lock with one key held")
	for _, k := range []string{keys[0], keys[2]} {
		if lockStatus(t, c, k).Held {
			t.Fatalf("all or none: %s is not held", k)
		}
	}
	must(t, other.Release(ctx), "Release")

	m, err := c.TryMultiLock(ctx, keys, lockbroker.TTL(5*time.Second))
	must(t, err, "the multi-lock once all are free")
	if len(m.Locks) != 3 {
		t.Fatalf("three locks: %+v", m.Locks)
	}
	for _, k := range keys {
		s := lockStatus(t, c, k)
		if !s.Held || s.Owner != m.Owner() || s.Token != m.TokenOf(k) || s.Token == 0 {
			t.Fatalf("%s held by the multi-lock with its token %d: %+v", k, m.TokenOf(k), s)
		}
	}
	must(t, m.Release(ctx), "Release")
	for _, k := range keys {
		if lockStatus(t, c, k).Held {
			t.Fatalf("%s released", k)
		}
	}
}

func TestC16Elections(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 60*time.Second)
	name := keyFor(t, "scheduler")
	var cut cutter
	watcher := newClient(t, lockbroker.WithHTTPClient(cut.client()))
	watch, err := watcher.Observe(ctx, name)
	must(t, err, "Observe")
	defer watch.Close()
	// next waits for the watch to show leader.
	next := func(leader string) lockbroker.ElectionStatus {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case s, ok := <-watch.C:
				if !ok {
					t.Fatalf("the watch ended: %v", watch.Err())
				}
				if s.Leader == leader {
					return s
				}
			case <-timeout:
				t.Fatalf("the watch shows leader %q", leader)
			}
		}
	}

	a, err := c.Campaign(ctx, name, lockbroker.Owner("node-a"), lockbroker.TTL(5*time.Second))
	must(t, err, "Campaign")
	if a.Term == 0 || a.Owner() != "node-a" {
		t.Fatalf("leader with a term: %+v", a)
	}
	if s := next("node-a"); s.Term != a.Term {
		t.Fatalf("the watch shows node-a's term %d: %+v", a.Term, s)
	}

	second := make(chan *lockbroker.Leadership, 1)
	go func() {
		b, err := c.Campaign(ctx, name, lockbroker.Owner("node-b"), lockbroker.Wait(20*time.Second))
		if err != nil {
			t.Errorf("the second candidate waits for the leadership: %v", err)
		}
		second <- b
	}()
	if s, err := c.ElectionStatus(ctx, name); err != nil || s.Leader != "node-a" {
		t.Fatalf("node-a leads while node-b waits: %+v, %v", s, err)
	}
	must(t, a.Resign(ctx), "Resign")
	var b *lockbroker.Leadership
	select {
	case b = <-second:
		if b == nil {
			t.FailNow()
		}
	case <-time.After(20 * time.Second):
		t.Fatal("resigning hands the leadership on")
	}
	if b.Term <= a.Term {
		t.Fatalf("a newer term: %d after %d", b.Term, a.Term)
	}
	if s := next("node-b"); s.Term != b.Term {
		t.Fatalf("the watch shows node-b's term %d: %+v", b.Term, s)
	}
	s, err := c.ElectionStatus(ctx, name)
	must(t, err, "ElectionStatus")
	if s.Leader != "node-b" || s.Term != b.Term {
		t.Fatalf("status shows node-b: %+v", s)
	}

	// The watch's connection breaks: it reconnects and goes on.
	dials := cut.dialed()
	cut.cut()
	must(t, b.Resign(ctx), "Resign")
	d, err := c.Campaign(ctx, name, lockbroker.Owner("node-d"))
	must(t, err, "Campaign")
	defer d.Resign(context.Background())
	if s := next("node-d"); s.Term != d.Term {
		t.Fatalf("after the break, the watch shows node-d's term %d: %+v", d.Term, s)
	}
	if cut.dialed() <= dials {
		t.Fatal("the watch reconnected")
	}
}
