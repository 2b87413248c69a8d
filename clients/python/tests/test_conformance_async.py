"""The conformance scenarios of clients/CONFORMANCE.md (C01–C25), for the async client
(``lockbroker.AsyncClient``), against the conformance brokers. One test per scenario, named
after its id, as in ``test_conformance_sync.py``.

Where a scenario needs a second actor (the holder that releases, the
observer), it is another task of the test's event loop; the stand-ins
(``helpers``) are threads, as for the sync suite.
"""

import asyncio
import os
import time
import unittest
from unittest import mock

import lockbroker
import conformance as expect
from conformance import (
    TENANT,
    UNAVAILABLE,
    async_client,
    client,
    eventually_async,
    forwarder,
    key,
    stand_in,
    tls_files,
    tls_url,
    url,
)
from conformance import require_brokers as setUpModule  # noqa: F401  (unittest runs it)
from helpers import AsyncCase, Proxy, closed_port, env, eventually, unique


async def later(delay: float, call) -> None:
    """Runs the coroutine function ``call`` after ``delay`` seconds (another actor's move)."""
    await asyncio.sleep(delay)
    await call()


class Locks(AsyncCase):
    async def test_c01_acquire_and_release(self):
        c, k = async_client(), unique("c01")
        grant = await c.locks.acquire(k, "c01-owner", ttl=30)
        self.assertIsInstance(grant.token, int)
        self.assertGreater(grant.token, 0)
        status = await c.locks.status(k)
        self.assertEqual((status.held, status.owner, status.token), (True, "c01-owner", grant.token))
        released = await c.locks.release(k, "c01-owner", grant.token)
        self.assertEqual(released, lockbroker.Released(released=True, hold_count=0))
        status = await c.locks.status(k)
        self.assertEqual((status.held, status.owner, status.token), (False, None, None))
        lease = await c.lock(k, ttl=30, wait=5)  # awaited, not entered: released by hand
        self.assertEqual((await c.locks.status(k)).token, lease.token)
        await lease.release()
        self.assertFalse((await c.locks.status(k)).held)

    async def test_c02_try_returns_at_once_while_held(self):
        c, k = async_client(), unique("c02")
        async with c.lock(k, ttl=30, wait=5):
            started = time.monotonic()
            self.assertIsNone(await c.try_lock(k, ttl=30), "not acquired: None, no exception")
            with self.assertRaises(lockbroker.LockHeld):
                await c.locks.acquire(k, "someone-else", ttl=30, wait=0)
            self.assertLess(time.monotonic() - started, 1.0, "no waiting")

    async def test_c03_wait_is_granted_on_release_and_times_out_typed(self):
        c, k = async_client(), unique("c03")
        holder = await c.locks.acquire(k, "holder", ttl=30)
        releasing = asyncio.ensure_future(later(0.3, lambda: c.locks.release(k, "holder", holder.token)))
        started = time.monotonic()
        async with c.lock(k, ttl=30, wait=10) as lease:
            self.assertGreaterEqual(time.monotonic() - started, 0.25, "granted after the release, not before")
            self.assertGreater(lease.token, holder.token)
        await releasing

        holder = await c.locks.acquire(k, "holder", ttl=30)
        self.addAsyncCleanup(c.locks.release, k, "holder", holder.token)
        started = time.monotonic()
        with self.assertRaises(lockbroker.LockHeld) as caught:
            async with c.lock(k, ttl=30, wait=0.3):
                self.fail("granted while held")
        expect.check_waited_then_held(self, started, caught)

    async def test_c04_renews_past_several_ttls(self):
        c, k = async_client(), unique("c04")
        async with c.lock(k, ttl=1.0, wait=5) as lease:
            await asyncio.sleep(3.5)  # time is what is tested: 3.5 TTLs
            status = await c.locks.status(k)
            self.assertEqual((status.held, status.owner, status.token), (True, lease.owner, lease.token))
            self.assertFalse(lease.lost.is_set())
            self.assertGreaterEqual(lease.renewals, 7, "renewed at about a third of the TTL")

    async def test_c05_lost_when_force_released_and_retaken(self):
        c, k = async_client(), unique("c05")
        admin = lockbroker.AsyncClient(url(), env("LOCKBROKER_ADMIN_TOKEN"))
        ttl = 1.5
        async with c.lock(k, ttl=ttl, wait=5) as lease:
            forced = await admin.force_release(TENANT, k)
            self.assertEqual((forced.owner, forced.token), (lease.owner, lease.token))
            new = await c.locks.acquire(k, "c05-new-holder", ttl=30)
            self.addAsyncCleanup(c.locks.release, k, "c05-new-holder", new.token)
            await asyncio.wait_for(lease.lost.wait(), ttl)  # lost within one TTL
            self.assertIsInstance(lease.lost_reason, lockbroker.LeaseLost)
            self.assertIsNone(await lease.release(), "releasing the lost lease does not raise")
        status = await c.locks.status(k)
        self.assertEqual((status.held, status.owner, status.token), (True, "c05-new-holder", new.token))

    async def test_c06_lost_before_the_ttl_when_renewals_go_unanswered(self):
        k, ttl = unique("c06"), 1.5
        proxy = Proxy(url())
        self.addCleanup(proxy.cut)
        lease = await lockbroker.AsyncClient(proxy.url, key(), timeout=2.0).lock(k, ttl=ttl, wait=5)
        await eventually_async("a renewal is confirmed", 5, lambda: lease.renewals >= 1)
        proxy.freeze()
        await asyncio.wait_for(lease.lost.wait(), 3 * ttl)
        expect.check_lost_unconfirmed(self, lease)

    async def test_c07_released_when_the_scope_ends(self):
        c, k = async_client(), unique("c07")
        async with c.lock(k, ttl=30, wait=5):
            self.assertTrue((await c.locks.status(k)).held)
        self.assertFalse((await c.locks.status(k)).held, "released at the normal end")
        with self.assertRaises(RuntimeError):
            async with c.lock(k, ttl=30, wait=5):
                raise RuntimeError("the job failed")
        self.assertFalse((await c.locks.status(k)).held, "released when an exception ends it")

        entered = asyncio.Event()

        async def job():
            async with c.lock(k, ttl=30, wait=5):
                entered.set()
                await asyncio.sleep(60)

        task = asyncio.ensure_future(job())
        await asyncio.wait_for(entered.wait(), 10)
        self.assertTrue((await c.locks.status(k)).held)
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertFalse((await c.locks.status(k)).held, "released when the task is cancelled")

    async def test_c08_tokens_increase_and_validate_fences(self):
        c, k = async_client(), unique("c08")
        tokens = []
        for _ in range(3):
            async with c.lock(k, ttl=30, wait=5) as lease:
                tokens.append(lease.token)
        self.assertEqual(tokens, sorted(set(tokens)), "strictly increasing")
        async with c.lock(k, ttl=30, wait=5) as lease:
            self.assertGreater(lease.token, tokens[-1])
            self.assertEqual(await c.locks.validate(k, lease.token), lockbroker.Validity(valid=True, token=lease.token))
            self.assertEqual(await c.locks.validate(k, tokens[-1]), lockbroker.Validity(valid=False, token=lease.token))


