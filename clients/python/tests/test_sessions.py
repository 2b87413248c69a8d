"""Sessions against a real broker, beyond C22/C23: lost before the TTL when keepalives go
unanswered, the plain calls, what the broker refuses (a renewal of a session's lease, a kind it
does not hold in sessions, an ended session), and what is checked before anything is sent."""

import asyncio
import json
import time
import unittest

import lockbroker
from helpers import AsyncCase, Proxy, client, env, eventually, unique
from lockbroker import specs


def setUpModule():
    env("LOCKBROKER_URL")
    env("LOCKBROKER_API_KEY")


class LostWithoutConfirmation(unittest.TestCase):
    def test_lost_before_the_ttl_when_keepalives_go_unanswered(self):
        c, k = client(), unique("s-frozen")
        proxy = Proxy(env("LOCKBROKER_URL"))
        self.addCleanup(proxy.cut)
        session = lockbroker.Client(proxy.url, env("LOCKBROKER_API_KEY"), timeout=2.0).session(ttl=1.5)
        lease = session.lock(k, wait=5)
        eventually("a keepalive is confirmed", 5, lambda: session.keepalives >= 1)
        proxy.freeze()
        self.assertTrue(session.lost.wait(3 * session.ttl), "lost while no keepalive gets through")
        self.assertLess(time.monotonic(), session.held_until, "before the TTL passed since the last confirmed keepalive was sent")
        self.assertIsInstance(session.lost_reason, lockbroker.Unavailable)
        self.assertTrue(lease.lost.is_set(), "its lease with it")
        self.assertEqual(lease.held_until, session.held_until, "a lease of the session lives as long as the session")
        eventually("the broker ends it by its TTL", 10, lambda: not c.locks.status(k).held)


class AsyncLostWithoutConfirmation(AsyncCase):
    async def test_lost_before_the_ttl_when_keepalives_go_unanswered(self):
        k = unique("s-frozen-async")
        proxy = Proxy(env("LOCKBROKER_URL"))
        self.addCleanup(proxy.cut)
        session = await lockbroker.AsyncClient(proxy.url, env("LOCKBROKER_API_KEY"), timeout=2.0).session(ttl=1.5)
        lease = await session.lock(k, wait=5)
        deadline = time.monotonic() + 5
        while session.keepalives < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        self.assertGreaterEqual(session.keepalives, 1, "a keepalive is confirmed")
        proxy.freeze()
        await asyncio.wait_for(session.lost.wait(), 3 * session.ttl)
        self.assertLess(time.monotonic(), session.held_until, "before the TTL passed since the last confirmed keepalive was sent")
        self.assertIsInstance(session.lost_reason, lockbroker.Unavailable)
        self.assertTrue(lease.lost.is_set(), "its lease with it")
        proxy.cut()
        await session.close()  # never raises: it ends by its TTL


class PlainCalls(unittest.TestCase):
    def test_a_session_of_ones_own_keeping(self):
        c, k, name = client(), unique("s-plain"), unique("s-name")
        info = c.sessions.open(ttl=30, name=name)
        self.assertEqual((info.name, info.ttl_ms, info.lock_delay_ms), (name, 30000, 0))
        grant = c.locks.acquire(k, "s-owner", session=info.id)
        self.assertEqual(grant.expires_at, info.expires_at, "the lease's end is the session's")
        self.assertEqual(c.locks.status(k).session, info.id)
        with self.assertRaises(lockbroker.BadRequest):
            c.locks.renew(k, "s-owner", grant.token, ttl=30)  # kept by the session, not renewed
        self.assertGreater(c.sessions.keepalive(info.id).expires_at, info.expires_at)
        self.assertEqual([s.id for s in c.sessions.list(prefix=name)], [info.id])
        status = c.sessions.status(info.id)
        self.assertEqual([(e.kind, e.key, e.token) for e in status.leases], [("lock", k, grant.token)])
        self.assertEqual(c.sessions.close(info.id), lockbroker.SessionClosed(closed=True, released=1))
        self.assertFalse(c.locks.status(k).held)
        with self.assertRaises(lockbroker.SessionNotFound):
            c.sessions.close(info.id)
        with self.assertRaises(lockbroker.SessionNotFound):
            c.sessions.keepalive(info.id)
        with self.assertRaises(lockbroker.SessionNotFound):
            c.locks.acquire(k, "s-owner", session=info.id)
        self.assertFalse(c.locks.status(k).held, "an ended session is granted nothing")


class Handles(unittest.TestCase):
    def test_a_lease_released_alone_leaves_the_session_and_its_other_leases(self):
        c, k1, k2 = client(), unique("s-one"), unique("s-two")
        with c.session(ttl=30) as session:
            a = session.lock(k1, wait=5)
            with session.lock(k2, wait=5) as b:
                self.assertEqual(session.leases, [a, b])
                self.assertIsNone(session.try_lock(k1), "a fresh owner per call: no silent re-entry")
            self.assertFalse(c.locks.status(k2).held)
            self.assertEqual(session.leases, [a])
            self.assertEqual(c.locks.status(k1).token, a.token)
        self.assertIsNone(a.release(), "closed with the session: nothing left to release")
        self.assertFalse(c.locks.status(k1).held)

    def test_an_ended_session_grants_nothing(self):
        c, k = client(), unique("s-ended")
        with c.session(ttl=30) as session:
            c.sessions.close(session.id)
            with self.assertRaises(lockbroker.SessionNotFound):
                session.lock(k, wait=1)
        self.assertFalse(c.locks.status(k).held)

    def test_what_is_refused_before_anything_is_sent(self):
        c = lockbroker.Client("http://127.0.0.1:1", "k")  # nobody there: nothing may be sent
        for ttl in (0.5, 3601):
            with self.subTest(ttl=ttl), self.assertRaises(ValueError):
                c.session(ttl=ttl)
        with self.assertRaises(TypeError):
            c.semaphores.acquire("k", "o", permits=2, session="s")
        body = specs.LOCKS.acquire("k", "o", 30, 0, 0, {}, 10, session="s").payload()
        self.assertEqual(sorted(json.loads(body)), ["owner", "priority", "session", "wait_ms"], "no ttl_ms")

    def test_only_kinds_the_broker_holds_in_sessions(self):
        c = client()
        with c.session(ttl=30) as session:
            with self.assertRaises(TypeError):
                session.hold(c.semaphores, unique("s-sem"), permits=2)
            self.assertEqual(session.leases, [])


class AsyncHandles(AsyncCase):
    async def test_awaited_session_and_lease(self):
        c, k = lockbroker.AsyncClient(env("LOCKBROKER_URL"), env("LOCKBROKER_API_KEY")), unique("s-async")
        session = await c.session(ttl=30)
        lease = await session.lock(k, wait=5)
        self.assertEqual((await c.locks.status(k)).session, session.id)
        self.assertIsNone(await session.try_lock(k))
        closed = await session.close()
        self.assertEqual(closed, lockbroker.SessionClosed(closed=True, released=1))
        self.assertIsNone(await lease.release())
        self.assertIsNone(await session.close(), "once")
        self.assertFalse((await c.locks.status(k)).held)
        self.assertEqual([s async for s in c.sessions.list(prefix=unique("nobody"))], [])


if __name__ == "__main__":
    unittest.main()
