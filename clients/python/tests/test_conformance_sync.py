"""The conformance scenarios of clients/CONFORMANCE.md (C01–C25), for the sync client
(``lockbroker.Client``), against the conformance brokers. One test per scenario, named after
its id; ``test_conformance_async.py`` has the same for the async client."""

import os
import threading
import time
import unittest
from unittest import mock

import lockbroker
import conformance as expect
from conformance import (
    TENANT,
    UNAVAILABLE,
    Interrupted,
    client,
    forwarder,
    interrupt_main,
    interruptible,
    key,
    stand_in,
    tls_files,
    tls_url,
    url,
)
from conformance import require_brokers as setUpModule  # noqa: F401  (unittest runs it)
from helpers import Proxy, closed_port, env, eventually, unique


class Locks(unittest.TestCase):
    def test_c01_acquire_and_release(self):
        c, k = client(), unique("c01")
        grant = c.locks.acquire(k, "c01-owner", ttl=30)
        self.assertIsInstance(grant.token, int)
        self.assertGreater(grant.token, 0)
        status = c.locks.status(k)
        self.assertEqual((status.held, status.owner, status.token), (True, "c01-owner", grant.token))
        self.assertEqual(c.locks.release(k, "c01-owner", grant.token), lockbroker.Released(released=True, hold_count=0))
        status = c.locks.status(k)
        self.assertEqual((status.held, status.owner, status.token), (False, None, None))

    def test_c02_try_returns_at_once_while_held(self):
        c, k = client(), unique("c02")
        with c.lock(k, ttl=30, wait=5):
            started = time.monotonic()
            self.assertIsNone(c.try_lock(k, ttl=30), "not acquired: None, no exception")
            with self.assertRaises(lockbroker.LockHeld):  # the plain call's typed answer
                c.locks.acquire(k, "someone-else", ttl=30, wait=0)
            self.assertLess(time.monotonic() - started, 1.0, "no waiting")

    def test_c03_wait_is_granted_on_release_and_times_out_typed(self):
        c, k = client(), unique("c03")
        holder = c.locks.acquire(k, "holder", ttl=30)
        releases = threading.Timer(0.3, c.locks.release, (k, "holder", holder.token))
        releases.start()
        self.addCleanup(releases.cancel)
        started = time.monotonic()
        with c.lock(k, ttl=30, wait=10) as lease:
            self.assertGreaterEqual(time.monotonic() - started, 0.25, "granted after the release, not before")
            self.assertGreater(lease.token, holder.token)
        releases.join()

        holder = c.locks.acquire(k, "holder", ttl=30)
        self.addCleanup(c.locks.release, k, "holder", holder.token)
        started = time.monotonic()
        with self.assertRaises(lockbroker.LockHeld) as caught:
            c.lock(k, ttl=30, wait=0.3)
        expect.check_waited_then_held(self, started, caught)

    def test_c04_renews_past_several_ttls(self):
        c, k = client(), unique("c04")
        with c.lock(k, ttl=1.0, wait=5) as lease:
            time.sleep(3.5)  # time is what is tested: 3.5 TTLs
            status = c.locks.status(k)
            self.assertEqual((status.held, status.owner, status.token), (True, lease.owner, lease.token))
            self.assertFalse(lease.lost.is_set())
            # Every third of the TTL is about 10 renewals; every half, 7.
            self.assertGreaterEqual(lease.renewals, 7, "renewed at about a third of the TTL")

    def test_c05_lost_when_force_released_and_retaken(self):
        c, k = client(), unique("c05")
        admin = lockbroker.Client(url(), env("LOCKBROKER_ADMIN_TOKEN"))
        ttl = 1.5
        with c.lock(k, ttl=ttl, wait=5) as lease:
            forced = admin.force_release(TENANT, k)
            self.assertEqual((forced.owner, forced.token), (lease.owner, lease.token))
            new = c.locks.acquire(k, "c05-new-holder", ttl=30)
            self.addCleanup(c.locks.release, k, "c05-new-holder", new.token)
            self.assertTrue(lease.lost.wait(ttl), "lost within one TTL")
            self.assertIsInstance(lease.lost_reason, lockbroker.LeaseLost)
            self.assertIsNone(lease.release(), "releasing the lost lease does not raise")
        status = c.locks.status(k)
        self.assertEqual((status.held, status.owner, status.token), (True, "c05-new-holder", new.token))

    def test_c06_lost_before_the_ttl_when_renewals_go_unanswered(self):
        k, ttl = unique("c06"), 1.5
        proxy = Proxy(url())
        self.addCleanup(proxy.cut)
        lease = lockbroker.Client(proxy.url, key(), timeout=2.0).lock(k, ttl=ttl, wait=5)
        eventually("a renewal is confirmed", 5, lambda: lease.renewals >= 1)
        proxy.freeze()
        self.assertTrue(lease.lost.wait(3 * ttl), "lost while no renewal gets through")
        expect.check_lost_unconfirmed(self, lease)

    def test_c07_released_when_the_scope_ends(self):
        c, k = client(), unique("c07")
        with c.lock(k, ttl=30, wait=5):
            self.assertTrue(c.locks.status(k).held)
        self.assertFalse(c.locks.status(k).held, "released at the normal end")
        with self.assertRaises(RuntimeError):
            with c.lock(k, ttl=30, wait=5):
                self.assertTrue(c.locks.status(k).held)
                raise RuntimeError("the job failed")
        self.assertFalse(c.locks.status(k).held, "released when an exception ends it")

    def test_c08_tokens_increase_and_validate_fences(self):
        c, k = client(), unique("c08")
        tokens = []
        for _ in range(3):
            with c.lock(k, ttl=30, wait=5) as lease:
                tokens.append(lease.token)
        self.assertEqual(tokens, sorted(set(tokens)), "strictly increasing")
        with c.lock(k, ttl=30, wait=5) as lease:
            self.assertGreater(lease.token, tokens[-1])
            self.assertEqual(c.locks.validate(k, lease.token), lockbroker.Validity(valid=True, token=lease.token))
            self.assertEqual(c.locks.validate(k, tokens[-1]), lockbroker.Validity(valid=False, token=lease.token))


