package lockbroker_test

// Locks: C01–C08 of clients/CONFORMANCE.md.

import (
	"context"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

func TestC01AcquireAndRelease(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	key := keyFor(t, "job")

	lease, err := c.Lock(ctx, key, lockbroker.TTL(10*time.Second))
	must(t, err, "Lock")
	if lease.Token() == 0 {
		t.Fatal("a grant carries a positive fencing token")
	}
	s := lockStatus(t, c, key)
	if !s.Held || s.Owner != lease.Owner() || s.Token != lease.Token() {
		t.Fatalf("status shows the holder and token: %+v, lease owner %s token %d", s, lease.Owner(), lease.Token())
	}
	must(t, lease.Release(ctx), "Release")
	if s := lockStatus(t, c, key); s.Held {
		t.Fatalf("free after the release: %+v", s)
	}
	must(t, lease.Release(ctx), "a second Release does nothing")
}

func TestC02TryWhileHeld(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	key := keyFor(t, "job")
	holder, err := c.TryLock(ctx, key)
	must(t, err, "TryLock of a free key")
	defer holder.Release(ctx)

	start := time.Now()
	lease, err := c.TryLock(ctx, key)
	took := time.Since(start)
	if lease != nil {
		t.Fatal("no lease while another owner holds the key")
	}
	wantIs(t, err, lockbroker.ErrHeld, "TryLock of a held key")
	if e := asError(t, err); e.Status != 409 || e.Code != lockbroker.CodeLockHeld {
		t.Fatalf("the broker's 409 lock_held: %+v", e)
	}
	if took > time.Second {
		t.Fatalf("a try answers at once, it took %v", took)
	}
}

func TestC03WaitForTheHolder(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	key := keyFor(t, "job")
	holder, err := c.TryLock(ctx, key)
	must(t, err, "TryLock")
	released := make(chan error, 1)
	start := time.Now()
	go func() {
		time.Sleep(300 * time.Millisecond) // the holder's work: what the waiter waits for
		released <- holder.Release(ctx)
	}()
	lease, err := c.Lock(ctx, key, lockbroker.Wait(10*time.Second))
	must(t, err, "Lock waiting up to 10 s")
	must(t, <-released, "the holder's Release")
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("granted only after the holder released, but it took %v", waited)
	}
	if s := lockStatus(t, c, key); s.Owner != lease.Owner() {
		t.Fatalf("the waiter holds it: %+v", s)
	}

	start = time.Now()
	other, err := c.Lock(ctx, key, lockbroker.Wait(300*time.Millisecond))
	took := time.Since(start)
	if other != nil {
		t.Fatal("no lease while the key stays held")
	}
	wantIs(t, err, lockbroker.ErrHeld, "a wait of 300 ms on a held key")
	if e := asError(t, err); e.RetryAfter <= 0 {
		t.Fatalf("the held error carries retry_after_ms: %+v", e)
	}
	if took < 250*time.Millisecond || took > 5*time.Second {
		t.Fatalf("it waited about 300 ms, not %v", took)
	}
	must(t, lease.Release(ctx), "Release")
}

func TestC04RenewsPastSeveralTTLs(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	key := keyFor(t, "job")
	lease, err := c.Lock(ctx, key, lockbroker.TTL(time.Second))
	must(t, err, "Lock")
	first := lease.ExpiresAt()

	select {
	case <-lease.Lost():
		t.Fatalf("lost while renewing: %v", lease.Err())
	case <-time.After(3500 * time.Millisecond): // what is tested: holding past several TTLs
	}
	if err := lease.Err(); err != nil {
		t.Fatalf("still held: %v", err)
	}
	s := lockStatus(t, c, key)
	if !s.Held || s.Owner != lease.Owner() || s.Token != lease.Token() {
		t.Fatalf("the same owner and token hold it: %+v", s)
	}
	if !lease.ExpiresAt().After(first) {
		t.Fatalf("renewals moved the end: %v, then %v", first, lease.ExpiresAt())
	}
	must(t, lease.Release(ctx), "Release")
}

