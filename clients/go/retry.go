package lockbroker

import (
	"math/rand"
	"sync"
	"time"
)

// RetryPolicy says how failed calls are tried again: after a 503
// (unavailable: nothing was granted) and after a connection that could not
// be made (nothing was sent), with exponential backoff and jitter; after a
// 429 once the broker's hint (retry_after_ms, Retry-After) has passed. A
// connection that broke after the request was sent is retried only for calls
// that are safe to repeat (status reads, renewals, releases), never for an
// acquire. No other 4xx is ever retried: asking again gets the same answer.
//
// Every retry also fits in the call's context: when the next try could not
// start before the context's deadline, the call fails at once with the last
// error (ErrUnavailable, ErrRateLimited...) instead of sleeping into the
// deadline.
type RetryPolicy struct {
	// Attempts is the number of tries in all, the first included; 1 never
	// retries.
	Attempts int
	// BaseDelay is the delay before the first retry; it doubles with each
	// one, and each delay is drawn between half of it and all of it (so
	// clients that failed together do not retry together).
	BaseDelay time.Duration
	// MaxDelay bounds the backoff, and a 503's retry hint.
	MaxDelay time.Duration
}

// DefaultRetryPolicy rides out a broker restart or a database failover of a
// second or two: 5 tries, 100 ms doubling, at most 2 s apart.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Attempts: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: 2 * time.Second}
}

// Backoff is the delay before retry number n (1 for the first retry) when
// the broker gave no hint: BaseDelay·2^(n-1), capped at MaxDelay, then
// jittered to between half of it and all of it.
func (p RetryPolicy) Backoff(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := p.BaseDelay
	for i := 1; i < n && d < p.MaxDelay; i++ {
		d *= 2
	}
	if d > p.MaxDelay {
		d = p.MaxDelay
	}
	return jitter(d, 0.5, 1.0)
}

// delay is the wait before retry n after err: the broker's hint for a 429
// (honoured in full, plus up to a fifth more so that the clients it held
// back do not all come back at once), the larger of the backoff and the
// hint (capped) for a 503, the backoff otherwise.
func (p RetryPolicy) delay(n int, err *Error) time.Duration {
	backoff := p.Backoff(n)
	switch {
	case err.Status == 429 && err.RetryAfter > 0:
		return jitter(err.RetryAfter, 1.0, 1.2)
	case err.RetryAfter > backoff:
		if err.RetryAfter > p.MaxDelay {
			return p.MaxDelay
		}
		return err.RetryAfter
	}
	return backoff
}

var (
	randMu sync.Mutex
	// random is seeded per process: Go 1.19's global source is not.
	random = rand.New(rand.NewSource(time.Now().UnixNano()))
)

// jitter draws a duration between lo·d and hi·d.
func jitter(d time.Duration, lo, hi float64) time.Duration {
	randMu.Lock()
	f := lo + random.Float64()*(hi-lo)
	randMu.Unlock()
	return time.Duration(float64(d) * f)
}
