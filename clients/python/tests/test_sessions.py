"""Sessions against a real broker, beyond C22–C24: lost before the TTL when keepalives go
unanswered, the plain calls (of every kind), what the broker refuses (a renewal of a session's
lease of any kind, an ended session), every kind's lease lost with its session, released
through its own handle, and taken by the ``try_`` guards, and what is checked before anything
is sent."""

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
        body = specs.LOCKS.acquire("k", "o", 30, 0, 0, {}, 10, session="s").payload()
        self.assertEqual(sorted(json.loads(body)), ["owner", "priority", "session", "wait_ms"], "no ttl_ms")
        for spec, fields in ((specs.SEMAPHORES, {"permits": 2}), (specs.RWLOCKS, {"mode": "read"}), (specs.ELECTIONS, {})):
            with self.subTest(kind=spec.noun):
                body = json.loads(spec.acquire("k", "o", 30, 0, 0, fields, 10, session="s").payload())
                self.assertEqual((body["session"], "ttl_ms" in body), ("s", False), "every kind: the session in place of ttl_ms")
        body = json.loads(specs.acquire_multi(["a", "b"], "o", 30, 0, session="s").payload())
        self.assertEqual(sorted(body), ["keys", "owner", "session", "wait_ms"], "a multi-lock's too")

    def test_a_session_holds_leases_of_the_clients_kinds_with_their_fields(self):
        c = client()
        with c.session(ttl=30) as session:
            with self.assertRaises(TypeError):
                session.hold(c.sessions, unique("s-what"))
            with self.assertRaises(ValueError):
                session.rwlock(unique("s-rw"), "both", wait=1)
            with self.assertRaises(TypeError):
                session.hold(c.semaphores, unique("s-sem"))  # no permits
            self.assertEqual(session.leases, [])


