"""What the conformance suites (``clients/CONFORMANCE.md``, C01–C25) of the sync and the async
client share: the brokers and tenants the harness hands over, the stand-ins the scenarios allow
(in ``helpers``), interrupting the main thread, and what a scenario expects once its client has
done its part (``check_*``: one definition of each expectation, whichever client is tested).

``tests/python_client.rs`` starts the brokers with ``lockbroker_tests::Conformance`` and sets
the variables read here; missing, the tests fail (``helpers.env``).
"""

import asyncio
import contextlib
import json
import signal
import threading
import time
import unittest
import urllib.parse
import urllib.request
from typing import Any, Awaitable, Callable, Dict, Iterator, List, Optional, Tuple, Type, TypeVar, Union

import lockbroker
from helpers import POLL_EVERY, FakeBroker, env, unique
from lockbroker.retry import RetryPolicy

T = TypeVar("T")

#: The tenant the conformance keys belong to (``LOCKBROKER_API_KEY``'s).
TENANT = "default"

#: A 503 as the broker sends it, without a hint (so the client's own backoff shows).
UNAVAILABLE = (503, {"error": {"code": "unavailable", "message": "database down"}})

#: How late past a deadline a call may fail ("by the deadline, within a small slack").
SLACK = 0.25


def require_brokers() -> None:
    """Fails the suite at once when the harness's brokers are not given (a module's ``setUpModule``)."""
    url()
    key()


def url() -> str:
    return env("LOCKBROKER_URL")


def key() -> str:
    return env("LOCKBROKER_API_KEY")


def tls_url() -> str:
    return env("LOCKBROKER_TLS_URL")


def tls_files(who: str = "CLIENT") -> Dict[str, str]:
    """The CA and a client certificate and key (``CLIENT``: accepted; ``STRANGER``: refused) as
    client options."""
    return {
        "ca_file": env("LOCKBROKER_TEST_CA_FILE"),
        "client_cert": env(f"LOCKBROKER_TEST_{who}_CERT"),
        "client_key": env(f"LOCKBROKER_TEST_{who}_KEY"),
    }


def client(**options: Any) -> lockbroker.Client:
    """A sync client of the plain broker, as tenant ``default``."""
    return lockbroker.Client(url(), key(), **options)


def async_client(**options: Any) -> lockbroker.AsyncClient:
    """An async client of the plain broker, as tenant ``default``."""
    return lockbroker.AsyncClient(url(), key(), **options)


def forwarder(answers: Optional[list] = None) -> FakeBroker:
    """A stand-in in front of the real broker that forwards (after ``answers``, if any) and
    records every request and what it got: for counting requests and their timing."""
    return FakeBroker(list(answers or []) + ["forward"], upstream=url())


def stand_in(case: unittest.TestCase, answers: list, upstream: bool = True) -> FakeBroker:
    """A scripted stand-in (``helpers.FakeBroker``), forwarding to the real broker if ``upstream``,
    closed when the test ends."""
    fake = FakeBroker(answers, upstream=url() if upstream else None)
    case.addCleanup(fake.close)
    return fake


def tls_environment() -> Dict[str, str]:
    """C20: the environment of a client of the TLS broker with the accepted certificate."""
    files = tls_files()
    return {
        "LOCKBROKER_URL": tls_url(),
        "LOCKBROKER_API_KEY": key(),
        "LOCKBROKER_CA_FILE": files["ca_file"],
        "LOCKBROKER_CLIENT_CERT": files["client_cert"],
        "LOCKBROKER_CLIENT_KEY": files["client_key"],
    }


def refused_tls_options() -> Dict[str, Dict[str, str]]:
    """C20: the client options the TLS broker refuses (or that refuse it), by case."""
    files = tls_files()
    return {
        "no client certificate": {"ca_file": files["ca_file"]},
        "the stranger's certificate": tls_files("STRANGER"),
        "no CA file": {"client_cert": files["client_cert"], "client_key": files["client_key"]},
    }


def four_hundreds(make: Callable[..., Any], fake_url: str, held: str) -> List[Tuple[int, Type[Exception], Callable[[], Any]]]:
    """C10: ``(status, exception, call)`` for each 4xx answer, the calls made by clients of
    ``make`` (``lockbroker.Client`` or ``AsyncClient``) through the stand-in at ``fake_url``;
    ``held`` is a key another owner holds."""
    c = make(fake_url, key(), backoff=0.01)
    admin = make(fake_url, env("LOCKBROKER_ADMIN_TOKEN"))
    return [
        (400, lockbroker.BadRequest, lambda: c.locks.acquire(unique("c10"), "me", ttl=0.001)),
        (401, lockbroker.Unauthenticated, lambda: make(fake_url, "not-a-key").locks.status(held)),
        (404, lockbroker.NotFound, lambda: admin.force_release(TENANT, unique("c10"))),
        (409, lockbroker.LockHeld, lambda: c.locks.acquire(held, "me", ttl=30)),
        (422, lockbroker.InvalidKey, lambda: c.locks.status("bad\x01key")),
    ]


