"""The policy's logic under plain CPython, no WebAssembly needed.

Needs the bindings on the path: `componentize-py -d wit/policy.wit -w policy
bindings bindings` then `PYTHONPATH=bindings python -m unittest` (build.sh
does both).
"""

import unittest

from componentize_py_types import Err
from wit_world.exports import backoff, fairness

import app


def delay(attempt: int, seed: int) -> int:
    contention = backoff.Contention(
        attempt=attempt, waited_ms=0, budget_ms=0, waiters=0, lease_remaining_ms=0, seed=seed
    )
    decision = app.Backoff().next_delay(contention)
    assert isinstance(decision, backoff.Decision_RetryAfter), decision
    return decision.value


class PolicyTest(unittest.TestCase):
    def test_keys_are_case_insensitive(self):
        self.assertEqual(app.Naming().storage_key("team-a", "Orders/42"), "orders/42")
        self.assertEqual(app.Naming().storage_key("team-a", "ORDERS/42"), "orders/42")

    def test_the_default_checks_still_apply(self):
        with self.assertRaises(Err) as empty:
            app.Naming().storage_key("t", "")
        self.assertEqual(empty.exception.value, "key must not be empty")
        with self.assertRaises(Err) as control:
            app.Naming().storage_key("t", "ab\ncd")
        self.assertEqual(
            control.exception.value, "key contains a control character (U+000A) at byte 2"
        )
        self.assertEqual(app.Naming().storage_key("t", "x" * 255), "x" * 255)
        with self.assertRaises(Err) as long:
            app.Naming().storage_key("t", "é" * 128)
        self.assertIn("256 bytes long", long.exception.value)

    def test_fairness_is_fifo_and_backoff_full_jitter_up_to_1s(self):
        waiter = fairness.Waiter(id=1, owner="w", priority=5, enqueued_at_ms=1000, attempts=0)
        self.assertEqual(app.Fairness().pick_next("k", [waiter, waiter]), 0)
        self.assertEqual(delay(1, 0), 1)
        self.assertEqual(delay(2, 19), 20)
        self.assertEqual(delay(0, 9), 10)
        self.assertEqual(delay(40, 999), 1000)

    def test_describes_itself(self):
        self.assertEqual(app.Meta().describe().name, "my-policy")


if __name__ == "__main__":
    unittest.main()
