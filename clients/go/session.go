package lockbroker

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Session keeps many leases alive with one keepalive: the leases taken with
// its calls of every kind (Lock, Semaphore, ReadLock, WriteLock, MultiLock,
// Campaign and their Try forms, the Client's calls of the same names held
// in the session) are not renewed one by one but live as long as the
// session, and end with it (a close, or an expiry when its keepalives stop).
// Hold many keys for one piece of work with it, at the cost of one request
// every third of the TTL whatever their number.
//
//	s, err := c.Session(ctx, 10*time.Second)
//	if err != nil {
//		return err
//	}
//	defer s.Close(ctx) // releases every lease of it
//	a, err := s.Lock(ctx, "orders/17")
//	...
//	p, err := s.Semaphore(ctx, "encoders", 3)
//	...
//	r, err := s.ReadLock(ctx, "config")
//
// The session sends a keepalive in a goroutine of its own every third of
// its TTL, by the rule every Lease renews by: it is lost (Lost is closed,
// Err says why) when the broker answers that it has ended (404
// session_not_found: closed from elsewhere, or expired), at once, or when no
// keepalive was confirmed before it could have expired, counted from when
// the last confirmed one was sent, so that Lost fires before the broker can
// grant its keys to another owner. Every lease of it is lost then too: one
// signal to watch for all of them.
//
// Go has no destructors: a session that is never closed is kept alive for
// as long as the process runs. Close it, with defer.
type Session struct {
	client *Client
	info   SessionInfo
	// keeper sends the keepalives (a Lease over sessionHeld): its Lost is
	// the session's.
	keeper *Lease

	mu     sync.Mutex
	leases map[*Lease]struct{} // held in it, not yet released
	ended  bool                // closed by Close: leases adopted now are gone
}

// SessionOption configures a session (Client.Session).
type SessionOption func(map[string]any)

// SessionName names the session (listings find it by prefix of its name).
func SessionName(name string) SessionOption {
	return func(body map[string]any) { body["name"] = name }
}

// LockDelay keeps the session's keys from being granted again for d after
// the session *expires* (not after a close): the time a holder that lost it
// unawares gets to notice, as Chubby's and Consul's lock-delay. 0 to one
// minute; default none.
func LockDelay(d time.Duration) SessionOption {
	return func(body map[string]any) { body["lock_delay_ms"] = d.Milliseconds() }
}

// Session opens a session that lives ttl without a keepalive (1 s to 1 h; 0
// for the broker's default, 15 s) and keeps it alive until Close.
//
// Opening is not repeated after a connection broke once the request was
// sent (it would open a second session): the error then matches
// ErrOutcomeUnknown, and a session the broker did open holds nothing and
// expires by its TTL.
func (c *Client) Session(ctx context.Context, ttl time.Duration, opts ...SessionOption) (*Session, error) {
	body := map[string]any{}
	if ttl > 0 {
		body["ttl_ms"] = ttl.Milliseconds()
	}
	for _, opt := range opts {
		opt(body)
	}
	var info SessionInfo
	sent := time.Now()
	err := c.send(ctx, call{method: "POST", path: "/v1/sessions", body: func() any { return body }}, &info)
	if err != nil {
		return nil, err
	}
	s := &Session{client: c, info: info, leases: map[*Lease]struct{}{}}
	g := grant{held: &sessionHeld{id: info.ID, ttl: info.TTL()}, key: info.ID, ttl: info.TTL(), expires: info.ExpiresAt}
	s.keeper = c.startLease(g, info.ID, sent, time.Now(), false)
	return s, nil
}

// ID is the session's id (its leases' Session in LockStatus).
func (s *Session) ID() string { return s.info.ID }

// Name is the session's name ("" when it has none).
func (s *Session) Name() string { return s.info.Name }

// TTL is how long the session lives without a keepalive.
func (s *Session) TTL() time.Duration { return s.info.TTL() }

// ExpiresAt is when the session (and every lease of it) ends by the
// broker's clock unless kept alive, as the last keepalive said. For display:
// Lost is what to act on.
func (s *Session) ExpiresAt() time.Time { return s.keeper.ExpiresAt() }

// Lost is closed when the session is lost, and with it every lease of it
// (see Session). It stays open while the session lives, and after a Close
// that succeeded.
func (s *Session) Lost() <-chan struct{} { return s.keeper.Lost() }

// Err is nil while the session lives (and after a Close that succeeded),
// else why it was lost: an *Error matching ErrLeaseLost, with code
// CodeLeaseLost (the broker answered that it had ended; Err holds that
// answer, matching ErrSessionNotFound) or CodeLeaseExpired (no keepalive was
// confirmed in time).
func (s *Session) Err() error { return s.keeper.Err() }

// Context returns a copy of parent that is canceled when the session is
// lost: hand it to the work its leases protect.
func (s *Session) Context(parent context.Context) (context.Context, context.CancelFunc) {
	return s.keeper.Context(parent)
}

