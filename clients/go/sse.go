package lockbroker

import (
	"bufio"
	"errors"
	"io"
	"strings"
)

// Server-Sent Events, the wire format of Observe and Events: a reader that
// turns a body into events, by the rules of the HTML standard that matter
// here: event:, id: and data: fields (several data: lines joined by "\n"),
// ":" comments (the broker's keep-alives), a blank line ends an event, and
// "\n", "\r\n" or "\r" end a line.

// sseEvent is one dispatched event.
type sseEvent struct {
	// name is "message" when the event named none.
	name string
	// id is its id: field, "" when it had none.
	id   string
	data string
}

// maxEventBytes bounds one event, so that a broken stream cannot grow the
// buffer without bound.
const maxEventBytes = 1 << 20

var errEventTooLong = errors.New("an event longer than 1 MiB")

// sseReader reads events from a stream.
type sseReader struct {
	r       *bufio.Reader
	afterCR bool // the last line ended with "\r": a "\n" next ends nothing
	line    []byte
	name    string
	id      string
	data    strings.Builder
	hasData bool
}

func newSSEReader(r io.Reader) *sseReader { return &sseReader{r: bufio.NewReader(r)} }

// next is the next event; io.EOF when the stream ended cleanly, another
// error when it broke.
func (s *sseReader) next() (sseEvent, error) {
	for {
		b, err := s.r.ReadByte()
		if err != nil {
			return sseEvent{}, err
		}
		afterCR := s.afterCR
		s.afterCR = false
		switch {
		case b == '\n' && afterCR:
		case b == '\n' || b == '\r':
			s.afterCR = b == '\r'
			if ev, ok := s.endLine(); ok {
				return ev, nil
			}
		default:
			s.line = append(s.line, b)
			if len(s.line)+s.data.Len() > maxEventBytes {
				return sseEvent{}, errEventTooLong
			}
		}
	}
}

// endLine takes the line read; a blank one dispatches the event, if it had
// data.
func (s *sseReader) endLine() (sseEvent, bool) {
	line := string(s.line)
	s.line = s.line[:0]
	if line == "" {
		ev := sseEvent{name: s.name, id: s.id, data: s.data.String()}
		had := s.hasData
		s.name, s.id, s.hasData = "", "", false
		s.data.Reset()
		if ev.name == "" {
			ev.name = "message"
		}
		return ev, had
	}
	if line[0] == ':' {
		return sseEvent{}, false
	}
	field, value := line, ""
	if i := strings.IndexByte(line, ':'); i >= 0 {
		field, value = line[:i], strings.TrimPrefix(line[i+1:], " ")
	}
	switch field {
	case "event":
		s.name = value
	case "id":
		s.id = value
	case "data":
		if s.hasData {
			s.data.WriteByte('\n')
		}
		s.data.WriteString(value)
		s.hasData = true
	}
	return sseEvent{}, false
}
