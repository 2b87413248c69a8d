package lockbroker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// The one place where a request is sent, timed, retried (RetryPolicy says
// when) and its answer decoded.

// maxAnswerBytes bounds what is read of an answer (the broker's are small).
const maxAnswerBytes = 4 << 20

// call is one request to the broker.
type call struct {
	method string
	// path is escaped, from /v1..., with its query.
	path string
	// body makes the JSON body for each try (a waiting acquire asks each
	// time only for what is left of its wait); nil sends none.
	body   func() any
	header map[string]string
	// wait is how long the broker may hold the request (a waiting acquire):
	// a try gets wait plus the client's slack to be answered.
	wait time.Duration
	// idempotent: sending it twice is harmless (reads, renewals, releases),
	// so it may be retried after a connection broke mid-request. An acquire
	// is not: the same owner would re-enter what it got the first time.
	idempotent bool
	// once: a single try (a lease's renewals time their own retries).
	once bool
}

// send runs cl under the retry policy and decodes a 2xx answer into out (if
// not nil).
func (c *Client) send(ctx context.Context, cl call, out any) error {
	_, data, err := c.exchange(ctx, cl, false)
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &Error{Status: 200, Code: CodeUnexpected, Message: "an answer that is not the API's JSON: " + snippet(data), Err: err}
	}
	return nil
}

// open runs cl under the retry policy and returns its 2xx response with the
// body unread (an event stream). Only the wait for the headers is bounded;
// the body lasts until ctx ends or the response is closed.
func (c *Client) open(ctx context.Context, cl call) (*http.Response, error) {
	resp, _, err := c.exchange(ctx, cl, true)
	return resp, err
}

func (c *Client) exchange(ctx context.Context, cl call, stream bool) (*http.Response, []byte, error) {
	attempts := c.retry.Attempts
	if cl.once {
		attempts = 1
	}
	for n := 1; ; n++ {
		resp, data, e := c.try(ctx, cl, stream)
		if e == nil {
			return resp, data, nil
		}
		if n >= attempts || !retryable(e, cl) {
			return nil, nil, settled(e, cl)
		}
		delay := c.retry.delay(n, e)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= delay {
			// The next try could not start in time: fail now, with what
			// the broker said, rather than at the deadline.
			return nil, nil, settled(e, cl)
		}
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, nil, canceled(ctx, false)
		case <-timer.C:
		}
	}
}

// retryable: whether another try of cl may follow the failure e.
func retryable(e *Error, cl call) bool {
	switch {
	case e.Code == CodeCanceled || e.Code == CodeTLS:
		return false
	case e.Status == 503:
		return true // nothing was granted: the broker promises it
	case e.Status == 429:
		return e.RetryAfter > 0 // nothing was done; the hint says when
	case e.Status != 0:
		return false // the broker decided: asking again gets the same answer
	case !e.sent:
		return true // no connection: nothing reached the broker
	default:
		return cl.idempotent
	}
}

// settled is the error a call ends with: a request that is not safe to
// repeat and got no answer after it was sent has an unknown outcome.
func settled(e *Error, cl call) *Error {
	if e.sent && !cl.idempotent && e.Status == 0 && (e.Code == CodeUnreachable || e.Code == CodeTimeout) {
		return &Error{
			Code:    CodeOutcomeUnknown,
			Message: "no answer came after the request was sent: it may or may not have been carried out",
			Err:     e,
			sent:    true,
		}
	}
	return e
}

// canceled is the error of a call whose context ended.
func canceled(ctx context.Context, sent bool) *Error {
	return &Error{Code: CodeCanceled, Message: "the call's context ended", Err: ctx.Err(), sent: sent}
}

