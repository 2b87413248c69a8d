package lockbroker_test

// Deadlocks: C25 of clients/CONFORMANCE.md.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

func TestC25Deadlock(t *testing.T) {
	rec := newRecorder()
	c := newClient(t, lockbroker.WithHTTPClient(&http.Client{Transport: rec}))
	ctx := testCtx(t, 60*time.Second)
	k1, k2 := keyFor(t, "k1"), keyFor(t, "k2")
	const ttl = 10 * time.Second

	a, err := c.Session(ctx, ttl)
	must(t, err, "session A")
	defer a.Close(ctx)
	b, err := c.Session(ctx, ttl)
	must(t, err, "session B")
	defer b.Close(ctx)
	_, err = a.Lock(ctx, k1)
	must(t, err, "A locks k1")
	_, err = b.Lock(ctx, k2)
	must(t, err, "B locks k2")

	type result struct {
		lease *lockbroker.Lease
		err   error
	}
	aWaits := make(chan result, 1)
	go func() {
		l, err := a.Lock(ctx, k2, lockbroker.Wait(10*time.Second))
		aWaits <- result{l, err}
	}()
	var aWaiter queuedWaiter
	eventually(t, 5*time.Second, "A's acquire of k2 waits", func() (bool, error) {
		ws, err := lockWaiters(ctx, t, k2)
		if err != nil || len(ws) != 1 || ws[0].Session != a.ID() {
			return false, err
		}
		aWaiter = ws[0]
		return true, nil
	})

	acquiresOfK1 := func() int {
		return rec.count(func(r string) bool {
			return strings.HasPrefix(r, "POST ") && strings.HasSuffix(r, "/"+url.PathEscape(k1)+"/acquire")
		})
	}
	before := acquiresOfK1()
	start := time.Now()
	_, err = b.Lock(ctx, k1, lockbroker.Wait(10*time.Second))
	if took := time.Since(start); took >= 2*time.Second {
		t.Fatalf("the deadlock is refused at once, not after %v", took)
	}
	var dl *lockbroker.DeadlockError
	if !errors.As(err, &dl) {
		t.Fatalf("B's acquire of k1 fails with a *DeadlockError, not %T: %v", err, err)
	}
	wantIs(t, err, lockbroker.ErrDeadlock, "B's acquire of k1")
	wantIs(t, err, lockbroker.ErrConflict, "B's acquire of k1")
	if errors.Is(err, lockbroker.ErrHeld) {
		t.Fatalf("a deadlock is not a held lock: %v", err)
	}
	if e := asError(t, err); e.Status != 409 || e.Code != lockbroker.CodeDeadlock {
		t.Fatalf("409 deadlock: %+v", e)
	}
	if n := acquiresOfK1() - before; n != 1 {
		t.Fatalf("the deadlock is not retried: %d acquires of k1 sent", n)
	}
	sk1, sk2 := lockStatus(t, c, k1).StorageKey, lockStatus(t, c, k2).StorageKey
	if len(dl.Cycle) != 2 {
		t.Fatalf("the cycle has two steps: %+v", dl.Cycle)
	}
	if s := dl.Cycle[0]; s.Session != b.ID() || s.Owner == "" || s.Owner == aWaiter.Owner || s.Kind != "lock" || s.StorageKey != sk1 {
		t.Fatalf("the first step is B's session waiting for k1 (%s): %+v", sk1, s)
	}
	if s := dl.Cycle[1]; s.Session != a.ID() || s.Owner != aWaiter.Owner || s.Kind != "lock" || s.StorageKey != sk2 {
		t.Fatalf("the second step is A's session (owner %s) waiting for k2 (%s): %+v", aWaiter.Owner, sk2, s)
	}

	select {
	case r := <-aWaits:
		t.Fatalf("A's acquire still waits: %+v", r)
	default:
	}
	if ws, err := lockWaiters(ctx, t, k2); err != nil || len(ws) != 1 || ws[0].Owner != aWaiter.Owner {
		t.Fatalf("A still waits for k2: %+v (%v)", ws, err)
	}

	must(t, b.Close(ctx), "closing B")
	select {
	case r := <-aWaits:
		must(t, r.err, "A's acquire of k2 after B closed")
		if st := lockStatus(t, c, k2); !st.Held || st.Session != a.ID() || st.Owner != r.lease.Owner() || st.Token != r.lease.Token() {
			t.Fatalf("k2 is A's: %+v", st)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("closing B's session grants k2 to A")
	}
}

// queuedWaiter is one waiter of GET /v1/locks/{key}/waiters.
type queuedWaiter struct {
	Owner   string `json:"owner"`
	Session string `json:"session"`
}

// lockWaiters is the waiters of the lock key, asked with a plain GET (the
// client has no call for it).
func lockWaiters(ctx context.Context, t *testing.T, key string) ([]queuedWaiter, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(need(t, "LOCKBROKER_URL"), "/")+"/v1/locks/"+url.PathEscape(key)+"/waiters", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+need(t, "LOCKBROKER_API_KEY"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("GET waiters: HTTP %d", resp.StatusCode)
	}
	var answer struct {
		Waiters []queuedWaiter `json:"waiters"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return nil, err
	}
	return answer.Waiters, nil
}