class Failures(AsyncCase):
    async def test_c09_retries_503_and_connection_failures_with_growing_jittered_delays(self):
        backoff = 0.1
        fake = stand_in(self, [UNAVAILABLE, UNAVAILABLE, "forward"])
        c = lockbroker.AsyncClient(fake.url, key(), backoff=backoff, max_backoff=2.0)
        k = unique("c09")
        self.assertFalse((await c.locks.status(k)).held, "the third try got the broker's answer")
        expect.check_503s_retried(self, fake, backoff)

        always = stand_in(self, [UNAVAILABLE], upstream=False)
        c = lockbroker.AsyncClient(always.url, key(), retries=50, backoff=0.1, max_backoff=0.4)
        started = time.monotonic()
        with self.assertRaises(lockbroker.Unavailable) as caught:
            with lockbroker.deadline(1.0):
                await c.locks.status(k)
        expect.check_503s_given_up_at_the_deadline(self, started, caught, always)

        nobody = lockbroker.AsyncClient(f"http://127.0.0.1:{closed_port()}", key(), retries=50, backoff=0.1, max_backoff=0.4)
        started = time.monotonic()
        with self.assertRaises(lockbroker.Unreachable):
            with lockbroker.deadline(1.0):
                await nobody.locks.acquire(k, "me", ttl=30)
        expect.check_unreachable_retried_to_the_deadline(self, started)

    async def test_c10_4xx_answers_are_not_retried(self):
        fake = forwarder()
        self.addCleanup(fake.close)
        held = unique("c10")
        holder = await async_client().locks.acquire(held, "holder", ttl=30)
        self.addAsyncCleanup(async_client().locks.release, held, "holder", holder.token)
        for status, error, call in expect.four_hundreds(lockbroker.AsyncClient, fake.url, held):
            with self.subTest(status=status):
                before = len(fake.requests)
                with self.assertRaises(error) as caught:
                    await call()
                self.assertEqual(caught.exception.status, status)
                self.assertEqual(len(fake.requests), before + 1, "exactly one request")

    async def test_c11_an_acquire_whose_answer_was_lost_is_not_sent_again(self):
        c, k = async_client(), unique("c11")
        fake = stand_in(self, ["forward-then-hang-up", "forward"])
        with self.assertRaises(lockbroker.OutcomeUnknown):
            await lockbroker.AsyncClient(fake.url, key(), backoff=0.01).locks.acquire(k, "c11-owner", ttl=30)
        self.assertEqual(fake.count("POST", "/acquire"), 1, "exactly one acquire reached the server")
        status = await c.locks.status(k)
        self.assertEqual((status.held, status.owner), (True, "c11-owner"), "it was granted: the outcome was unknown")
        await c.locks.release(k, "c11-owner", status.token)

        fake = stand_in(self, ["forward-then-hang-up", "forward"])
        with self.assertRaises(lockbroker.OutcomeUnknown):
            async with lockbroker.AsyncClient(fake.url, key(), backoff=0.01).lock(k, ttl=30, wait=5):
                self.fail("entered without a grant seen")
        self.assertEqual(fake.count("POST", "/acquire"), 1, "exactly one acquire reached the server")
        self.assertGreaterEqual(fake.count("GET", f"/v1/locks/{k}"), 1, "it looked the key up")
        self.assertFalse((await c.locks.status(k)).held, "and released what it had been granted")

    async def test_c12_429_is_waited_out_within_the_deadline(self):
        fake = forwarder()
        self.addCleanup(fake.close)
        limited = lockbroker.AsyncClient(fake.url, env("LOCKBROKER_LIMITED_API_KEY"), retries=8)
        k = unique("c12")
        for _ in range(6):  # 2 a second, burst 2
            self.assertFalse((await limited.locks.status(k)).held)
        expect.check_429s_waited_out(self, fake)

        started = time.monotonic()
        with self.assertRaises(lockbroker.RateLimited) as caught:
            with lockbroker.deadline(0.1):
                for _ in range(10):
                    await limited.locks.status(k)
        expect.check_429_raised_within_the_deadline(self, started, caught)


