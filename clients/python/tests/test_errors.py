"""Error answers of a real broker as exceptions, by code."""

import unittest

import lockbroker
from helpers import client, env, unique


def setUpModule():
    env("LOCKBROKER_URL")
    env("LOCKBROKER_API_KEY")


class Errors(unittest.TestCase):
    def test_bad_input_is_a_bad_request_with_its_code(self):
        c = client()
        with self.assertRaises(lockbroker.BadRequest) as caught:
            c.locks.acquire(unique("ttl"), "me", ttl=0.001)
        err = caught.exception
        self.assertEqual((err.status, err.code), (400, "bad_request"))
        self.assertIn("ttl_ms", err.message)
        with self.assertRaises(lockbroker.BadRequest) as caught:
            c.locks.acquire(unique("owner"), "")
        self.assertIn("owner", caught.exception.message)

    def test_a_key_the_naming_policy_rejects(self):
        with self.assertRaises(lockbroker.InvalidKey) as caught:
            client().locks.status("bad\x01key")
        self.assertEqual((caught.exception.status, caught.exception.code), (422, "invalid_key"))
        self.assertIsInstance(caught.exception, lockbroker.BadRequest)

    def test_a_wrong_api_key_is_unauthenticated(self):
        wrong = lockbroker.Client(env("LOCKBROKER_URL"), "not-a-key")
        with self.assertRaises(lockbroker.Unauthenticated) as caught:
            wrong.lock(unique("auth"), wait=0)
        self.assertEqual((caught.exception.status, caught.exception.code), (401, "unauthenticated"))
        with self.assertRaises(lockbroker.Unauthenticated):
            lockbroker.Client(env("LOCKBROKER_URL"), api_key="").locks.status("x")

    def test_a_stale_token_is_lease_lost(self):
        c, key = client(), unique("stale")
        grant = c.locks.acquire(key, "me", ttl=30)
        self.addCleanup(c.locks.release, key, "me", grant.token)
        with self.assertRaises(lockbroker.NotOwner) as caught:
            c.locks.release(key, "me", grant.token + 1)
        self.assertEqual(caught.exception.code, "lease_lost")
        with self.assertRaises(lockbroker.LeaseLost):
            c.locks.renew(key, "not-me", grant.token)


if __name__ == "__main__":
    unittest.main()
