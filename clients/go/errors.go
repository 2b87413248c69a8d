package lockbroker

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Code names why a call failed: the broker's own error code when it answered
// with its JSON error envelope, or one of the client's codes (Unreachable,
// OutcomeUnknown, TLS, Timeout, Canceled, LeaseExpired, Config, Unexpected) when it did
// not. Codes may be added by newer brokers: match on the sentinel errors with
// errors.Is, which fall back on the HTTP status for a code they do not know.
type Code string

// The broker's error codes (API.md, "Errors").
const (
	CodeBadRequest       Code = "bad_request"
	CodeUnauthenticated  Code = "unauthenticated"
	CodeForbidden        Code = "forbidden"
	CodeNotFound         Code = "not_found"
	CodeMethodNotAllowed Code = "method_not_allowed"
	CodeLockHeld         Code = "lock_held"
	CodeLeaseLost        Code = "lease_lost"
	CodeSemaphoreFull    Code = "semaphore_full"
	CodePermitsMismatch  Code = "permits_mismatch"
	CodeTooLarge         Code = "too_large"
	CodeURITooLong       Code = "uri_too_long"
	CodeHeadersTooLarge  Code = "headers_too_large"
	CodeInvalidKey       Code = "invalid_key"
	CodeInvalidPolicy    Code = "invalid_policy"
	CodeTooManyWaiters   Code = "too_many_waiters"
	CodeTooManyStreams   Code = "too_many_streams"
	CodeQuotaExceeded    Code = "quota_exceeded"
	CodeRateLimited      Code = "rate_limited"
	CodeSessionNotFound  Code = "session_not_found"
	CodeDeadlock         Code = "deadlock"
	CodePolicyError      Code = "policy_error"
	CodeUnavailable      Code = "unavailable"
)

// The client's own codes, for failures without an answer from the broker.
const (
	// CodeUnreachable: no connection could be made, or it broke, and the
	// retries ran out. Nothing was answered.
	CodeUnreachable Code = "unreachable"
	// CodeOutcomeUnknown: the connection broke (or the call timed out) after
	// an acquire was sent, and the client could not find out whether it was
	// granted. An acquire is never sent again blindly: the same owner would
	// re-enter a lock it may already hold.
	CodeOutcomeUnknown Code = "outcome_unknown"
	// CodeTLS: the TLS handshake failed (the broker's certificate is not
	// trusted, or the broker refused the client's certificate). Not retried:
	// it fails the same way every time.
	CodeTLS Code = "tls"
	// CodeTimeout: no answer within the call's wait plus the client's slack
	// (WithSlack), and the retries ran out.
	CodeTimeout Code = "timeout"
	// CodeCanceled: the caller's context ended; Unwrap gives ctx.Err().
	CodeCanceled Code = "canceled"
	// CodeLeaseExpired: a lease was lost because no renewal was confirmed
	// before it could have run out (the broker unreachable or unavailable).
	CodeLeaseExpired Code = "lease_expired"
	// CodeConfig: the client was set up wrongly (a URL that is not
	// http(s)://host[:port], a TLS file that cannot be read).
	CodeConfig Code = "config"
	// CodeUnexpected: the broker answered something that is not the API's
	// JSON (a proxy's error page, a truncated body).
	CodeUnexpected Code = "unexpected"
)

