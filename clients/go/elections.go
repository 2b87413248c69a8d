package lockbroker

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"
)

// Leadership is the leadership of an election, held: a Lease whose token is
// the term and whose owner is the candidate. Resign (or Release) hands it on
// to the next candidate in line.
type Leadership struct {
	*Lease
	// Term is the leadership's fencing token.
	Term uint64
}

// Resign gives the leadership up; the same as Release.
func (l *Leadership) Resign(ctx context.Context) error { return l.Release(ctx) }

// Campaign runs for the leadership of the election name, waiting as Lock
// does while another candidate leads. Owner names the candidate (default: a
// fresh host:pid:n).
func (c *Client) Campaign(ctx context.Context, name string, opts ...AcquireOption) (*Leadership, error) {
	return c.campaign(ctx, name, opts, true)
}

// TryCampaign takes the leadership if nobody leads now; else ErrHeld, as
// TryLock.
func (c *Client) TryCampaign(ctx context.Context, name string, opts ...AcquireOption) (*Leadership, error) {
	return c.campaign(ctx, name, opts, false)
}

// ElectionStatus is the election name's leadership now.
func (c *Client) ElectionStatus(ctx context.Context, name string) (*ElectionStatus, error) {
	var s ElectionStatus
	if err := c.get(ctx, leasePath("elections", name, ""), &s); err != nil {
		return nil, err
	}
	return &s, nil
}

func (c *Client) campaign(ctx context.Context, name string, opts []AcquireOption, wait bool) (*Leadership, error) {
	held := func(candidate string, term uint64, ttl time.Duration) *keyHeld {
		return &keyHeld{kind: "elections", key: name, owner: candidate, token: term, ttl: ttl}
	}
	a := acquisition{
		what: fmt.Sprintf("election %q", name),
		path: leasePath("elections", name, "campaign"),
		body: func(candidate string, t terms, waitMs int64) map[string]any {
			body := t.fields(waitMs)
			body["candidate"] = candidate
			return body
		},
		decode: func(data []byte, candidate string, t terms) (grant, any, error) {
			var a struct {
				Term      uint64    `json:"term"`
				TTLMs     int64     `json:"ttl_ms"`
				ExpiresAt time.Time `json:"expires_at"`
			}
			if err := decodeAnswer(data, &a); err != nil {
				return grant{}, nil, err
			}
			ttl := time.Duration(a.TTLMs) * time.Millisecond
			return grant{held: held(candidate, a.Term, ttl), key: name, token: a.Term, ttl: ttl, expires: a.ExpiresAt}, nil, nil
		},
		find: func(ctx context.Context, c *Client, candidate string, t terms) (*grant, any, error) {
			s, err := c.ElectionStatus(ctx, name)
			if err != nil || s.Leader != candidate {
				return nil, nil, err
			}
			g := grant{held: held(candidate, s.Term, t.ttl), key: name, token: s.Term, ttl: t.ttl}
			if s.ExpiresAt != nil {
				g.expires = *s.ExpiresAt
			}
			return &g, nil, nil
		},
	}
	l, _, err := c.acquire(ctx, a, opts, wait)
	if err != nil {
		return nil, err
	}
	return &Leadership{Lease: l, Term: l.Token()}, nil
}

// LeaderWatch is the leadership of an election as it changes (Observe): C
// receives the leadership when the watch opens, then each change of leader
// (a new term, a vacancy). The watch reopens its stream when the connection
// ends or breaks, and then skips the leadership it already delivered. C is
// closed when the watch's context ends, after Close, or when the broker
// refuses to reopen the stream (Err says which).
type LeaderWatch struct {
	C <-chan ElectionStatus

	cancel context.CancelFunc
	mu     sync.Mutex
	err    error
}

// Err is why C was closed (nil while it is open).
func (w *LeaderWatch) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close stops the watch; C is closed soon after.
func (w *LeaderWatch) Close() { w.cancel() }

// Observe watches the leadership of the election name. It returns once the
// stream is open (or the error of opening it), so that every change from
// then on is seen.
func (c *Client) Observe(ctx context.Context, name string) (*LeaderWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	path := leasePath("elections", name, "observe")
	resp, err := c.open(ctx, call{method: "GET", path: path, idempotent: true})
	if err != nil {
		cancel()
		return nil, err
	}
	ch := make(chan ElectionStatus, 16)
	w := &LeaderWatch{C: ch, cancel: cancel}
	go func() {
		defer close(ch)
		var last *ElectionStatus
		err := c.follow(ctx, resp.Body, path, func() map[string]string { return nil }, func(ev sseEvent) bool {
			if ev.name != "leader" {
				return true
			}
			var s ElectionStatus
			if json.Unmarshal([]byte(ev.data), &s) != nil {
				return true
			}
			if last != nil && last.Leader == s.Leader && last.Term == s.Term {
				return true // a reopened stream first tells what we knew
			}
			last = &s
			select {
			case ch <- s:
				return true
			case <-ctx.Done():
				return false
			}
		})
		if err == nil {
			err = canceled(ctx, false)
		}
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
	}()
	return w, nil
}
