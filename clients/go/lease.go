package lockbroker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// held is what a Lease needs of one kind of lease (a lock, a permit, a read
// or write lease, a leadership, a multi-lock): one renewal, and the release.
type held interface {
	// renew sends one renewal (no retries: the lease times its own) and
	// returns the lease's new length and end by the broker's clock.
	renew(ctx context.Context, c *Client) (time.Duration, time.Time, error)
	// release gives the lease back (resigns a leadership).
	release(ctx context.Context, c *Client) error
}

// minRenewEvery: renewals are never closer together than this, whatever the
// TTL.
const minRenewEvery = 20 * time.Millisecond

// Lease is a held lease (a lock, a semaphore permit, a read or write lease,
// a leadership, a multi-lock), renewed in a goroutine of its own every third
// of its TTL until Release.
//
// The lease is lost (the Lost channel is closed, Err says why) when the
// broker refuses a renewal (the lease expired, was force-released or
// re-granted), or when no renewal was confirmed before the lease could have
// run out. That deadline is counted from when the last confirmed request was
// *sent* (the broker granted or renewed the lease after that instant, so its
// lease lasts at least that long), less a twentieth of the TTL for the
// scheduling of this process: Lost fires before another owner can be granted
// the lease, never after. Stop the work the lease protects when it fires,
// and pass Token to whatever the lease protects (fencing).
//
// A lease held in a Session is not renewed on its own: the session's
// keepalives keep it, and it is lost when the session is (see Session).
//
// Go has no destructors: a lease that is never released is renewed for as
// long as the process runs. Release it, with defer.
type Lease struct {
	client *Client
	held   held
	key    string
	owner  string
	token  uint64
	// session is the session the lease is held in (nil: on its own): it
	// lives, ends and is lost with it.
	session *Session

	ctx  context.Context // ended by Release: stops the renewals
	stop context.CancelFunc
	lost chan struct{}
	done chan struct{} // closed when the renewal goroutine has ended

	mu       sync.Mutex
	ttl      time.Duration
	expires  time.Time
	err      error // why the lease was lost
	released bool
}

// grant is what an acquire's answer says of the lease.
type grant struct {
	held    held
	key     string
	token   uint64
	ttl     time.Duration
	expires time.Time
}

// startLease starts keeping g, asked for at sent and answered at answered.
//
// The lease began after sent, so sent+ttl is a safe end for a request that
// did not wait. One that may have waited in the queue (queued) was granted at
// some unknown time before answered: the lease then assumes the answer took
// at most a tenth of the TTL to arrive, and renews at once to replace that
// assumption with a measured bound.
func (c *Client) startLease(g grant, owner string, sent, answered time.Time, queued bool) *Lease {
	began := sent
	if queued {
		if b := answered.Add(-g.ttl / 10); b.After(began) {
			began = b
		}
	}
	every := renewEvery(g.ttl)
	next := began.Add(every)
	if began.After(sent) {
		next = answered
	}
	l := newLease(c, g, owner)
	go l.keep(began.Add(g.ttl), next)
	return l
}

// newLease is g held by owner, before anything keeps it.
func newLease(c *Client, g grant, owner string) *Lease {
	ctx, stop := context.WithCancel(context.Background())
	return &Lease{
		client:  c,
		held:    g.held,
		key:     g.key,
		owner:   owner,
		token:   g.token,
		ctx:     ctx,
		stop:    stop,
		lost:    make(chan struct{}),
		done:    make(chan struct{}),
		ttl:     g.ttl,
		expires: g.expires,
	}
}

func renewEvery(ttl time.Duration) time.Duration {
	if every := ttl / 3; every > minRenewEvery {
		return every
	}
	return minRenewEvery
}

// Token is the fencing token (a leadership's term): it strictly increases
// with every grant of the key. Pass it to whatever the lease protects, which
// should refuse writes carrying an older one.
func (l *Lease) Token() uint64 { return l.token }

// Key is the key (or the election's name) as it was asked for.
func (l *Lease) Key() string { return l.key }

// Owner is who holds the lease (an election's candidate).
func (l *Lease) Owner() string { return l.owner }