class Failures(unittest.TestCase):
    def test_c09_retries_503_and_connection_failures_with_growing_jittered_delays(self):
        backoff = 0.1
        fake = stand_in(self, [UNAVAILABLE, UNAVAILABLE, "forward"])
        c = lockbroker.Client(fake.url, key(), backoff=backoff, max_backoff=2.0)
        k = unique("c09")
        self.assertFalse(c.locks.status(k).held, "the third try got the broker's answer")
        expect.check_503s_retried(self, fake, backoff)

        always = stand_in(self, [UNAVAILABLE], upstream=False)
        c = lockbroker.Client(always.url, key(), retries=50, backoff=0.1, max_backoff=0.4)
        started = time.monotonic()
        with self.assertRaises(lockbroker.Unavailable) as caught:
            with lockbroker.deadline(1.0):
                c.locks.status(k)
        expect.check_503s_given_up_at_the_deadline(self, started, caught, always)

        nobody = lockbroker.Client(f"http://127.0.0.1:{closed_port()}", key(), retries=50, backoff=0.1, max_backoff=0.4)
        started = time.monotonic()
        with self.assertRaises(lockbroker.Unreachable):
            with lockbroker.deadline(1.0):
                nobody.locks.acquire(k, "me", ttl=30)
        expect.check_unreachable_retried_to_the_deadline(self, started)

    def test_c10_4xx_answers_are_not_retried(self):
        fake = forwarder()
        self.addCleanup(fake.close)
        held = unique("c10")
        holder = client().locks.acquire(held, "holder", ttl=30)
        self.addCleanup(client().locks.release, held, "holder", holder.token)
        for status, error, call in expect.four_hundreds(lockbroker.Client, fake.url, held):
            with self.subTest(status=status):
                before = len(fake.requests)
                with self.assertRaises(error) as caught:
                    call()
                self.assertEqual(caught.exception.status, status)
                self.assertEqual(len(fake.requests), before + 1, "exactly one request")

    def test_c11_an_acquire_whose_answer_was_lost_is_not_sent_again(self):
        # The stand-in passes the acquire on (the broker grants it) and hangs up.
        c, k = client(), unique("c11")
        fake = stand_in(self, ["forward-then-hang-up", "forward"])
        with self.assertRaises(lockbroker.OutcomeUnknown):
            lockbroker.Client(fake.url, key(), backoff=0.01).locks.acquire(k, "c11-owner", ttl=30)
        self.assertEqual(fake.count("POST", "/acquire"), 1, "exactly one acquire reached the server")
        status = c.locks.status(k)
        self.assertEqual((status.held, status.owner), (True, "c11-owner"), "it was granted: the outcome was unknown")
        c.locks.release(k, "c11-owner", status.token)

        # A guard, with its own owner, finds out and gives back what was granted.
        fake = stand_in(self, ["forward-then-hang-up", "forward"])
        with self.assertRaises(lockbroker.OutcomeUnknown):
            lockbroker.Client(fake.url, key(), backoff=0.01).lock(k, ttl=30, wait=5)
        self.assertEqual(fake.count("POST", "/acquire"), 1, "exactly one acquire reached the server")
        self.assertGreaterEqual(fake.count("GET", f"/v1/locks/{k}"), 1, "it looked the key up")
        self.assertFalse(c.locks.status(k).held, "and released what it had been granted")

    def test_c12_429_is_waited_out_within_the_deadline(self):
        fake = forwarder()
        self.addCleanup(fake.close)
        limited = lockbroker.Client(fake.url, env("LOCKBROKER_LIMITED_API_KEY"), retries=8)
        k = unique("c12")
        for _ in range(6):  # 2 a second, burst 2
            self.assertFalse(limited.locks.status(k).held)
        expect.check_429s_waited_out(self, fake)

        started = time.monotonic()
        with self.assertRaises(lockbroker.RateLimited) as caught:
            with lockbroker.deadline(0.1):
                for _ in range(10):
                    limited.locks.status(k)
        expect.check_429_raised_within_the_deadline(self, started, caught)


