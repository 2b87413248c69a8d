package lockbroker

import (
	"fmt"
	"os"
	"sync/atomic"
)

// The broker treats the same owner acquiring what it holds as re-entry (same
// token, one more hold), so two goroutines of one process must not share an
// owner by accident: every acquire gets a fresh owner, identity:n, unless the
// caller names one with Owner.

var ownerSeq atomic.Uint64

// defaultIdentity is host:pid.
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}

// uniqueOwner is identity:n, n unique in this process.
func uniqueOwner(identity string) string {
	return fmt.Sprintf("%s:%d", identity, ownerSeq.Add(1))
}
