"""The client's pure parts: the renewal thread's rules, the event-stream
parser and time parsing, without a broker."""

import threading
import time
import unittest
from datetime import datetime, timezone

import lockbroker
from lockbroker.errors import error_for
from lockbroker.models import parse_time
from lockbroker.renewal import Renewer
from lockbroker.sse import events


def renewer(renew, ttl, lost):
    return Renewer(renew, ttl, time.monotonic(), lost, timeout=5.0, backoff=0.01, what="test").start()


class Renewal(unittest.TestCase):
    def test_renews_every_third_of_the_ttl(self):
        calls = []
        lost = threading.Event()
        r = renewer(lambda timeout: calls.append(time.monotonic()), 0.6, lost)
        self.addCleanup(r.stop)
        deadline = time.monotonic() + 5
        while len(calls) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        r.stop()
        self.assertGreaterEqual(len(calls), 4)
        gaps = [b - a for a, b in zip(calls, calls[1:])]
        self.assertTrue(all(0.15 <= g <= 0.5 for g in gaps), f"every 0.2 s: {gaps}")
        self.assertFalse(lost.is_set())

    def test_a_refusal_loses_the_lease_at_once(self):
        lost = threading.Event()

        def refuse(timeout):
            raise lockbroker.LeaseLost(409, "lease_lost", "gone")

        started = time.monotonic()
        r = renewer(refuse, 3.0, lost)
        self.addCleanup(r.stop)
        self.assertTrue(lost.wait(5))
        self.assertLess(time.monotonic() - started, 2.0, "at the first renewal (1 s), not at the deadline (3 s)")
        self.assertIsInstance(r.last_error, lockbroker.LeaseLost)

    def test_transient_failures_are_retried_until_the_deadline_then_lost(self):
        lost = threading.Event()
        calls = []

        def unavailable(timeout):
            calls.append(time.monotonic())
            raise lockbroker.Unavailable(503, "unavailable", "down")

        started = time.monotonic()
        r = renewer(unavailable, 1.2, lost)
        self.addCleanup(r.stop)
        self.assertTrue(lost.wait(5))
        at = time.monotonic() - started
        self.assertLessEqual(at, 1.2 + 0.4, "lost by the deadline (the TTL after the grant was asked)")
        self.assertGreaterEqual(at, 0.4, "not before the first renewal was due")
        self.assertGreater(len(calls), 1, "retried before giving up")

    def test_a_transient_failure_that_passes_keeps_the_lease(self):
        lost = threading.Event()
        calls = []

        def flaky(timeout):
            calls.append(time.monotonic())
            if len(calls) % 2 == 1:
                raise lockbroker.Unreachable(None, "unreachable", "reset")

        r = renewer(flaky, 0.3, lost)
        self.addCleanup(r.stop)
        deadline = time.monotonic() + 5
        while r.renewals < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        r.stop()
        self.assertGreaterEqual(r.renewals, 4)
        self.assertFalse(lost.is_set())

    def test_stop_does_not_count_as_lost(self):
        lost = threading.Event()
        r = renewer(lambda timeout: None, 0.3, lost)
        r.stop()
        self.assertFalse(lost.is_set())


class EventStream(unittest.TestCase):
    def test_events_comments_and_multi_line_data(self):
        stream = iter(
            [
                b": keep-alive\n",
                b"\n",
                b"event: leader\n",
                b'data: {"leader": "a",\n',
                b'data:  "term": 1}\n',
                b"\n",
                b"event: leader\r\n",
                b'data: {"leader": null}\r\n',
                b"\r\n",
                b"event: leader\n",
                b'data: {"leader": "cut off"}\n',
                b"",
            ]
        )
        got = list(events(lambda: next(stream)))
        self.assertEqual(got, [("leader", {"leader": "a", "term": 1}, None), ("leader", {"leader": None}, None)])

    def test_readline_none_stops(self):
        lines = iter([b"event: leader\n", b"data: {}\n", b"\n", None, b"event: x\n"])
        self.assertEqual(list(events(lambda: next(lines))), [("leader", {}, None)])

    def test_an_id_holds_until_the_next_one(self):
        lines = iter(
            [b"id: 7\n", b"event: granted\n", b'data: {"token": 1}\n', b"\n",
             b"event: reset\n", b"data: {}\n", b"\n",
             b"id: 9\n", b"data: {}\n", b"\n", b""]
        )
        got = [(m.event, m.id) for m in events(lambda: next(lines))]
        self.assertEqual(got, [("granted", "7"), ("reset", "7"), ("message", "9")])


class Times(unittest.TestCase):
    def test_broker_times_parse_to_utc(self):
        self.assertEqual(
            parse_time("2026-11-21T10:00:00.5Z"), datetime(2026, 11, 21, 10, 0, 0, 500000, tzinfo=timezone.utc)
        )
        self.assertEqual(parse_time("2026-11-21T10:00:00Z").tzinfo, timezone.utc)
        self.assertEqual(parse_time("2026-11-21T10:00:00.123456789Z").microsecond, 123456)
        self.assertIsNone(parse_time(None))

class ErrorMapping(unittest.TestCase):
    """Codes pick the exception class; a code a newer broker added still
    raises a LockbrokerError that keeps the code, by its status if known."""

    def test_known_codes_get_their_class(self):
        e = error_for(409, "lock_held", "held", 120)
        self.assertIsInstance(e, lockbroker.LockHeld)
        self.assertEqual((e.code, e.retry_after_ms), ("lock_held", 120))

    def test_an_unknown_code_with_a_known_status_keeps_its_code(self):
        e = error_for(429, "from_a_newer_broker", "over quota")
        self.assertIsInstance(e, lockbroker.LockbrokerError)
        self.assertIsInstance(e, lockbroker.TooManyWaiters)
        self.assertEqual((e.status, e.code, e.message), (429, "from_a_newer_broker", "over quota"))
        self.assertIsInstance(error_for(429, "quota_exceeded", "q"), lockbroker.QuotaExceeded)
        self.assertIsInstance(error_for(429, "rate_limited", "r", 40), lockbroker.RateLimited)

    def test_too_many_streams_is_a_too_many_waiters(self):
        e = error_for(429, "too_many_streams", "16 open")
        self.assertIsInstance(e, lockbroker.TooManyStreams)
        self.assertIsInstance(e, lockbroker.TooManyWaiters)

    def test_an_unknown_code_and_status_is_the_base_class(self):
        e = error_for(418, "teapot", "short and stout")
        self.assertIs(type(e), lockbroker.LockbrokerError)
        self.assertEqual(e.code, "teapot")
        self.assertIn("teapot", str(e))


class KindFields(unittest.TestCase):
    """Each kind asks for its own fields before anything is sent (the URL leads nowhere)."""

    def test_a_kind_takes_its_own_fields_and_no_others(self):
        c = lockbroker.Client("http://127.0.0.1:1", "k", retries=0)
        with self.assertRaises(TypeError):
            c.semaphores.acquire("k", "me")  # no permits
        with self.assertRaises(TypeError):
            c.locks.acquire("k", "me", permits=2)
        with self.assertRaises(TypeError):
            c.semaphores.release("k", "me", 1)  # no slot
        with self.assertRaises(TypeError):
            c.locks.renew("k", "me", 1, slot=0)
        with self.assertRaises(ValueError):
            c.rwlocks.acquire("k", "me", mode="upgrade")


if __name__ == "__main__":
    unittest.main()
