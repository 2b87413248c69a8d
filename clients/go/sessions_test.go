package lockbroker_test

// Sessions: C22 and C23 of clients/CONFORMANCE.md.

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

func TestC22SessionKeepsItsLeases(t *testing.T) {
	rec := newRecorder()
	c := newClient(t, lockbroker.WithHTTPClient(&http.Client{Transport: rec}))
	ctx := testCtx(t, 60*time.Second)
	first, second := keyFor(t, "first"), keyFor(t, "second")
	const ttl = 3 * time.Second

	var id string
	func() {
		s, err := c.Session(ctx, ttl, lockbroker.SessionName(keyFor(t, "session")))
		must(t, err, "Session")
		defer func() { must(t, s.Close(ctx), "Close at scope exit") }()
		id = s.ID()
		if s.TTL() != ttl {
			t.Fatalf("the session lives %v without a keepalive, not %v", ttl, s.TTL())
		}
		a, err := s.Lock(ctx, first, lockbroker.Wait(5*time.Second))
		must(t, err, "Lock in the session")
		b, err := s.TryLock(ctx, second)
		must(t, err, "TryLock in the session")
		if a.Token() == 0 || b.Token() == 0 {
			t.Fatalf("grants carry fencing tokens: %d, %d", a.Token(), b.Token())
		}
		for _, l := range []*lockbroker.Lease{a, b} {
			st := lockStatus(t, c, l.Key())
			if !st.Held || st.Session != id || st.Token != l.Token() {
				t.Fatalf("status of %s names the session %s: %+v", l.Key(), id, st)
			}
		}

		held := time.Now()
		select { // what is tested: holding past three TTLs with no call of ours
		case <-s.Lost():
			t.Fatalf("session lost while kept alive: %v", s.Err())
		case <-a.Lost():
			t.Fatalf("a lease lost while its session lives: %v", a.Err())
		case <-time.After(10 * time.Second):
		}
		if err := s.Err(); err != nil {
			t.Fatalf("the session still lives: %v", err)
		}
		for _, l := range []*lockbroker.Lease{a, b} {
			st := lockStatus(t, c, l.Key())
			if !st.Held || st.Owner != l.Owner() || st.Token != l.Token() || st.Session != id {
				t.Fatalf("%s is held by the same owner and token after 10 s: %+v", l.Key(), st)
			}
		}
		keepalives := rec.count(func(r string) bool { return strings.HasSuffix(r, "/keepalive") })
		if want := int(3 * time.Since(held) / ttl); keepalives < want-2 {
			t.Fatalf("about one keepalive every third of the TTL: %d in %v", keepalives, time.Since(held))
		}
		if renewals := rec.count(func(r string) bool { return strings.HasSuffix(r, "/renew") }); renewals != 0 {
			t.Fatalf("no lease of a session is renewed on its own: %d renewals", renewals)
		}

		must(t, a.Release(ctx), "Release of one lease of the session")
		if st := lockStatus(t, c, first); st.Held {
			t.Fatalf("the released key is free at once: %+v", st)
		}
		if st := lockStatus(t, c, second); !st.Held || st.Token != b.Token() {
			t.Fatalf("the other key stays held: %+v", st)
		}
	}()

	if st := lockStatus(t, c, second); st.Held {
		t.Fatalf("closing the session (defer) released its remaining lease: %+v", st)
	}
	_, err := c.SessionStatus(ctx, id)
	wantIs(t, err, lockbroker.ErrSessionNotFound, "the closed session's status")
	if e := asError(t, err); e.Status != 404 {
		t.Fatalf("a closed session answers 404: %+v", e)
	}
}

func TestC23SessionLost(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 60*time.Second)
	key := keyFor(t, "job")
	const ttl = 3 * time.Second
	s, err := c.Session(ctx, ttl)
	must(t, err, "Session")
	defer s.Close(ctx)
	lease, err := s.Lock(ctx, key)
	must(t, err, "Lock in the session")

	// Closed from outside: the test's own DELETE /v1/sessions/{id}.
	closed, err := c.CloseSession(ctx, s.ID())
	must(t, err, "CloseSession from outside")
	ended := time.Now()
	if closed.Released != 1 {
		t.Fatalf("the close released the session's lease: %+v", closed)
	}
	next, err := c.Lock(ctx, key, lockbroker.Wait(5*time.Second), lockbroker.TTL(10*time.Second))
	must(t, err, "another owner's Lock")
	defer next.Release(ctx)

	select {
	case <-s.Lost():
	case <-time.After(ttl - time.Since(ended)):
		t.Fatal("the session's lost signal fires within one TTL of its end")
	}
	reason := s.Err()
	wantIs(t, reason, lockbroker.ErrLeaseLost, "the session's reason")
	wantIs(t, reason, lockbroker.ErrSessionNotFound, "the session's reason is the broker's answer")
	select {
	case <-lease.Lost():
	case <-time.After(time.Second):
		t.Fatal("the session's lease reports lost with it")
	}
	wantIs(t, lease.Err(), lockbroker.ErrLeaseLost, "the lease's reason")
	if s.Err() != reason {
		t.Fatalf("lost once: the reason stays %v, not %v", reason, s.Err())
	}

	if err := s.Close(ctx); err != nil {
		wantIs(t, err, lockbroker.ErrLeaseLost, "closing a lost session says it was lost")
	}
	if err := lease.Release(ctx); err != nil {
		wantIs(t, err, lockbroker.ErrLeaseLost, "releasing a lease of a lost session says it was lost")
	}
	st := lockStatus(t, c, key)
	if !st.Held || st.Owner != next.Owner() || st.Token != next.Token() || st.Session != "" {
		t.Fatalf("the new holder keeps its lease: %+v", st)
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

// Not a scenario of its own: C06's rule for a session. When no keepalive can
// be confirmed, the session and its leases are lost before the TTL has
// passed since the last confirmed keepalive was sent.
func TestSessionLostWithoutConfirmation(t *testing.T) {
	fwd := startForwarder(t, brokerHost(t))
	c := clientOf(t, "http://"+fwd.addr, need(t, "LOCKBROKER_API_KEY"))
	ctx := testCtx(t, 30*time.Second)
	key := keyFor(t, "job")
	const ttl = 2 * time.Second
	s, err := c.Session(ctx, ttl)
	must(t, err, "Session through the forwarder")
	defer s.Close(ctx)
	lease, err := s.Lock(ctx, key)
	must(t, err, "Lock in the session")
	eventually(t, 5*time.Second, "a keepalive went through", func() (bool, error) {
		n, _ := fwd.answered()
		return n >= 3, nil // the open, the acquire and a keepalive
	})

	fwd.cut.Store(true)
	select {
	case <-s.Lost():
	case <-time.After(3 * ttl):
		t.Fatal("lost fires when no keepalive can be confirmed")
	}
	lost := time.Now()
	_, lastConfirmed := fwd.answered()
	if !lost.Before(lastConfirmed.Add(ttl)) {
		t.Fatalf("lost fired %v after the last confirmed keepalive was sent: not before the TTL (%v)", lost.Sub(lastConfirmed), ttl)
	}
	if e := asError(t, s.Err()); e.Code != lockbroker.CodeLeaseExpired {
		t.Fatalf("lost for want of confirmation: %+v", e)
	}
	eventually(t, time.Second, "the lease is lost with its session", func() (bool, error) {
		return lease.Err() != nil, nil
	})
	// The broker ends the session, and its lease, in its own time.
	freeSoon(t, newClient(t), key, 5*time.Second)
}
