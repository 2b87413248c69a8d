package lockbroker

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
)

// Lock takes the lock key, waiting in the broker's queue while another owner
// holds it: up to Wait if given, else until ctx ends (in requests of at most
// five minutes each). The lease is renewed every third of its TTL until
// Release:
//
//	lease, err := c.Lock(ctx, "nightly", lockbroker.TTL(30*time.Second), lockbroker.Wait(time.Minute))
//	if err != nil {
//		return err // errors.Is(err, lockbroker.ErrHeld): still held after a minute
//	}
//	defer lease.Release(ctx)
//
// When ctx ends while the request waits, Lock returns an error matching
// context.Canceled (or DeadlineExceeded) and makes sure that no lease is left
// behind: a grant that crossed the cancellation is released. When the answer
// never came (the connection broke after the request was sent), the request
// is not sent again: Lock finds out from the lock's status whether its owner
// got it, and returns ErrOutcomeUnknown if it cannot tell.
func (c *Client) Lock(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	l, _, err := c.acquire(ctx, lockAcquisition("locks", key, nil), opts, true)
	return l, err
}

// TryLock takes the lock key if it is free now (or already this Owner's),
// without waiting. When another owner holds it, it returns a nil lease and
// an *Error matching ErrHeld (its RetryAfter is the broker's hint), as etcd's
// concurrency.Mutex.TryLock answers ErrLocked: "held" is an outcome the
// caller must handle, and Go says so with an error.
//
//	lease, err := c.TryLock(ctx, "nightly")
//	if errors.Is(err, lockbroker.ErrHeld) {
//		return nil // another run is in progress
//	}
func (c *Client) TryLock(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	l, _, err := c.acquire(ctx, lockAcquisition("locks", key, nil), opts, false)
	return l, err
}

// lockAcquisition is the acquire of a lock ("locks") or of a reader-writer
// lock ("rwlocks", extra carrying its mode).
func lockAcquisition(kind, key string, extra map[string]any) acquisition {
	return acquisition{
		what: fmt.Sprintf("%s %q", kind, key),
		path: leasePath(kind, key, "acquire"),
		body: func(owner string, t terms, waitMs int64) map[string]any {
			body := t.fields(waitMs)
			body["owner"] = owner
			for k, v := range extra {
				body[k] = v
			}
			return body
		},
		decode: func(data []byte, owner string, t terms) (grant, any, error) {
			var a leaseAnswer
			if err := decodeAnswer(data, &a); err != nil {
				return grant{}, nil, err
			}
			return grant{
				held:    &keyHeld{kind: kind, key: key, owner: owner, token: a.Token, ttl: a.ttl()},
				key:     key,
				token:   a.Token,
				ttl:     a.ttl(),
				expires: a.ExpiresAt,
			}, data, nil
		},
		find: func(ctx context.Context, c *Client, owner string, t terms) (*grant, any, error) {
			if kind == "rwlocks" {
				return findRW(ctx, c, key, owner, t)
			}
			status, err := c.LockStatus(ctx, key)
			if err != nil || !status.Held || status.Owner != owner {
				return nil, nil, err
			}
			g := grant{
				held:  &keyHeld{kind: kind, key: key, owner: owner, token: status.Token, ttl: t.ttl},
				key:   key,
				token: status.Token,
				ttl:   t.ttl,
			}
			if status.ExpiresAt != nil {
				g.expires = *status.ExpiresAt
			}
			return &g, nil, nil
		},
	}
}

// LockStatus is the lock key now: its holder, token, waiters.
func (c *Client) LockStatus(ctx context.Context, key string) (*LockStatus, error) {
	var s LockStatus
	if err := c.get(ctx, leasePath("locks", key, ""), &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate asks whether token is the live grant of the lock key now: the
// check a fenced write makes before it writes (the answer may be stale on
// arrival; a store that compares tokens itself is stronger).
func (c *Client) Validate(ctx context.Context, key string, token uint64) (*Validity, error) {
	var v Validity
	err := c.post(ctx, leasePath("locks", key, "validate"), map[string]any{"token": token}, reading, &v)
	if err != nil {
		return nil, err
	}
	return &v, nil
}

// History is the lock key's latest events (grants, releases, expiries,
// hand-offs, force-releases), newest first; limit 1 to 1000, 0 for the
// broker's default (100).
func (c *Client) History(ctx context.Context, key string, limit int) ([]HistoryEvent, error) {
	return c.history(ctx, "locks", key, limit)
}

// SemaphoreHistory is History for a semaphore.
func (c *Client) SemaphoreHistory(ctx context.Context, key string, limit int) ([]HistoryEvent, error) {
	return c.history(ctx, "semaphores", key, limit)
}

// RWLockHistory is History for a reader-writer lock.
func (c *Client) RWLockHistory(ctx context.Context, key string, limit int) ([]HistoryEvent, error) {
	return c.history(ctx, "rwlocks", key, limit)
}

func (c *Client) history(ctx context.Context, kind, key string, limit int) ([]HistoryEvent, error) {
	path := leasePath(kind, key, "history")
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var answer struct {
		Events []HistoryEvent `json:"events"`
	}
	if err := c.get(ctx, path, &answer); err != nil {
		return nil, err
	}
	return answer.Events, nil
}

// decodeAnswer reads a 200 answer into out.
func decodeAnswer(data []byte, out any) error {
	if err := json.Unmarshal(data, out); err != nil {
		return &Error{Status: 200, Code: CodeUnexpected, Message: "an answer that is not the API's JSON: " + snippet(data), Err: err}
	}
	return nil
}