class OtherKinds(AsyncCase):
    async def test_c13_semaphore_of_two(self):
        c, k = async_client(), unique("c13")
        a = await c.semaphore(k, permits=2, ttl=30, wait=5)
        b = await c.semaphore(k, permits=2, ttl=30, wait=5)
        self.addAsyncCleanup(b.close)
        self.assertEqual({a.slot, b.slot}, {0, 1})
        self.assertTrue(a.token > 0 and b.token > 0, "each permit has its fencing token")
        self.assertIsNone(await c.try_semaphore(k, permits=2), "a third is refused")
        await a.release()
        third = await c.try_semaphore(k, permits=2, ttl=30)
        self.assertIsNotNone(third, "granted after a release")
        self.addAsyncCleanup(third.close)
        self.assertEqual(third.slot, a.slot)
        holders = (await c.semaphores.status(k)).holders
        self.assertEqual(sorted(h.owner for h in holders), sorted([b.owner, third.owner]))

    async def test_c14_readers_share_a_writer_waits(self):
        c, k = async_client(), unique("c14")
        r1 = await c.read_lock(k, ttl=30, wait=5)
        r2 = await c.read_lock(k, ttl=30, wait=5)
        self.assertEqual(len((await c.rwlocks.status(k)).readers), 2, "two readers at once")
        self.assertIsNone(await c.try_write_lock(k, ttl=30), "a writer is refused while they hold")
        await r1.release()
        self.assertIsNone(await c.try_write_lock(k, ttl=30), "and while one still does")
        await r2.release()
        async with c.write_lock(k, ttl=30, wait=5) as writer:
            self.assertEqual((await c.rwlocks.status(k)).writer.owner, writer.owner)
            self.assertGreater(writer.token, max(r1.token, r2.token))

    async def test_c15_multilock_all_or_none(self):
        c, base = async_client(), unique("c15")
        keys = [f"{base}/a", f"{base}/b", f"{base}/c"]
        other = await c.locks.acquire(keys[1], "other-owner", ttl=30)
        self.assertIsNone(await c.try_multilock(keys, ttl=30), "refused while one is held by another")
        self.assertEqual([(await c.locks.status(k)).held for k in (keys[0], keys[2])], [False, False])
        await c.locks.release(keys[1], "other-owner", other.token)
        async with c.multilock(keys, ttl=30, wait=5) as held:
            self.assertEqual(sorted(held.tokens), keys)
            self.assertTrue(all([(await c.locks.status(k)).owner == held.owner for k in keys]))
        self.assertFalse(any([(await c.locks.status(k)).held for k in keys]))

    async def test_c16_election_handover_and_observe_across_a_broken_connection(self):
        c, name = async_client(), unique("c16")
        proxy = Proxy(url())
        self.addCleanup(proxy.cut)
        seen = []

        async def observe():
            async for change in lockbroker.AsyncClient(proxy.url, key()).elections.observe(name, timeout=30):
                seen.append(change)
                if change.leader == "c16-b":
                    return

        watcher = asyncio.ensure_future(observe())
        await eventually_async("observe yields the vacancy now", 10, lambda: seen)
        a = await c.campaign(name, ttl=10, wait=5, candidate="c16-a")
        self.addAsyncCleanup(a.close)
        self.assertGreater(a.term, 0)
        await eventually_async("observe yields the leader", 10, lambda: any(s.leader == "c16-a" for s in seen))
        counted = forwarder()  # to see the second campaign reach the broker
        self.addCleanup(counted.close)
        second = asyncio.ensure_future(lockbroker.AsyncClient(counted.url, key()).campaign(name, ttl=10, wait=20, candidate="c16-b"))
        await eventually_async("the second candidate campaigns", 10, lambda: counted.count("POST", "/campaign") == 1)
        self.assertIsNone(await c.try_campaign(name, candidate="c16-c"), "one leader at a time")
        self.assertFalse(second.done(), "the second candidate waits")
        self.assertEqual((await c.elections.leader(name)).leader, "c16-a")
        proxy.drop()  # the observer's stream breaks
        await a.resign()
        b = await asyncio.wait_for(second, 20)
        self.addAsyncCleanup(b.close)
        self.assertGreater(b.term, a.term)
        await asyncio.wait_for(watcher, 20)
        expect.check_observed_across_the_break(self, seen, b)

    async def test_c17_history_newest_first(self):
        c, k = async_client(), unique("c17")
        async with c.lock(k, ttl=30, wait=5) as lease:
            pass
        expect.check_history(self, await c.locks.history(k), lease)

    async def test_c18_listing_pages_and_tenants(self):
        c, prefix = async_client(), unique("c18") + "/"
        keys = [prefix + n for n in ("a", "b", "c")]
        for k in keys:
            self.addAsyncCleanup((await c.lock(k, ttl=30, wait=5)).close)
        self.addAsyncCleanup((await c.lock(unique("c18"), ttl=30, wait=5)).close)  # not under the prefix
        fake = forwarder()
        self.addCleanup(fake.close)
        listed = [s async for s in lockbroker.AsyncClient(fake.url, key()).locks.list(prefix=prefix, page_size=1)]
        self.assertEqual([s.storage_key for s in listed], keys)
        self.assertGreaterEqual(len(fake.requests), 3, "a page of one per request")
        self.assertGreaterEqual(sum("cursor=" in path for _, path, _ in fake.requests), 2, "each next page by its cursor")
        other = lockbroker.AsyncClient(url(), env("LOCKBROKER_OTHER_API_KEY"))
        self.assertEqual([s async for s in other.locks.list(prefix=prefix)], [], "another tenant lists none of them")

    async def test_c19_events_with_ids_and_resumed_after_the_last(self):
        c, prefix = async_client(), unique("c19") + "/"

        async def next_two(stream):
            got = []
            async for event in stream:
                got.append(event)
                if len(got) == 2:
                    return got
            self.fail(f"two events expected, the stream ended after {got!r}")

        async with c.events(prefix=prefix, timeout=30) as stream:
            async with c.lock(prefix + "one", ttl=30, wait=5) as first:
                pass
            events = await next_two(stream)
        expect.check_events(self, events, stream, prefix, first)
        async with c.events(prefix=prefix, after=stream.last_id, timeout=30) as again:
            async with c.lock(prefix + "two", ttl=30, wait=5) as second:
                pass
            resumed = await next_two(again)
        expect.check_resumed(self, resumed, events, prefix, second)