# -- what the scenarios expect ------------------------------------------------------------


def check_waited_then_held(case: unittest.TestCase, started: float, caught: Any) -> None:
    """C03: a wait of 300 ms for a held lock took about that long and ended typed, with a hint."""
    elapsed = time.monotonic() - started
    case.assertGreaterEqual(elapsed, 0.25, "it waited")
    case.assertLess(elapsed, 3.0, "for about 300 ms")
    case.assertIsNotNone(caught.exception.retry_after_ms)


def check_lost_unconfirmed(case: unittest.TestCase, lease: Any) -> None:
    """C06: a lease whose renewals go unanswered is lost (now) before it could have ended."""
    case.assertLess(time.monotonic(), lease.held_until, "before the TTL passed since the last confirmed renewal was sent")
    case.assertIsInstance(lease.lost_reason, lockbroker.Unavailable)


def check_503s_retried(case: unittest.TestCase, fake: FakeBroker, backoff: float) -> None:
    """C09: two 503s, then the answer, after growing jittered delays."""
    case.assertEqual([a[0] for a in fake.answered], [503, 503, 200])
    sent = [at for _, _, at in fake.requests]
    case.assertGreaterEqual(sent[1] - sent[0], backoff / 2, "half to all of the backoff")
    case.assertGreaterEqual(sent[2] - sent[1], backoff, "then half to all of twice as much")
    delays = {RetryPolicy(4, backoff, 2.0).backoff_delay(1) for _ in range(20)}
    case.assertGreater(len(delays), 1, "jittered")


def check_503s_given_up_at_the_deadline(case: unittest.TestCase, started: float, caught: Any, fake: FakeBroker) -> None:
    """C09: 503s retried until a deadline of 1 s, then raised as they came."""
    case.assertLess(time.monotonic() - started, 1.0 + SLACK, "by the deadline, not after")
    case.assertEqual((caught.exception.status, caught.exception.code), (503, "unavailable"))
    case.assertGreater(len(fake.requests), 2, "retried until then")


def check_unreachable_retried_to_the_deadline(case: unittest.TestCase, started: float) -> None:
    """C09: connection failures retried too, until a deadline of 1 s."""
    elapsed = time.monotonic() - started
    case.assertGreaterEqual(elapsed, 0.5, "connection failures are retried too")
    case.assertLess(elapsed, 1.0 + SLACK, "by the deadline, not after")


def check_429s_waited_out(case: unittest.TestCase, fake: FakeBroker) -> None:
    """C12: a burst past the rate met 429s, each retried only after its ``retry_after_ms``."""
    refused = [i for i, a in enumerate(fake.answered) if a is not None and a[0] == 429]
    case.assertTrue(refused, "the burst met 429")
    for i in refused:
        _, code, retry_after_ms = fake.answered[i]
        case.assertEqual(code, "rate_limited")
        waited = fake.requests[i + 1][2] - fake.requests[i][2]
        case.assertGreaterEqual(waited, retry_after_ms / 1000.0 - 0.01, "retry_after_ms waited out before trying again")


def check_429_raised_within_the_deadline(case: unittest.TestCase, started: float, caught: Any) -> None:
    """C12: within a deadline of 0.1 s, a 429 whose hint ends past it is raised at once."""
    case.assertLess(time.monotonic() - started, 0.1 + SLACK, "failed at once, not after the hint")
    case.assertEqual((caught.exception.status, caught.exception.code), (429, "rate_limited"))
    case.assertGreater(caught.exception.retry_after_ms, 0, "carrying the broker's hint")


def check_observed_across_the_break(case: unittest.TestCase, seen: List[Any], b: Any) -> None:
    """C16: observe saw the vacancy first and the second leader last, across a broken connection."""
    case.assertEqual(seen[-1].leader, "c16-b", "observe went on after its connection broke")
    case.assertEqual(seen[-1].term, b.term)
    case.assertEqual(seen[0].leader, None)


def check_history(case: unittest.TestCase, events: List[Any], lease: Any) -> None:
    """C17: the history of a lock held once, newest first."""
    case.assertEqual(
        [(e.event, e.owner, e.token) for e in events[:2]],
        [("released", lease.owner, lease.token), ("granted", lease.owner, lease.token)],
    )
    case.assertGreaterEqual(events[0].at, events[1].at)