class OtherKinds(unittest.TestCase):
    def test_c13_semaphore_of_two(self):
        c, k = client(), unique("c13")
        a = c.semaphore(k, permits=2, ttl=30, wait=5)
        b = c.semaphore(k, permits=2, ttl=30, wait=5)
        self.addCleanup(b.close)
        self.assertEqual({a.slot, b.slot}, {0, 1})
        self.assertTrue(a.token > 0 and b.token > 0, "each permit has its fencing token")
        self.assertIsNone(c.try_semaphore(k, permits=2), "a third is refused")
        a.release()
        third = c.try_semaphore(k, permits=2, ttl=30)
        self.assertIsNotNone(third, "granted after a release")
        self.addCleanup(third.close)
        self.assertEqual(third.slot, a.slot)
        self.assertEqual(sorted(h.owner for h in c.semaphores.status(k).holders), sorted([b.owner, third.owner]))

    def test_c14_readers_share_a_writer_waits(self):
        c, k = client(), unique("c14")
        r1 = c.read_lock(k, ttl=30, wait=5)
        r2 = c.read_lock(k, ttl=30, wait=5)
        self.assertEqual(len(c.rwlocks.status(k).readers), 2, "two readers at once")
        self.assertIsNone(c.try_write_lock(k, ttl=30), "a writer is refused while they hold")
        r1.release()
        self.assertIsNone(c.try_write_lock(k, ttl=30), "and while one still does")
        r2.release()
        with c.write_lock(k, ttl=30, wait=5) as writer:
            self.assertEqual(c.rwlocks.status(k).writer.owner, writer.owner)
            self.assertGreater(writer.token, max(r1.token, r2.token))

    def test_c15_multilock_all_or_none(self):
        c, base = client(), unique("c15")
        keys = [f"{base}/a", f"{base}/b", f"{base}/c"]
        other = c.locks.acquire(keys[1], "other-owner", ttl=30)
        self.assertIsNone(c.try_multilock(keys, ttl=30), "refused while one is held by another")
        self.assertEqual([c.locks.status(k).held for k in (keys[0], keys[2])], [False, False], "none of the others held")
        c.locks.release(keys[1], "other-owner", other.token)
        with c.multilock(keys, ttl=30, wait=5) as held:
            self.assertEqual(sorted(held.tokens), keys)
            self.assertTrue(all(c.locks.status(k).owner == held.owner for k in keys))
        self.assertFalse(any(c.locks.status(k).held for k in keys))

    def test_c16_election_handover_and_observe_across_a_broken_connection(self):
        c, name = client(), unique("c16")
        proxy = Proxy(url())
        self.addCleanup(proxy.cut)
        seen, errors = [], []

        def observe():
            try:
                for change in lockbroker.Client(proxy.url, key()).elections.observe(name, timeout=30):
                    seen.append(change)
                    if change.leader == "c16-b":
                        return
            except Exception as err:  # surfaced below
                errors.append(err)

        watcher = threading.Thread(target=observe, daemon=True)
        watcher.start()
        eventually("observe yields the vacancy now", 10, lambda: seen)
        a = c.campaign(name, ttl=10, wait=5, candidate="c16-a")
        self.addCleanup(a.close)
        self.assertGreater(a.term, 0)
        eventually("observe yields the leader", 10, lambda: any(s.leader == "c16-a" for s in seen))
        won = []
        counted = forwarder()  # to see the second campaign reach the broker
        self.addCleanup(counted.close)
        second_client = lockbroker.Client(counted.url, key())
        second = threading.Thread(target=lambda: won.append(second_client.campaign(name, ttl=10, wait=20, candidate="c16-b")))
        second.start()
        eventually("the second candidate campaigns", 10, lambda: counted.count("POST", "/campaign") == 1)
        self.assertIsNone(c.try_campaign(name, candidate="c16-c"), "one leader at a time")
        self.assertEqual(won, [], "the second candidate waits")
        self.assertEqual(c.elections.leader(name).leader, "c16-a")
        proxy.drop()  # the observer's stream breaks
        a.resign()
        second.join(20)
        self.assertEqual(len(won), 1, "resigning handed leadership to the waiting candidate")
        b = won[0]
        self.addCleanup(b.close)
        self.assertGreater(b.term, a.term)
        watcher.join(20)
        self.assertEqual(errors, [])
        expect.check_observed_across_the_break(self, seen, b)

    def test_c17_history_newest_first(self):
        c, k = client(), unique("c17")
        with c.lock(k, ttl=30, wait=5) as lease:
            pass
        expect.check_history(self, c.locks.history(k), lease)

    def test_c18_listing_pages_and_tenants(self):
        c, prefix = client(), unique("c18") + "/"
        keys = [prefix + n for n in ("a", "b", "c")]
        for k in keys:
            self.addCleanup(c.lock(k, ttl=30, wait=5).close)
        self.addCleanup(c.lock(unique("c18"), ttl=30, wait=5).close)  # not under the prefix
        fake = forwarder()
        self.addCleanup(fake.close)
        listed = list(lockbroker.Client(fake.url, key()).locks.list(prefix=prefix, page_size=1))
        self.assertEqual([s.storage_key for s in listed], keys)
        self.assertGreaterEqual(len(fake.requests), 3, "a page of one per request")
        self.assertGreaterEqual(sum("cursor=" in path for _, path, _ in fake.requests), 2, "each next page by its cursor")
        other = lockbroker.Client(url(), env("LOCKBROKER_OTHER_API_KEY"))
        self.assertEqual(list(other.locks.list(prefix=prefix)), [], "another tenant lists none of them")

    def test_c19_events_with_ids_and_resumed_after_the_last(self):
        c, prefix = client(), unique("c19") + "/"

        def next_two(stream):
            got = []
            for event in stream:
                got.append(event)
                if len(got) == 2:
                    return got
            self.fail(f"two events expected, the stream ended after {got!r}")

        with c.events(prefix=prefix, timeout=30) as stream:
            with c.lock(prefix + "one", ttl=30, wait=5) as first:
                pass
            events = next_two(stream)
        expect.check_events(self, events, stream, prefix, first)
        with c.events(prefix=prefix, after=stream.last_id, timeout=30) as again:
            with c.lock(prefix + "two", ttl=30, wait=5) as second:
                pass
            resumed = next_two(again)
        expect.check_resumed(self, resumed, events, prefix, second)


