package lockbroker

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// One acquire for every kind of lease: how long to wait (and in how many
// requests), what to do when the answer never came (find out by status,
// never send it again blindly), and what to do when the caller gave up while
// it waited (make sure no lease is left behind).

// acquisition is one kind's acquire of one key.
type acquisition struct {
	// what names it in messages: `lock "nightly"`.
	what string
	path string
	// body is the request for owner, waiting up to waitMs.
	body func(owner string, t terms, waitMs int64) map[string]any
	// decode reads a 200 answer.
	decode func(data []byte, owner string, t terms) (grant, any, error)
	// find looks the owner up in the lease's status: its grant if it holds
	// it, nil if not.
	find func(ctx context.Context, c *Client, owner string, t terms) (*grant, any, error)
}

// acquire takes the lease a describes for a fresh owner (or Owner's),
// waiting (Wait, else until ctx ends) if wait, else trying once. It returns
// the lease and the kind's decoded answer (or what find saw).
func (c *Client) acquire(ctx context.Context, a acquisition, opts []AcquireOption, wait bool) (*Lease, any, error) {
	t := collectTerms(opts)
	owner := c.newOwner(t)
	var until time.Time // the end of the caller's Wait; zero: until ctx ends
	if wait && t.waitSet {
		until = time.Now().Add(t.wait)
	}
	for {
		waitFor, capped := time.Duration(0), false
		if wait {
			waitFor, capped = c.waitFor(ctx, until)
		}
		ends := time.Now().Add(waitFor)
		body := func() any {
			// A retry (after a 503) asks only for what is left of the wait.
			left := time.Until(ends)
			if left < 0 || waitFor == 0 {
				left = 0
			}
			return a.body(owner, t, left.Milliseconds())
		}
		sent := time.Now()
		_, data, err := c.exchange(ctx, call{method: "POST", path: a.path, body: body, wait: waitFor}, false)
		if err == nil {
			g, answer, err := a.decode(data, owner, t)
			if err != nil {
				return nil, nil, err
			}
			return c.begin(g, owner, t, sent, time.Now(), waitFor > 0), answer, nil
		}
		e := asError(err)
		switch {
		case e == nil:
		case e.Code == CodeOutcomeUnknown:
			return c.findOut(ctx, a, owner, t, sent, e)
		case e.Code == CodeCanceled && e.sent:
			go c.abandon(a, owner, t)
			return nil, nil, e
		case errors.Is(e, ErrHeld) && capped && ctx.Err() == nil && (until.IsZero() || time.Now().Before(until)):
			continue // a wait longer than one request may ask for: ask again
		}
		return nil, nil, typed(err) // a deadlock as a *DeadlockError, never asked again
	}
}

// begin keeps a granted lease: on its own (renewed every third of its TTL),
// or, when it was asked for in a session, for as long as the session lives
// (the broker refuses renewals of a session's lease).
func (c *Client) begin(g grant, owner string, t terms, sent, answered time.Time, queued bool) *Lease {
	if t.session != nil {
		return t.session.adopt(g, owner)
	}
	return c.startLease(g, owner, sent, answered, queued)
}

// waitFor is the wait_ms of the next request of a waiting acquire: what is
// left of the caller's Wait and of ctx (less the time the answer takes to
// come back), at most what one request may ask for (capped then).
func (c *Client) waitFor(ctx context.Context, until time.Time) (time.Duration, bool) {
	w := maxWaitPerRequest
	if !until.IsZero() {
		if left := time.Until(until); left < w {
			w = left
		}
	}
	if deadline, ok := ctx.Deadline(); ok {
		room := time.Until(deadline)
		margin := room / 10
		if margin < 20*time.Millisecond {
			margin = 20 * time.Millisecond
		}
		if margin > 500*time.Millisecond {
			margin = 500 * time.Millisecond
		}
		if room-margin < w {
			w = room - margin
		}
	}
	if w < 0 {
		w = 0
	}
	return w, w == maxWaitPerRequest
}

// findOut settles an acquire whose answer never came: the lease's status
// says whether this owner holds it (owners are unique per call unless the
// caller named one). Held: the lease is returned (and renewed at once, to
// measure it). Not held, or the status could not be read: ErrOutcomeUnknown.
func (c *Client) findOut(ctx context.Context, a acquisition, owner string, t terms, sent time.Time, cause *Error) (*Lease, any, error) {
	fctx, cancel := context.WithTimeout(ctx, c.slack)
	defer cancel()
	g, seen, err := a.find(fctx, c, owner, t)
	if err != nil {
		return nil, nil, &Error{
			Code:    CodeOutcomeUnknown,
			Message: fmt.Sprintf("%s: %s; its status could not be read either (%v)", a.what, cause.Message, err),
			Err:     cause.Err,
		}
	}
	if g == nil {
		return nil, nil, &Error{
			Code:    CodeOutcomeUnknown,
			Message: fmt.Sprintf("%s: %s; its status shows it is not held by %s (a late grant is released by the broker)", a.what, cause.Message, owner),
			Err:     cause.Err,
		}
	}
	return c.begin(*g, owner, t, sent, time.Now(), true), seen, nil
}

// abandon makes sure an acquire the caller gave up on while it was in flight
// leaves no lease behind: if the broker granted it meanwhile, it is released.
// (The broker also releases a grant whose client hung up; this covers a grant
// answered just as the caller gave up.)
func (c *Client) abandon(a acquisition, owner string, t terms) {
	ctx, cancel := context.WithTimeout(context.Background(), c.slack)
	defer cancel()
	g, _, err := a.find(ctx, c, owner, t)
	if err != nil || g == nil {
		return
	}
	_ = g.held.release(ctx, c)
}
