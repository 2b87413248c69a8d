package lockbroker

import "context"

// Reader-writer locks: many readers or one writer. A reader is granted while
// no writer holds the key and nobody is queued; a writer while nobody holds
// it and nobody is queued (so a waiting writer is not starved by readers).
// Keys are their own namespace: rwlock "k" is not lock "k". The same owner
// asking again for the mode it holds renews it with the same token; there is
// no upgrade or downgrade.

// ReadLock takes a read lease of key, waiting as Lock does.
func (c *Client) ReadLock(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return c.rwLock(ctx, key, "read", opts, true)
}

// TryReadLock takes a read lease of key if one is granted now; else ErrHeld,
// as TryLock.
func (c *Client) TryReadLock(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return c.rwLock(ctx, key, "read", opts, false)
}

// WriteLock takes the write lease of key, waiting as Lock does.
func (c *Client) WriteLock(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return c.rwLock(ctx, key, "write", opts, true)
}

// TryWriteLock takes the write lease of key if it is free now; else ErrHeld,
// as TryLock.
func (c *Client) TryWriteLock(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return c.rwLock(ctx, key, "write", opts, false)
}

func (c *Client) rwLock(ctx context.Context, key, mode string, opts []AcquireOption, wait bool) (*Lease, error) {
	l, _, err := c.acquire(ctx, lockAcquisition("rwlocks", key, map[string]any{"mode": mode}), opts, wait)
	return l, err
}

// RWLockStatus is the reader-writer lock key now: its writer or readers.
func (c *Client) RWLockStatus(ctx context.Context, key string) (*RWLockStatus, error) {
	var s RWLockStatus
	if err := c.get(ctx, leasePath("rwlocks", key, ""), &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// findRW is owner's read or write lease of key, if it holds one.
func findRW(ctx context.Context, c *Client, key, owner string, t terms) (*grant, any, error) {
	status, err := c.RWLockStatus(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	holders := status.Readers
	if status.Writer != nil {
		holders = append(holders, *status.Writer)
	}
	for _, h := range holders {
		if h.Owner == owner {
			return &grant{
				held:    &keyHeld{kind: "rwlocks", key: key, owner: owner, token: h.Token, ttl: t.ttl},
				key:     key,
				token:   h.Token,
				ttl:     t.ttl,
				expires: h.ExpiresAt,
			}, nil, nil
		}
	}
	return nil, nil, nil
}
