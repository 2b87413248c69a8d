package lockbroker

import (
	"context"
	"fmt"
)

// Permit is a held permit of a semaphore (N holders at once): a Lease with
// its slot.
type Permit struct {
	*Lease
	// Slot is the permit taken, 0 to Permits-1.
	Slot int
	// Permits is the semaphore's size.
	Permits int
}

// Semaphore takes one of permits permits of the semaphore key, waiting as
// Lock does while all are taken (then ErrHeld, which a full semaphore's
// error matches, as well as ErrSemaphoreFull). permits must agree with the
// semaphore's size while anyone holds it (else ErrPermitsMismatch).
func (c *Client) Semaphore(ctx context.Context, key string, permits int, opts ...AcquireOption) (*Permit, error) {
	return c.semaphore(ctx, key, permits, opts, true)
}

// TrySemaphore takes a permit if one is free now; else ErrHeld (and
// ErrSemaphoreFull), as TryLock.
func (c *Client) TrySemaphore(ctx context.Context, key string, permits int, opts ...AcquireOption) (*Permit, error) {
	return c.semaphore(ctx, key, permits, opts, false)
}

// SemaphoreStatus is the semaphore key now: its size and holders.
func (c *Client) SemaphoreStatus(ctx context.Context, key string) (*SemaphoreStatus, error) {
	var s SemaphoreStatus
	if err := c.get(ctx, leasePath("semaphores", key, ""), &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// semaphoreAnswer is a semaphore's grant or renewal.
type semaphoreAnswer struct {
	leaseAnswer
	Slot    int `json:"slot"`
	Permits int `json:"permits"`
}

func (c *Client) semaphore(ctx context.Context, key string, permits int, opts []AcquireOption, wait bool) (*Permit, error) {
	held := func(owner string, token uint64, slot int, t terms) *keyHeld {
		return &keyHeld{kind: "semaphores", key: key, owner: owner, token: token, ttl: t.ttl, extra: map[string]any{"slot": slot}}
	}
	a := acquisition{
		what: fmt.Sprintf("semaphore %q", key),
		path: leasePath("semaphores", key, "acquire"),
		body: func(owner string, t terms, waitMs int64) map[string]any {
			body := t.fields(waitMs)
			body["owner"], body["permits"] = owner, permits
			return body
		},
		decode: func(data []byte, owner string, t terms) (grant, any, error) {
			var a semaphoreAnswer
			if err := decodeAnswer(data, &a); err != nil {
				return grant{}, nil, err
			}
			h := held(owner, a.Token, a.Slot, t)
			h.ttl = a.ttl()
			return grant{held: h, key: key, token: a.Token, ttl: a.ttl(), expires: a.ExpiresAt}, a.Slot, nil
		},
		find: func(ctx context.Context, c *Client, owner string, t terms) (*grant, any, error) {
			status, err := c.SemaphoreStatus(ctx, key)
			if err != nil {
				return nil, nil, err
			}
			for _, h := range status.Holders {
				if h.Owner == owner {
					return &grant{held: held(owner, h.Token, h.Slot, t), key: key, token: h.Token, ttl: t.ttl, expires: h.ExpiresAt}, h.Slot, nil
				}
			}
			return nil, nil, nil
		},
	}
	l, slot, err := c.acquire(ctx, a, opts, wait)
	if err != nil {
		return nil, err
	}
	return &Permit{Lease: l, Slot: slot.(int), Permits: permits}, nil
}
