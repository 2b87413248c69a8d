package lockbroker

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
)

// Event is one item of an EventStream: a change of a lease, or a reset.
type Event struct {
	Change
	// Reset: the broker's history no longer reaches back to where the stream
	// resumed, so changes were missed; the changes that follow start at the
	// oldest it kept. Change is zero then.
	Reset bool
}

// EventStream is every change of the tenant's locks, semaphores and rwlocks
// under a prefix, made through any broker, as it happens (Events). C
// receives them. When the connection ends or breaks, the stream reopens it
// after the last event received (Last-Event-ID), so nothing the broker still
// keeps is missed or repeated. C is closed when the stream's context ends,
// after Close, or when the broker refuses to reopen it (Err says which).
type EventStream struct {
	C <-chan Event

	cancel context.CancelFunc
	mu     sync.Mutex
	lastID uint64
	err    error
}

// Err is why C was closed (nil while it is open).
func (s *EventStream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// LastID is the id of the last change delivered (or the after the stream
// was opened with): where a new stream would resume.
func (s *EventStream) LastID() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastID
}

// Close stops the stream; C is closed soon after.
func (s *EventStream) Close() { s.cancel() }

// Events opens the changes of the tenant's leases whose storage key starts
// with prefix (matched literally), made after the event id after (0: from
// now on). It returns once the stream is open (or the error of opening it:
// ErrThrottled when the tenant has its most streams open on this broker), so
// that every change from then on is in it.
func (c *Client) Events(ctx context.Context, prefix string, after uint64) (*EventStream, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &EventStream{cancel: cancel, lastID: after}
	path := "/v1/events?prefix=" + segment(prefix)
	header := func() map[string]string {
		if id := s.LastID(); id > 0 {
			return map[string]string{"Last-Event-ID": strconv.FormatUint(id, 10)}
		}
		return nil
	}
	resp, err := c.open(ctx, call{method: "GET", path: path, header: header(), idempotent: true})
	if err != nil {
		cancel()
		return nil, err
	}
	ch := make(chan Event, 64)
	s.C = ch
	go func() {
		defer close(ch)
		err := c.follow(ctx, resp.Body, path, header, func(ev sseEvent) bool {
			var out Event
			switch ev.name {
			case "reset":
				out.Reset = true
			case string(EventGranted), string(EventReleased), string(EventExpired), string(EventHandedOff), string(EventForceReleased):
				if json.Unmarshal([]byte(ev.data), &out.Change) != nil {
					return true
				}
				if out.ID == 0 {
					out.ID, _ = strconv.ParseUint(ev.id, 10, 64)
				}
			default:
				return true
			}
			select {
			case ch <- out:
			case <-ctx.Done():
				return false
			}
			if !out.Reset {
				s.mu.Lock()
				s.lastID = out.ID
				s.mu.Unlock()
			}
			return true
		})
		if err == nil {
			err = canceled(ctx, false)
		}
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
	}()
	return s, nil
}
