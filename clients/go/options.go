package lockbroker

import (
	"crypto/tls"
	"net/http"
	"time"
)

// Option configures a Client (New, FromEnv).
type Option func(*settings)

// settings is what the options set; New turns it into a Client.
type settings struct {
	caFile, certFile, keyFile string
	tlsConfig                 *tls.Config
	httpClient                *http.Client
	retry                     RetryPolicy
	slack                     time.Duration
	identity                  string
}

// DefaultSlack is how long an answer may take beyond the call's own wait by
// default: the broker bounds its database work by db_timeout_ms (2 s by
// default), so this is generous.
const DefaultSlack = 10 * time.Second

// WithCAFile trusts the broker certificates signed by the CA in this PEM file
// (instead of the system's roots). FromEnv reads LOCKBROKER_CA_FILE.
func WithCAFile(path string) Option { return func(s *settings) { s.caFile = path } }

// WithClientCert presents this certificate (PEM, chain allowed) and key to a
// broker that requires mutual TLS. FromEnv reads LOCKBROKER_CLIENT_CERT and
// LOCKBROKER_CLIENT_KEY.
func WithClientCert(certFile, keyFile string) Option {
	return func(s *settings) { s.certFile, s.keyFile = certFile, keyFile }
}

// WithTLSConfig uses this TLS configuration for https:// brokers; the CA and
// certificate files of WithCAFile and WithClientCert are added to a clone of
// it.
func WithTLSConfig(config *tls.Config) Option { return func(s *settings) { s.tlsConfig = config } }

// WithHTTPClient sends every request through hc (its Transport, its
// cookies...: a RoundTripper that traces, a dialer of your own). The client
// sets no Timeout on it (each call is bounded by its context, its wait and
// the slack). The TLS options do not apply to it: configure its transport.
func WithHTTPClient(hc *http.Client) Option { return func(s *settings) { s.httpClient = hc } }

// WithRetry sets how failed calls are retried (default DefaultRetryPolicy).
func WithRetry(policy RetryPolicy) Option { return func(s *settings) { s.retry = policy } }

// WithSlack sets how long an answer may take beyond the call's own wait
// before the try fails with CodeTimeout (default DefaultSlack).
func WithSlack(d time.Duration) Option { return func(s *settings) { s.slack = d } }

// WithIdentity sets the prefix of the owners the client makes up
// (identity:n); default host:pid.
func WithIdentity(identity string) Option { return func(s *settings) { s.identity = identity } }

// AcquireOption configures one acquire (Lock, TryLock, Semaphore, ReadLock,
// MultiLock, Campaign and their Try forms).
type AcquireOption func(*terms)

// terms is what an acquire asks for.
type terms struct {
	ttl      time.Duration
	wait     time.Duration
	waitSet  bool
	owner    string
	priority *int
	// session holds the lease in a session (Session.Lock) in place of a
	// TTL of its own.
	session *Session
}

// DefaultTTL is the lease length when TTL is not given (the broker's own
// default).
const DefaultTTL = 30 * time.Second

// maxWaitPerRequest is the longest wait_ms the broker takes; a longer wait
// is asked for in several requests.
const maxWaitPerRequest = 300 * time.Second

// TTL sets the lease's length (the broker takes 100 ms up to the tenant's
// max_ttl_ms; default DefaultTTL). The lease is renewed every third of it
// while held.
func TTL(d time.Duration) AcquireOption { return func(t *terms) { t.ttl = d } }

// Wait bounds how long a waiting acquire (Lock, Semaphore, ReadLock,
// WriteLock, MultiLock, Campaign) waits in the broker's queue; past it the
// call fails with ErrHeld, carrying the broker's RetryAfter. Without Wait it
// waits until its context ends. Try calls ignore it: they never wait.
func Wait(d time.Duration) AcquireOption {
	return func(t *terms) { t.wait, t.waitSet = d, true }
}

// Owner names the holder (1 to 128 bytes; an election's candidate). The same
// owner acquiring a lock it holds re-enters it: same token, one more hold,
// each released by its own Release. Default: a fresh owner for each call,
// host:pid:n (see WithIdentity).
func Owner(owner string) AcquireOption { return func(t *terms) { t.owner = owner } }

// Priority orders waiters for fairness policies that use it (the built-in
// FIFO does not).
func Priority(p int) AcquireOption { return func(t *terms) { t.priority = &p } }

func collectTerms(opts []AcquireOption) terms {
	t := terms{ttl: DefaultTTL}
	for _, opt := range opts {
		opt(&t)
	}
	return t
}

// fields is the terms' part of an acquire body.
func (t terms) fields(waitMs int64) map[string]any {
	body := map[string]any{"wait_ms": waitMs}
	if t.session != nil {
		// The broker refuses both: the lease lasts as long as the session.
		body["session"] = t.session.ID()
	} else {
		body["ttl_ms"] = t.ttl.Milliseconds()
	}
	if t.priority != nil {
		body["priority"] = *t.priority
	}
	return body
}
