package lockbroker

// The leases of a Session: not renewed on their own (the broker refuses a
// renewal of a session's lease: the session's keepalives keep it), lost when
// the session is lost, over when it is closed.

// adopt keeps g, granted in s to owner.
func (s *Session) adopt(g grant, owner string) *Lease {
	l := newLease(s.client, g, owner)
	l.session = s
	s.mu.Lock()
	ended := s.ended
	if !ended {
		s.leases[l] = struct{}{}
	}
	s.mu.Unlock()
	go l.follow(s)
	if ended {
		// Granted as Close closed the session: the close released it.
		l.end()
	}
	return l
}

// follow waits until the lease is released or ended (Release, Close), or
// its session is lost, and then loses it with the session's reason.
func (l *Lease) follow(s *Session) {
	defer close(l.done)
	defer s.forget(l)
	select {
	case <-s.keeper.lost:
		l.lose(s.keeper.Err())
	case <-l.ctx.Done():
		select {
		case <-s.keeper.lost: // lost as it was released: say so
			l.lose(s.keeper.Err())
		default:
		}
	}
}

// end marks the lease released without sending anything: its session's
// close released it.
func (l *Lease) end() {
	l.mu.Lock()
	l.released = true
	l.mu.Unlock()
	l.stop()
}

// forget drops a lease that no longer follows s.
func (s *Session) forget(l *Lease) {
	s.mu.Lock()
	delete(s.leases, l)
	s.mu.Unlock()
}

// endLeases ends every lease of s, closed: later Releases send nothing.
func (s *Session) endLeases() {
	s.mu.Lock()
	s.ended = true
	leases := make([]*Lease, 0, len(s.leases))
	for l := range s.leases {
		leases = append(leases, l)
	}
	s.mu.Unlock()
	for _, l := range leases {
		l.end()
	}
}
