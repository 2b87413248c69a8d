"""Retries, error mapping and key encoding, against a scripted fake broker
(no real broker needed: these are the client's own rules)."""

import time
import unittest

import lockbroker
from helpers import FakeBroker, closed_port

STATUS = {"key": "k", "storage_key": "k", "held": False, "owner": None, "token": None,
          "expires_at": None, "waiters": 0}
UNAVAILABLE = (503, {"error": {"code": "unavailable", "message": "database down", "retry_after_ms": 200}})
HELD = (409, {"error": {"code": "lock_held", "message": "held", "retry_after_ms": 7}})


class Retries(unittest.TestCase):
    def fake(self, answers):
        fake = FakeBroker(answers)
        self.addCleanup(fake.close)
        return fake

    def test_503_is_retried_after_the_hint_then_answered(self):
        fake = self.fake([UNAVAILABLE, (200, STATUS)])
        client = lockbroker.Client(fake.url, "k", backoff=0.01)
        status = client.locks.status("k")
        self.assertEqual(status.held, False)
        self.assertEqual(len(fake.requests), 2)
        gap = fake.requests[1][2] - fake.requests[0][2]
        self.assertGreaterEqual(gap, 0.2, "retry_after_ms (200) is honoured over the 10 ms backoff")

    def test_503_gives_up_after_the_retries(self):
        fake = self.fake([(503, {"error": {"code": "unavailable", "message": "down"}})])
        client = lockbroker.Client(fake.url, "k", retries=3, backoff=0.01, max_backoff=0.02)
        with self.assertRaises(lockbroker.Unavailable) as caught:
            client.locks.acquire("k", "me")
        self.assertEqual(caught.exception.status, 503)
        self.assertEqual(caught.exception.code, "unavailable")
        self.assertEqual(len(fake.requests), 4, "one try and three retries")

    def test_a_waiting_acquire_retried_waits_only_for_what_is_left(self):
        grant = {"key": "k", "storage_key": "k", "owner": "me", "token": 1, "hold_count": 1,
                 "ttl_ms": 30000, "expires_at": "2026-11-21T10:00:00.000Z"}
        fake = self.fake([UNAVAILABLE, (200, grant)])
        client = lockbroker.Client(fake.url, "k", backoff=0.01)
        self.assertEqual(client.locks.acquire("k", "me", wait=5).token, 1)
        first, second = fake.bodies[0]["wait_ms"], fake.bodies[1]["wait_ms"]
        self.assertEqual(first, 5000)
        self.assertLessEqual(second, 5000 - 200, "the 200 ms spent before the retry are not waited again")

    def test_429_is_retried_after_its_retry_after_header(self):
        limited = (429, {"error": {"code": "rate_limited", "message": "slow down"}}, {"Retry-After": "1"})
        fake = self.fake([limited, (200, STATUS)])
        client = lockbroker.Client(fake.url, "k", backoff=0.01)
        self.assertFalse(client.locks.status("k").held)
        self.assertGreaterEqual(fake.requests[1][2] - fake.requests[0][2], 1.0, "Retry-After (1 s) is honoured")
        with lockbroker.deadline(0.5):
            fake.answers[:0] = [limited]
            with self.assertRaises(lockbroker.RateLimited) as caught:
                client.locks.status("k")
        self.assertEqual(caught.exception.retry_after_ms, 1000, "raised at once: the hint ends past the deadline")

    def test_4xx_is_never_retried(self):
        fake = self.fake([HELD, (200, STATUS)])
        client = lockbroker.Client(fake.url, "k", backoff=0.01)
        with self.assertRaises(lockbroker.LockHeld) as caught:
            client.locks.acquire("k", "me")
        err = caught.exception
        self.assertEqual((err.status, err.code, err.retry_after_ms), (409, "lock_held", 7))
        self.assertIsInstance(err, lockbroker.Busy)
        self.assertEqual(len(fake.requests), 1)

    def test_an_acquire_is_not_repeated_after_the_connection_broke_mid_request(self):
        # The broker may have granted it: a repeat by the same owner would
        # re-enter (a second hold nobody releases).
        fake = self.fake(["hang-up", (200, STATUS)])
        client = lockbroker.Client(fake.url, "k", backoff=0.01)
        with self.assertRaises(lockbroker.Unreachable):
            client.locks.acquire("k", "me")
        self.assertEqual(len(fake.requests), 1)

    def test_a_read_is_repeated_after_the_connection_broke_mid_request(self):
        fake = self.fake(["hang-up", (200, STATUS)])
        client = lockbroker.Client(fake.url, "k", backoff=0.01)
        self.assertEqual(client.locks.status("k").waiters, 0)
        self.assertEqual(len(fake.requests), 2)

    def test_an_unreachable_broker_is_retried_a_bounded_number_of_times(self):
        client = lockbroker.Client(f"http://127.0.0.1:{closed_port()}", "k", retries=2, backoff=0.05)
        started = time.monotonic()
        with self.assertRaises(lockbroker.Unreachable) as caught:
            client.locks.acquire("k", "me")
        elapsed = time.monotonic() - started
        self.assertIsNone(caught.exception.status)
        self.assertIsInstance(caught.exception, lockbroker.Unavailable)
        self.assertGreaterEqual(elapsed, 0.05 * 0.5 + 0.1 * 0.5, "two backoffs were slept")
        self.assertLess(elapsed, 5.0)

    def test_unknown_codes_still_raise_the_base_error(self):
        fake = self.fake([(418, {"error": {"code": "teapot", "message": "short and stout"}})])
        client = lockbroker.Client(fake.url, "k")
        with self.assertRaises(lockbroker.LockbrokerError) as caught:
            client.locks.status("k")
        self.assertEqual(type(caught.exception), lockbroker.LockbrokerError)
        self.assertEqual((caught.exception.status, caught.exception.code), (418, "teapot"))

    def test_the_key_is_one_percent_encoded_path_segment(self):
        fake = self.fake([(200, STATUS)])
        client = lockbroker.Client(fake.url + "/prefix/", "k")
        client.locks.status("a/b c%?#ü~-._")
        self.assertEqual(fake.requests[0][1], "/prefix/v1/locks/a%2Fb%20c%25%3F%23%C3%BC~-._")