class Transport(unittest.TestCase):
    def test_c20_mutual_tls(self):
        k = unique("c20")
        c = lockbroker.Client(tls_url(), key(), **tls_files())
        with c.lock(k, ttl=30, wait=5) as lease:
            self.assertEqual(c.locks.status(k).owner, lease.owner)
        self.assertFalse(c.locks.status(k).held)
        with mock.patch.dict(os.environ, expect.tls_environment()):
            self.assertFalse(lockbroker.Client().locks.status(k).held, "the TLS files from the environment")
        for case, options in expect.refused_tls_options().items():
            with self.subTest(case):
                started = time.monotonic()
                with self.assertRaises(lockbroker.TlsError):
                    lockbroker.Client(tls_url(), key(), **options).locks.acquire(k, "me", ttl=30)
                self.assertLess(time.monotonic() - started, 5.0, "not a hang")
        self.assertFalse(c.locks.status(k).held)

    def test_c21_an_interrupted_acquire_leaves_no_lease(self):
        c, k = client(), unique("c21")
        # Interrupted while it waits in the queue.
        holder = c.locks.acquire(k, "holder", ttl=30)
        waiting = interrupt_main(lambda: eventually("the acquire waits", 10, lambda: c.locks.status(k).waiters == 1))
        with interruptible(), self.assertRaises(Interrupted):
            c.lock(k, ttl=30, wait=10)
        self.assertIsNone(waiting.error)
        c.locks.release(k, "holder", holder.token)
        eventually("the key is free (not left to the interrupted waiter)", 10, lambda: not c.locks.status(k).held)

        # Interrupted after the broker granted it, before the answer arrived
        # (the proxy keeps it): the guard finds the grant and releases it.
        holder = c.locks.acquire(k, "holder", ttl=30)
        proxy = Proxy(url())
        self.addCleanup(proxy.cut)

        def granted_meanwhile():
            eventually("the acquire waits", 10, lambda: c.locks.status(k).waiters == 1)
            proxy.hold_answers()
            c.locks.release(k, "holder", holder.token)
            eventually("the broker grants it", 10, lambda: c.locks.status(k).owner not in (None, "holder"))

        granting = interrupt_main(granted_meanwhile)
        with interruptible(), self.assertRaises(Interrupted):
            lockbroker.Client(proxy.url, key()).lock(k, ttl=30, wait=10)
        self.assertIsNone(granting.error)
        eventually("the grant is given back", 10, lambda: not c.locks.status(k).held)
        self.assertEqual(c.locks.history(k, limit=1)[0].event, "released", "released, not left to expire")