class EveryKind(unittest.TestCase):
    """Semaphore permits, rwlock leases, multi-locks and leaderships held in a session (C24 holds
    one of each across TTLs and closes the session)."""

    def test_plain_calls_of_every_kind_in_a_session_of_ones_own(self):
        c, base = client(), unique("s-kinds")
        info = c.sessions.open(ttl=30)
        permit = c.semaphores.acquire(base + "/pool", "s-owner", permits=2, session=info.id)
        self.assertEqual((permit.expires_at, permit.ttl_ms), (info.expires_at, info.ttl_ms), "the session's end and TTL")
        read = c.rwlocks.acquire(base + "/rw", "s-owner", mode="read", session=info.id)
        multi = c.acquire_multi([base + "/a", base + "/b"], "s-owner", session=info.id)
        self.assertEqual(multi.ttl_ms, info.ttl_ms)
        term = c.elections.acquire(base + "/leader", "s-owner", session=info.id)
        self.assertEqual(c.semaphores.status(base + "/pool").holders[0].session, info.id)
        self.assertEqual(c.rwlocks.status(base + "/rw").readers[0].session, info.id)
        self.assertEqual(c.locks.status(base + "/a").session, info.id)
        renewals = {
            "semaphore": lambda: c.semaphores.renew(base + "/pool", "s-owner", permit.token, slot=permit.slot),
            "rwlock": lambda: c.rwlocks.renew(base + "/rw", "s-owner", read.token),
            "multi-lock": lambda: c.renew_multi("s-owner", [{"key": e.key, "token": e.token} for e in multi.locks]),
            "election": lambda: c.elections.renew(base + "/leader", "s-owner", term.term),
        }
        for kind, renew in renewals.items():
            with self.subTest(kind=kind), self.assertRaises(lockbroker.BadRequest):
                renew()  # kept by the session, not renewed
        shown = sorted((e.kind, e.key, e.token, e.slot, e.mode) for e in c.sessions.status(info.id).leases)
        self.assertEqual(shown, sorted([
            ("semaphore", base + "/pool", permit.token, permit.slot, None),
            ("rwlock", base + "/rw", read.token, None, "read"),
            ("lock", base + "/a", multi.token(base + "/a"), None, None),
            ("lock", base + "/b", multi.token(base + "/b"), None, None),
            ("election", base + "/leader", term.term, None, None),
        ]))
        self.assertEqual(c.sessions.close(info.id), lockbroker.SessionClosed(closed=True, released=5))
        self.assertEqual(c.semaphores.status(base + "/pool").holders, [])
        self.assertEqual(c.rwlocks.status(base + "/rw").readers, [])
        self.assertFalse(any(c.locks.status(base + k).held for k in ("/a", "/b")))
        self.assertIsNone(c.elections.leader(base + "/leader").leader)
        with self.assertRaises(lockbroker.SessionNotFound):
            c.acquire_multi([base + "/a"], "s-owner", session=info.id)
        with self.assertRaises(lockbroker.SessionNotFound):
            c.semaphores.acquire(base + "/pool", "s-owner", permits=2, session=info.id)
        self.assertEqual(c.semaphores.status(base + "/pool").holders, [], "an ended session is granted nothing")

    def test_each_released_through_its_handle_alone_and_the_rest_by_the_close(self):
        c, base = client(), unique("s-own")
        with c.session(ttl=30) as session:
            permit = session.semaphore(base + "/pool", permits=1, wait=5)
            writer = session.write_lock(base + "/rw", wait=5)
            multi = session.multilock([base + "/a", base + "/b"], wait=5)
            leader = session.campaign(base + "/leader", wait=5)
            self.assertIsInstance(permit, lockbroker.Permit)
            self.assertIsInstance(writer, lockbroker.RwLease)
            self.assertIsInstance(multi, lockbroker.MultiLease)
            self.assertIsInstance(leader, lockbroker.Leader)
            self.assertEqual(session.leases, [permit, writer, multi, leader])
            with session.read_lock(base + "/read", wait=5) as reader:
                self.assertEqual(c.rwlocks.status(base + "/read").readers[0].token, reader.token)
            self.assertEqual(c.rwlocks.status(base + "/read").readers, [], "its with block released it")
            self.assertEqual(permit.release(), lockbroker.Released(released=True, hold_count=0))
            self.assertEqual(c.semaphores.status(base + "/pool").holders, [], "released through its handle: free at once")
            leader.resign()
            self.assertIsNone(c.elections.leader(base + "/leader").leader)
            self.assertTrue(all(r.released for r in multi.release()))
            self.assertFalse(any(c.locks.status(k).held for k in multi.keys))
            self.assertEqual(session.leases, [writer], "the others stay held")
            self.assertEqual(c.rwlocks.status(base + "/rw").writer.token, writer.token)
            self.assertEqual(session.close(), lockbroker.SessionClosed(closed=True, released=1))
            self.assertIsNone(writer.release(), "closed with the session: nothing left to release")
        self.assertIsNone(c.rwlocks.status(base + "/rw").writer)

    def test_the_try_guards_give_none_when_taken(self):
        c, base = client(), unique("s-try")
        with c.session(ttl=30) as session:
            permit = session.try_semaphore(base + "/pool", permits=1)
            self.assertIsNotNone(permit, "granted at once: free")
            self.assertIsNone(session.try_semaphore(base + "/pool", permits=1), "every permit taken")
            reader = session.try_read_lock(base + "/rw")
            self.assertEqual(reader.mode, "read")
            self.assertIsNone(session.try_write_lock(base + "/rw"), "a reader holds it: a fresh owner per call")
            writer = session.try_write_lock(base + "/w")
            self.assertIsNone(session.try_read_lock(base + "/w"), "a writer holds it")
            leader = session.try_campaign(base + "/leader", candidate="s-candidate")
            self.assertEqual((leader.candidate, c.elections.leader(base + "/leader").leader), ("s-candidate", "s-candidate"))
            self.assertIsNone(session.try_campaign(base + "/leader"), "another candidate leads")
            multi = session.try_multilock([base + "/a", base + "/b"])
            self.assertIsNone(session.try_multilock([base + "/b", base + "/c"]), "one key is busy")
            self.assertFalse(c.locks.status(base + "/c").held, "none of the others held")
            self.assertEqual(len(session.leases), 5)
            self.assertTrue(all(lease.session is session for lease in (permit, reader, writer, leader, multi)))
        self.assertEqual(c.semaphores.status(base + "/pool").holders, [])

    def test_every_lease_of_a_lost_session_is_lost_with_it(self):
        c, base = client(), unique("s-lost")
        with self.assertLogs("lockbroker", "WARNING") as logs:
            with c.session(ttl=3.0) as session:
                leases = [
                    session.lock(base + "/lock", wait=5),
                    session.semaphore(base + "/pool", permits=1, wait=5),
                    session.read_lock(base + "/read", wait=5),
                    session.write_lock(base + "/write", wait=5),
                    session.multilock([base + "/a", base + "/b"], wait=5),
                    session.campaign(base + "/leader", wait=5),
                ]
                c.sessions.close(session.id)  # from outside
                new = c.semaphores.acquire(base + "/pool", "s-new-holder", permits=1, ttl=30)
                self.addCleanup(c.semaphores.release, base + "/pool", "s-new-holder", new.token, slot=new.slot)
                self.assertTrue(session.lost.wait(session.ttl), "lost within one TTL")
                for lease in leases:
                    with self.subTest(lease=lease):
                        self.assertTrue(lease.lost.is_set(), "every lease of it reports lost")
                        self.assertIsInstance(lease.lost_reason, lockbroker.SessionNotFound)
                        self.assertIsNone(lease.release(), "releasing it does not raise")
        self.assertEqual(len([line for line in logs.output if "lost" in line]), 1, "one lost signal for them all")
        holders = c.semaphores.status(base + "/pool").holders
        self.assertEqual([(h.owner, h.token, h.session) for h in holders], [("s-new-holder", new.token, None)], "the new holder's left alone")


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


