"""The event stream against a real broker: changes made after it opened arrive, a stream
started after an id gets exactly what followed it, and a broken stream resumes where it was."""

import unittest

import lockbroker
from helpers import Proxy, client, env, unique

#: How long any one event may take to arrive (a change reaches every stream within 1 s).
WITHIN = 20.0


def setUpModule():
    env("LOCKBROKER_URL")
    env("LOCKBROKER_API_KEY")


class Events(unittest.TestCase):
    def stream(self, c, **kw):
        stream = c.events(timeout=WITHIN * 3, **kw)
        self.addCleanup(stream.close)
        return stream

    def next_events(self, stream, n):
        """The next ``n`` events, or a failure when the stream ends (its timeout) first."""
        got = []
        for event in stream:
            got.append(event)
            if len(got) == n:
                return got
        self.fail(f"{n} events expected, the stream ended after {got!r}")

    @staticmethod
    def seen(events):
        return [(e.event, e.kind, e.storage_key, e.owner, e.token) for e in events]

    def test_a_grant_made_after_the_stream_opened_arrives(self):
        c, prefix = client(), unique("ev") + "/"
        stream = self.stream(c, prefix=prefix)
        key = prefix + "job"
        grant = c.locks.acquire(key, "w1", ttl=30)
        c.locks.acquire(unique("ev"), "elsewhere", ttl=30)  # another prefix: not sent
        permit = c.semaphores.acquire(prefix + "pool", "w2", permits=2, ttl=30)
        c.locks.release(key, "w1", grant.token)
        events = self.next_events(stream, 3)
        self.assertEqual(
            self.seen(events),
            [
                ("granted", "lock", key, "w1", grant.token),
                ("granted", "semaphore", prefix + "pool", "w2", permit.token),
                ("released", "lock", key, "w1", grant.token),
            ],
        )
        self.assertTrue(all(isinstance(e, lockbroker.Event) and e.at.tzinfo is not None for e in events))
        ids = [e.id for e in events]
        self.assertEqual(ids, sorted(set(ids)), "ids increase")
        self.assertEqual(stream.last_id, ids[-1])

    def test_after_an_id_exactly_the_missed_events_arrive(self):
        c, prefix = client(), unique("ev") + "/"
        first = self.stream(c, prefix=prefix)
        tokens = [c.locks.acquire(prefix + str(n), "w", ttl=30).token for n in range(3)]
        events = self.next_events(first, 3)
        self.assertEqual([e.token for e in events], tokens)
        first.close()

        resumed = self.stream(c, prefix=prefix, after=events[0].id)
        later = c.locks.acquire(prefix + "later", "w", ttl=30)
        again = self.next_events(resumed, 3)
        self.assertEqual(again[:2], events[1:], "the two after the id, once each")
        self.assertEqual(self.seen(again[2:]), [("granted", "lock", prefix + "later", "w", later.token)])

    def test_a_broken_stream_resumes_with_last_event_id(self):
        c, prefix = client(), unique("ev") + "/"
        proxy = Proxy(env("LOCKBROKER_URL"))
        via_proxy = lockbroker.Client(proxy.url, env("LOCKBROKER_API_KEY"))
        stream = self.stream(via_proxy, prefix=prefix)
        witness = self.stream(c, prefix=prefix)
        c.locks.acquire(prefix + "before", "w", ttl=30)
        (before,) = self.next_events(stream, 1)
        proxy.drop()
        # Made while the stream is broken (it reconnects when next read), and
        # seen by another stream first: the broker's feed is past them, so
        # only a resume with Last-Event-ID sends them, a fresh stream would not.
        missed = [c.locks.acquire(prefix + str(n), "w", ttl=30).token for n in range(2)]
        self.assertEqual([e.token for e in self.next_events(witness, 3)[1:]], missed)
        got = self.next_events(stream, 2)
        self.assertEqual([e.token for e in got], missed)
        self.assertGreater(got[0].id, before.id)
        self.assertGreaterEqual(stream.reconnects, 1)

    def test_a_stream_ends_at_its_timeout(self):
        c = client()
        with c.events(prefix=unique("quiet"), timeout=0.5) as stream:
            self.assertEqual(list(stream), [])


if __name__ == "__main__":
    unittest.main()
