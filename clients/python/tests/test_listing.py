"""Listing every kind against a real broker: what is held is listed (every page of it, in
storage-key order), what was released is not, and another tenant sees nothing."""

import unittest

from helpers import client, env, other_tenant, unique


def setUpModule():
    env("LOCKBROKER_URL")
    env("LOCKBROKER_API_KEY")


class Listing(unittest.TestCase):
    def setUp(self):
        self.c, self.prefix = client(), unique("ls") + "/"
        self.keys = [self.prefix + name for name in ("a", "b", "c")]

    def hold(self, lease):
        self.addCleanup(lease.close)
        return lease

    def test_held_locks_are_listed_and_released_ones_are_not(self):
        c, keys = self.c, self.keys
        leases = [self.hold(c.lock(key, ttl=30, wait=5)) for key in keys]
        outsider = self.hold(c.lock(unique("ls"), ttl=30, wait=5))
        listed = list(c.locks.list(prefix=self.prefix))
        self.assertEqual(
            [(s.storage_key, s.held, s.owner, s.token, s.hold_count) for s in listed],
            [(lease.key, True, lease.owner, lease.token, 1) for lease in leases],
        )
        self.assertTrue(all(s.expires_at.tzinfo is not None for s in listed))
        self.assertNotIn(outsider.key, [s.storage_key for s in listed], "only the prefix")
        one_a_page = [s.storage_key for s in c.locks.list(prefix=self.prefix, page_size=1)]
        self.assertEqual(one_a_page, keys, "pages of one, followed by their cursors")
        self.assertEqual([s.storage_key for s in c.locks.list(prefix=self.prefix, limit=2, page_size=1)], keys[:2])

        leases[1].release()
        self.assertEqual([s.storage_key for s in c.locks.list(prefix=self.prefix)], [keys[0], keys[2]])
        self.assertEqual(list(other_tenant().locks.list(prefix=self.prefix)), [], "another tenant's")

    def test_semaphores_are_listed_with_their_holders(self):
        c, (a, b, _) = self.c, self.keys
        first = self.hold(c.semaphore(a, permits=2, ttl=30, wait=5))
        second = self.hold(c.semaphore(a, permits=2, ttl=30, wait=5))
        only = self.hold(c.semaphore(b, permits=3, ttl=30, wait=5))
        listed = list(c.semaphores.list(prefix=self.prefix, page_size=1))
        self.assertEqual([(s.storage_key, s.permits) for s in listed], [(a, 2), (b, 3)])
        self.assertEqual(
            sorted((h.slot, h.owner, h.token) for h in listed[0].holders),
            sorted((p.slot, p.owner, p.token) for p in (first, second)),
        )
        only.release()
        first.release()
        listed = list(c.semaphores.list(prefix=self.prefix))
        self.assertEqual([s.storage_key for s in listed], [a], "a semaphore nobody holds is not listed")
        self.assertEqual([h.token for h in listed[0].holders], [second.token])

    def test_rwlocks_are_listed_with_their_writer_or_readers(self):
        c, (a, b, _) = self.c, self.keys
        readers = [self.hold(c.read_lock(a, ttl=30, wait=5)) for _ in range(2)]
        writer = self.hold(c.write_lock(b, ttl=30, wait=5))
        listed = list(c.rwlocks.list(prefix=self.prefix))
        self.assertEqual([s.storage_key for s in listed], [a, b])
        self.assertIsNone(listed[0].writer)
        self.assertEqual(sorted(r.token for r in listed[0].readers), sorted(r.token for r in readers))
        self.assertEqual((listed[1].writer.owner, listed[1].writer.token, listed[1].readers), (writer.owner, writer.token, []))
        writer.release()
        self.assertEqual([s.storage_key for s in c.rwlocks.list(prefix=self.prefix)], [a])

    def test_elections_are_listed_with_their_leader(self):
        c, (a, b, _) = self.c, self.keys
        leaders = [self.hold(c.campaign(name, ttl=30, wait=5, candidate=f"node-{name[-1]}")) for name in (a, b)]
        listed = list(c.elections.list(prefix=self.prefix))
        self.assertEqual(
            [(s.storage_key, s.leader, s.term) for s in listed],
            [(leader.name, leader.candidate, leader.term) for leader in leaders],
        )
        leaders[0].resign()
        self.assertEqual([s.storage_key for s in c.elections.list(prefix=self.prefix)], [b], "resigned: not listed")


if __name__ == "__main__":
    unittest.main()