class AsyncEveryKind(AsyncCase):
    async def test_every_kind_in_async_with_blocks_and_lost_with_the_session(self):
        c, base = lockbroker.AsyncClient(env("LOCKBROKER_URL"), env("LOCKBROKER_API_KEY")), unique("s-async-kinds")
        async with c.session(ttl=30) as session:
            async with session.semaphore(base + "/pool", 1, wait=5) as permit, session.multilock([base + "/a", base + "/b"]) as multi:
                self.assertIsInstance(permit, lockbroker.aio.AsyncPermit)
                self.assertIsNone(await session.try_semaphore(base + "/pool", 1))
                self.assertIsNone(await session.try_multilock([base + "/b"]))
                self.assertEqual((await c.locks.status(base + "/a")).token, multi.tokens[base + "/a"])
            self.assertEqual((await c.semaphores.status(base + "/pool")).holders, [], "released at the block's end")
            self.assertFalse((await c.locks.status(base + "/a")).held)
            reader = await session.try_read_lock(base + "/rw")
            self.assertIsNone(await session.try_write_lock(base + "/rw"))
            writer = await session.write_lock(base + "/w", wait=5)
            leader = await session.campaign(base + "/leader", wait=5, candidate="s-async")
            self.assertIsNone(await session.try_campaign(base + "/leader"))
            self.assertEqual(session.leases, [reader, writer, leader])
            await leader.resign()
            self.assertIsNone((await c.elections.leader(base + "/leader")).leader)
            with self.assertLogs("lockbroker", "WARNING") as logs:
                await c.sessions.close(session.id)  # from outside
                await asyncio.wait_for(session.lost.wait(), session.ttl)
            self.assertTrue(reader.lost.is_set() and writer.lost.is_set(), "lost with the session")
            self.assertFalse(leader.lost.is_set(), "resigned before: no longer the session's")
            self.assertEqual(len([line for line in logs.output if "lost" in line]), 1)
            self.assertIsNone(await writer.release())
        self.assertIsNone((await c.rwlocks.status(base + "/w")).writer)


if __name__ == "__main__":
    unittest.main()