// Lock takes the lock key in the session, waiting as Client.Lock does (Wait,
// Owner and Priority apply; TTL does not: the lease lasts as long as the
// session). Each call gets a fresh owner unless Owner names one, so two
// Locks of one key in one session exclude each other as two Client.Locks
// do. Release the lease to free the key before the session ends; its Lost
// is the session's.
//
// The calls of the other kinds below are the same: the Client's call of
// that name, with its options, held in the session.
func (s *Session) Lock(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return s.client.Lock(ctx, key, s.terms(opts)...)
}

// TryLock takes the lock key in the session if it is free now, without
// waiting, as Client.TryLock (ErrHeld when another owner holds it).
func (s *Session) TryLock(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return s.client.TryLock(ctx, key, s.terms(opts)...)
}

// Semaphore takes one of permits permits of the semaphore key in the
// session, waiting as Client.Semaphore does while all are taken. Release the
// permit to give it back before the session ends.
func (s *Session) Semaphore(ctx context.Context, key string, permits int, opts ...AcquireOption) (*Permit, error) {
	return s.client.Semaphore(ctx, key, permits, s.terms(opts)...)
}

// TrySemaphore takes a permit in the session if one is free now; else
// ErrHeld (and ErrSemaphoreFull), as Client.TrySemaphore.
func (s *Session) TrySemaphore(ctx context.Context, key string, permits int, opts ...AcquireOption) (*Permit, error) {
	return s.client.TrySemaphore(ctx, key, permits, s.terms(opts)...)
}

// ReadLock takes a read lease of the reader-writer lock key in the session,
// waiting as Client.ReadLock does.
func (s *Session) ReadLock(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return s.client.ReadLock(ctx, key, s.terms(opts)...)
}

// TryReadLock takes a read lease of key in the session if one is granted
// now; else ErrHeld, as Client.TryReadLock.
func (s *Session) TryReadLock(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return s.client.TryReadLock(ctx, key, s.terms(opts)...)
}

// WriteLock takes the write lease of the reader-writer lock key in the
// session, waiting as Client.WriteLock does.
func (s *Session) WriteLock(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return s.client.WriteLock(ctx, key, s.terms(opts)...)
}

// TryWriteLock takes the write lease of key in the session if it is free
// now; else ErrHeld, as Client.TryWriteLock.
func (s *Session) TryWriteLock(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return s.client.TryWriteLock(ctx, key, s.terms(opts)...)
}

// MultiLock takes the locks keys all or none in the session, waiting as
// Client.MultiLock does. Each key is a lease of the session (its status
// names it); the MultiLease releases them together.
func (s *Session) MultiLock(ctx context.Context, keys []string, opts ...AcquireOption) (*MultiLease, error) {
	return s.client.MultiLock(ctx, keys, s.terms(opts)...)
}

// TryMultiLock takes the locks keys in the session if all are free now;
// else ErrHeld (and none of them is held), as Client.TryMultiLock.
func (s *Session) TryMultiLock(ctx context.Context, keys []string, opts ...AcquireOption) (*MultiLease, error) {
	return s.client.TryMultiLock(ctx, keys, s.terms(opts)...)
}

// Campaign runs for the leadership of the election name in the session,
// waiting as Client.Campaign does while another candidate leads (Owner
// names the candidate). The leadership lasts as long as the session: its
// close or loss hands it to the next candidate in line. Resign to give it up
// before.
func (s *Session) Campaign(ctx context.Context, name string, opts ...AcquireOption) (*Leadership, error) {
	return s.client.Campaign(ctx, name, s.terms(opts)...)
}

// TryCampaign takes the leadership in the session if nobody leads now; else
// ErrHeld, as Client.TryCampaign.
func (s *Session) TryCampaign(ctx context.Context, name string, opts ...AcquireOption) (*Leadership, error) {
	return s.client.TryCampaign(ctx, name, s.terms(opts)...)
}

// terms are opts with the lease held in s: every kind's acquire asks for
// "session" in place of "ttl_ms" (terms.fields), and keeps the grant in s
// (Client.begin).
func (s *Session) terms(opts []AcquireOption) []AcquireOption {
	in := func(t *terms) { t.session = s }
	return append(append([]AcquireOption{}, opts...), in)
}

// Close stops the keepalives and closes the session: the broker releases
// every lease of it at once, each key handed to its next waiter. Only the
// first call does anything; later ones return nil. As Lease.Release, it is
// meant for defer and still closes when ctx has ended (bounded by the
// client's slack).
//
// It returns an error matching ErrLeaseLost when the session was lost before
// or the broker answers that it had ended (its leases are gone; nothing is
// released that another owner holds now), and the call's own error
// (ErrUnavailable...) when the close could not be made: the session and its
// leases then expire by its TTL. Either way its leases are over for this
// process: releasing one afterwards sends nothing.
func (s *Session) Close(ctx context.Context) error {
	err := s.keeper.Release(ctx)
	if errors.Is(err, ErrSessionNotFound) {
		// It had ended before a keepalive could tell: lost, with its leases.
		s.keeper.lose(lostError(err))
		return s.keeper.Err()
	}
	if s.keeper.Err() == nil {
		s.endLeases()
	}
	return err
}
