package lockbroker

import (
	"context"
	"strconv"
)

// Listings: the tenant's live leases of one kind whose storage key starts
// with a prefix (bytes, matched literally: % and _ are not wildcards), in
// storage-key order, a page at a time. A lease live for the whole of a paged
// scan is listed exactly once.

// ListOptions pick a page of a listing.
type ListOptions struct {
	// Limit is the most items of the page, 1 to 1000; 0 for the broker's
	// default (100). A page may hold fewer: follow Next.
	Limit int
	// Cursor is the previous page's Next; "" for the first page.
	Cursor string
}

// ListLocks is one page of the tenant's live locks under prefix.
func (c *Client) ListLocks(ctx context.Context, prefix string, opts ListOptions) (*Page[LockStatus], error) {
	return list[LockStatus](ctx, c, "locks", prefix, opts)
}

// ListSemaphores is one page of the tenant's live semaphores under prefix.
func (c *Client) ListSemaphores(ctx context.Context, prefix string, opts ListOptions) (*Page[SemaphoreStatus], error) {
	return list[SemaphoreStatus](ctx, c, "semaphores", prefix, opts)
}

// ListRWLocks is one page of the tenant's live reader-writer locks under
// prefix.
func (c *Client) ListRWLocks(ctx context.Context, prefix string, opts ListOptions) (*Page[RWLockStatus], error) {
	return list[RWLockStatus](ctx, c, "rwlocks", prefix, opts)
}

// ListElections is one page of the tenant's led elections under prefix.
func (c *Client) ListElections(ctx context.Context, prefix string, opts ListOptions) (*Page[ElectionStatus], error) {
	return list[ElectionStatus](ctx, c, "elections", prefix, opts)
}

// AllLocks is every live lock under prefix, the pages followed (pageSize
// items a request; 0 for the broker's default).
func (c *Client) AllLocks(ctx context.Context, prefix string, pageSize int) ([]LockStatus, error) {
	var all []LockStatus
	opts := ListOptions{Limit: pageSize}
	for {
		page, err := c.ListLocks(ctx, prefix, opts)
		if err != nil {
			return nil, err
		}
		all = append(all, page.Items...)
		if page.Next == "" {
			return all, nil
		}
		opts.Cursor = page.Next
	}
}

func list[T any](ctx context.Context, c *Client, kind, prefix string, opts ListOptions) (*Page[T], error) {
	path := "/v1/" + kind + "?prefix=" + segment(prefix)
	if opts.Limit > 0 {
		path += "&limit=" + strconv.Itoa(opts.Limit)
	}
	if opts.Cursor != "" {
		path += "&cursor=" + segment(opts.Cursor)
	}
	var page Page[T]
	if err := c.get(ctx, path, &page); err != nil {
		return nil, err
	}
	return &page, nil
}
