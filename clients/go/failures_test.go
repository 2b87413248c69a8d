package lockbroker_test

// Failures and retries: C09–C12 of clients/CONFORMANCE.md.

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

// fastRetry is a retry policy whose delays are short enough for a test and
// long enough to measure: 100 ms doubling.
func fastRetry(attempts int) lockbroker.Option {
	return lockbroker.WithRetry(lockbroker.RetryPolicy{Attempts: attempts, BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second})
}

func TestC09RetryOn503AndConnectionFailures(t *testing.T) {
	key := need(t, "LOCKBROKER_API_KEY")
	ctx := testCtx(t, 60*time.Second)

	t.Run("503 twice then forwarded", func(t *testing.T) {
		s := startStandIn(t, func(n int, _ *http.Request) standInAction {
			if n <= 2 {
				return answer503
			}
			return forward
		})
		c := clientOf(t, s.URL, key, fastRetry(5))
		lock := keyFor(t, "job")
		lease, err := c.TryLock(ctx, lock)
		must(t, err, "an acquire answered 503 twice (nothing granted) is retried")
		defer lease.Release(ctx)
		at := s.times()
		if len(at) < 3 {
			t.Fatalf("three tries reached the stand-in, got %d", len(at))
		}
		first, second := at[1].Sub(at[0]), at[2].Sub(at[1])
		// Jittered (TestBackoffGrowsWithJitterWithinBounds draws many): the
		// first delay is 50–100 ms, the second 100–200 ms, plus the
		// exchanges' own time.
		if first < 45*time.Millisecond || first > 180*time.Millisecond || second < 95*time.Millisecond {
			t.Fatalf("the delays grow from about 100 ms: %v, then %v", first, second)
		}
		if got := s.acquireCount(); got != 3 {
			t.Fatalf("the acquire was tried three times, got %d", got)
		}
	})

	t.Run("503 past the deadline", func(t *testing.T) {
		s := startStandIn(t, func(int, *http.Request) standInAction { return answer503 })
		c := clientOf(t, s.URL, key, fastRetry(20))
		const budget = 400 * time.Millisecond
		short, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		start := time.Now()
		_, err := c.LockStatus(short, keyFor(t, "job"))
		took := time.Since(start)
		wantIs(t, err, lockbroker.ErrUnavailable, "503 until the deadline")
		if e := asError(t, err); e.Status != 503 || e.Code != lockbroker.CodeUnavailable {
			t.Fatalf("the broker's 503: %+v", e)
		}
		if took > budget+150*time.Millisecond {
			t.Fatalf("it fails by the deadline (%v), not after: %v", budget, took)
		}
		if n := len(s.times()); n < 2 {
			t.Fatalf("it retried within the deadline: %d tries", n)
		}
	})

	t.Run("connection refused", func(t *testing.T) {
		dead := deadAddr(t)
		c := clientOf(t, "http://"+dead, key, fastRetry(3))
		start := time.Now()
		_, err := c.TryLock(ctx, keyFor(t, "job"))
		took := time.Since(start)
		wantIs(t, err, lockbroker.ErrUnreachable, "nobody listens")
		wantIs(t, err, lockbroker.ErrUnavailable, "nobody listens")
		if errors.Is(err, lockbroker.ErrOutcomeUnknown) {
			t.Fatalf("nothing was sent, so the outcome is known: %v", err)
		}
		// Two retries: 50–100 ms, then 100–200 ms.
		if took < 150*time.Millisecond {
			t.Fatalf("the acquire was retried after growing delays, but failed after %v", took)
		}

		const budget = 250 * time.Millisecond
		short, cancel := context.WithTimeout(ctx, budget)
		defer cancel()
		start = time.Now()
		_, err = clientOf(t, "http://"+dead, key, fastRetry(20)).LockStatus(short, "x")
		took = time.Since(start)
		wantIs(t, err, lockbroker.ErrUnavailable, "nobody listens until the deadline")
		if took > budget+150*time.Millisecond {
			t.Fatalf("it fails by the deadline (%v), not after: %v", budget, took)
		}
	})
}

// deadAddr is a local address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err, "listen")
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestC104xxNotRetried(t *testing.T) {
	count := newCounter()
	hc := &http.Client{Transport: count}
	c := newClient(t, lockbroker.WithHTTPClient(hc), fastRetry(5))
	ctx := testCtx(t, 30*time.Second)
	held := keyFor(t, "held")
	holder, err := c.TryLock(ctx, held)
	must(t, err, "TryLock")
	defer holder.Release(ctx)
	wrongKey := clientOf(t, need(t, "LOCKBROKER_URL"), "not-a-key", lockbroker.WithHTTPClient(hc), fastRetry(5))
	adminC := clientOf(t, need(t, "LOCKBROKER_URL"), need(t, "LOCKBROKER_ADMIN_TOKEN"), lockbroker.WithHTTPClient(hc), fastRetry(5))

	cases := []struct {
		status int
		want   error
		call   func() error
	}{
		{400, lockbroker.ErrBadRequest, func() error {
			_, err := c.TryLock(ctx, keyFor(t, "short"), lockbroker.TTL(10*time.Millisecond))
			return err
		}},
		{401, lockbroker.ErrUnauthenticated, func() error {
			_, err := wrongKey.LockStatus(ctx, held)
			return err
		}},
		{404, lockbroker.ErrNotFound, func() error {
			_, err := adminC.ForceRelease(ctx, "default", keyFor(t, "free"))
			return err
		}},
		{409, lockbroker.ErrHeld, func() error {
			_, err := c.TryLock(ctx, held)
			return err
		}},
		{422, lockbroker.ErrInvalidKey, func() error {
			_, err := c.TryLock(ctx, "bad\x01key")
			return err
		}},
	}
	for _, tc := range cases {
		count.take()
		err := tc.call()
		wantIs(t, err, tc.want, http.StatusText(tc.status))
		if e := asError(t, err); e.Status != tc.status {
			t.Fatalf("HTTP %d: got %+v", tc.status, e)
		}
		if n, _ := count.take(); n != 1 {
			t.Fatalf("HTTP %d is answered after exactly one request, it took %d", tc.status, n)
		}
	}
}

