"""The async client's transport against a scripted fake broker: the same rules as the sync
client's (``test_transport.py``), over its own HTTP code — retries and what is never retried,
``Retry-After``, keys, chunked event streams resumed after their last id."""

import unittest

import lockbroker
from helpers import AsyncCase, FakeBroker

STATUS = {"key": "k", "storage_key": "k", "held": False, "owner": None, "token": None,
          "expires_at": None, "waiters": 0}
GRANT = {"key": "k", "storage_key": "k", "owner": "me", "token": 1, "hold_count": 1,
         "ttl_ms": 30000, "expires_at": "2026-11-21T10:00:00.000Z"}
UNAVAILABLE = (503, {"error": {"code": "unavailable", "message": "database down", "retry_after_ms": 200}})


class Retries(AsyncCase):
    def fake(self, answers):
        fake = FakeBroker(answers)
        self.addCleanup(fake.close)
        return fake

    async def test_503_is_retried_after_the_hint_then_answered(self):
        fake = self.fake([UNAVAILABLE, (200, STATUS)])
        client = lockbroker.AsyncClient(fake.url, "k", backoff=0.01)
        self.assertFalse((await client.locks.status("k")).held)
        self.assertEqual(len(fake.requests), 2)
        self.assertGreaterEqual(fake.requests[1][2] - fake.requests[0][2], 0.2, "retry_after_ms is honoured")

    async def test_a_retry_after_header_alone_is_honoured(self):
        fake = self.fake([(429, {"error": {"code": "rate_limited", "message": "slow down"}}, {"Retry-After": "1"}), (200, STATUS)])
        client = lockbroker.AsyncClient(fake.url, "k", backoff=0.01)
        with lockbroker.deadline(0.5):  # Retry-After is whole seconds: 1 s is past the deadline
            with self.assertRaises(lockbroker.RateLimited):
                await client.locks.status("k")
        self.assertEqual(len(fake.requests), 1)

    async def test_a_waiting_acquire_retried_waits_only_for_what_is_left(self):
        fake = self.fake([UNAVAILABLE, (200, GRANT)])
        client = lockbroker.AsyncClient(fake.url, "k", backoff=0.01)
        self.assertEqual((await client.locks.acquire("k", "me", wait=5)).token, 1)
        self.assertEqual(fake.bodies[0]["wait_ms"], 5000)
        self.assertLessEqual(fake.bodies[1]["wait_ms"], 5000 - 200)

    async def test_an_acquire_is_not_repeated_after_the_connection_broke_mid_request(self):
        fake = self.fake(["hang-up", (200, GRANT)])
        client = lockbroker.AsyncClient(fake.url, "k", backoff=0.01)
        with self.assertRaises(lockbroker.OutcomeUnknown):
            await client.locks.acquire("k", "me")
        self.assertEqual(len(fake.requests), 1)

    async def test_a_read_is_repeated_after_the_connection_broke_mid_request(self):
        fake = self.fake(["hang-up", (200, STATUS)])
        client = lockbroker.AsyncClient(fake.url, "k", backoff=0.01)
        self.assertEqual((await client.locks.status("k")).waiters, 0)
        self.assertEqual(len(fake.requests), 2)

    async def test_4xx_is_never_retried_and_keys_are_one_segment(self):
        fake = self.fake([(409, {"error": {"code": "lock_held", "message": "held", "retry_after_ms": 7}})])
        client = lockbroker.AsyncClient(fake.url + "/prefix/", "k", backoff=0.01)
        with self.assertRaises(lockbroker.LockHeld) as caught:
            await client.locks.acquire("a/b c%?#ü~-._", "me")
        self.assertEqual((caught.exception.status, caught.exception.retry_after_ms), (409, 7))
        self.assertEqual([p for _, p, _ in fake.requests], ["/prefix/v1/locks/a%2Fb%20c%25%3F%23%C3%BC~-._/acquire"])


class EventStreams(AsyncCase):
    async def test_a_stream_the_broker_ends_is_resumed_after_the_last_id(self):
        granted = b'id: 5\nevent: granted\ndata: {"id": 5, "kind": "lock", "storage_key": "k", "owner": "o", "token": 9, "at": "2026-11-21T10:00:00Z"}\n\n'
        released = granted.replace(b"5", b"6").replace(b"granted", b"released")
        fake = FakeBroker([(200, b": keep-alive\n\nevent: reset\ndata: {}\n\n" + granted), (200, released)])
        self.addCleanup(fake.close)
        client = lockbroker.AsyncClient(fake.url, "k")
        async with client.events(prefix="k", after=3, timeout=10) as stream:
            got = [await stream.__anext__() for _ in range(3)]
        self.assertEqual([(e.event, e.id, e.token) for e in got], [("reset", None, None), ("granted", 5, 9), ("released", 6, 9)])
        self.assertEqual((stream.last_id, stream.reconnects), (6, 1))
        self.assertEqual([h.get("Last-Event-ID") for h in fake.headers[:2]], ["3", "5"], "resumed after the last id seen")

    async def test_observe_yields_each_leader_once_across_reconnects(self):
        vacant = b'event: leader\ndata: {"name": "e", "storage_key": "e", "leader": null, "term": null}\n\n'
        led = b'event: leader\ndata: {"name": "e", "storage_key": "e", "leader": "a", "term": 1}\n\n'
        # The second stream starts with the leadership the first one ended on.
        fake = FakeBroker([(200, vacant + led), (200, led)])
        self.addCleanup(fake.close)
        client = lockbroker.AsyncClient(fake.url, "k", backoff=0.01)
        seen = []
        async for change in client.elections.observe("e", timeout=1.0):
            seen.append((change.leader, change.term))
        self.assertEqual(seen, [(None, None), ("a", 1)])
        self.assertGreaterEqual(len(fake.requests), 2, "it connected again")


if __name__ == "__main__":
    unittest.main()
