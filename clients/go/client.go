package lockbroker

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// DefaultURL is the broker FromEnv talks to when LOCKBROKER_URL is unset.
const DefaultURL = "http://127.0.0.1:7420"

// Version is this client's version (the workspace's).
const Version = "0.1.0"

// Client talks to one broker with one bearer token (a tenant's API key, or
// the admin token for ForceRelease). It is safe for concurrent use; its
// connections are pooled and reused.
type Client struct {
	base     string // scheme://host[:port][/prefix], no trailing slash
	apiKey   string
	http     *http.Client
	retry    RetryPolicy
	slack    time.Duration
	identity string
}

// New makes a client of the broker at rawURL (http:// or https://, a path
// prefix allowed) with a tenant's apiKey (empty: no Authorization header).
//
// It fails when the URL is not http(s)://host[:port], or when a TLS file
// cannot be read.
func New(rawURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &Error{Code: CodeConfig, Message: fmt.Sprintf("not an http(s) URL: %q", rawURL), Err: err}
	}
	s := settings{retry: DefaultRetryPolicy(), slack: DefaultSlack}
	for _, opt := range opts {
		opt(&s)
	}
	if s.retry.Attempts < 1 {
		s.retry.Attempts = 1
	}
	hc := s.httpClient
	if hc == nil {
		transport, err := newTransport(s)
		if err != nil {
			return nil, err
		}
		hc = &http.Client{Transport: transport}
	}
	// A redirect would resend the bearer token elsewhere and turn POSTs
	// into GETs: the broker never redirects, so neither do we.
	client := *hc
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	identity := s.identity
	if identity == "" {
		identity = defaultIdentity()
	}
	return &Client{
		base:     strings.TrimRight(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"),
		apiKey:   apiKey,
		http:     &client,
		retry:    s.retry,
		slack:    s.slack,
		identity: identity,
	}, nil
}

// FromEnv makes a client from LOCKBROKER_URL (default DefaultURL),
// LOCKBROKER_API_KEY, and for TLS LOCKBROKER_CA_FILE, LOCKBROKER_CLIENT_CERT
// and LOCKBROKER_CLIENT_KEY, as lockctl and the other clients read them.
// opts come after what the environment says, so they override it.
func FromEnv(opts ...Option) (*Client, error) {
	rawURL := os.Getenv("LOCKBROKER_URL")
	if rawURL == "" {
		rawURL = DefaultURL
	}
	var env []Option
	if ca := os.Getenv("LOCKBROKER_CA_FILE"); ca != "" {
		env = append(env, WithCAFile(ca))
	}
	cert, key := os.Getenv("LOCKBROKER_CLIENT_CERT"), os.Getenv("LOCKBROKER_CLIENT_KEY")
	if (cert == "") != (key == "") {
		return nil, &Error{Code: CodeConfig, Message: "LOCKBROKER_CLIENT_CERT and LOCKBROKER_CLIENT_KEY go together"}
	}
	if cert != "" {
		env = append(env, WithClientCert(cert, key))
	}
	return New(rawURL, os.Getenv("LOCKBROKER_API_KEY"), append(env, opts...)...)
}

// URL is the broker's base URL.
func (c *Client) URL() string { return c.base }

// WithAPIKey is the same broker, connections and settings with another
// bearer token (the admin token, another tenant's key).
func (c *Client) WithAPIKey(apiKey string) *Client {
	other := *c
	other.apiKey = apiKey
	return &other
}

// newOwner is the owner of an acquire: the caller's, else a fresh one.
func (c *Client) newOwner(t terms) string {
	if t.owner != "" {
		return t.owner
	}
	return uniqueOwner(c.identity)
}

// asError is err as an *Error (nil for nil).
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}
