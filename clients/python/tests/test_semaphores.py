"""Semaphores against a real broker: permits bound the holders, permits renew and learn when they are lost."""

import threading
import time
import unittest

import lockbroker
from helpers import client, env, eventually, unique


def setUpModule():
    env("LOCKBROKER_URL")
    env("LOCKBROKER_API_KEY")


class Semaphores(unittest.TestCase):
    def test_permits_limit_the_holders(self):
        c, key = client(), unique("pool")
        a = c.semaphore(key, permits=2, ttl=30, wait=5)
        b = c.semaphore(key, permits=2, ttl=30, wait=5)
        self.addCleanup(a.close)
        self.addCleanup(b.close)
        self.assertNotEqual(a.slot, b.slot)
        self.assertIsNone(c.try_semaphore(key, permits=2), "a third owner finds it full")
        with self.assertRaises(lockbroker.SemaphoreFull):
            c.semaphores.acquire(key, "third", permits=2)
        status = c.semaphores.status(key)
        self.assertEqual(status.permits, 2)
        self.assertEqual(sorted((h.slot, h.owner) for h in status.holders), sorted([(a.slot, a.owner), (b.slot, b.owner)]))
        a.release()
        with c.semaphore(key, permits=2, ttl=30, wait=5) as third:
            self.assertEqual(third.slot, a.slot, "the freed slot")

    def test_threads_never_exceed_the_permits(self):
        c, key, permits = client(), unique("bounded"), 2
        inside, most, slots_inside = [0], [0], set()
        guard = threading.Lock()
        errors = []

        def worker():
            try:
                for _ in range(4):
                    with c.semaphore(key, permits=permits, ttl=10, wait=60) as permit:
                        with guard:
                            self.assertNotIn(permit.slot, slots_inside, "a slot has one holder")
                            slots_inside.add(permit.slot)
                            inside[0] += 1
                            most[0] = max(most[0], inside[0])
                        time.sleep(0.01)  # work, so that holders meet
                        with guard:
                            inside[0] -= 1
                            slots_inside.discard(permit.slot)
            except Exception as err:
                errors.append(err)

        workers = [threading.Thread(target=worker) for _ in range(5)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        self.assertFalse(any(w.is_alive() for w in workers))
        self.assertEqual(errors, [])
        self.assertLessEqual(most[0], permits)
        self.assertEqual(c.semaphores.status(key).holders, [])

    def test_a_permit_renews_and_learns_when_it_is_taken_away(self):
        c, key = client(), unique("permit")
        permit = c.semaphore(key, permits=1, ttl=1.0, wait=5)
        self.addCleanup(permit.close)
        eventually("renewed past its TTL", 10, lambda: permit.renewals >= 3)
        self.assertEqual([h.token for h in c.semaphores.status(key).holders], [permit.token])
        c.semaphores.release(key, permit.owner, permit.token, slot=permit.slot)
        self.assertTrue(permit.lost.wait(5))

    def test_another_size_is_refused(self):
        c, key = client(), unique("sized")
        with c.semaphore(key, permits=3, ttl=30, wait=5):
            with self.assertRaises(lockbroker.PermitsMismatch) as caught:
                c.try_semaphore(key, permits=4)
            self.assertEqual((caught.exception.status, caught.exception.code), (409, "permits_mismatch"))


if __name__ == "__main__":
    unittest.main()
