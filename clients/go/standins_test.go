package lockbroker_test

// What the scenarios that need the network to misbehave put between the
// client and the broker (CONFORMANCE.md allows them for C06, C09 and C11),
// and the instruments other scenarios observe the client with (a request
// counter, a dialer whose connections the test can cut). The broker itself
// is never replaced: each stand-in forwards to it.

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// forwarder is a TCP forwarder to the broker that the test can cut: once
// cut, it forwards nothing either way, and holds new connections silent.
// It notes when each request that got an answer was forwarded (a request
// is the first bytes from the client after an answer, or on a new
// connection).
type forwarder struct {
	addr string
	cut  atomic.Bool

	mu            sync.Mutex
	lastConfirmed time.Time // when the last answered request came through
	confirmed     int
	open          []net.Conn
}

func startForwarder(t *testing.T, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err, "listen")
	f := &forwarder{addr: ln.Addr().String()}
	var conns sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		f.cut.Store(true)
		f.mu.Lock()
		for _, c := range f.open {
			c.Close()
		}
		f.mu.Unlock()
		conns.Wait()
	})
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			f.track(client)
			conns.Add(1)
			go func() {
				defer conns.Done()
				f.serve(client, target)
			}()
		}
	}()
	return f
}

func (f *forwarder) serve(client net.Conn, target string) {
	defer client.Close()
	if f.cut.Load() {
		f.hold(client)
		return
	}
	server, err := net.Dial("tcp", target)
	if err != nil {
		return
	}
	f.track(server)
	defer server.Close()
	var (
		mu      sync.Mutex
		pending time.Time // when the request now in flight came in
	)
	done := make(chan struct{}, 2)
	pipe := func(from, to net.Conn, up bool) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, 32<<10)
		for {
			// A deadline so that a cut is noticed by an idle pipe too.
			from.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := from.Read(buf)
			if f.cut.Load() {
				if err != nil && !isTimeout(err) {
					return
				}
				continue // read and drop: the connection goes silent
			}
			if n > 0 {
				mu.Lock()
				if up && pending.IsZero() {
					pending = time.Now()
				}
				if !up && !pending.IsZero() {
					f.mu.Lock()
					f.lastConfirmed, f.confirmed = pending, f.confirmed+1
					f.mu.Unlock()
					pending = time.Time{}
				}
				mu.Unlock()
				if _, err := to.Write(buf[:n]); err != nil {
					return
				}
			}
			if err != nil && !isTimeout(err) {
				return
			}
		}
	}
	go pipe(client, server, true)
	go pipe(server, client, false)
	<-done
}

func (f *forwarder) track(conn net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.open = append(f.open, conn)
}

// hold keeps a connection open and silent until the test ends.
func (f *forwarder) hold(conn net.Conn) {
	io.Copy(io.Discard, conn)
}

// answered is how many requests got an answer through the forwarder, and
// when the last of them came through.
func (f *forwarder) answered() (int, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.confirmed, f.lastConfirmed
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// brokerHost is host:port of the plain broker.
func brokerHost(t *testing.T) string {
	u, err := url.Parse(need(t, "LOCKBROKER_URL"))
	must(t, err, "LOCKBROKER_URL")
	return u.Host
}

// standIn is an HTTP server in front of the broker: it answers some
// requests itself (decide says how) and forwards the others. It notes when
// each request arrived.
type standIn struct {
	*httptest.Server
	mu       sync.Mutex
	arrivals []time.Time
	acquires int
}

// standInAction is what a stand-in does with a request.
type standInAction int

const (
	forward        standInAction = iota
	answer503                    // 503 unavailable, the broker's envelope
	closeUnheard                 // read it and close the connection
	forwardUnheard               // forward it, then close without the answer
)

func startStandIn(t *testing.T, decide func(n int, r *http.Request) standInAction) *standIn {
	t.Helper()
	target, err := url.Parse(need(t, "LOCKBROKER_URL"))
	must(t, err, "LOCKBROKER_URL")
	proxy := httputil.NewSingleHostReverseProxy(target)
	s := &standIn{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.arrivals = append(s.arrivals, time.Now())
		n := len(s.arrivals)
		if strings.HasSuffix(r.URL.Path, "/acquire") {
			s.acquires++
		}
		s.mu.Unlock()
		switch decide(n, r) {
		case answer503:
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error": {"code": "unavailable", "message": "a stand-in for a broker whose database is down"}}`)
		case closeUnheard:
			io.Copy(io.Discard, r.Body)
			hangUp(w)
		case forwardUnheard:
			req, _ := http.NewRequestWithContext(context.Background(), r.Method, target.String()+r.URL.RequestURI(), r.Body)
			req.Header = r.Header.Clone()
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			hangUp(w)
		default:
			proxy.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

// hangUp closes the request's connection without a word.
func hangUp(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err == nil {
		conn.Close()
	}
}

func (s *standIn) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.arrivals...)
}

func (s *standIn) acquireCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acquires
}

// counter is a RoundTripper that counts the requests a client sends and the
// statuses it gets.
type counter struct {
	next     http.RoundTripper
	mu       sync.Mutex
	requests int
	statuses map[int]int
}

func newCounter() *counter {
	return &counter{next: http.DefaultTransport.(*http.Transport).Clone(), statuses: map[int]int{}}
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.requests++
	c.mu.Unlock()
	resp, err := c.next.RoundTrip(r)
	if err == nil {
		c.mu.Lock()
		c.statuses[resp.StatusCode]++
		c.mu.Unlock()
	}
	return resp, err
}

// take returns the requests counted since the last take, and the statuses.
func (c *counter) take() (int, map[int]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, s := c.requests, c.statuses
	c.requests, c.statuses = 0, map[int]int{}
	return n, s
}

// cutter is an HTTP client whose connections the test can break.
type cutter struct {
	mu    sync.Mutex
	conns []net.Conn
	dials int
}

func (c *cutter) client() *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err == nil {
				c.mu.Lock()
				c.conns = append(c.conns, conn)
				c.dials++
				c.mu.Unlock()
			}
			return conn, err
		},
	}}
}

// cut closes every connection made so far.
func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

func (c *cutter) dialed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dials
}

// recorder is a RoundTripper that notes the method and path of every
// request a client sends, e.g. "POST /v1/sessions/ID/keepalive".
type recorder struct {
	next http.RoundTripper
	mu   sync.Mutex
	sent []string
}

func newRecorder() *recorder {
	return &recorder{next: http.DefaultTransport.(*http.Transport).Clone()}
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.sent = append(r.sent, req.Method+" "+req.URL.EscapedPath())
	r.mu.Unlock()
	return r.next.RoundTrip(req)
}

// count is how many requests sent so far satisfy match.
func (r *recorder) count(match func(request string) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.sent {
		if match(s) {
			n++
		}
	}
	return n
}
