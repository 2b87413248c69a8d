package lockbroker

import (
	"io"
	"strings"
	"testing"
)

// chunks is a reader that hands out its data a few bytes at a time.
type chunks struct {
	data string
	size int
}

func (c *chunks) Read(p []byte) (int, error) {
	if c.data == "" {
		return 0, io.EOF
	}
	n := c.size
	if n > len(c.data) {
		n = len(c.data)
	}
	if n > len(p) {
		n = len(p)
	}
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestSSEEventsSplitAnywhereAreReassembled(t *testing.T) {
	wire := ": keep-alive\n\nevent: leader\ndata: {\"a\":1}\n\nevent: leader\r\ndata: x\r\ndata: y\r\n\r\nid: 7\ndata: plain\r\r"
	want := []sseEvent{
		{name: "leader", data: `{"a":1}`},
		{name: "leader", data: "x\ny"},
		{name: "message", id: "7", data: "plain"},
	}
	for size := 1; size <= len(wire); size++ {
		r := newSSEReader(&chunks{data: wire, size: size})
		for i, w := range want {
			got, err := r.next()
			if err != nil {
				t.Fatalf("chunks of %d: event %d: %v", size, i, err)
			}
			if got != w {
				t.Fatalf("chunks of %d: event %d: got %+v, want %+v", size, i, got, w)
			}
		}
		if _, err := r.next(); err != io.EOF {
			t.Fatalf("chunks of %d: then the end, got %v", size, err)
		}
	}
}

func TestSSEAnEndlessEventIsRefused(t *testing.T) {
	r := newSSEReader(strings.NewReader("data: " + strings.Repeat("x", maxEventBytes+1)))
	if _, err := r.next(); err != errEventTooLong {
		t.Fatalf("refused: %v", err)
	}
}