class Transport(AsyncCase):
    async def test_c20_mutual_tls(self):
        k = unique("c20")
        c = lockbroker.AsyncClient(tls_url(), key(), **tls_files())
        async with c.lock(k, ttl=30, wait=5) as lease:
            self.assertEqual((await c.locks.status(k)).owner, lease.owner)
        self.assertFalse((await c.locks.status(k)).held)
        with mock.patch.dict(os.environ, expect.tls_environment()):
            from_environment = lockbroker.AsyncClient()
        self.assertFalse((await from_environment.locks.status(k)).held, "the TLS files from the environment")
        for case, options in expect.refused_tls_options().items():
            with self.subTest(case):
                started = time.monotonic()
                with self.assertRaises(lockbroker.TlsError):
                    await lockbroker.AsyncClient(tls_url(), key(), **options).locks.acquire(k, "me", ttl=30)
                self.assertLess(time.monotonic() - started, 5.0, "not a hang")
        self.assertFalse((await c.locks.status(k)).held)

    async def test_c21_a_cancelled_acquire_leaves_no_lease(self):
        c, k = async_client(), unique("c21")

        async def hold():
            async with c.lock(k, ttl=30, wait=10):
                await asyncio.sleep(60)

        # Cancelled while it waits in the queue.
        holder = await c.locks.acquire(k, "holder", ttl=30)
        task = asyncio.ensure_future(hold())
        await eventually_async("the acquire waits", 10, lambda: self.waiters(c, k, 1))
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        await c.locks.release(k, "holder", holder.token)
        await eventually_async("the key is free (not left to the cancelled waiter)", 10, lambda: self.free(c, k))

        # Cancelled after the broker granted it, before this task read the
        # answer: the loop is held up (the calls below block it) until the
        # grant is made, then the task is cancelled before it runs again.
        holder = await c.locks.acquire(k, "holder", ttl=30)
        task = asyncio.ensure_future(hold())
        await eventually_async("the acquire waits", 10, lambda: self.waiters(c, k, 1))
        blocking = client()
        blocking.locks.release(k, "holder", holder.token)
        eventually("the broker grants it", 10, lambda: blocking.locks.status(k).owner not in (None, "holder"))
        task.cancel()
        with self.assertRaises(asyncio.CancelledError):
            await task
        await eventually_async("the grant is given back", 10, lambda: self.free(c, k))
        self.assertEqual((await c.locks.history(k, limit=1))[0].event, "released", "released, not left to expire")

    @staticmethod
    async def waiters(c, k, n):
        return (await c.locks.status(k)).waiters == n

    @staticmethod
    async def free(c, k):
        return not (await c.locks.status(k)).held