class Sessions(unittest.TestCase):
    def test_c22_a_session_keeps_its_locks_alive_and_releases_them_when_closed(self):
        c, k1, k2 = client(), unique("c22"), unique("c22")
        fake = forwarder()  # counts the keepalives and renewals the session's client sends
        self.addCleanup(fake.close)
        held_for = 10.0
        with lockbroker.Client(fake.url, key()).session(ttl=3.0) as session:
            a = session.lock(k1, wait=5)
            b = session.try_lock(k2)
            self.assertIsNotNone(b, "granted at once: the key is free")
            expect.check_session_holds(self, [c.locks.status(k) for k in (k1, k2)], session, [a, b])
            time.sleep(held_for)  # time is what is tested: more than three TTLs, no call of the test's
            expect.check_session_kept(self, [c.locks.status(k) for k in (k1, k2)], session, [a, b], fake, held_for)
            a.release()
            self.assertFalse(c.locks.status(k1).held, "released through its handle: free at once")
            self.assertEqual(c.locks.status(k2).token, b.token, "the other stays held")
        self.assertFalse(c.locks.status(k2).held, "closing the session released every lease of it")
        with self.assertRaises(lockbroker.SessionNotFound) as caught:
            c.sessions.status(session.id)
        self.assertEqual(caught.exception.status, 404)

    def test_c23_a_session_closed_from_outside_is_lost_once(self):
        c, k = client(), unique("c23")
        with self.assertLogs("lockbroker", "WARNING") as logs:
            with c.session(ttl=3.0) as session:
                lease = session.lock(k, wait=5)
                other = session.lock(unique("c23"), wait=5)
                closed_at = time.monotonic()
                c.sessions.close(session.id)  # from outside: the session's handle is not told
                new = c.locks.acquire(k, "c23-new-holder", ttl=30)
                self.addCleanup(c.locks.release, k, "c23-new-holder", new.token)
                self.assertTrue(session.lost.wait(session.ttl), "lost within one TTL")
                lost_after = time.monotonic() - closed_at
                self.assertIsNone(lease.release(), "releasing its lost lease does not raise")
            self.assertIsNone(session.close(), "closing the lost session does not raise (nor did its with block)")
        expect.check_session_lost(self, session, [lease, other], lost_after, logs.output)
        expect.check_new_holder_kept(self, c.locks.status(k), new)

    def test_c24_every_kind_is_held_in_a_session_and_freed_by_its_close(self):
        c, kinds = client(), expect.EveryKind()
        fake = forwarder()  # counts the keepalives and renewals the session's client sends
        self.addCleanup(fake.close)
        held_for = 10.0
        with lockbroker.Client(fake.url, key()).session(ttl=3.0) as session:
            permit = session.semaphore(kinds.semaphore, permits=kinds.PERMITS, wait=5)
            reader = session.read_lock(kinds.read, wait=5)
            writer = session.write_lock(kinds.write, wait=5)
            multi = session.multilock(kinds.multi, wait=5)
            leader = session.campaign(kinds.election, wait=5)
            leases = [permit, reader, writer, multi, leader]
            expect.check_every_kind_granted(self, kinds, session, *leases)
            expect.check_every_kind_holds(self, [status() for status in kinds.statuses(c)], kinds, session, *leases)
            expect.check_session_lists_every_kind(self, c.sessions.status(session.id), kinds, *leases)
            time.sleep(held_for)  # time is what is tested: more than three TTLs, no call of the test's
            expect.check_every_kind_holds(self, [status() for status in kinds.statuses(c)], kinds, session, *leases)
            expect.check_kept_by_keepalives(self, session, leases, fake, held_for)
        expect.check_every_kind_freed(self, [status() for status in kinds.statuses(c)])
        with self.assertRaises(lockbroker.SessionNotFound):
            c.sessions.status(session.id)

    def test_c25_a_wait_that_would_close_a_cycle_is_refused_with_it(self):
        c, cycle = client(), expect.Cycle()
        fake = forwarder()  # counts B's acquires: the refusal is not retried
        self.addCleanup(fake.close)
        with c.session(ttl=cycle.TTL) as a, lockbroker.Client(fake.url, key()).session(ttl=cycle.TTL) as b:
            a.lock(cycle.k1, wait=cycle.WAIT)
            b.lock(cycle.k2, wait=cycle.WAIT)
            granted = []

            def a_waits_for_k2():
                try:
                    granted.append(a.lock(cycle.k2, wait=cycle.WAIT, owner=cycle.a_owner))
                except BaseException as err:  # noqa: B902  (the test checks what it got)
                    granted.append(err)

            waiting = threading.Thread(target=a_waits_for_k2, daemon=True)
            waiting.start()
            eventually("A's acquire of k2 waits", 10, lambda: a.id in expect.waiting_sessions(cycle.k2))
            started = time.monotonic()
            with self.assertRaises(lockbroker.DeadlockError) as caught:
                b.lock(cycle.k1, wait=cycle.WAIT, owner=cycle.b_owner)
            refused_after = time.monotonic() - started
            sent = fake.count("POST", f"/v1/locks/{cycle.k1}/acquire")
            statuses = [c.locks.status(k) for k in (cycle.k1, cycle.k2)]
            expect.check_deadlock(self, cycle, caught.exception, refused_after, sent, a, b, statuses)
            self.assertTrue(waiting.is_alive(), "A's acquire still waits")
            self.assertIn(a.id, expect.waiting_sessions(cycle.k2), "A's acquire still waits")
            b.close()
            waiting.join(cycle.WAIT)
            self.assertEqual(len(granted), 1, "A's acquire ended once B's session was closed")
            if isinstance(granted[0], BaseException):
                raise granted[0]
            expect.check_cycle_broken(self, cycle, a, granted[0], c.locks.status(cycle.k2))


if __name__ == "__main__":
    unittest.main()
