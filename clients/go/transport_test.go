package lockbroker_test

// Transport: C20 and C21 of clients/CONFORMANCE.md.

import (
	"context"
	"errors"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

func TestC20TLS(t *testing.T) {
	url, key := need(t, "LOCKBROKER_TLS_URL"), need(t, "LOCKBROKER_API_KEY")
	ca := need(t, "LOCKBROKER_TEST_CA_FILE")
	cert, certKey := need(t, "LOCKBROKER_TEST_CLIENT_CERT"), need(t, "LOCKBROKER_TEST_CLIENT_KEY")
	stranger, strangerKey := need(t, "LOCKBROKER_TEST_STRANGER_CERT"), need(t, "LOCKBROKER_TEST_STRANGER_KEY")
	ctx := testCtx(t, 60*time.Second)

	t.Run("with the CA and a client certificate", func(t *testing.T) {
		c := clientOf(t, url, key, lockbroker.WithCAFile(ca), lockbroker.WithClientCert(cert, certKey))
		lock := keyFor(t, "job")
		lease, err := c.Lock(ctx, lock, lockbroker.TTL(5*time.Second))
		must(t, err, "Lock over mutual TLS")
		if s := lockStatus(t, c, lock); !s.Held || s.Token != lease.Token() {
			t.Fatalf("held: %+v", s)
		}
		must(t, lease.Release(ctx), "Release over mutual TLS")
		if lockStatus(t, c, lock).Held {
			t.Fatal("released")
		}
	})

	t.Run("from the environment", func(t *testing.T) {
		t.Setenv("LOCKBROKER_URL", url)
		t.Setenv("LOCKBROKER_API_KEY", key)
		t.Setenv("LOCKBROKER_CA_FILE", ca)
		t.Setenv("LOCKBROKER_CLIENT_CERT", cert)
		t.Setenv("LOCKBROKER_CLIENT_KEY", certKey)
		c, err := lockbroker.FromEnv()
		must(t, err, "FromEnv")
		_, err = c.LockStatus(ctx, keyFor(t, "job"))
		must(t, err, "a call configured by LOCKBROKER_* variables")
	})

	refused := map[string]*lockbroker.Client{
		"without a client certificate":  clientOf(t, url, key, lockbroker.WithCAFile(ca)),
		"with a stranger's certificate": clientOf(t, url, key, lockbroker.WithCAFile(ca), lockbroker.WithClientCert(stranger, strangerKey)),
		"without the CA":                clientOf(t, url, key, lockbroker.WithClientCert(cert, certKey)),
	}
	for name, c := range refused {
		c := c
		t.Run(name, func(t *testing.T) {
			for what, call := range map[string]func(context.Context) error{
				"an acquire": func(ctx context.Context) error { _, err := c.TryLock(ctx, keyFor(t, "job")); return err },
				"a status":   func(ctx context.Context) error { _, err := c.LockStatus(ctx, keyFor(t, "job")); return err },
			} {
				call5s, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := call(call5s)
				cancel()
				t.Logf("%s: %v", what, err)
				wantIs(t, err, lockbroker.ErrTLS, what)
				if errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%s: refused in the handshake, not a hang: %v", what, err)
				}
			}
		})
	}
}

func TestC21Cancellation(t *testing.T) {
	c := newClient(t)
	ctx := testCtx(t, 60*time.Second)

	// waitQueued waits until n acquires wait for key.
	waitQueued := func(key string, n int) {
		t.Helper()
		eventually(t, 5*time.Second, "the acquire waits in the queue", func() (bool, error) {
			s, err := c.LockStatus(ctx, key)
			return err == nil && s.Waiters == n, err
		})
	}
	// waiting starts a Lock that waits for key until its context is
	// canceled; done gets its error (nil if it was granted first, and
	// released).
	waiting := func(key string) (context.CancelFunc, <-chan error) {
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			lease, err := c.Lock(wctx, key, lockbroker.Wait(30*time.Second))
			if lease != nil {
				// Granted before the cancellation was seen: the caller
				// holds it, and releases it.
				err = lease.Release(ctx)
			}
			done <- err
		}()
		return cancel, done
	}

	t.Run("canceled while it waits", func(t *testing.T) {
		key := keyFor(t, "job")
		holder, err := c.TryLock(ctx, key)
		must(t, err, "TryLock")
		cancel, done := waiting(key)
		waitQueued(key, 1)
		canceledAt := time.Now()
		cancel()
		select {
		case err := <-done:
			wantIs(t, err, context.Canceled, "the canceled Lock")
			if took := time.Since(canceledAt); took > time.Second {
				t.Fatalf("it returned at once, not after %v", took)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a canceled Lock returns")
		}
		must(t, holder.Release(ctx), "Release")
		freeSoon(t, c, key, 5*time.Second)
	})

	t.Run("canceled as it is granted", func(t *testing.T) {
		for i := 0; i < 3; i++ {
			key := keyFor(t, "job")
			holder, err := c.TryLock(ctx, key)
			must(t, err, "TryLock")
			cancel, done := waiting(key)
			waitQueued(key, 1)
			go holder.Release(ctx)
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("the canceled Lock: %v", err)
			}
			freeSoon(t, c, key, 5*time.Second)
		}
	})

	t.Run("deadline", func(t *testing.T) {
		key := keyFor(t, "job")
		holder, err := c.TryLock(ctx, key)
		must(t, err, "TryLock")
		defer holder.Release(ctx)
		short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		defer cancel()
		start := time.Now()
		lease, err := c.Lock(short, key)
		took := time.Since(start)
		if lease != nil {
			t.Fatal("not granted while held")
		}
		if !errors.Is(err, lockbroker.ErrHeld) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("held until the deadline: %v", err)
		}
		if took > time.Second {
			t.Fatalf("it gives up by the deadline, not after %v", took)
		}
		eventually(t, 5*time.Second, "nothing is left behind: no waiter, the holder holds", func() (bool, error) {
			s, err := c.LockStatus(ctx, key)
			return err == nil && s.Owner == holder.Owner() && s.Token == holder.Token() && s.Waiters == 0, err
		})
	})
}