class Listing(unittest.TestCase):
    def test_pages_are_followed_by_their_cursor_up_to_the_limit(self):
        item = dict(STATUS, held=True)
        fake = FakeBroker([(200, {"items": [dict(item, storage_key="a")], "next": "c1"}),
                           (200, {"items": [dict(item, storage_key="b"), dict(item, storage_key="c")], "next": None})])
        self.addCleanup(fake.close)
        client = lockbroker.Client(fake.url, "k")
        listed = list(client.semaphores.list(prefix="a b/%", limit=2, page_size=5))
        self.assertEqual([s.storage_key for s in listed], ["a", "b"])
        self.assertIsInstance(listed[0], lockbroker.SemaphoreStatus)
        self.assertEqual(
            [path for _, path, _ in fake.requests],
            ["/v1/semaphores?prefix=a%20b%2F%25&limit=2", "/v1/semaphores?prefix=a%20b%2F%25&limit=1&cursor=c1"],
        )


class EventStreams(unittest.TestCase):
    def test_a_stream_the_broker_ends_is_resumed_after_the_last_id(self):
        granted = b'id: 5\nevent: granted\ndata: {"id": 5, "kind": "lock", "storage_key": "k", "owner": "o", "token": 9, "at": "2026-11-21T10:00:00.000001Z"}\n\n'
        released = granted.replace(b"5", b"6").replace(b"granted", b"released")
        fake = FakeBroker([(200, b": keep-alive\n\nevent: reset\ndata: {}\n\n" + granted), (200, released)])
        self.addCleanup(fake.close)
        client = lockbroker.Client(fake.url, "k")
        with client.events(prefix="k", after=3, timeout=10) as stream:
            got = [next(stream) for _ in range(3)]
        self.assertEqual([(e.event, e.id, e.token) for e in got], [("reset", None, None), ("granted", 5, 9), ("released", 6, 9)])
        self.assertEqual(got[1].at.microsecond, 1)
        self.assertEqual((stream.last_id, stream.reconnects), (6, 1))
        self.assertEqual([path for _, path, _ in fake.requests[:2]], ["/v1/events?prefix=k"] * 2)
        self.assertEqual([h.get("Last-Event-ID") for h in fake.headers[:2]], ["3", "5"], "resumed after the last id seen")


class Configuration(unittest.TestCase):
    def test_url_and_key_come_from_the_environment(self):
        import os
        from unittest import mock

        with mock.patch.dict(os.environ, {"LOCKBROKER_URL": "http://example.invalid:1", "LOCKBROKER_API_KEY": "x"}):
            self.assertEqual(lockbroker.Client().url, "http://example.invalid:1")
        with mock.patch.dict(os.environ, {}, clear=True):
            with self.assertRaises(ValueError):
                lockbroker.Client()
        with self.assertRaises(ValueError):
            lockbroker.Client("ftp://example.invalid")


if __name__ == "__main__":
    unittest.main()
