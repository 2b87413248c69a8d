package lockbroker_test

// The conformance suite (clients/CONFORMANCE.md, C01–C24) runs against the
// brokers that tests/go_client.rs starts (lockbroker_tests::Conformance) and
// describes in LOCKBROKER_* variables. Without them the conformance tests
// and the examples fail, saying so: they are never skipped.

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"testing"
	"time"

	"lockbroker.dev/lockbroker"
)

const howToRun = "run `cargo test -p lockbroker-tests --test go_client`: it starts the brokers of clients/CONFORMANCE.md and sets the LOCKBROKER_* variables"

func TestMain(m *testing.M) {
	if os.Getenv("LOCKBROKER_URL") == "" {
		fmt.Fprintln(os.Stderr, "LOCKBROKER_URL is unset: "+howToRun)
	}
	os.Exit(m.Run())
}

// need is the environment variable name, or fails the test.
func need(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is unset: %s", name, howToRun)
	}
	return v
}

// newClient is a client of the plain broker with tenant default's key.
func newClient(t *testing.T, opts ...lockbroker.Option) *lockbroker.Client {
	t.Helper()
	return clientOf(t, need(t, "LOCKBROKER_URL"), need(t, "LOCKBROKER_API_KEY"), opts...)
}

func clientOf(t *testing.T, url, key string, opts ...lockbroker.Option) *lockbroker.Client {
	t.Helper()
	c, err := lockbroker.New(url, key, opts...)
	if err != nil {
		t.Fatalf("lockbroker.New(%s): %v", url, err)
	}
	return c
}

// admin is the broker's admin client.
func admin(t *testing.T) *lockbroker.Client {
	t.Helper()
	return clientOf(t, need(t, "LOCKBROKER_URL"), need(t, "LOCKBROKER_ADMIN_TOKEN"))
}

// testCtx is a context that ends with the test, or after d.
func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var seq = rand.New(rand.NewSource(time.Now().UnixNano()))

// keyFor is a key of this test's own, so that suites and runs never meet.
func keyFor(t *testing.T, name string) string {
	return fmt.Sprintf("go/%s/%s-%08x", strings.ReplaceAll(t.Name(), "/", "."), name, seq.Uint32())
}

// must fails the test on err.
func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eventually polls cond every 20 ms until it holds, failing the test if it
// does not within d.
func eventually(t *testing.T, d time.Duration, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (last error: %v)", what, d, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// asError is err's *lockbroker.Error, or fails the test.
func asError(t *testing.T, err error) *lockbroker.Error {
	t.Helper()
	var e *lockbroker.Error
	if !errors.As(err, &e) {
		t.Fatalf("want a *lockbroker.Error, got %T: %v", err, err)
	}
	return e
}

// wantIs fails the test unless errors.Is(err, target).
func wantIs(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: want an error matching %v, got %v", what, target, err)
	}
}

// lockStatus is the lock's status, or fails the test.
func lockStatus(t *testing.T, c *lockbroker.Client, key string) *lockbroker.LockStatus {
	t.Helper()
	s, err := c.LockStatus(testCtx(t, 10*time.Second), key)
	must(t, err, "status of "+key)
	return s
}

// freeSoon waits until the lock key is free.
func freeSoon(t *testing.T, c *lockbroker.Client, key string, within time.Duration) {
	t.Helper()
	eventually(t, within, key+" is free", func() (bool, error) {
		s, err := c.LockStatus(context.Background(), key)
		return err == nil && !s.Held, err
	})
}
