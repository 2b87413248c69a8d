"""Locks against a real broker: exclusivity, renewal, losing a lease, release
on exceptions, the plain calls, keys and tenants."""

import threading
import time
import unittest

import lockbroker
from helpers import Proxy, client, env, eventually, other_tenant, unique


def setUpModule():
    env("LOCKBROKER_URL")
    env("LOCKBROKER_API_KEY")


class Exclusivity(unittest.TestCase):
    def test_while_held_try_lock_elsewhere_gets_none(self):
        c, key = client(), unique("held")
        with c.lock(key, ttl=10, wait=5) as lease:
            self.assertIsNone(c.try_lock(key), "another owner (a fresh one per call)")
            self.assertIsNone(client().try_lock(key, owner="someone-else"))
            status = c.locks.status(key)
            self.assertEqual((status.held, status.owner, status.token), (True, lease.owner, lease.token))
        later = c.try_lock(key)
        self.assertIsNotNone(later, "free once the block ended")
        later.release()

    def test_threads_never_overlap_and_tokens_increase(self):
        c, key = client(), unique("exclusive")
        threads, rounds = 4, 5
        history = []  # (start, end, token)
        record = threading.Lock()
        errors = []

        def worker():
            try:
                for _ in range(rounds):
                    with c.lock(key, ttl=10, wait=60) as lease:
                        start = time.monotonic()
                        # Some work inside, so that an overlap would show.
                        time.sleep(0.005)
                        end = time.monotonic()
                    with record:
                        history.append((start, end, lease.token))
            except Exception as err:  # surfaced below, not lost in a thread
                errors.append(err)

        workers = [threading.Thread(target=worker) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        self.assertFalse(any(w.is_alive() for w in workers), "workers finished within 120 s")
        self.assertEqual(errors, [])
        self.assertEqual(len(history), threads * rounds)
        history.sort()
        for (s1, e1, t1), (s2, e2, t2) in zip(history, history[1:]):
            self.assertLessEqual(e1, s2, f"holds overlap: {(s1, e1, t1)} and {(s2, e2, t2)}")
            self.assertLess(t1, t2, "fencing tokens strictly increase in grant order")


class Renewal(unittest.TestCase):
    def test_renewal_keeps_the_lock_past_its_ttl(self):
        c, key, control_key = client(), unique("renewed"), unique("control")
        ttl = 1.0
        started = time.monotonic()
        with c.lock(key, ttl=ttl, wait=5) as lease:
            # A lease of the same TTL that nobody renews shows that the TTL
            # really runs out meanwhile, by the database's clock.
            control = c.locks.acquire(control_key, "control", ttl=ttl)
            eventually("the unrenewed control lease expires", 10, lambda: not c.locks.status(control_key).held)
            eventually("three TTLs pass", 10, lambda: time.monotonic() - started >= 3 * ttl)
            status = c.locks.status(key)
            self.assertTrue(status.held)
            self.assertEqual((status.owner, status.token), (lease.owner, lease.token))
            self.assertGreaterEqual(lease.renewals, 3)
            self.assertFalse(lease.lost.is_set())
        with self.assertRaises(lockbroker.LeaseLost):
            c.locks.release(control_key, "control", control.token)
        self.assertFalse(c.locks.status(key).held)


class LosingTheLease(unittest.TestCase):
    def test_lost_when_the_broker_refuses_the_renewal(self):
        # Someone with the owner and token (an operator, a copy of the
        # process) releases the lease; a thief takes the lock. The next
        # renewal is refused and the holder learns it.
        c, key = client(), unique("taken")
        lease = c.lock(key, ttl=1.5, wait=5)
        self.addCleanup(lease.close)
        client().locks.release(key, lease.owner, lease.token)
        thief = client().locks.acquire(key, "thief", ttl=30)
        self.assertGreater(thief.token, lease.token)
        self.assertTrue(lease.lost.wait(5), "lost within a renewal period")
        self.assertIsInstance(lease.lost_reason, lockbroker.LeaseLost)
        with self.assertRaises(lockbroker.LeaseLost):
            lease.raise_if_lost()
        with lease:  # the exit's release is refused: no exception, lost stays set
            pass
        self.assertEqual(c.locks.status(key).owner, "thief", "the thief's lease was not touched")

    def test_lost_when_no_renewal_gets_through_before_expiry(self):
        direct, key = client(), unique("cut-off")
        proxy = Proxy(env("LOCKBROKER_URL"))
        via_proxy = lockbroker.Client(proxy.url, env("LOCKBROKER_API_KEY"), timeout=2.0)
        ttl = 1.5
        lease = via_proxy.lock(key, ttl=ttl, wait=5)
        self.addCleanup(lease.close)
        eventually("a renewal went through", 5, lambda: lease.renewals >= 1)
        cut_at = time.monotonic()
        proxy.cut()
        self.assertTrue(lease.lost.wait(10), "lost while the broker cannot be reached")
        self.assertLessEqual(time.monotonic() - cut_at, ttl + 1.0, "lost by the lease's end, not long after")
        self.assertIsInstance(lease.lost_reason, lockbroker.Unavailable)
        # The broker agrees: the lease runs out and another owner gets it.
        other = eventually("another owner takes the lock", 10, lambda: direct.try_lock(key, ttl=5))
        self.assertGreater(other.token, lease.token)
        other.release()


class ReleaseOnExit(unittest.TestCase):
    def test_released_when_the_block_raises(self):
        c, key = client(), unique("raises")
        with self.assertRaises(RuntimeError):
            with c.lock(key, ttl=30, wait=5) as lease:
                self.assertTrue(c.locks.status(key).held)
                raise RuntimeError("the job failed")
        status = c.locks.status(key)
        self.assertFalse(status.held, "released at once, not after the 30 s TTL")
        self.assertFalse(lease.lost.is_set())
        with self.assertRaises(lockbroker.LeaseLost):
            c.locks.release(key, lease.owner, lease.token)

    def test_explicit_release_is_idempotent(self):
        c, key = client(), unique("explicit")
        lease = c.lock(key, ttl=30, wait=5)
        self.assertEqual(lease.release(), lockbroker.Released(released=True, hold_count=0))
        self.assertIsNone(lease.release())
        self.assertFalse(c.locks.status(key).held)


class PlainCalls(unittest.TestCase):
    def test_acquire_reenter_renew_release_status(self):
        c, key = client(), unique("plain")
        grant = c.locks.acquire(key, "w7", ttl=30)
        self.assertIsInstance(grant, lockbroker.LockGrant)
        self.assertEqual((grant.key, grant.owner, grant.hold_count, grant.ttl_ms), (key, "w7", 1, 30000))
        self.assertIsNotNone(grant.expires_at.tzinfo)
        again = c.locks.acquire(key, "w7", ttl=30)
        self.assertEqual((again.token, again.hold_count), (grant.token, 2), "re-entry keeps the token")
        renewed = c.locks.renew(key, "w7", grant.token, ttl=60)
        self.assertGreater(renewed.expires_at, grant.expires_at)
        with self.assertRaises(lockbroker.LockHeld) as caught:
            c.locks.acquire(key, "w8")
        self.assertIsNotNone(caught.exception.retry_after_ms)
        self.assertEqual(c.locks.release(key, "w7", grant.token), lockbroker.Released(released=False, hold_count=1))
        self.assertEqual(c.locks.release(key, "w7", grant.token), lockbroker.Released(released=True, hold_count=0))
        status = c.locks.status(key)
        self.assertEqual((status.held, status.owner, status.token, status.expires_at), (False, None, None, None))

    def test_a_waiting_lock_gets_the_lock_when_it_is_released(self):
        c, key = client(), unique("waited")
        first = c.lock(key, ttl=30, wait=5)
        got = []
        waiter = threading.Thread(target=lambda: got.append(c.lock(key, ttl=30, wait=30)))
        waiter.start()
        eventually("the second lock waits in the queue", 10, lambda: c.locks.status(key).waiters == 1)
        first.release()
        waiter.join(30)
        self.assertEqual(len(got), 1)
        self.assertGreater(got[0].token, first.token)
        got[0].release()

    def test_history_lists_the_locks_events_newest_first(self):
        c, key = client(), unique("audited")
        a = c.locks.acquire(key, "a", ttl=30)
        c.locks.release(key, "a", a.token)
        b = c.locks.acquire(key, "b", ttl=30)
        events = c.locks.history(key)
        self.assertEqual(
            [(e.event, e.owner, e.token) for e in events],
            [("granted", "b", b.token), ("released", "a", a.token), ("granted", "a", a.token)],
        )
        self.assertTrue(all(e.at.tzinfo is not None for e in events))
        self.assertGreaterEqual(events[0].at, events[-1].at)
        self.assertEqual(c.locks.history(key, limit=1), events[:1])
        with self.assertRaises(lockbroker.BadRequest):
            c.locks.history(key, limit=0)
        c.locks.release(key, "b", b.token)


class KeysAndTenants(unittest.TestCase):
    def test_keys_are_sent_byte_for_byte(self):
        c = client()
        odd = unique("a/b c%?#ü") + "/acquire"
        with c.lock(odd, ttl=30, wait=5) as lease:
            self.assertEqual(lease.key, odd)
            self.assertEqual(c.locks.status(odd).key, odd)
            self.assertFalse(c.locks.status(odd.upper()).held, "keys compare byte for byte")

    def test_another_tenant_does_not_see_the_lock(self):
        key = unique("tenant")
        with client().lock(key, ttl=30, wait=5):
            other = other_tenant()
            self.assertFalse(other.locks.status(key).held)
            lease = other.try_lock(key)
            self.assertIsNotNone(lease, "the same key of another tenant is another lock")
            lease.release()


if __name__ == "__main__":
    unittest.main()
