package lockbroker

import "time"

// What the broker answers, as Go types (the JSON shapes are in API.md and
// the broker's /openapi.json). Fields the broker sends as null are zero
// values here: a free lock's Owner is "" and its Token 0 (tokens start at 1).

// LockStatus is a lock now (GET /v1/locks/{key}, and each item of
// ListLocks).
type LockStatus struct {
	// Key as asked for (listings may give the storage key).
	Key string `json:"key"`
	// StorageKey is the key the tenant's naming policy stores it under.
	StorageKey string     `json:"storage_key"`
	Held       bool       `json:"held"`
	Owner      string     `json:"owner"`
	Token      uint64     `json:"token"`
	HoldCount  int        `json:"hold_count"`
	AcquiredAt *time.Time `json:"acquired_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	// Waiters queued for it.
	Waiters int `json:"waiters"`
	// Session is the id of the session the lease is held in (its ExpiresAt
	// is the session's); "" when free or held on its own.
	Session string `json:"session"`
}

// SemaphoreHolder is one taken permit of a semaphore.
type SemaphoreHolder struct {
	Slot      int       `json:"slot"`
	Owner     string    `json:"owner"`
	Token     uint64    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	// Session is the id of the session the permit is held in (its
	// ExpiresAt is the session's); "" when held on its own.
	Session string `json:"session"`
}

// SemaphoreStatus is a semaphore now.
type SemaphoreStatus struct {
	Key        string `json:"key"`
	StorageKey string `json:"storage_key"`
	// Permits is its size; 0 when nobody holds it.
	Permits int               `json:"permits"`
	Holders []SemaphoreHolder `json:"holders"`
	Waiters int               `json:"waiters"`
}

// RWHolder is a holder of a reader-writer lock.
type RWHolder struct {
	Owner     string    `json:"owner"`
	Token     uint64    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
	// Session is the id of the session the lease is held in (its ExpiresAt
	// is the session's); "" when held on its own.
	Session string `json:"session"`
}

// RWLockStatus is a reader-writer lock now: one writer or many readers.
type RWLockStatus struct {
	Key        string     `json:"key"`
	StorageKey string     `json:"storage_key"`
	Writer     *RWHolder  `json:"writer"`
	Readers    []RWHolder `json:"readers"`
	Waiters    int        `json:"waiters"`
}

// ElectionStatus is an election's leadership now, and each item of Observe.
type ElectionStatus struct {
	Name       string `json:"name"`
	StorageKey string `json:"storage_key"`
	// Leader is "" while nobody leads.
	Leader string `json:"leader"`
	// Term is the leader's fencing token; 0 while nobody leads.
	Term      uint64     `json:"term"`
	ExpiresAt *time.Time `json:"expires_at"`
}

// EventKind is what happened to a lease, in its history and event streams.
type EventKind string

// The kinds of events.
const (
	EventGranted       EventKind = "granted"
	EventReleased      EventKind = "released"
	EventExpired       EventKind = "expired"
	EventHandedOff     EventKind = "handed_off"
	EventForceReleased EventKind = "force_released"
)

// HistoryEvent is one event of a lease's history.
type HistoryEvent struct {
	Event EventKind `json:"event"`
	Owner string    `json:"owner"`
	Token uint64    `json:"token"`
	// At is by the database's clock.
	At time.Time `json:"at"`
}

// Validity is whether a token is the live grant of a lock (Validate).
type Validity struct {
	Valid bool `json:"valid"`
	// Token is the current grant's token; 0 when the lock is free.
	Token uint64 `json:"token"`
}

// Page is one page of a listing: Next is the cursor of the next page, ""
// after the last.
type Page[T any] struct {
	Items []T `json:"items"`
	// Next is nil in the broker's JSON after the last page.
	Next string `json:"next"`
}

// Change is one event of an Events stream.
type Change struct {
	// ID increases with every event; resume after it with After.
	ID    uint64    `json:"id"`
	Event EventKind `json:"event"`
	// Kind is "lock", "semaphore" or "rwlock".
	Kind       string    `json:"kind"`
	StorageKey string    `json:"storage_key"`
	Owner      string    `json:"owner"`
	Token      uint64    `json:"token"`
	At         time.Time `json:"at"`
}

// ForceReleased is what an admin's ForceRelease ended.
type ForceReleased struct {
	Tenant     string `json:"tenant"`
	Key        string `json:"key"`
	StorageKey string `json:"storage_key"`
	Owner      string `json:"owner"`
	Token      uint64 `json:"token"`
	// HandedOff: a queued waiter got the lock at once.
	HandedOff bool `json:"handed_off"`
}

// leaseAnswer is the fields every grant and renewal answer shares.
type leaseAnswer struct {
	Key        string    `json:"key"`
	StorageKey string    `json:"storage_key"`
	Owner      string    `json:"owner"`
	Token      uint64    `json:"token"`
	TTLMs      int64     `json:"ttl_ms"`
	ExpiresAt  time.Time `json:"expires_at"`
}

func (a leaseAnswer) ttl() time.Duration { return time.Duration(a.TTLMs) * time.Millisecond }

// SessionInfo is a session (the answer to opening one, and each item of
// ListSessions). Name is "" when it has none.
type SessionInfo struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	TTLMs       int64     `json:"ttl_ms"`
	LockDelayMs int64     `json:"lock_delay_ms"`
	CreatedAt   time.Time `json:"created_at"`
	// ExpiresAt is when it ends without a keepalive (the database's clock).
	ExpiresAt time.Time `json:"expires_at"`
}

// TTL is how long the session lives without a keepalive.
func (s SessionInfo) TTL() time.Duration { return time.Duration(s.TTLMs) * time.Millisecond }

// SessionLease is a lease held in a session.
type SessionLease struct {
	// Kind is "lock", "election", "semaphore" or "rwlock" (each key of a
	// multi-lock is a lock).
	Kind string `json:"kind"`
	// Key is the storage key: the broker does not keep the key clients sent.
	Key        string `json:"key"`
	StorageKey string `json:"storage_key"`
	Token      uint64 `json:"token"`
	// Slot is a permit's slot, nil for other kinds.
	Slot *int `json:"slot"`
	// Mode is a reader-writer lease's mode ("read", "write"), "" for other
	// kinds.
	Mode string `json:"mode"`
}

// SessionStatus is a session now and every lease held in it
// (GET /v1/sessions/{id}).
type SessionStatus struct {
	SessionInfo
	Leases []SessionLease `json:"leases"`
}

// SessionClosed is what closing a session released.
type SessionClosed struct {
	Closed bool `json:"closed"`
	// Released counts the leases the close released.
	Released int `json:"released"`
}