def check_events(case: unittest.TestCase, events: List[Any], stream: Any, prefix: str, first: Any) -> None:
    """C19: a lock held once under ``prefix`` came as two events with increasing ids."""
    case.assertEqual(
        [(e.event, e.kind, e.storage_key, e.token) for e in events],
        [("granted", "lock", prefix + "one", first.token), ("released", "lock", prefix + "one", first.token)],
    )
    case.assertTrue(all(e.id is not None for e in events) and events[0].id < events[1].id)
    case.assertEqual(stream.last_id, events[1].id)


def check_resumed(case: unittest.TestCase, resumed: List[Any], events: List[Any], prefix: str, second: Any) -> None:
    """C19: a stream started after the last id got what followed, nothing already seen."""
    case.assertEqual([(e.event, e.storage_key, e.token) for e in resumed], [
        ("granted", prefix + "two", second.token), ("released", prefix + "two", second.token)
    ], "nothing already seen")
    case.assertGreater(resumed[0].id, events[1].id)


def check_session_holds(case: unittest.TestCase, statuses: List[Any], session: Any, leases: List[Any]) -> None:
    """C22: each lease of the session is held with its token, and its status names the session."""
    case.assertEqual(
        [(s.held, s.owner, s.token, s.session) for s in statuses],
        [(True, lease.owner, lease.token, session.id) for lease in leases],
    )
    case.assertTrue(all(lease.token > 0 for lease in leases), "granted with fencing tokens")


def check_session_kept(case: unittest.TestCase, statuses: List[Any], session: Any, leases: List[Any], fake: FakeBroker, held_for: float) -> None:
    """C22: after ``held_for`` seconds (more than three TTLs) with no call of the test's, the leases
    are still held with the same tokens and nothing was lost: the session kept itself alive with a
    keepalive about every third of its TTL, and no lease of it was renewed on its own."""
    check_session_holds(case, statuses, session, leases)
    check_kept_by_keepalives(case, session, leases, fake, held_for)


def check_kept_by_keepalives(case: unittest.TestCase, session: Any, leases: List[Any], fake: FakeBroker, held_for: float) -> None:
    """C22, C24: nothing of the session was lost in ``held_for`` seconds, in which its client (the
    one behind ``fake``) sent a keepalive about every third of its TTL and no renewal at all."""
    case.assertFalse(session.lost.is_set(), "the session's lost signal has not fired")
    case.assertFalse(any(lease.lost.is_set() for lease in leases))
    keepalives = fake.count("POST", f"/v1/sessions/{session.id}/keepalive")
    expected = held_for / (session.ttl / 3.0)  # every third of the TTL
    case.assertGreaterEqual(keepalives, expected * 0.7, "a keepalive about every third of the TTL")
    case.assertLessEqual(keepalives, expected * 1.5 + 1, "and not more often")
    case.assertIn(session.keepalives, (keepalives - 1, keepalives), "each one confirmed (the last may be in flight)")
    case.assertEqual(fake.count("POST", "/renew"), 0, "no lease of it renewed on its own")  # multilock/renew too


def check_session_lost(case: unittest.TestCase, session: Any, leases: List[Any], lost_after: float, logged: List[str]) -> None:
    """C23: a session closed from outside was lost ``lost_after`` seconds later, within one TTL,
    once, and so is every lease of it."""
    case.assertLess(lost_after, session.ttl, "lost within one TTL of the session")
    case.assertIsInstance(session.lost_reason, lockbroker.SessionNotFound)
    case.assertTrue(all(lease.lost.is_set() for lease in leases), "every lease of it reports lost")
    case.assertTrue(all(isinstance(lease.lost_reason, lockbroker.SessionNotFound) for lease in leases))
    case.assertEqual(len([line for line in logged if "lost" in line]), 1, "the lost signal fired once")


def check_new_holder_kept(case: unittest.TestCase, status: Any, new: Any) -> None:
    """C23: closing the lost session and releasing its lease left the new holder's lease alone."""
    case.assertEqual((status.held, status.owner, status.token, status.session), (True, new.owner, new.token, None))


class Cycle:
    """C25: the keys and owners of two sessions that would wait for each other: A holds ``k1``
    and waits for ``k2``, B holds ``k2`` and asks for ``k1``."""

    TTL = 10.0
    WAIT = 10.0
    #: B's refusal comes at once: well within its wait.
    REFUSED_WITHIN = 2.0

    def __init__(self) -> None:
        self.k1, self.k2 = unique("c25"), unique("c25")
        self.a_owner, self.b_owner = unique("c25-a-waits"), unique("c25-b-asks")