class Sessions(AsyncCase):
    async def test_c22_a_session_keeps_its_locks_alive_and_releases_them_when_closed(self):
        c, k1, k2 = async_client(), unique("c22"), unique("c22")
        fake = forwarder()  # counts the keepalives and renewals the session's client sends
        self.addCleanup(fake.close)
        held_for = 10.0
        async with lockbroker.AsyncClient(fake.url, key()).session(ttl=3.0) as session:
            a = await session.lock(k1, wait=5)
            b = await session.try_lock(k2)
            self.assertIsNotNone(b, "granted at once: the key is free")
            expect.check_session_holds(self, [await c.locks.status(k) for k in (k1, k2)], session, [a, b])
            await asyncio.sleep(held_for)  # time is what is tested: more than three TTLs, no call of the test's
            statuses = [await c.locks.status(k) for k in (k1, k2)]
            expect.check_session_kept(self, statuses, session, [a, b], fake, held_for)
            await a.release()
            self.assertFalse((await c.locks.status(k1)).held, "released through its handle: free at once")
            self.assertEqual((await c.locks.status(k2)).token, b.token, "the other stays held")
        self.assertFalse((await c.locks.status(k2)).held, "closing the session released every lease of it")
        with self.assertRaises(lockbroker.SessionNotFound) as caught:
            await c.sessions.status(session.id)
        self.assertEqual(caught.exception.status, 404)

    async def test_c23_a_session_closed_from_outside_is_lost_once(self):
        c, k = async_client(), unique("c23")
        with self.assertLogs("lockbroker", "WARNING") as logs:
            async with c.session(ttl=3.0) as session:
                async with session.lock(k, wait=5) as lease:
                    other = await session.lock(unique("c23"), wait=5)
                    closed_at = time.monotonic()
                    await c.sessions.close(session.id)  # from outside: the session's handle is not told
                    new = await c.locks.acquire(k, "c23-new-holder", ttl=30)
                    self.addAsyncCleanup(c.locks.release, k, "c23-new-holder", new.token)
                    await asyncio.wait_for(session.lost.wait(), session.ttl)  # lost within one TTL
                    lost_after = time.monotonic() - closed_at
                self.assertIsNone(await lease.release(), "releasing its lost lease (again) does not raise")
            self.assertIsNone(await session.close(), "closing the lost session does not raise (nor did its block)")
        expect.check_session_lost(self, session, [lease, other], lost_after, logs.output)
        expect.check_new_holder_kept(self, await c.locks.status(k), new)

    async def test_c24_every_kind_is_held_in_a_session_and_freed_by_its_close(self):
        c, kinds = async_client(), expect.EveryKind()
        fake = forwarder()  # counts the keepalives and renewals the session's client sends
        self.addCleanup(fake.close)
        held_for = 10.0
        async with lockbroker.AsyncClient(fake.url, key()).session(ttl=3.0) as session:
            permit = await session.semaphore(kinds.semaphore, permits=kinds.PERMITS, wait=5)
            reader = await session.read_lock(kinds.read, wait=5)
            writer = await session.write_lock(kinds.write, wait=5)
            multi = await session.multilock(kinds.multi, wait=5)
            leader = await session.campaign(kinds.election, wait=5)
            leases = [permit, reader, writer, multi, leader]
            expect.check_every_kind_granted(self, kinds, session, *leases)
            expect.check_every_kind_holds(self, [await status() for status in kinds.statuses(c)], kinds, session, *leases)
            expect.check_session_lists_every_kind(self, await c.sessions.status(session.id), kinds, *leases)
            await asyncio.sleep(held_for)  # time is what is tested: more than three TTLs, no call of the test's
            expect.check_every_kind_holds(self, [await status() for status in kinds.statuses(c)], kinds, session, *leases)
            expect.check_kept_by_keepalives(self, session, leases, fake, held_for)
        expect.check_every_kind_freed(self, [await status() for status in kinds.statuses(c)])
        with self.assertRaises(lockbroker.SessionNotFound):
            await c.sessions.status(session.id)

    async def test_c25_a_wait_that_would_close_a_cycle_is_refused_with_it(self):
        c, cycle = async_client(), expect.Cycle()
        fake = forwarder()  # counts B's acquires: the refusal is not retried
        self.addCleanup(fake.close)

        async def waits(session_id):  # whether the session waits for k2 (a blocking request: in a thread)
            return session_id in await asyncio.to_thread(expect.waiting_sessions, cycle.k2)

        async with c.session(ttl=cycle.TTL) as a, lockbroker.AsyncClient(fake.url, key()).session(ttl=cycle.TTL) as b:
            await a.lock(cycle.k1, wait=cycle.WAIT)
            await b.lock(cycle.k2, wait=cycle.WAIT)

            async def a_waits_for_k2():
                return await a.lock(cycle.k2, wait=cycle.WAIT, owner=cycle.a_owner)

            waiting = asyncio.ensure_future(a_waits_for_k2())
            self.addCleanup(waiting.cancel)
            await eventually_async("A's acquire of k2 waits", 10, lambda: waits(a.id))
            started = time.monotonic()
            with self.assertRaises(lockbroker.DeadlockError) as caught:
                await b.lock(cycle.k1, wait=cycle.WAIT, owner=cycle.b_owner)
            refused_after = time.monotonic() - started
            sent = fake.count("POST", f"/v1/locks/{cycle.k1}/acquire")
            statuses = [await c.locks.status(k) for k in (cycle.k1, cycle.k2)]
            expect.check_deadlock(self, cycle, caught.exception, refused_after, sent, a, b, statuses)
            self.assertFalse(waiting.done(), "A's acquire still waits")
            self.assertTrue(await waits(a.id), "A's acquire still waits")
            await b.close()
            granted = await asyncio.wait_for(waiting, cycle.WAIT)
            expect.check_cycle_broken(self, cycle, a, granted, await c.locks.status(cycle.k2))


if __name__ == "__main__":
    unittest.main()
