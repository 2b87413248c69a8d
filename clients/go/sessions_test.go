package lockbroker_test

// Sessions: C22, C23 and C24 of clients/CONFORMANCE.md.

import (
	"context"
	"fmt"
	"net/http"
	"sort"
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

func TestC24EveryKindInASession(t *testing.T) {
	rec := newRecorder()
	c := newClient(t, lockbroker.WithHTTPClient(&http.Client{Transport: rec}))
	ctx := testCtx(t, 90*time.Second)
	pool, reading, writing := keyFor(t, "pool"), keyFor(t, "read"), keyFor(t, "write")
	keys := []string{keyFor(t, "m1"), keyFor(t, "m2")}
	election := keyFor(t, "election")
	const ttl = 3 * time.Second

	var id string
	func() {
		s, err := c.Session(ctx, ttl, lockbroker.SessionName(keyFor(t, "session")))
		must(t, err, "Session")
		defer func() { must(t, s.Close(ctx), "Close at scope exit") }()
		id = s.ID()

		// Each kind through the session's own call for it.
		permit, err := s.Semaphore(ctx, pool, 2, lockbroker.Wait(5*time.Second))
		must(t, err, "Semaphore in the session")
		reader, err := s.ReadLock(ctx, reading, lockbroker.Wait(5*time.Second))
		must(t, err, "ReadLock in the session")
		writer, err := s.WriteLock(ctx, writing, lockbroker.Wait(5*time.Second))
		must(t, err, "WriteLock in the session")
		multi, err := s.MultiLock(ctx, keys, lockbroker.Wait(5*time.Second))
		must(t, err, "MultiLock in the session")
		leader, err := s.Campaign(ctx, election, lockbroker.Wait(5*time.Second))
		must(t, err, "Campaign in the session")

		if permit.Permits != 2 || permit.Slot < 0 || permit.Slot > 1 {
			t.Fatalf("a permit of a semaphore of 2: slot %d of %d", permit.Slot, permit.Permits)
		}
		if len(multi.Locks) != 2 || multi.TokenOf(keys[0]) == 0 || multi.TokenOf(keys[1]) == 0 {
			t.Fatalf("both keys of the multi-lock granted with tokens: %+v", multi.Locks)
		}
		if leader.Term == 0 || leader.Term != leader.Token() {
			t.Fatalf("the campaign won a term: %d (token %d)", leader.Term, leader.Token())
		}
		leases := []*lockbroker.Lease{permit.Lease, reader, writer, multi.Lease, leader.Lease}
		for _, l := range leases {
			if l.Token() == 0 {
				t.Fatalf("%s granted with a fencing token", l.Key())
			}
			if l.TTL() != ttl {
				t.Fatalf("%s lasts as long as the session: TTL %v, not %v", l.Key(), l.TTL(), ttl)
			}
		}

		// Held by the same owners and tokens, in the session; returns the
		// storage keys.
		stillHeld := func(when string) map[string]string {
			t.Helper()
			storage := map[string]string{}
			sem, err := c.SemaphoreStatus(ctx, pool)
			must(t, err, "SemaphoreStatus")
			if sem.Permits != 2 || len(sem.Holders) != 1 || sem.Holders[0].Slot != permit.Slot ||
				sem.Holders[0].Owner != permit.Owner() || sem.Holders[0].Token != permit.Token() || sem.Holders[0].Session != id {
				t.Fatalf("%s: the permit is held in the session: %+v", when, sem)
			}
			storage[pool] = sem.StorageKey
			rd, err := c.RWLockStatus(ctx, reading)
			must(t, err, "RWLockStatus")
			if rd.Writer != nil || len(rd.Readers) != 1 || rd.Readers[0].Owner != reader.Owner() ||
				rd.Readers[0].Token != reader.Token() || rd.Readers[0].Session != id {
				t.Fatalf("%s: the read lease is held in the session: %+v", when, rd)
			}
			storage[reading] = rd.StorageKey
			wr, err := c.RWLockStatus(ctx, writing)
			must(t, err, "RWLockStatus")
			if wr.Writer == nil || len(wr.Readers) != 0 || wr.Writer.Owner != writer.Owner() ||
				wr.Writer.Token != writer.Token() || wr.Writer.Session != id {
				t.Fatalf("%s: the write lease is held in the session: %+v", when, wr)
			}
			storage[writing] = wr.StorageKey
			for _, k := range keys {
				st := lockStatus(t, c, k)
				if !st.Held || st.Owner != multi.Owner() || st.Token != multi.TokenOf(k) || st.Session != id {
					t.Fatalf("%s: %s of the multi-lock is held in the session: %+v", when, k, st)
				}
				storage[k] = st.StorageKey
			}
			el, err := c.ElectionStatus(ctx, election)
			must(t, err, "ElectionStatus")
			if el.Leader != leader.Owner() || el.Term != leader.Term {
				t.Fatalf("%s: the campaign leads: %+v", when, el)
			}
			storage[election] = el.StorageKey
			return storage
		}
		storage := stillHeld("granted")

		// The session lists all six leases, with the permit's slot and the
		// rwlock leases' modes.
		slot := permit.Slot
		want := []string{
			sessionLease("semaphore", storage[pool], permit.Token(), &slot, ""),
			sessionLease("rwlock", storage[reading], reader.Token(), nil, "read"),
			sessionLease("rwlock", storage[writing], writer.Token(), nil, "write"),
			sessionLease("lock", storage[keys[0]], multi.TokenOf(keys[0]), nil, ""),
			sessionLease("lock", storage[keys[1]], multi.TokenOf(keys[1]), nil, ""),
			sessionLease("election", storage[election], leader.Term, nil, ""),
		}
		listed := func(when string) {
			t.Helper()
			status, err := c.SessionStatus(ctx, id)
			must(t, err, "SessionStatus")
			var got []string
			for _, l := range status.Leases {
				got = append(got, sessionLease(l.Kind, l.StorageKey, l.Token, l.Slot, l.Mode))
			}
			sort.Strings(got)
			sort.Strings(want)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("%s: the session lists its six leases:\n%s\nnot:\n%s", when, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		}
		listed("granted")

		held := time.Now()
		select { // what is tested: holding past three TTLs with no call of ours
		case <-s.Lost():
			t.Fatalf("session lost while kept alive: %v", s.Err())
		case <-time.After(10 * time.Second):
		}
		for _, l := range leases {
			if err := l.Err(); err != nil {
				t.Fatalf("%s lost while its session lives: %v", l.Key(), err)
			}
		}
		stillHeld("after 10 s")
		listed("after 10 s")
		keepalives := rec.count(func(r string) bool { return strings.HasSuffix(r, "/keepalive") })
		if want := int(3 * time.Since(held) / ttl); keepalives < want-2 {
			t.Fatalf("about one keepalive every third of the TTL: %d in %v", keepalives, time.Since(held))
		}
		if n := rec.count(func(r string) bool { return strings.HasSuffix(r, "/renew") }); n != 0 {
			t.Fatalf("no lease of a session is renewed on its own: %d renewals", n)
		}
	}()

	// The close at scope exit freed every one of them.
	sem, err := c.SemaphoreStatus(ctx, pool)
	must(t, err, "SemaphoreStatus")
	if len(sem.Holders) != 0 {
		t.Fatalf("the semaphore has no holder after the close: %+v", sem)
	}
	for _, k := range []string{reading, writing} {
		rw, err := c.RWLockStatus(ctx, k)
		must(t, err, "RWLockStatus")
		if rw.Writer != nil || len(rw.Readers) != 0 {
			t.Fatalf("%s has no holder after the close: %+v", k, rw)
		}
	}
	for _, k := range keys {
		if st := lockStatus(t, c, k); st.Held {
			t.Fatalf("%s of the multi-lock is free after the close: %+v", k, st)
		}
	}
	el, err := c.ElectionStatus(ctx, election)
	must(t, err, "ElectionStatus")
	if el.Leader != "" || el.Term != 0 {
		t.Fatalf("the election has no leader after the close: %+v", el)
	}
	_, err = c.SessionStatus(ctx, id)
	wantIs(t, err, lockbroker.ErrSessionNotFound, "the closed session's status")
}

// sessionLease is one lease of a session's status, as text to compare.
func sessionLease(kind, storageKey string, token uint64, slot *int, mode string) string {
	s := fmt.Sprintf("%s %s token %d", kind, storageKey, token)
	if slot != nil {
		s += fmt.Sprintf(" slot %d", *slot)
	}
	if mode != "" {
		s += " mode " + mode
	}
	return s
}

// Not a scenario of its own: C22's and C23's rules for the other kinds. A
// session's lease of every kind is released through its own handle, each
// call has an owner of its own, and every lease of a session closed from
// outside reports lost with it, without a release freeing what another
// owner holds now.
func TestSessionLeasesOfEveryKindReleaseAndLose(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 60*time.Second)
	pool, table := keyFor(t, "pool"), keyFor(t, "table")
	keys := []string{keyFor(t, "m1"), keyFor(t, "m2")}
	election := keyFor(t, "election")
	s, err := c.Session(ctx, 3*time.Second)
	must(t, err, "Session")
	defer s.Close(ctx)

	// Two permits of one session are two holders: each call its own owner.
	p1, err := s.TrySemaphore(ctx, pool, 2)
	must(t, err, "TrySemaphore in the session")
	p2, err := s.TrySemaphore(ctx, pool, 2)
	must(t, err, "a second TrySemaphore in the session")
	if p1.Slot == p2.Slot || p1.Owner() == p2.Owner() {
		t.Fatalf("two permits, two owners: %d/%s and %d/%s", p1.Slot, p1.Owner(), p2.Slot, p2.Owner())
	}
	_, err = s.TrySemaphore(ctx, pool, 2)
	wantIs(t, err, lockbroker.ErrSemaphoreFull, "a third permit of 2")
	r1, err := s.TryReadLock(ctx, table)
	must(t, err, "TryReadLock in the session")
	r2, err := s.TryReadLock(ctx, table)
	must(t, err, "a second reader in the session")
	_, err = s.TryWriteLock(ctx, table)
	wantIs(t, err, lockbroker.ErrHeld, "a writer of the session while two of its readers read")
	multi, err := s.TryMultiLock(ctx, keys)
	must(t, err, "TryMultiLock in the session")
	leader, err := s.TryCampaign(ctx, election, lockbroker.Owner("candidate-1"))
	must(t, err, "TryCampaign in the session")
	if leader.Owner() != "candidate-1" {
		t.Fatalf("Owner names the candidate: %s", leader.Owner())
	}
	_, err = s.TryCampaign(ctx, election, lockbroker.Owner("candidate-2"))
	wantIs(t, err, lockbroker.ErrHeld, "another candidate of the session")

	// Released through their own handles, one by one: each is free at once,
	// the others stay held.
	must(t, p1.Release(ctx), "Release of a permit")
	sem, err := c.SemaphoreStatus(ctx, pool)
	must(t, err, "SemaphoreStatus")
	if len(sem.Holders) != 1 || sem.Holders[0].Token != p2.Token() {
		t.Fatalf("one permit released, the other held: %+v", sem)
	}
	must(t, r1.Release(ctx), "Release of a read lease")
	must(t, r2.Release(ctx), "Release of the other read lease")
	w, err := s.TryWriteLock(ctx, table)
	must(t, err, "the write lease once both readers released")
	must(t, multi.Release(ctx), "Release of the multi-lock")
	for _, k := range keys {
		if st := lockStatus(t, c, k); st.Held {
			t.Fatalf("%s is free once the multi-lock is released: %+v", k, st)
		}
	}
	must(t, leader.Resign(ctx), "Resign of the leadership")
	el, err := c.ElectionStatus(ctx, election)
	must(t, err, "ElectionStatus")
	if el.Leader != "" {
		t.Fatalf("nobody leads after the resignation: %+v", el)
	}
	status, err := c.SessionStatus(ctx, s.ID())
	must(t, err, "SessionStatus")
	if len(status.Leases) != 2 {
		t.Fatalf("the permit and the write lease remain in the session: %+v", status.Leases)
	}

	// Held again, then the session closed from outside: every lease of it is
	// lost with the session, and releasing one frees nothing of another's.
	multi, err = s.TryMultiLock(ctx, keys)
	must(t, err, "TryMultiLock again")
	leader, err = s.TryCampaign(ctx, election)
	must(t, err, "TryCampaign again")
	closed, err := c.CloseSession(ctx, s.ID())
	must(t, err, "CloseSession from outside")
	if closed.Released != 5 {
		t.Fatalf("the close released the permit, the write lease, two keys and the leadership: %+v", closed)
	}
	next, err := c.TryWriteLock(ctx, table, lockbroker.TTL(10*time.Second))
	must(t, err, "another owner's write lease")
	defer next.Release(ctx)
	select {
	case <-s.Lost():
	case <-time.After(3 * time.Second):
		t.Fatal("the session's lost signal fires within one TTL of its end")
	}
	for _, l := range []*lockbroker.Lease{p2.Lease, w, multi.Lease, leader.Lease} {
		select {
		case <-l.Lost():
		case <-time.After(time.Second):
			t.Fatalf("%s reports lost with its session", l.Key())
		}
		wantIs(t, l.Err(), lockbroker.ErrLeaseLost, l.Key()+"'s reason")
		if err := l.Release(ctx); err != nil {
			wantIs(t, err, lockbroker.ErrLeaseLost, "releasing a lease of a lost session")
		}
	}
	rw, err := c.RWLockStatus(context.Background(), table)
	must(t, err, "RWLockStatus")
	if rw.Writer == nil || rw.Writer.Token != next.Token() || rw.Writer.Session != "" {
		t.Fatalf("the new writer keeps its lease: %+v", rw)
	}
}
