package lockbroker

import (
	"context"
	"time"
)

// keyHeld is a held lease of one key of any kind: a lock, a permit (with its
// slot), a read or write lease, a leadership (whose owner is the candidate
// and whose token is the term). Renewals and releases differ only in their
// paths and field names.
type keyHeld struct {
	kind  string // locks, semaphores, rwlocks, elections
	key   string
	owner string
	token uint64
	ttl   time.Duration
	// extra goes into renewals and releases (a permit's slot).
	extra map[string]any
}

func (h *keyHeld) election() bool { return h.kind == "elections" }

// ids is who holds what, in the kind's field names.
func (h *keyHeld) ids() map[string]any {
	body := map[string]any{}
	if h.election() {
		body["candidate"], body["term"] = h.owner, h.token
	} else {
		body["owner"], body["token"] = h.owner, h.token
	}
	for k, v := range h.extra {
		body[k] = v
	}
	return body
}

func (h *keyHeld) renew(ctx context.Context, c *Client) (time.Duration, time.Time, error) {
	body := h.ids()
	body["ttl_ms"] = h.ttl.Milliseconds()
	var answer leaseAnswer
	if err := c.post(ctx, leasePath(h.kind, h.key, "renew"), body, renewal, &answer); err != nil {
		return 0, time.Time{}, err
	}
	h.ttl = answer.ttl()
	return h.ttl, answer.ExpiresAt, nil
}

func (h *keyHeld) release(ctx context.Context, c *Client) error {
	action := "release"
	if h.election() {
		action = "resign"
	}
	return c.post(ctx, leasePath(h.kind, h.key, action), h.ids(), releasing, nil)
}

// How a POST about a held lease is sent.
type postKind int

const (
	// renewal: one try (the lease retries on its own schedule); safe to
	// repeat.
	renewal postKind = iota
	// releasing: retried on 503 and on connections never made, never after
	// it was sent (a second release of a re-entered lock would release a
	// second hold).
	releasing
	// reading: a POST that changes nothing (validate).
	reading
)

// post sends body (nil: none) as JSON.
func (c *Client) post(ctx context.Context, path string, body any, how postKind, out any) error {
	cl := call{method: "POST", path: path, idempotent: how != releasing, once: how == renewal}
	if body != nil {
		cl.body = func() any { return body }
	}
	return c.send(ctx, cl, out)
}

func (c *Client) get(ctx context.Context, path string, out any) error {
	return c.send(ctx, call{method: "GET", path: path, idempotent: true}, out)
}

// leasePath is /v1/{kind}/{key}[/{action}].
func leasePath(kind, key, action string) string {
	p := "/v1/" + kind + "/" + segment(key)
	if action != "" {
		p += "/" + action
	}
	return p
}
