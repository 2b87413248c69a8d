"""Reader-writer locks against a real broker: reads share, a write is alone, a queued writer blocks new readers."""

import threading
import unittest

import lockbroker
from helpers import client, env, eventually, unique


def setUpModule():
    env("LOCKBROKER_URL")
    env("LOCKBROKER_API_KEY")


class RwLocks(unittest.TestCase):
    def test_reads_share_and_a_write_is_alone(self):
        c, key = client(), unique("cfg")
        with c.read_lock(key, ttl=30, wait=5) as a, c.read_lock(key, ttl=30, wait=5) as b:
            self.assertEqual((a.mode, b.mode), ("read", "read"))
            self.assertGreater(b.token, a.token)
            self.assertEqual(b.grant.readers, 2)
            self.assertIsNone(c.try_write_lock(key), "readers exclude a writer")
            with self.assertRaises(lockbroker.LockHeld):
                c.rwlocks.acquire(key, "writer", mode="write")
            status = c.rwlocks.status(key)
            self.assertIsNone(status.writer)
            self.assertEqual(sorted(r.owner for r in status.readers), sorted([a.owner, b.owner]))
            last_read = b.token
        with c.write_lock(key, ttl=30, wait=5) as w:
            self.assertGreater(w.token, last_read, "tokens increase across modes")
            self.assertEqual(w.grant.readers, 0)
            self.assertIsNone(c.try_read_lock(key), "a writer excludes readers")
            self.assertEqual(c.rwlocks.status(key).writer.token, w.token)
        self.assertIsNotNone(c.try_read_lock(key), "released on with exit")
        with self.assertRaises(ValueError):
            c.rwlocks.acquire(key, "x", mode="exclusive")

    def test_a_waiting_writer_blocks_new_readers_and_gets_the_key(self):
        c, key = client(), unique("queue")
        reader = c.read_lock(key, ttl=30, wait=5)
        self.addCleanup(reader.close)
        got = []
        writer = threading.Thread(target=lambda: got.append(c.write_lock(key, ttl=30, wait=30)))
        writer.start()
        eventually("the writer waits", 10, lambda: c.rwlocks.status(key).waiters == 1)
        self.assertIsNone(c.try_read_lock(key), "a queued writer blocks new readers")
        reader.release()
        writer.join(30)
        self.assertEqual(len(got), 1)
        with got[0] as w:
            self.assertGreater(w.token, reader.token)
            self.assertEqual(c.rwlocks.status(key).writer.owner, w.owner)

    def test_plain_calls_renew_and_release(self):
        c, key = client(), unique("plain")
        grant = c.rwlocks.acquire(key, "me", ttl=1, mode="write")
        renewed = c.rwlocks.renew(key, "me", grant.token, ttl=30)
        self.assertEqual((renewed.token, renewed.ttl_ms), (grant.token, 30000))
        c.rwlocks.release(key, "me", grant.token)
        with self.assertRaises(lockbroker.LeaseLost):
            c.rwlocks.release(key, "me", grant.token)
        self.assertIsNone(c.rwlocks.status(key).writer)


if __name__ == "__main__":
    unittest.main()
