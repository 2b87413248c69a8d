"""A lockbroker policy: case-insensitive keys.

Keys are lowercased, so `Orders/42` and `orders/42` are the same lock; then
the broker's default checks apply (not empty, at most 255 bytes, no control
characters). Fairness (oldest waiter first) and backoff (exponential with
full jitter, 10 ms to 1 s) are the broker's defaults, written out below so
you can change them.

The interface is wit/policy.wit: each class below implements one of its
interfaces, named as componentize-py names them (`Naming`, `Fairness`,
`Backoff`, `Meta`; functions and fields in snake_case). Raise
`Err(reason)` to reject a key (HTTP 422 with that reason); a `variant` is
one class per case (`backoff.Decision_RetryAfter(10)`,
`backoff.Decision_GiveUp()`).

A policy keeps no state between calls (the broker may run each call in a
fresh instance) and has no clock, randomness (but the `seed` it is handed),
files or network. Any other exception traps: a naming call then fails
closed (HTTP 500), fairness and backoff fall back to the built-in rules.
"""

from typing import List

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import backoff, fairness, meta

NAME = "my-policy"
VERSION = "0.1.0"

# The longest key accepted, in bytes (UTF-8).
MAX_KEY_BYTES = 255
# Backoff: the first ceiling and the largest, in milliseconds.
BASE_DELAY_MS = 10
MAX_DELAY_MS = 1000


def check_key(key: str) -> str:
    """The broker's default naming checks: returns `key` or raises `Err(reason)`."""
    if not key:
        raise Err("key must not be empty")
    size = len(key.encode("utf-8"))
    if size > MAX_KEY_BYTES:
        raise Err(f"key is {size} bytes long; at most {MAX_KEY_BYTES} bytes are allowed")
    for i, c in enumerate(key):
        # Control characters: C0, DEL and C1 (what Rust's char::is_control means).
        if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F:
            at = len(key[:i].encode("utf-8"))
            raise Err(f"key contains a control character (U+{ord(c):04X}) at byte {at}")
    return key


def ceiling_ms(attempt: int) -> int:
    """min(1000, 10 * 2^min(attempt - 1, 20)) ms; attempt 0 counts as 1."""
    doublings = min(max(attempt, 1) - 1, 20)
    return min(MAX_DELAY_MS, BASE_DELAY_MS << doublings)


class Meta(exports.Meta):
    def describe(self) -> meta.Descriptor:
        """Shown in `GET /v1/admin/tenants`."""
        return meta.Descriptor(name=NAME, version=VERSION)


class Naming(exports.Naming):
    def storage_key(self, tenant: str, key: str) -> str:
        return check_key(key.lower())


class Fairness(exports.Fairness):
    def pick_next(self, key: str, waiters: List[fairness.Waiter]) -> int:
        """Index of the waiter (oldest first) granted the freed lock next."""
        return 0


class Backoff(exports.Backoff):
    def next_delay(self, contention: backoff.Contention) -> backoff.Decision:
        """Full jitter in [1, ceiling] ms; never gives up (the broker enforces `wait_ms`)."""
        return backoff.Decision_RetryAfter(1 + contention.seed % ceiling_ms(contention.attempt))
