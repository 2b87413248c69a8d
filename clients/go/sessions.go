package lockbroker

import "context"

// Sessions by id: what any process of the tenant may read or do to a
// session, its own or another's (Client.Session opens one and keeps it).

// SessionStatus is the session id now and every lease held in it; an error
// matching ErrSessionNotFound once it has ended (closed or expired).
func (c *Client) SessionStatus(ctx context.Context, id string) (*SessionStatus, error) {
	var s SessionStatus
	if err := c.get(ctx, sessionPath(id, ""), &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListSessions is one page of the tenant's live sessions whose name starts
// with prefix, by name then id.
func (c *Client) ListSessions(ctx context.Context, prefix string, opts ListOptions) (*Page[SessionInfo], error) {
	return list[SessionInfo](ctx, c, "sessions", prefix, opts)
}

// CloseSession ends the session id and releases every lease of it, each key
// handed to its next waiter: the cleanup of a session whose process is gone
// (or a test's). Its holder's Session sees it lost at its next keepalive.
// An error matching ErrSessionNotFound when it had ended already.
func (c *Client) CloseSession(ctx context.Context, id string) (*SessionClosed, error) {
	return c.closeSession(ctx, id)
}

// closeSession sends the DELETE. Repeating it is harmless to the broker, so
// it is retried after a broken connection too (a repeat that finds the
// session closed answers 404: the leases are gone either way).
func (c *Client) closeSession(ctx context.Context, id string) (*SessionClosed, error) {
	var closed SessionClosed
	if err := c.send(ctx, call{method: "DELETE", path: sessionPath(id, ""), idempotent: true}, &closed); err != nil {
		return nil, err
	}
	return &closed, nil
}