func TestC05LostOnRefusal(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	key := keyFor(t, "job")
	const ttl = time.Second
	lease, err := c.Lock(ctx, key, lockbroker.TTL(ttl))
	must(t, err, "Lock")

	_, err = admin(t).ForceRelease(ctx, "default", key)
	must(t, err, "ForceRelease")
	forced := time.Now()
	next, err := c.Lock(ctx, key, lockbroker.Wait(5*time.Second), lockbroker.TTL(10*time.Second))
	must(t, err, "another owner's Lock")
	defer next.Release(ctx)

	select {
	case <-lease.Lost():
	case <-time.After(ttl - time.Since(forced)):
		t.Fatalf("lost fires within one TTL of the force-release")
	}
	wantIs(t, lease.Err(), lockbroker.ErrLeaseLost, "the reason")
	if e := asError(t, lease.Err()); e.Code != lockbroker.CodeLeaseLost {
		t.Fatalf("lost because the broker refused: %+v", e)
	}

	err = lease.Release(ctx)
	wantIs(t, err, lockbroker.ErrLeaseLost, "releasing a lost lease says it was lost")
	s := lockStatus(t, c, key)
	if !s.Held || s.Owner != next.Owner() || s.Token != next.Token() {
		t.Fatalf("the new holder keeps its lease: %+v", s)
	}
	if next.Token() <= lease.Token() {
		t.Fatalf("the new grant has a newer token: %d after %d", next.Token(), lease.Token())
	}
	select {
	case <-next.Lost():
		t.Fatalf("the new holder's lease is not touched: %v", next.Err())
	default:
	}
}

func TestC06LostWithoutConfirmation(t *testing.T) {
	fwd := startForwarder(t, brokerHost(t))
	c := clientOf(t, "http://"+fwd.addr, need(t, "LOCKBROKER_API_KEY"))
	ctx := testCtx(t, 30*time.Second)
	key := keyFor(t, "job")
	const ttl = 2 * time.Second
	lease, err := c.Lock(ctx, key, lockbroker.TTL(ttl))
	must(t, err, "Lock through the forwarder")
	eventually(t, 5*time.Second, "a renewal went through", func() (bool, error) {
		n, _ := fwd.answered()
		return n >= 2, nil // the acquire and a renewal
	})

	fwd.cut.Store(true)
	select {
	case <-lease.Lost():
	case <-time.After(3 * ttl):
		t.Fatal("lost fires when no renewal can be confirmed")
	}
	lost := time.Now()
	_, lastConfirmed := fwd.answered()
	if !lost.Before(lastConfirmed.Add(ttl)) {
		t.Fatalf("lost fired %v after the last confirmed renewal was sent: not before the TTL (%v)", lost.Sub(lastConfirmed), ttl)
	}
	wantIs(t, lease.Err(), lockbroker.ErrLeaseLost, "the reason")
	if e := asError(t, lease.Err()); e.Code != lockbroker.CodeLeaseExpired {
		t.Fatalf("lost for want of confirmation: %+v", e)
	}
	// The broker lets the lease run out in its own time.
	freeSoon(t, newClient(t), key, 5*time.Second)
}

func TestC07ReleaseOnScopeExit(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 30*time.Second)

	normal := keyFor(t, "normal")
	func() {
		lease, err := c.Lock(ctx, normal)
		must(t, err, "Lock")
		defer lease.Release(ctx)
		if !lockStatus(t, c, normal).Held {
			t.Fatal("held inside the scope")
		}
	}()
	if lockStatus(t, c, normal).Held {
		t.Fatal("released when the scope ended normally")
	}

	panicking := keyFor(t, "panicking")
	recovered := func() (recovered any) {
		defer func() { recovered = recover() }()
		lease, err := c.Lock(ctx, panicking)
		must(t, err, "Lock")
		defer lease.Release(ctx)
		panic("the work failed")
	}()
	if recovered == nil {
		t.Fatal("the panic went through")
	}
	if lockStatus(t, c, panicking).Held {
		t.Fatal("released when the scope ended by a panic")
	}

	// A deferred Release still releases when the work's context has ended.
	canceled := keyFor(t, "canceled")
	func() {
		work, cancel := context.WithCancel(ctx)
		lease, err := c.Lock(work, canceled)
		must(t, err, "Lock")
		defer lease.Release(work)
		cancel()
	}()
	if lockStatus(t, c, canceled).Held {
		t.Fatal("released when the scope's context had ended")
	}
}

func TestC08FencingTokens(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 30*time.Second)
	key := keyFor(t, "job")
	var tokens []uint64
	for i := 0; i < 3; i++ {
		lease, err := c.TryLock(ctx, key)
		must(t, err, "TryLock")
		tokens = append(tokens, lease.Token())
		if i < 2 {
			must(t, lease.Release(ctx), "Release")
		} else {
			defer lease.Release(ctx)
		}
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens strictly increase: %v", tokens)
		}
	}
	current, older := tokens[2], tokens[1]
	v, err := c.Validate(ctx, key, current)
	must(t, err, "Validate")
	if !v.Valid || v.Token != current {
		t.Fatalf("the current token is valid: %+v", v)
	}
	v, err = c.Validate(ctx, key, older)
	must(t, err, "Validate")
	if v.Valid || v.Token != current {
		t.Fatalf("an older token is stale: %+v", v)
	}
}