func TestC11AcquireNotRepeatedBlindly(t *testing.T) {
	key := need(t, "LOCKBROKER_API_KEY")
	ctx := testCtx(t, 60*time.Second)

	t.Run("unheard: outcome unknown", func(t *testing.T) {
		s := startStandIn(t, func(_ int, r *http.Request) standInAction {
			if strings.HasSuffix(r.URL.Path, "/acquire") {
				return closeUnheard
			}
			return forward
		})
		c := clientOf(t, s.URL, key, fastRetry(5))
		lock := keyFor(t, "job")
		for _, try := range []func() (*lockbroker.Lease, error){
			func() (*lockbroker.Lease, error) { return c.TryLock(ctx, lock) },
			func() (*lockbroker.Lease, error) { return c.Lock(ctx, lock, lockbroker.Wait(2*time.Second)) },
		} {
			before := s.acquireCount()
			lease, err := try()
			if lease != nil {
				t.Fatal("no lease: the broker never saw the acquire")
			}
			wantIs(t, err, lockbroker.ErrOutcomeUnknown, "the acquire's answer never came")
			if n := s.acquireCount() - before; n != 1 {
				t.Fatalf("exactly one acquire reaches the server, got %d", n)
			}
		}
	})

	t.Run("granted but unheard: found out by status", func(t *testing.T) {
		s := startStandIn(t, func(_ int, r *http.Request) standInAction {
			if strings.HasSuffix(r.URL.Path, "/acquire") {
				return forwardUnheard
			}
			return forward
		})
		c := clientOf(t, s.URL, key, fastRetry(5))
		lock := keyFor(t, "job")
		lease, err := c.TryLock(ctx, lock, lockbroker.TTL(5*time.Second))
		must(t, err, "the status says the grant is ours")
		if n := s.acquireCount(); n != 1 {
			t.Fatalf("exactly one acquire reaches the server, got %d", n)
		}
		st := lockStatus(t, newClient(t), lock)
		if !st.Held || st.Owner != lease.Owner() || st.Token != lease.Token() {
			t.Fatalf("the lease found is the one held: %+v, lease %s/%d", st, lease.Owner(), lease.Token())
		}
		must(t, lease.Release(ctx), "Release")
		if lockStatus(t, newClient(t), lock).Held {
			t.Fatal("released")
		}
	})
}

func TestC12RateLimitHonoured(t *testing.T) {
	count := newCounter()
	limited := clientOf(t, need(t, "LOCKBROKER_URL"), need(t, "LOCKBROKER_LIMITED_API_KEY"),
		lockbroker.WithHTTPClient(&http.Client{Transport: count}), fastRetry(8))
	ctx := testCtx(t, 60*time.Second)
	key := keyFor(t, "job")

	// A burst beyond the tenant's rate (2 a second, burst 2): the calls that
	// meet 429 wait for the hint and succeed within their deadline.
	const burst = 5
	var wg sync.WaitGroup
	errs := make(chan error, burst)
	start := time.Now()
	for i := 0; i < burst; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			_, err := limited.LockStatus(call, key)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err, "a rate-limited call within its deadline")
	}
	_, statuses := count.take()
	if statuses[429] == 0 {
		t.Fatalf("the burst met 429 rate_limited (statuses %v)", statuses)
	}
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Fatalf("the calls waited for the hints: all done in %v", took)
	}

	// A deadline shorter than the hint: the typed error, by the deadline.
	const budget = 100 * time.Millisecond
	var met *lockbroker.Error
	for i := 0; i < 20 && met == nil; i++ {
		call, cancel := context.WithTimeout(ctx, budget)
		start := time.Now()
		_, err := limited.LockStatus(call, key)
		took := time.Since(start)
		cancel()
		if err == nil {
			continue // a token was left: spend it
		}
		wantIs(t, err, lockbroker.ErrRateLimited, "a hint beyond the deadline")
		wantIs(t, err, lockbroker.ErrThrottled, "a 429")
		met = asError(t, err)
		if met.Status != 429 || met.RetryAfter <= 0 {
			t.Fatalf("429 rate_limited with retry_after_ms: %+v", met)
		}
		if took > budget+150*time.Millisecond {
			t.Fatalf("it fails by the deadline (%v), not after: %v", budget, took)
		}
	}
	if met == nil {
		t.Fatal("calls faster than the rate met 429")
	}
}