def waiting_sessions(k: str) -> List[Optional[str]]:
    """C25: the sessions of the waiters ``GET /v1/locks/{k}/waiters`` lists (a plain request: the
    client has no call for it)."""
    request = urllib.request.Request(
        f"{url().rstrip('/')}/v1/locks/{urllib.parse.quote(k, safe='')}/waiters",
        headers={"Authorization": f"Bearer {key()}", "Accept": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return [w.get("session") for w in json.loads(answer.read())["waiters"]]


def check_deadlock(
    case: unittest.TestCase, cycle: Cycle, caught: Any, refused_after: float, sent: int, a: Any, b: Any, statuses: List[Any]
) -> None:
    """C25: B's acquire of ``k1`` was refused at once (``refused_after`` seconds), sent once
    (``sent``), with ``DeadlockError`` and its cycle: B waiting for ``k1`` (held by A), then A
    waiting for ``k2`` (held by B). ``statuses``: those of ``k1`` and ``k2`` then."""
    case.assertIsInstance(caught, lockbroker.DeadlockError)
    case.assertIsInstance(caught, lockbroker.Busy, "a refusal of a busy key, as LockHeld is")
    case.assertEqual((caught.status, caught.code), (409, "deadlock"))
    case.assertLess(refused_after, Cycle.REFUSED_WITHIN, "refused at once, not after its wait")
    case.assertEqual(sent, 1, "not retried")
    k1, k2 = statuses
    case.assertEqual(
        caught.cycle,
        [
            lockbroker.CycleStep(session=b.id, owner=cycle.b_owner, kind="lock", storage_key=k1.storage_key),
            lockbroker.CycleStep(session=a.id, owner=cycle.a_owner, kind="lock", storage_key=k2.storage_key),
        ],
    )
    case.assertEqual((k1.session, k2.session), (a.id, b.id), "nothing granted: each key stays with its holder")


def check_cycle_broken(case: unittest.TestCase, cycle: Cycle, a: Any, granted: Any, status: Any) -> None:
    """C25: once B's session was closed, A's waiting acquire was granted ``k2``, in A's session."""
    case.assertEqual((granted.key, granted.owner), (cycle.k2, cycle.a_owner))
    case.assertIs(granted.session, a)
    case.assertEqual((status.held, status.owner, status.token, status.session), (True, cycle.a_owner, granted.token, a.id))


class EveryKind:
    """C24: the keys of one lease of each kind held in one session (a semaphore of two permits, a
    rwlock read and another written, a multi-lock of two keys, an election), and what their
    statuses show while the session holds them and after it is closed."""

    PERMITS = 2

    def __init__(self) -> None:
        base = unique("c24")
        self.semaphore, self.read, self.write, self.election = (f"{base}/{n}" for n in ("pool", "read", "write", "leader"))
        self.multi = [f"{base}/multi-a", f"{base}/multi-b"]

    def statuses(self, c: Any) -> List[Callable[[], Any]]:
        """Each key's status call of client ``c`` (sync: the status; async: its coroutine), in the
        order the ``check_every_kind_*`` functions read them: semaphore, rwlock read, rwlock
        written, the multi-lock's keys, election."""
        return (
            [lambda: c.semaphores.status(self.semaphore), lambda: c.rwlocks.status(self.read), lambda: c.rwlocks.status(self.write)]
            + [lambda k=k: c.locks.status(k) for k in self.multi]
            + [lambda: c.elections.status(self.election)]
        )


def check_every_kind_granted(case: unittest.TestCase, kinds: EveryKind, session: Any, permit: Any, reader: Any, writer: Any, multi: Any, leader: Any) -> None:
    """C24: each kind's session call gave that kind's handle (a permit's ``slot``, a rwlock
    lease's ``mode``, a multi-lock's ``tokens``, a leader's ``term``), held in the session and
    granted with fencing tokens."""
    case.assertEqual(
        [(h.key, h.session) for h in (permit, reader, writer)] + [(leader.name, leader.session), (multi.keys, multi.session)],
        [(kinds.semaphore, session), (kinds.read, session), (kinds.write, session), (kinds.election, session), (kinds.multi, session)],
    )
    case.assertIn(permit.slot, range(EveryKind.PERMITS))
    case.assertEqual((reader.mode, writer.mode), ("read", "write"))
    tokens = [permit.token, reader.token, writer.token, leader.term] + list(multi.tokens.values())
    case.assertEqual(len(tokens), 6, "both keys of the multi-lock granted")
    case.assertTrue(all(token > 0 for token in tokens), "granted with fencing tokens")


def check_every_kind_holds(case: unittest.TestCase, statuses: List[Any], kinds: EveryKind, session: Any, permit: Any, reader: Any, writer: Any, multi: Any, leader: Any) -> None:
    """C24: each key's status shows its lease held with its token (named by the session, for the
    kinds whose status names it)."""
    pool, read, written, *locks, election = statuses
    case.assertEqual([(h.slot, h.owner, h.token, h.session) for h in pool.holders], [(permit.slot, permit.owner, permit.token, session.id)])
    case.assertEqual(([(h.owner, h.token, h.session) for h in read.readers], read.writer), ([(reader.owner, reader.token, session.id)], None))
    case.assertEqual(
        ((written.writer.owner, written.writer.token, written.writer.session), written.readers), ((writer.owner, writer.token, session.id), [])
    )
    case.assertEqual(
        [(s.held, s.owner, s.token, s.session) for s in locks], [(True, multi.owner, multi.tokens[k], session.id) for k in kinds.multi]
    )
    case.assertEqual((election.leader, election.term), (leader.candidate, leader.term))


def check_session_lists_every_kind(case: unittest.TestCase, status: Any, kinds: EveryKind, permit: Any, reader: Any, writer: Any, multi: Any, leader: Any) -> None:
    """C24: ``GET /v1/sessions/{id}`` lists the six leases: the permit with its slot, the rwlock
    leases with their modes, both keys of the multi-lock, the leadership."""
    listed = sorted((e.kind, e.key, e.token, e.slot, e.mode) for e in status.leases)
    expected = sorted(
        [
            ("semaphore", kinds.semaphore, permit.token, permit.slot, None),
            ("rwlock", kinds.read, reader.token, None, "read"),
            ("rwlock", kinds.write, writer.token, None, "write"),
            ("election", kinds.election, leader.term, None, None),
        ]
        + [("lock", k, multi.tokens[k], None, None) for k in kinds.multi]
    )
    case.assertEqual(listed, expected)


def check_every_kind_freed(case: unittest.TestCase, statuses: List[Any]) -> None:
    """C24: after the session's close, the semaphore has no holder, neither rwlock has one, both
    keys of the multi-lock are free and the election has no leader."""
    pool, read, written, *locks, election = statuses
    case.assertEqual(pool.holders, [], "the semaphore has no holder")
    case.assertEqual([(s.writer, s.readers) for s in (read, written)], [(None, [])] * 2, "neither rwlock has one")
    case.assertEqual([s.held for s in locks], [False, False], "both keys of the multi-lock are free")
    case.assertEqual((election.leader, election.term), (None, None), "the election has no leader")


async def eventually_async(what: str, timeout: float, check: Callable[[], Union[T, Awaitable[T]]]) -> T:
    """``helpers.eventually`` for coroutines: awaits ``check()`` (or takes its value) until it is
    truthy, and returns it; AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    tries = 0
    while True:
        tries += 1
        value = check()
        if asyncio.iscoroutine(value) or isinstance(value, asyncio.Future):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not true within {timeout} s ({tries} tries)")
        await asyncio.sleep(POLL_EVERY)


class Interrupted(Exception):
    """Raised in the main thread by :func:`interrupt_main`: what a thread interrupt is in Python
    (a signal whose handler raises, as Ctrl-C raises ``KeyboardInterrupt``)."""


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise Interrupted(f"signal {signum}")


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """For the block, ``SIGUSR1`` to the main thread raises :class:`Interrupted` there."""
    if threading.current_thread() is not threading.main_thread():
        raise AssertionError("signals are handled in the main thread only: run the test there")
    previous = signal.signal(signal.SIGUSR1, _raise_interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, previous)


def interrupt_main(when: Callable[[], None]) -> threading.Thread:
    """Starts a thread that runs ``when`` (which waits for the moment) and then interrupts the
    main thread, blocked in a call, with ``SIGUSR1`` (see :func:`interruptible`). An exception
    of ``when`` is kept in the thread's ``error`` attribute, and the main thread not interrupted."""
    main = threading.main_thread().ident

    def run() -> None:
        try:
            when()
        except BaseException as err:  # surfaced by the test, not lost in the thread
            thread.error = err  # type: ignore[attr-defined]
            return
        signal.pthread_kill(main, signal.SIGUSR1)  # type: ignore[arg-type]

    thread = threading.Thread(target=run, daemon=True)
    thread.error = None  # type: ignore[attr-defined]
    thread.start()
    return thread
