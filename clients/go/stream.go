package lockbroker

import (
	"context"
	"io"
	"time"
)

// follow reads the event stream at path until ctx ends, reopening it when it
// ends or breaks (after a backoff, growing while reopening fails and reset by
// every event received), as a browser's EventSource does. first is the
// stream already opened, if any; header gives the headers of each reopening
// (Last-Event-ID). onEvent gets each event and returns false to stop.
//
// It returns ctx's error as an *Error (CodeCanceled), or the broker's
// refusal to reopen the stream (a 4xx: the key was revoked, the tenant has
// too many streams open).
func (c *Client) follow(ctx context.Context, first io.ReadCloser, path string, header func() map[string]string, onEvent func(sseEvent) bool) error {
	body := first
	failures := 0
	for {
		if body == nil {
			resp, err := c.open(ctx, call{method: "GET", path: path, header: header(), idempotent: true})
			if err != nil {
				if ctx.Err() != nil {
					return canceled(ctx, false)
				}
				if refused(err) {
					return err
				}
				failures++
				if !sleep(ctx, c.retry.Backoff(failures)) {
					return canceled(ctx, false)
				}
				continue
			}
			body = resp.Body
		}
		events := newSSEReader(body)
		for {
			ev, err := events.next()
			if err != nil {
				break
			}
			failures = 0
			if !onEvent(ev) {
				body.Close()
				return nil
			}
		}
		body.Close()
		body = nil
		if ctx.Err() != nil {
			return canceled(ctx, false)
		}
		failures++
		if !sleep(ctx, c.retry.Backoff(failures)) {
			return canceled(ctx, false)
		}
	}
}

// sleep waits d, or less if ctx ends first (then false).
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