// TTL is the lease's length, as last granted (a session's lease: the
// session's).
func (l *Lease) TTL() time.Duration {
	if l.session != nil {
		return l.session.TTL()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ttl
}

// ExpiresAt is when the lease ends by the broker's clock unless renewed, as
// the last grant or renewal said (a session's lease: the session's last
// keepalive). For display: this machine's clock may differ; Lost is what to
// act on.
func (l *Lease) ExpiresAt() time.Time {
	if l.session != nil {
		return l.session.ExpiresAt()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expires
}

// Lost is closed when the lease is lost (see Lease). It stays open while the
// lease is held, and after a Release that succeeded.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Err is nil while the lease is held (and after a Release that succeeded),
// else why it was lost: an *Error matching ErrLeaseLost, with code
// CodeLeaseLost (the broker refused a renewal; Err holds its answer) or
// CodeLeaseExpired (no renewal was confirmed in time; Err holds the last
// failure).
func (l *Lease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Context returns a copy of parent that is canceled when the lease is lost:
// hand it to the work the lease protects. Call cancel when the work is done.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-l.lost:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// Release stops the renewals and releases the lease (resigns a leadership).
// Only the first call does anything; later ones return nil.
//
// It is meant for defer: when ctx has already ended (the work was canceled,
// its deadline passed), the release is still sent, bounded by the client's
// slack, so that the key is free at once rather than when the TTL runs out.
//
// It returns an error matching ErrLeaseLost when the lease was lost before
// (nothing is sent then: the key may be someone else's now) or when the
// broker answers that this owner no longer holds it; the call's own error
// (ErrUnavailable, ErrOutcomeUnknown...) when the release could not be
// made, in which case the lease runs out by its TTL.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return nil
	}
	l.released = true
	l.mu.Unlock()
	l.stop()
	<-l.done
	if err := l.Err(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), l.client.slack)
		defer cancel()
	}
	err := l.held.release(ctx, l.client)
	if errors.Is(err, ErrLeaseLost) {
		l.lose(lostError(err))
	}
	return err
}

// keep renews the lease until Release or until it is lost. deadline is when
// the lease surely ends by this machine's clock unless renewed; next is when
// to renew first.
func (l *Lease) keep(deadline, next time.Time) {
	defer close(l.done)
	every := renewEvery(l.ttl)
	retryEvery := every / 4
	if retryEvery < minRenewEvery {
		retryEvery = minRenewEvery
	}
	margin := l.ttl / 20
	var lastErr error
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-timer.C:
		}
		lostAt := deadline.Add(-margin)
		sent := time.Now()
		if !sent.Before(lostAt) {
			l.lose(expiredError(lastErr))
			return
		}
		ctx, cancel := context.WithDeadline(l.ctx, lostAt)
		ttl, expires, err := l.held.renew(ctx, l.client)
		cancel()
		if l.ctx.Err() != nil {
			return // released meanwhile
		}
		switch {
		case err == nil:
			deadline = sent.Add(ttl)
			next = sent.Add(every)
			l.mu.Lock()
			l.ttl, l.expires = ttl, expires
			l.mu.Unlock()
		case refused(err):
			l.lose(lostError(err))
			return
		default:
			lastErr = err
			next = time.Now().Add(retryEvery)
			if next.After(lostAt) {
				next = lostAt
			}
		}
		timer.Reset(time.Until(next))
	}
}

// refused: the broker answered the renewal with a refusal that will not
// change (a 4xx other than 429): the lease is gone.
func refused(err error) bool {
	e := asError(err)
	return e != nil && e.Status >= 400 && e.Status < 500 && e.Status != 429
}

func (l *Lease) lose(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return
	}
	l.err = err
	close(l.lost)
}

// lostError is the loss of a lease the broker refused.
func lostError(cause error) error {
	e := &Error{Code: CodeLeaseLost, Message: "the broker refused the lease", Err: cause}
	if c := asError(cause); c != nil {
		e.Status = c.Status
		e.Message = fmt.Sprintf("the broker refused the lease (%s)", c.Code)
	}
	return e
}

// expiredError is the loss of a lease no renewal was confirmed for in time.
func expiredError(last error) error {
	msg := "no renewal was confirmed before the lease could have run out"
	if last != nil {
		msg += " (last failure: " + last.Error() + ")"
	}
	return &Error{Code: CodeLeaseExpired, Message: msg, Err: last}
}