// Error is every failure of a call: the broker's refusal (Status is its HTTP
// status, Code its error code) or the client's own (Status 0). Compare it with
// the sentinel errors (errors.Is(err, lockbroker.ErrHeld)); take it out with
// errors.As to read RetryAfter.
type Error struct {
	// Status is the HTTP status of the broker's answer; 0 when none came.
	Status int
	// Code says why, stably: the broker's code, or one of the client's.
	Code Code
	// Message is the broker's (or the client's) explanation, for people.
	Message string
	// RetryAfter is the broker's hint of when to try again (retry_after_ms,
	// else the Retry-After header), with lock_held, semaphore_full, the 429s
	// and some 503s; 0 when it gave none.
	RetryAfter time.Duration
	// Err is the underlying cause (a network error, ctx.Err()), if any.
	Err error

	// cycle: with CodeDeadlock, the broker's cycle (see DeadlockError).
	cycle []CycleStep

	// sent: the request may have reached the broker (the transport wrote
	// it), so a failure without an answer leaves its outcome open.
	sent bool
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("lockbroker: ")
	b.WriteString(string(e.Code))
	if e.Status != 0 {
		fmt.Fprintf(&b, " (HTTP %d)", e.Status)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %v)", e.RetryAfter)
	}
	if e.Err != nil && !strings.Contains(e.Message, e.Err.Error()) {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap gives the underlying cause: errors.Is(err, context.Canceled) works
// on a canceled call, errors.As(err, &x509.UnknownAuthorityError{}) on an
// untrusted certificate.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the sentinel errors of this package by code (and, for a code
// this client does not know, by HTTP status).
func (e *Error) Is(target error) bool {
	k, ok := target.(errorKind)
	if !ok {
		return false
	}
	for _, mine := range kindsOf(e) {
		if mine == k {
			return true
		}
	}
	return false
}

// errorKind is the type of the sentinel errors: a name that an *Error is
// compared with by its code.
type errorKind string

func (k errorKind) Error() string { return "lockbroker: " + string(k) }

// The sentinel errors, for errors.Is. An *Error matches every sentinel its
// code falls under: a full semaphore is both ErrSemaphoreFull and ErrHeld; a
// broker that could not be reached is both ErrUnreachable and ErrUnavailable.
var (
	// ErrHeld: the lock (leadership, rwlock) is held by another owner, or
	// every permit of the semaphore is taken (lock_held, semaphore_full). A
	// Try call answers it at once; a waiting one when its wait ran out.
	ErrHeld error = errorKind("held")
	// ErrSemaphoreFull: every permit of the semaphore is taken.
	ErrSemaphoreFull error = errorKind("semaphore full")
	// ErrLeaseLost: the lease is not (or no longer) this owner's: the broker
	// refused its renewal or release, or no renewal was confirmed in time.
	ErrLeaseLost error = errorKind("lease lost")
	// ErrUnavailable: the broker answered 503 (its database is down, it is
	// shutting down) or could not be reached, after the retries.
	ErrUnavailable error = errorKind("unavailable")
	// ErrUnreachable: no answer came from the broker (refused, reset, timed
	// out), after the retries.
	ErrUnreachable error = errorKind("unreachable")
	// ErrOutcomeUnknown: an acquire may or may not have been granted (see
	// CodeOutcomeUnknown).
	ErrOutcomeUnknown error = errorKind("outcome unknown")
	// ErrTLS: the TLS handshake failed (see CodeTLS).
	ErrTLS error = errorKind("tls")
	// ErrThrottled: any 429: rate_limited, quota_exceeded, too_many_waiters,
	// too_many_streams.
	ErrThrottled error = errorKind("throttled")
	// ErrRateLimited: the tenant sent more than max_requests_per_s (429
	// rate_limited), and the hint did not fit in the context's deadline.
	ErrRateLimited error = errorKind("rate limited")
	// ErrBadRequest: 400 (a value out of range, a malformed request).
	ErrBadRequest error = errorKind("bad request")
	// ErrUnauthenticated: 401, the API key is missing or unknown.
	ErrUnauthenticated error = errorKind("unauthenticated")
	// ErrForbidden: 403.
	ErrForbidden error = errorKind("forbidden")
	// ErrNotFound: 404 (nothing to force-release, an unknown tenant).
	ErrNotFound error = errorKind("not found")
	// ErrConflict: any 409 (lock_held, lease_lost, semaphore_full,
	// permits_mismatch, deadlock).
	ErrConflict error = errorKind("conflict")
	// ErrPermitsMismatch: the semaphore exists with another number of permits.
	ErrPermitsMismatch error = errorKind("permits mismatch")
	// ErrInvalidKey: 422, the tenant's naming policy rejected the key.
	ErrInvalidKey error = errorKind("invalid key")
	// ErrSessionNotFound: 404 session_not_found, the session ended (closed,
	// expired) or never existed: its leases are gone, and an acquire in it
	// granted nothing.
	ErrSessionNotFound error = errorKind("session not found")
	// ErrDeadlock: 409 deadlock, a session's waiting acquire refused at
	// once because its wait would close a cycle of sessions waiting for each
	// other. Nothing was granted or queued. The error is a *DeadlockError
	// (errors.As) with the cycle. Never retried: end one of the sessions, or
	// take keys in one order.
	ErrDeadlock error = errorKind("deadlock")
	// ErrPolicy: 500 policy_error, the tenant's policy failed (fail closed).
	ErrPolicy error = errorKind("policy error")
	// ErrConfig: the client was set up wrongly (see CodeConfig).
	ErrConfig error = errorKind("config")
	// ErrTimeout: no answer within the call's wait plus the slack.
	ErrTimeout error = errorKind("timeout")
)

// kindsOf lists the sentinels an error falls under.
func kindsOf(e *Error) []errorKind {
	var kinds []errorKind
	add := func(ks ...error) {
		for _, k := range ks {
			kinds = append(kinds, k.(errorKind))
		}
	}
	switch e.Code {
	case CodeLockHeld:
		add(ErrHeld)
	case CodeSemaphoreFull:
		add(ErrHeld, ErrSemaphoreFull)
	case CodeLeaseLost, CodeLeaseExpired:
		add(ErrLeaseLost)
	case CodePermitsMismatch:
		add(ErrPermitsMismatch)
	case CodeUnavailable:
		add(ErrUnavailable)
	case CodeUnreachable:
		add(ErrUnreachable, ErrUnavailable)
	case CodeTimeout:
		add(ErrTimeout, ErrUnreachable, ErrUnavailable)
	case CodeOutcomeUnknown:
		add(ErrOutcomeUnknown)
	case CodeTLS:
		add(ErrTLS)
	case CodeConfig:
		add(ErrConfig)
	case CodeRateLimited:
		add(ErrRateLimited)
	case CodeInvalidKey:
		add(ErrInvalidKey)
	case CodePolicyError:
		add(ErrPolicy)
	case CodeSessionNotFound:
		add(ErrSessionNotFound)
	case CodeDeadlock:
		add(ErrDeadlock)
	}
	switch e.Status {
	case 400:
		add(ErrBadRequest)
	case 401:
		add(ErrUnauthenticated)
	case 403:
		add(ErrForbidden)
	case 404:
		add(ErrNotFound)
	case 409:
		add(ErrConflict)
	case 422:
		add(ErrInvalidKey)
	case 429:
		add(ErrThrottled)
	case 503:
		add(ErrUnavailable)
	}
	return kinds
}

// CycleStep is one step of a deadlock's cycle: Session, as Owner, waits (or,
// for the first step, would wait) for StorageKey of Kind, which the next
// step's session holds; the last step's key is held by the first's.
type CycleStep struct {
	// Session is the session that waits.
	Session string `json:"session"`
	// Owner is its owner of that wait.
	Owner string `json:"owner"`
	// Kind is "lock", "election", "semaphore" or "rwlock".
	Kind string `json:"kind"`
	// StorageKey is the key it waits for (its storage key).
	StorageKey string `json:"storage_key"`
}

// DeadlockError is the broker's 409 deadlock: a waiting acquire in a
// session refused at once, because waiting would close a cycle of sessions
// waiting for each other. Nothing was granted or queued, nothing else in the
// cycle was disturbed, and it is not retried. It matches ErrDeadlock and
// ErrConflict (errors.Is), and unwraps to its *Error (Status, Code,
// Message).
type DeadlockError struct {
	// Cycle is the cycle the wait would have closed, starting with this
	// acquire's session and owner.
	Cycle []CycleStep
	// Message is the broker's explanation, for people.
	Message string

	err *Error
}

func (d *DeadlockError) Error() string {
	var b strings.Builder
	b.WriteString(d.err.Error())
	if len(d.Cycle) > 0 {
		b.WriteString(" (cycle:")
		for _, s := range d.Cycle {
			fmt.Fprintf(&b, " session %s waits for %s %q;", s.Session, s.Kind, s.StorageKey)
		}
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap gives the broker's *Error: errors.Is(err, ErrDeadlock) and
// errors.As(err, &*Error) both work.
func (d *DeadlockError) Unwrap() error { return d.err }

// typed is err as the type its code calls for: a deadlock as a
// *DeadlockError, anything else as it is.
func typed(err error) error {
	var e *Error
	if errors.As(err, &e) && e.Code == CodeDeadlock {
		var d *DeadlockError
		if errors.As(err, &d) {
			return err
		}
		return &DeadlockError{Cycle: e.cycle, Message: e.Message, err: e}
	}
	return err
}
