package lockbroker

import (
	"errors"
	"testing"
	"time"
)

func TestBackoffGrowsWithJitterWithinBounds(t *testing.T) {
	p := RetryPolicy{Attempts: 10, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	seen := map[time.Duration]bool{}
	for i := 0; i < 50; i++ {
		first, third := p.Backoff(1), p.Backoff(3)
		if first < 50*time.Millisecond || first > 100*time.Millisecond {
			t.Fatalf("the first delay is half to all of 100 ms: %v", first)
		}
		if third < 200*time.Millisecond || third > 400*time.Millisecond {
			t.Fatalf("the third is half to all of 400 ms: %v", third)
		}
		if p.Backoff(40) > time.Second {
			t.Fatal("capped")
		}
		seen[first] = true
	}
	if len(seen) < 10 {
		t.Fatalf("jittered: only %d distinct delays in 50", len(seen))
	}
}

func TestHintsAreHonoured(t *testing.T) {
	p := DefaultRetryPolicy()
	limited := &Error{Status: 429, Code: CodeRateLimited, RetryAfter: 5 * time.Second}
	if d := p.delay(1, limited); d < 5*time.Second || d > 6*time.Second {
		t.Fatalf("a 429 waits its whole hint (and a little): %v", d)
	}
	busy := &Error{Status: 503, Code: CodeUnavailable, RetryAfter: time.Minute}
	if d := p.delay(1, busy); d != p.MaxDelay {
		t.Fatalf("a 503's hint is capped: %v", d)
	}
}

func TestRetryableFailures(t *testing.T) {
	acquire := call{idempotent: false}
	status := call{idempotent: true}
	cases := []struct {
		err       *Error
		cl        call
		retry     bool
		settledAs error
	}{
		{&Error{Status: 503, Code: CodeUnavailable}, acquire, true, ErrUnavailable},
		{&Error{Status: 429, Code: CodeRateLimited, RetryAfter: time.Second}, acquire, true, ErrRateLimited},
		{&Error{Status: 409, Code: CodeLockHeld}, acquire, false, ErrHeld},
		{&Error{Status: 400, Code: CodeBadRequest}, status, false, ErrBadRequest},
		{&Error{Code: CodeUnreachable}, acquire, true, ErrUnreachable},
		{&Error{Code: CodeUnreachable, sent: true}, acquire, false, ErrOutcomeUnknown},
		{&Error{Code: CodeUnreachable, sent: true}, status, true, ErrUnreachable},
		{&Error{Code: CodeTimeout, sent: true}, acquire, false, ErrOutcomeUnknown},
		{&Error{Code: CodeTLS}, status, false, ErrTLS},
	}
	for _, tc := range cases {
		if got := retryable(tc.err, tc.cl); got != tc.retry {
			t.Errorf("%v (idempotent %v): retryable %v, want %v", tc.err, tc.cl.idempotent, got, tc.retry)
		}
		if got := settled(tc.err, tc.cl); !errors.Is(got, tc.settledAs) {
			t.Errorf("%v (idempotent %v): ends as %v, want %v", tc.err, tc.cl.idempotent, got, tc.settledAs)
		}
	}
}

func TestErrorsMatchTheirSentinels(t *testing.T) {
	full := &Error{Status: 409, Code: CodeSemaphoreFull}
	if !errors.Is(full, ErrHeld) || !errors.Is(full, ErrSemaphoreFull) || !errors.Is(full, ErrConflict) || errors.Is(full, ErrLeaseLost) {
		t.Fatal("a full semaphore is held, full, a conflict, and not lost")
	}
	newer := &Error{Status: 429, Code: "some_new_code"}
	if !errors.Is(newer, ErrThrottled) {
		t.Fatal("an unknown code is matched by its status")
	}
	if errors.Is(&Error{Status: 500, Code: "other"}, ErrPolicy) {
		t.Fatal("a 500 that is not policy_error is not ErrPolicy")
	}
}

func TestAnswerErrors(t *testing.T) {
	e := answerError(429, []byte(`{"error": {"code": "rate_limited", "message": "slow down", "retry_after_ms": 480}}`), "1")
	if e.Code != CodeRateLimited || e.RetryAfter != 480*time.Millisecond || e.Message != "slow down" {
		t.Fatalf("the envelope: %+v", e)
	}
	e = answerError(429, []byte(`{"error": {"code": "rate_limited", "message": "slow down"}}`), "2")
	if e.RetryAfter != 2*time.Second {
		t.Fatalf("Retry-After when the body has no hint: %+v", e)
	}
	e = answerError(503, []byte("<html>bad gateway</html>"), "")
	if e.Code != CodeUnavailable || !errors.Is(e, ErrUnavailable) {
		t.Fatalf("a proxy's 503 page: %+v", e)
	}
	e = answerError(502, []byte("<html>bad gateway</html>"), "")
	if e.Code != CodeUnexpected {
		t.Fatalf("a proxy's 502 page: %+v", e)
	}
}

func TestKeysAreOnePathSegment(t *testing.T) {
	if got := segment("a/b c%é"); got != "a%2Fb%20c%25%C3%A9" {
		t.Fatalf("escaped: %s", got)
	}
	if got := leasePath("locks", "jobs/1", "acquire"); got != "/v1/locks/jobs%2F1/acquire" {
		t.Fatalf("path: %s", got)
	}
}

func TestDeadlockAnswerIsTypedAndNotRetried(t *testing.T) {
	e := answerError(409, []byte(`{"error": {"code": "deadlock", "message": "a cycle", "cycle": [
		{"session": "sb", "owner": "ob", "kind": "lock", "storage_key": "k1"},
		{"session": "sa", "owner": "oa", "kind": "semaphore", "storage_key": "k2"}]}}`), "")
	if retryable(e, call{}) || retryable(e, call{idempotent: true}) {
		t.Fatal("a deadlock is never retried")
	}
	err := typed(e)
	var dl *DeadlockError
	if !errors.As(err, &dl) || dl.Message != "a cycle" {
		t.Fatalf("a *DeadlockError: %T %v", err, err)
	}
	want := []CycleStep{{"sb", "ob", "lock", "k1"}, {"sa", "oa", "semaphore", "k2"}}
	if len(dl.Cycle) != 2 || dl.Cycle[0] != want[0] || dl.Cycle[1] != want[1] {
		t.Fatalf("the cycle: %+v", dl.Cycle)
	}
	if !errors.Is(err, ErrDeadlock) || !errors.Is(err, ErrConflict) || errors.Is(err, ErrHeld) {
		t.Fatalf("matches ErrDeadlock and ErrConflict, not ErrHeld: %v", err)
	}
	var base *Error
	if !errors.As(err, &base) || base.Status != 409 || base.Code != CodeDeadlock {
		t.Fatalf("unwraps to its *Error: %+v", base)
	}
	if typed(typed(e)) == nil || typed(&Error{Status: 409, Code: CodeLockHeld}).(*Error).Code != CodeLockHeld {
		t.Fatal("other errors stay as they are")
	}
}