// try is one HTTP exchange.
func (c *Client) try(ctx context.Context, cl call, stream bool) (*http.Response, []byte, *Error) {
	limit := cl.wait + c.slack
	tctx, cancel := context.WithCancel(ctx)
	var timedOut, wrote atomic.Bool
	timer := time.AfterFunc(limit, func() {
		timedOut.Store(true)
		cancel()
	})
	done := func() {
		timer.Stop()
		cancel()
	}
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			wrote.Store(true)
		}
	}}
	var body io.Reader
	if cl.body != nil {
		encoded, err := json.Marshal(cl.body())
		if err != nil {
			done()
			return nil, nil, &Error{Code: CodeConfig, Message: "encoding the request", Err: err}
		}
		body = bytes.NewReader(encoded)
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(tctx, trace), cl.method, c.base+cl.path, body)
	if err != nil {
		done()
		return nil, nil, &Error{Code: CodeConfig, Message: "making the request", Err: err}
	}
	req.Header.Set("User-Agent", "lockbroker-go/"+Version)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	for name, value := range cl.header {
		req.Header.Set(name, value)
	}
	fail := func(err error) *Error {
		done()
		return c.failure(ctx, err, limit, wrote.Load(), timedOut.Load())
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, fail(err)
	}
	ok := resp.StatusCode >= 200 && resp.StatusCode < 300
	if stream && ok {
		if !timer.Stop() {
			resp.Body.Close()
			return nil, nil, fail(context.DeadlineExceeded)
		}
		resp.Body = &closeCancels{ReadCloser: resp.Body, cancel: cancel}
		return resp, nil, nil
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	resp.Body.Close()
	if err != nil {
		return nil, nil, fail(err)
	}
	done()
	if ok {
		return resp, data, nil
	}
	return nil, nil, answerError(resp.StatusCode, data, resp.Header.Get("Retry-After"))
}

// failure classifies a try that got no (whole) answer.
func (c *Client) failure(ctx context.Context, err error, limit time.Duration, wrote, timedOut bool) *Error {
	switch {
	case ctx.Err() != nil:
		return canceled(ctx, wrote)
	case isTLSFailure(err):
		return &Error{Code: CodeTLS, Message: "the TLS handshake with the broker failed", Err: err}
	case timedOut:
		return &Error{Code: CodeTimeout, Message: fmt.Sprintf("no answer within %v", limit), Err: err, sent: wrote}
	case wrote:
		return &Error{Code: CodeUnreachable, Message: "the connection broke after the request was sent", Err: err, sent: true}
	default:
		return &Error{Code: CodeUnreachable, Message: "cannot reach the broker", Err: err}
	}
}

// closeCancels ends a stream's request when its body is closed.
type closeCancels struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *closeCancels) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// answerError is a non-2xx answer as an *Error: the API's envelope when it
// is one, else the status and the start of the body.
func answerError(status int, data []byte, retryAfter string) *Error {
	var envelope struct {
		Error struct {
			Code         string      `json:"code"`
			Message      string      `json:"message"`
			RetryAfterMs *int64      `json:"retry_after_ms"`
			Cycle        []CycleStep `json:"cycle"`
		} `json:"error"`
	}
	e := &Error{Status: status}
	if json.Unmarshal(data, &envelope) == nil && envelope.Error.Code != "" {
		e.Code = Code(envelope.Error.Code)
		e.Message = envelope.Error.Message
		e.cycle = envelope.Error.Cycle
		if ms := envelope.Error.RetryAfterMs; ms != nil && *ms > 0 {
			e.RetryAfter = time.Duration(*ms) * time.Millisecond
		}
	} else {
		e.Code = CodeUnexpected
		if status == 503 {
			e.Code = CodeUnavailable
		}
		e.Message = snippet(data)
	}
	if e.RetryAfter == 0 {
		if secs, err := strconv.Atoi(strings.TrimSpace(retryAfter)); err == nil && secs > 0 {
			e.RetryAfter = time.Duration(secs) * time.Second
		}
	}
	return e
}

// snippet is the start of a body, for a message.
func snippet(data []byte) string {
	if len(data) > 200 {
		data = data[:200]
	}
	return string(data)
}

// segment escapes s as one path segment (or query value): every byte but
// the unreserved A-Z a-z 0-9 - . _ ~ percent-encoded, so "a/b" is the key
// "a/b", not a path, and keys reach the broker byte for byte.
func segment(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if 'a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || ch == '-' || ch == '.' || ch == '_' || ch == '~' {
			b.WriteByte(ch)
		} else {
			fmt.Fprintf(&b, "%%%02X", ch)
		}
	}
	return b.String()
}
