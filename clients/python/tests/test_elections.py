"""Leader election against a real broker: one leader per term, renewal, resignation, and observers that see every change."""

import threading
import time
import unittest

from helpers import client, env, eventually, unique


def setUpModule():
    env("LOCKBROKER_URL")
    env("LOCKBROKER_API_KEY")


class Elections(unittest.TestCase):
    def test_leader_observe_resign(self):
        c, name = client(), unique("scheduler")
        seen, errors = [], []
        first_seen = threading.Event()

        def observer():
            try:
                for change in c.elections.observe(name, timeout=30):
                    seen.append(change)
                    first_seen.set()
                    if len(seen) == 4:
                        return
            except Exception as err:
                errors.append(err)

        watching = threading.Thread(target=observer)
        watching.start()
        self.assertTrue(first_seen.wait(10), "observe sends the current state at once")
        self.assertIsNone(seen[0].leader)

        a = c.campaign(name, ttl=1.0, wait=5, candidate="node-a")
        self.assertEqual(c.elections.leader(name).leader, "node-a")
        self.assertIsNone(c.try_campaign(name, candidate="node-b"), "one leader at a time")
        eventually("leadership renewed past its TTL", 10, lambda: a.renewals >= 3)
        self.assertEqual((c.elections.leader(name).leader, c.elections.leader(name).term), ("node-a", a.term))
        a.resign()
        self.assertFalse(a.lost.is_set(), "resigning is not losing")
        eventually("the observer sees the vacancy", 10, lambda: len(seen) >= 3)
        with c.campaign(name, ttl=30, wait=5, candidate="node-b") as b:
            self.assertGreater(b.term, a.term, "the term is a fencing token")
            watching.join(30)
        self.assertFalse(watching.is_alive())
        self.assertEqual(errors, [])
        self.assertEqual(
            [(e.leader, e.term) for e in seen[1:]],
            [("node-a", a.term), (None, seen[2].term), ("node-b", b.term)],
        )
        self.assertIsNone(c.elections.leader(name).leader, "resigned on exit")

    def test_observe_ends_at_its_timeout(self):
        c, name = client(), unique("quiet")
        started = time.monotonic()
        changes = list(c.elections.observe(name, timeout=0.5))
        elapsed = time.monotonic() - started
        self.assertEqual([e.leader for e in changes], [None])
        self.assertGreaterEqual(elapsed, 0.5)
        self.assertLess(elapsed, 5)


if __name__ == "__main__":
    unittest.main()
