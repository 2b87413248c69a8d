package lockbroker

import (
	"context"
	"fmt"
	"time"
)

// MultiLockEntry is one key of a held multi-lock.
type MultiLockEntry struct {
	Key        string    `json:"key"`
	StorageKey string    `json:"storage_key"`
	Token      uint64    `json:"token"`
	HoldCount  int       `json:"hold_count"`
	ExpiresAt  time.Time `json:"expires_at"`
}

// MultiLease is several locks held as one lease: taken all or none in one
// transaction, renewed and released together. Its Token is the first key's
// in storage-key order; TokenOf gives each key's.
type MultiLease struct {
	*Lease
	// Locks are the keys held, in storage-key order.
	Locks []MultiLockEntry
}

// TokenOf is the fencing token of key (0 if the lease has no such key).
func (m *MultiLease) TokenOf(key string) uint64 {
	for _, l := range m.Locks {
		if l.Key == key {
			return l.Token
		}
	}
	return 0
}

// MultiLock takes the locks keys (1 to 64) all or none, waiting as Lock does
// while any is held by another owner (it queues on the first busy key,
// holding none meanwhile). Keys are taken in storage-key order, so two
// multi-locks never deadlock each other.
func (c *Client) MultiLock(ctx context.Context, keys []string, opts ...AcquireOption) (*MultiLease, error) {
	return c.multiLock(ctx, keys, opts, true)
}

// TryMultiLock takes the locks keys if all are free now; else ErrHeld (and
// none of them is held), as TryLock.
func (c *Client) TryMultiLock(ctx context.Context, keys []string, opts ...AcquireOption) (*MultiLease, error) {
	return c.multiLock(ctx, keys, opts, false)
}

// multiAnswer is a multi-lock's grant or renewal.
type multiAnswer struct {
	Owner string           `json:"owner"`
	TTLMs int64            `json:"ttl_ms"`
	Locks []MultiLockEntry `json:"locks"`
}

// multiHeld is a held multi-lock.
type multiHeld struct {
	owner string
	locks []map[string]any // {key, token}
	ttl   time.Duration
}

func newMultiHeld(owner string, entries []MultiLockEntry, ttl time.Duration) *multiHeld {
	h := &multiHeld{owner: owner, ttl: ttl}
	for _, e := range entries {
		h.locks = append(h.locks, map[string]any{"key": e.Key, "token": e.Token})
	}
	return h
}

func (h *multiHeld) renew(ctx context.Context, c *Client) (time.Duration, time.Time, error) {
	body := map[string]any{"owner": h.owner, "ttl_ms": h.ttl.Milliseconds(), "locks": h.locks}
	var a multiAnswer
	if err := c.post(ctx, "/v1/multilock/renew", body, renewal, &a); err != nil {
		return 0, time.Time{}, err
	}
	h.ttl = time.Duration(a.TTLMs) * time.Millisecond
	return h.ttl, firstExpiry(a.Locks), nil
}

func (h *multiHeld) release(ctx context.Context, c *Client) error {
	return c.post(ctx, "/v1/multilock/release", map[string]any{"owner": h.owner, "locks": h.locks}, releasing, nil)
}

func firstExpiry(entries []MultiLockEntry) time.Time {
	if len(entries) == 0 {
		return time.Time{}
	}
	return entries[0].ExpiresAt
}

func (c *Client) multiLock(ctx context.Context, keys []string, opts []AcquireOption, wait bool) (*MultiLease, error) {
	a := acquisition{
		what: fmt.Sprintf("multi-lock %q", keys),
		path: "/v1/multilock/acquire",
		body: func(owner string, t terms, waitMs int64) map[string]any {
			body := t.fields(waitMs)
			body["owner"], body["keys"] = owner, keys
			return body
		},
		decode: func(data []byte, owner string, t terms) (grant, any, error) {
			var a multiAnswer
			if err := decodeAnswer(data, &a); err != nil {
				return grant{}, nil, err
			}
			if len(a.Locks) == 0 {
				return grant{}, nil, &Error{Status: 200, Code: CodeUnexpected, Message: "a multi-lock granted without keys"}
			}
			ttl := time.Duration(a.TTLMs) * time.Millisecond
			return grant{held: newMultiHeld(owner, a.Locks, ttl), key: a.Locks[0].Key, token: a.Locks[0].Token, ttl: ttl, expires: firstExpiry(a.Locks)}, a.Locks, nil
		},
		find: func(ctx context.Context, c *Client, owner string, t terms) (*grant, any, error) {
			var entries []MultiLockEntry
			for _, key := range keys {
				s, err := c.LockStatus(ctx, key)
				if err != nil {
					return nil, nil, err
				}
				if s.Held && s.Owner == owner {
					e := MultiLockEntry{Key: key, StorageKey: s.StorageKey, Token: s.Token, HoldCount: s.HoldCount}
					if s.ExpiresAt != nil {
						e.ExpiresAt = *s.ExpiresAt
					}
					entries = append(entries, e)
				}
			}
			switch len(entries) {
			case 0:
				return nil, nil, nil
			case len(keys):
				return &grant{held: newMultiHeld(owner, entries, t.ttl), key: entries[0].Key, token: entries[0].Token, ttl: t.ttl, expires: firstExpiry(entries)}, entries, nil
			}
			return nil, nil, fmt.Errorf("%s holds %d of the %d keys", owner, len(entries), len(keys))
		},
	}
	l, locks, err := c.acquire(ctx, a, opts, wait)
	if err != nil {
		return nil, err
	}
	return &MultiLease{Lease: l, Locks: locks.([]MultiLockEntry)}, nil
}
