package lockbroker_test

// Examples that run as tests (their output is checked), against the broker
// of LOCKBROKER_URL.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"time"

	"lockbroker.dev/lockbroker"
)

// A cron job that must not run twice at once: it tries the lock, and leaves
// if another run holds it. The work gets a context that ends if the lease is
// lost, and the lease's fencing token for what it writes.
func Example_cronJob() {
	ctx := context.Background()
	c, err := lockbroker.FromEnv() // LOCKBROKER_URL, LOCKBROKER_API_KEY
	if err != nil {
		log.Fatal(err)
	}
	lease, err := c.TryLock(ctx, "examples/nightly-report", lockbroker.TTL(30*time.Second))
	if errors.Is(err, lockbroker.ErrHeld) {
		fmt.Println("another run is in progress")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)

	work, cancel := lease.Context(ctx)
	defer cancel()
	if err := writeReport(work, lease.Token()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("report written")
	// Output: report written
}

// writeReport stands for the job's work.
func writeReport(ctx context.Context, token uint64) error {
	select {
	case <-ctx.Done():
		return ctx.Err() // the lease was lost: stop
	case <-time.After(10 * time.Millisecond):
		return nil
	}
}

// A leader loop: campaign, lead until the lease is lost or the work is
// done, resign, and campaign again.
func Example_leaderLoop() {
	c, err := lockbroker.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	for round := 0; round < 2; round++ { // a service loops until it shuts down
		leader, err := c.Campaign(ctx, "examples/scheduler", lockbroker.TTL(10*time.Second))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("leading")
		for tick := 0; tick < 3; tick++ {
			select {
			case <-leader.Lost():
				fmt.Println("lost the leadership:", leader.Err())
			case <-time.After(10 * time.Millisecond):
				// schedule work, fenced by leader.Term
			}
		}
		if err := leader.Resign(ctx); err != nil {
			log.Fatal(err)
		}
		fmt.Println("resigned")
	}
	// Output:
	// leading
	// resigned
	// leading
	// resigned
}

// A fenced write: the store keeps the newest token it has seen and refuses
// older ones, so a holder that lost its lease (paused, cut off) cannot
// overwrite the work of the next holder. Validate asks the broker the same.
func Example_fencedWrite() {
	ctx := context.Background()
	c, err := lockbroker.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	store := &fencedStore{}
	const key = "examples/ledger"

	first, err := c.Lock(ctx, key, lockbroker.Wait(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(store.write(first.Token(), "first"))
	stale := first.Token()
	if err := first.Release(ctx); err != nil {
		log.Fatal(err)
	}

	second, err := c.Lock(ctx, key, lockbroker.Wait(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer second.Release(ctx)
	fmt.Println(store.write(second.Token(), "second"))
	fmt.Println(store.write(stale, "late write of the first holder"))

	v, err := c.Validate(ctx, key, stale)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the broker says the old token is valid:", v.Valid)
	// Output:
	// accepted "first"
	// accepted "second"
	// refused "late write of the first holder": a newer token was seen
	// the broker says the old token is valid: false
}

// fencedStore refuses writes whose token is older than one it has seen.
type fencedStore struct {
	mu     sync.Mutex
	newest uint64
	value  string
}

func (s *fencedStore) write(token uint64, value string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.newest {
		return fmt.Sprintf("refused %q: a newer token was seen", value)
	}
	s.newest, s.value = token, value
	return fmt.Sprintf("accepted %q", value)
}

// Several keys held for one piece of work in a session: one keepalive keeps
// them all alive, one signal says they are lost, one Close releases them
// all.
func Example_session() {
	ctx := context.Background()
	c, err := lockbroker.FromEnv()
	if err != nil {
		log.Fatal(err)
	}
	session, err := c.Session(ctx, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close(ctx)
	for _, key := range []string{"examples/orders/17", "examples/invoices/17"} {
		if _, err := session.Lock(ctx, key, lockbroker.Wait(10*time.Second)); err != nil {
			log.Fatal(err)
		}
	}
	status, err := c.SessionStatus(ctx, session.ID())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("locks held in the session:", len(status.Leases))

	if err := session.Close(ctx); err != nil {
		log.Fatal(err)
	}
	lock, err := c.LockStatus(ctx, "examples/orders/17")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held after Close:", lock.Held)
	// Output:
	// locks held in the session: 2
	// held after Close: false
}
