// Package lockbroker is the Go client of lockbroker, a distributed lock
// broker: locks, semaphores, reader-writer locks, multi-locks and leader
// elections held as leases that renew themselves, with fencing tokens.
// Standard library only; Go 1.19 or later.
//
//	c, err := lockbroker.FromEnv() // LOCKBROKER_URL, LOCKBROKER_API_KEY, TLS files
//	if err != nil {
//		return err
//	}
//	lease, err := c.Lock(ctx, "nightly", lockbroker.TTL(30*time.Second), lockbroker.Wait(time.Minute))
//	if err != nil {
//		return err // errors.Is(err, lockbroker.ErrHeld): another owner kept it for a minute
//	}
//	defer lease.Release(ctx)
//	work, cancel := lease.Context(ctx) // ends if the lease is lost
//	defer cancel()
//	return run(work, lease.Token())    // pass the fencing token downstream
//
// # Layout
//
//   - client.go, options.go, tls.go: the Client (New, FromEnv) and its
//     options; the options of one acquire (TTL, Wait, Owner, Priority).
//   - transport.go, retry.go: the one place where a request is sent, timed
//     and retried (RetryPolicy): 503s and connections never made are retried
//     with jittered exponential backoff, 429s after the broker's hint, all
//     within the context's deadline; no other 4xx ever; an acquire whose
//     connection broke after it was sent is never sent again.
//   - errors.go: Error, every failure, with the broker's Code and the
//     sentinels errors.Is matches (ErrHeld, ErrLeaseLost, ErrUnavailable...).
//   - acquire.go: the acquire of every kind: waiting (in requests of at most
//     five minutes), finding out by status when an answer never came, and
//     releasing a grant that crossed a cancellation.
//   - lease.go, held.go: Lease, a held lease renewed in a goroutine every
//     third of its TTL, lost (Lost, Err) when the broker refuses a renewal
//     or none is confirmed in time, judged from when the last confirmed
//     request was sent.
//   - locks.go, semaphores.go, rwlocks.go, multilock.go, elections.go: each
//     kind's calls (Lock, Semaphore, ReadLock, MultiLock, Campaign and their
//     Try forms; statuses, Validate, History, Observe).
//   - session.go, session_held.go, session_leases.go, sessions.go:
//     Session, many leases of every kind (its Lock, Semaphore, ReadLock,
//     WriteLock, MultiLock, Campaign: the Client's calls held in it) kept
//     alive by one keepalive (the Lease machinery over the session itself),
//     lost and released together; sessions by id (status, listing, closing
//     from elsewhere).
//   - list.go: listings by prefix, a page at a time (cursors).
//   - events.go, stream.go, sse.go: Events and Observe, Server-Sent Events
//     streams that reopen themselves (Last-Event-ID) when they break.
//   - admin.go: ForceRelease, with the admin token.
//   - models.go: the broker's answers as Go types.
//
// # Try or wait
//
// Lock, Semaphore, ReadLock, WriteLock, MultiLock and Campaign wait in the
// broker's queue (fairly, by the tenant's policy) until granted, up to Wait
// or until their context ends. TryLock and the other Try forms never wait:
// when the lease is taken they return a nil lease and an *Error matching
// ErrHeld, whose RetryAfter is the broker's hint, as etcd's
// concurrency.Mutex.TryLock returns ErrLocked.
//
// # Owners
//
// Every acquire gets a fresh owner (host:pid:n) unless Owner names one; the
// same owner acquiring a lock it holds re-enters it (same token, one more
// hold). An election's owner is its candidate.
//
// # Losing a lease
//
// A lease can be lost without the holder noticing at once (a pause, a
// partition). The Lease's Lost channel is closed when the broker refused a
// renewal, or when no renewal was confirmed before the lease could have run
// out, which errs on the early side. Stop the protected work then
// (Lease.Context does it for you), and pass Token to whatever the lease
// protects so that it refuses writes of an older holder (Validate asks the
// broker the same).
package lockbroker
