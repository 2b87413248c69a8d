package lockbroker

import (
	"context"
	"time"
)

// sessionHeld is a session seen as a held lease, so that a Session is kept
// by the same Lease machinery as every other lease: a keepalive every third
// of its TTL, and lost (Lost, Err) when the broker refuses one (404
// session_not_found: it ended) or when none is confirmed before the session
// could have expired, counted from when the last confirmed one was sent.
type sessionHeld struct {
	id  string
	ttl time.Duration // fixed when it was opened: keepalives do not change it
}

// renew sends one keepalive.
func (h *sessionHeld) renew(ctx context.Context, c *Client) (time.Duration, time.Time, error) {
	var answer struct {
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := c.post(ctx, sessionPath(h.id, "keepalive"), nil, renewal, &answer); err != nil {
		return 0, time.Time{}, err
	}
	return h.ttl, answer.ExpiresAt, nil
}

// release closes the session (the broker releases every lease of it).
func (h *sessionHeld) release(ctx context.Context, c *Client) error {
	_, err := c.closeSession(ctx, h.id)
	return err
}

// sessionPath is /v1/sessions/{id}[/{action}].
func sessionPath(id, action string) string {
	p := "/v1/sessions/" + segment(id)
	if action != "" {
		p += "/" + action
	}
	return p
}
