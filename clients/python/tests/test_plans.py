"""The shared plans (``steps.py``) walked by scripted runners, without a broker: the exchange's
sorting of failures and its retries, the guarded acquire and its give-back, the renewal loop
on a fake clock, the resuming streams, the listing, and the runners themselves (the sync and the
async one walk a plan alike)."""

import asyncio
import json
import ssl
import time
import unittest
from typing import Any, Callable, Dict, List, Optional
from unittest import mock

import lockbroker
from lockbroker import acquiring, listing
from lockbroker.aio.running import AsyncRunner
from lockbroker.clock import LeaseClock
from lockbroker.exchange import CLOSED, Exchange
from lockbroker.models import LockGrant, LockStatus
from lockbroker.options import Options
from lockbroker.renewing import Renewals
from lockbroker.resuming import EventFeed, LeaderWatch
from lockbroker.retry import RetryPolicy
from lockbroker.running import Runner
from lockbroker.specs import LOCKS
from lockbroker.steps import END, Broke, Emit, Invoke, Shield, Sleep, Walk

# -- stand-ins -----------------------------------------------------------------------


class Script(Runner):
    """Does each I/O step by the test's ``answer(step)`` (its value, or what it raises) and
    records every step; sleeps are recorded, not slept."""

    def __init__(self, answer: Callable[[Any], Any]) -> None:
        self.answer = answer
        self.steps: List[Any] = []

    def _scripted(self, step: Any) -> Any:
        self.steps.append(step)
        return self.answer(step)

    do_connect = do_send = do_read_body = do_read_line = do_peek = do_sleep = _scripted

    def verbs(self) -> List[str]:
        return [type(step).__name__ for step in self.steps]


class Closable:
    """A connection or a response: ``closed`` once closed."""

    def __init__(self, status: int = 200, headers: Optional[Dict[str, str]] = None) -> None:
        self.status = status
        self.headers = headers or {}
        self.closed = False

    def getheader(self, name: str) -> Optional[str]:
        return self.headers.get(name)

    def close(self) -> None:
        self.closed = True


class Lines(Closable):
    """A streaming response: its lines, read one by one (``b""`` ends it)."""

    def __init__(self, lines: List[bytes]) -> None:
        super().__init__()
        self._lines = iter(lines)

    def readline(self) -> bytes:
        return next(self._lines)


class Calls:
    """Stands in for the exchange: each call is answered by the test's ``answer(call)``, in an
    ``Invoke`` step (so what it raises reaches the plan at its step, as a transport's failure would)."""

    timeout = 5.0
    retry = RetryPolicy(4, 0.1, 1.0)

    def __init__(self, answer: Callable[[Any], Any]) -> None:
        self.answer = answer
        self.sent: List[Any] = []

    def call(self, call: Any) -> Any:
        self.sent.append(call)
        return (yield Invoke(self.answer, (call,)))

    open = call

    def paths(self) -> List[str]:
        return [f"{call.method} {call.path}" for call in self.sent]


def options(url: str = "http://127.0.0.1:1", retries: int = 2) -> Options:
    return Options.build(url, "key", 10.0, retries, 0.1, 1.0)


def owner_of(call: Any) -> str:
    return json.loads(call.payload())["owner"]


def grant(owner: str, token: int = 7) -> LockGrant:
    return LockGrant.from_json({"key": "k", "storage_key": "k", "owner": owner, "token": token, "hold_count": 1, "ttl_ms": 30000})


def status(owner: Optional[str], token: Optional[int] = None) -> LockStatus:
    return LockStatus.from_json({"key": "k", "storage_key": "k", "held": owner is not None, "owner": owner, "token": token, "waiters": 0})


STATUS_BODY = b'{"key": "k", "storage_key": "k", "held": false, "waiters": 0}'

# -- the runners ---------------------------------------------------------------------


def plan_with_every_kind_of_step(invoke: Callable[..., Any]) -> Any:
    yield Sleep(0.0)
    got = yield Invoke(invoke, (20,))
    try:
        yield Invoke(invoke, (None,))  # fails: raised here
    except TypeError:
        got += 1
    return (yield Shield(sub_plan(got)))


def sub_plan(n: int) -> Any:
    yield Sleep(0.0)
    return n * 2


class Runners(unittest.TestCase):
    def test_a_failed_step_is_raised_in_the_plan_at_its_yield_and_both_runners_agree(self):
        def plus_one(n):
            return n + 1

        async def plus_one_async(n):
            return n + 1

        self.assertEqual(Runner().run(plan_with_every_kind_of_step(plus_one)), 44)
        self.assertEqual(asyncio.run(AsyncRunner().run(plan_with_every_kind_of_step(plus_one_async))), 44)

    def test_what_a_plan_raises_passes_on(self):
        def failing():
            yield Sleep(0.0)
            raise lockbroker.LockHeld(409, "lock_held", "held")

        with self.assertRaises(lockbroker.LockHeld):
            Runner().run(failing())

    def test_an_iterator_goes_on_only_when_asked_and_closing_it_ends_the_plan(self):
        progress = []

        def counting():
            try:
                for n in range(3):
                    progress.append(n)
                    yield Emit(n)
            finally:
                progress.append("closed")

        items = Runner().iterate(counting())
        self.assertEqual(next(items), 0)
        self.assertEqual(progress, [0], "nothing past the first item before the second is asked for")
        items.close()
        self.assertEqual(progress, [0, "closed"])
        self.assertEqual(list(Runner().iterate(counting())), [0, 1, 2])

    def test_a_walk_emits_end_once_done(self):
        walk = Walk(sub_plan(1))
        self.assertIs(Runner().run(walk.emitted()), END)

    def test_a_cancelled_task_runs_the_plans_shielded_clean_up_then_is_cancelled(self):
        cleaned = []

        def cleaning_up():
            yield Sleep(0.01)
            cleaned.append(True)

        def waiting():
            try:
                yield Sleep(60)
            except BaseException:
                yield Shield(cleaning_up())
                raise

        async def main():
            task = asyncio.ensure_future(AsyncRunner().run(waiting()))
            await asyncio.sleep(0.01)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        self.assertEqual(cleaned, [True])


# -- the exchange ---------------------------------------------------------------------


class Exchanges(unittest.TestCase):
    def exchange(self, answer, call, url="http://127.0.0.1:1", retries=2):
        script = Script(answer)
        return script, Runner.run(script, Exchange(options(url, retries)).call(call))

    def test_a_call_is_one_request_with_the_clients_headers_and_its_answer_parsed(self):
        connection, response = Closable(), Closable(200)
        answers = {"Connect": connection, "Send": response, "ReadBody": STATUS_BODY}
        script, got = self.exchange(lambda step: answers[type(step).__name__], LOCKS.status("a/b"))
        self.assertEqual(got, status(None))
        send = script.steps[1]
        self.assertEqual((send.method, send.target, send.body), ("GET", "/v1/locks/a%2Fb", None))
        self.assertEqual(send.headers["Authorization"], "Bearer key")
        self.assertEqual(send.headers["Connection"], "close")
        self.assertTrue(response.closed, "the response is closed once read")

    def test_failing_connections_are_retried_then_unreachable(self):
        def refuse(step):
            if type(step).__name__ == "Connect":
                raise Broke(ConnectionRefusedError("refused"), timed_out=False)

        script = Script(refuse)
        with self.assertRaises(lockbroker.Unreachable) as caught:
            script.run(Exchange(options(retries=2)).call(LOCKS.acquire("k", "me", 30.0, 0.0, 0, {}, 10.0)))
        self.assertEqual(script.verbs(), ["Connect", "Sleep", "Connect", "Sleep", "Connect"], "nothing was sent: an acquire too")
        self.assertIn("cannot connect to http://127.0.0.1:1: refused", str(caught.exception))
        first, second = script.steps[1].seconds, script.steps[3].seconds
        self.assertTrue(0.05 <= first <= 0.1 and 0.1 <= second <= 0.2, "half to all of a doubling backoff")

    def test_a_refused_handshake_is_final(self):
        def refuse(step):
            raise Broke(ssl.SSLError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"), timed_out=False)

        script = Script(refuse)
        with self.assertRaises(lockbroker.TlsError):
            script.run(Exchange(options("https://127.0.0.1:1")).call(LOCKS.status("k")))
        self.assertEqual(script.verbs(), ["Connect"])

    def test_broken_after_sending_a_read_is_retried_an_acquire_is_outcome_unknown(self):
        def reset_then_answer(step):
            name = type(step).__name__
            if name == "Send" and sum(type(s).__name__ == "Send" for s in script.steps) == 1:
                raise Broke(ConnectionResetError("reset"), timed_out=False)
            return {"Connect": Closable(), "Send": Closable(200), "ReadBody": STATUS_BODY, "Sleep": None}[name]

        script = Script(reset_then_answer)
        self.assertEqual(script.run(Exchange(options()).call(LOCKS.status("k"))), status(None))
        self.assertEqual(script.verbs(), ["Connect", "Send", "Sleep", "Connect", "Send", "ReadBody"])

        connection = Closable()
        script = Script(lambda step: connection if type(step).__name__ == "Connect" else reset_then_answer(step))
        with self.assertRaises(lockbroker.OutcomeUnknown):
            script.run(Exchange(options()).call(LOCKS.acquire("k", "me", 30.0, 0.0, 0, {}, 10.0)))
        self.assertEqual(script.verbs(), ["Connect", "Send"], "not sent again")
        self.assertTrue(connection.closed)

    def test_a_tls_probe_tells_a_refused_certificate_from_a_broken_connection(self):
        def probed(peeked):
            connections = []

            def answer(step):
                name = type(step).__name__
                if name == "Connect":
                    connections.append(Closable())
                    return connections[-1]
                if name == "Send":
                    raise Broke(ConnectionResetError("reset"), timed_out=False)
                if isinstance(peeked, BaseException):
                    raise peeked
                return peeked

            script = Script(answer)
            try:
                script.run(Exchange(options("https://127.0.0.1:1", retries=0)).call(LOCKS.acquire("k", "me", 30.0, 0.0, 0, {}, 10.0)))
            except lockbroker.LockbrokerError as err:
                self.assertTrue(all(c.closed for c in connections), "the call's and the probe's connections are closed")
                return script.verbs(), err
            self.fail("the call succeeded")

        verbs, err = probed(b"")  # closed at once after a fresh handshake: refused
        self.assertEqual(verbs, ["Connect", "Send", "Connect", "Peek"])
        self.assertIsInstance(err, lockbroker.TlsError)
        self.assertIn(CLOSED, str(err))
        _, err = probed(Broke(TimeoutError("timed out"), timed_out=True))  # silence: accepted
        self.assertIsInstance(err, lockbroker.OutcomeUnknown)
        _, err = probed(Broke(ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] alert"), timed_out=False))
        self.assertIsInstance(err, lockbroker.TlsError)
        self.assertIn("CERTIFICATE_REQUIRED", str(err))

    def test_a_call_that_timed_out_is_not_probed(self):
        def answer(step):
            if type(step).__name__ == "Send":
                raise Broke(TimeoutError("timed out"), timed_out=True)
            return Closable()

        script = Script(answer)
        with self.assertRaises(lockbroker.OutcomeUnknown):
            script.run(Exchange(options("https://127.0.0.1:1")).call(LOCKS.acquire("k", "me", 30.0, 0.0, 0, {}, 10.0)))
        self.assertEqual(script.verbs(), ["Connect", "Send"])

    def test_error_answers_by_their_code_503_retried_after_its_hint(self):
        unavailable = b'{"error": {"code": "unavailable", "message": "down", "retry_after_ms": 300}}'
        held = b'{"error": {"code": "lock_held", "message": "held"}}'
        bodies = [unavailable, held]

        def answer(step):
            name = type(step).__name__
            if name == "Send":
                return Closable(503 if len(bodies) == 2 else 409, {"Retry-After": "2"})
            return {"Connect": Closable(), "ReadBody": bodies[0] if name != "ReadBody" else bodies.pop(0), "Sleep": None}[name]

        script = Script(answer)
        with self.assertRaises(lockbroker.LockHeld) as caught:
            script.run(Exchange(options()).call(LOCKS.status("k")))
        self.assertEqual(script.verbs(), ["Connect", "Send", "ReadBody", "Sleep", "Connect", "Send", "ReadBody"])
        self.assertGreaterEqual(script.steps[3].seconds, 0.3, "the hint is waited out")
        self.assertEqual(caught.exception.retry_after_ms, 2000, "Retry-After stands in for a missing hint")

    def test_a_deadline_that_has_passed_sends_nothing(self):
        script = Script(lambda step: self.fail(f"no step: {step}"))
        with lockbroker.deadline(0.0), self.assertRaises(lockbroker.DeadlineExceeded):
            script.run(Exchange(options()).call(LOCKS.status("k")))

    def test_an_interrupted_send_closes_its_connection_and_passes_on(self):
        connection = Closable()

        def answer(step):
            if type(step).__name__ == "Send":
                raise KeyboardInterrupt
            return connection

        with self.assertRaises(KeyboardInterrupt):
            Script(answer).run(Exchange(options()).call(LOCKS.status("k")))
        self.assertTrue(connection.closed)


# -- the guarded acquire ----------------------------------------------------------------


class Acquiring(unittest.TestCase):
    def hold(self, answer, owner=None):
        calls, made = Calls(answer), []

        def make(grant_, ttl, sent):
            made.append((grant_, ttl, sent))
            return "held"

        plan = acquiring.hold(calls, LOCKS, "k", 30.0, 5.0, owner, 0, {}, make)
        return calls, made, plan

    def test_a_grant_is_made_into_the_handle(self):
        before = time.monotonic()
        calls, made, plan = self.hold(lambda call: grant(owner_of(call)))
        self.assertEqual(Runner().run(plan), "held")
        (got, ttl, sent), = made
        self.assertEqual((got.token, ttl), (7, 30.0))
        self.assertTrue(before <= sent <= time.monotonic(), "confirmed from when the acquire was sent")
        self.assertEqual(calls.paths(), ["POST /v1/locks/k/acquire"])

    def test_an_interrupted_acquire_gives_back_what_was_granted_and_passes_on(self):
        owners = []

        def answer(call):
            if call.path.endswith("/acquire"):
                owners.append(owner_of(call))
                raise KeyboardInterrupt  # the answer never seen
            if call.method == "GET":
                return status(owners[0], 7)
            self.assertEqual(json.loads(call.payload()), {"owner": owners[0], "token": 7})
            return lockbroker.Released(released=True, hold_count=0)

        calls, made, plan = self.hold(answer)
        with self.assertRaises(KeyboardInterrupt):
            Runner().run(plan)
        self.assertEqual(calls.paths(), ["POST /v1/locks/k/acquire", "GET /v1/locks/k", "POST /v1/locks/k/release"])
        self.assertIsNotNone(calls.sent[1].deadline, "the give-back has a deadline of its own")
        self.assertEqual(made, [])

    def test_outcome_unknown_looks_the_key_up_and_leaves_what_is_not_its_own(self):
        def answer(call):
            if call.path.endswith("/acquire"):
                raise lockbroker.OutcomeUnknown(None, "outcome_unknown", "reset")
            return status("someone-else", 3)

        calls, _, plan = self.hold(answer)
        with self.assertRaises(lockbroker.OutcomeUnknown):
            Runner().run(plan)
        self.assertEqual(calls.paths(), ["POST /v1/locks/k/acquire", "GET /v1/locks/k"])

    def test_with_the_callers_owner_nothing_is_given_back(self):
        def answer(call):
            raise KeyboardInterrupt

        calls, _, plan = self.hold(answer, owner="mine")
        with self.assertRaises(KeyboardInterrupt):
            Runner().run(plan)
        self.assertEqual(calls.paths(), ["POST /v1/locks/k/acquire"])

    def test_a_give_back_that_fails_is_logged_and_the_interruption_passes(self):
        def answer(call):
            if call.path.endswith("/acquire"):
                raise KeyboardInterrupt
            raise lockbroker.Unavailable(503, "unavailable", "down")

        _, _, plan = self.hold(answer)
        with self.assertLogs("lockbroker", "WARNING") as logged, self.assertRaises(KeyboardInterrupt):
            Runner().run(plan)
        self.assertIn("could not find out whether lock 'k' was granted", logged.output[0])

    def test_a_wrong_field_raises_before_anything_is_sent(self):
        calls = Calls(lambda call: self.fail("sent"))
        with self.assertRaises(TypeError):
            Runner().run(acquiring.hold(calls, LOCKS, "k", 30.0, 5.0, None, 0, {"permits": 2}, lambda *a: None))
        self.assertEqual(calls.sent, [])

    def test_try_gives_none_when_busy(self):
        def held(call):
            raise lockbroker.LockHeld(409, "lock_held", "held")

        _, _, plan = self.hold(held)
        self.assertIsNone(Runner().run(acquiring.trying(plan)))

    def test_a_cancelled_task_gives_back_too(self):
        owners, entered = [], []

        async def answer(call):
            if call.path.endswith("/acquire"):
                owners.append(owner_of(call))
                entered.append(True)
                await asyncio.sleep(60)  # waiting in the queue when cancelled
            if call.method == "GET":
                return status(owners[0], 7)
            return lockbroker.Released(released=True, hold_count=0)

        calls = Calls(answer)

        async def main():
            task = asyncio.ensure_future(AsyncRunner().run(acquiring.hold(calls, LOCKS, "k", 30.0, 5.0, None, 0, {}, lambda *a: "held")))
            while not entered:
                await asyncio.sleep(0)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task

        asyncio.run(main())
        self.assertEqual(calls.paths(), ["POST /v1/locks/k/acquire", "GET /v1/locks/k", "POST /v1/locks/k/release"])

    def test_an_interrupted_multi_lock_gives_back_the_keys_it_holds(self):
        owners = []

        def answer(call):
            if call.path.endswith("/acquire"):
                owners.append(owner_of(call))
                raise KeyboardInterrupt
            if call.method == "GET":
                key = call.path.rsplit("/", 1)[1]
                return LockStatus.from_json({"key": key, "held": True, "owner": owners[0] if key == "a" else "other", "token": 4})
            self.assertEqual(json.loads(call.payload())["locks"], [{"key": "a", "token": 4}])
            return []

        calls = Calls(answer)
        with self.assertRaises(KeyboardInterrupt):
            Runner().run(acquiring.hold_multi(calls, ["a", "b"], 30.0, 5.0, None, lambda *a: None))
        self.assertEqual(
            calls.paths(),
            ["POST /v1/multilock/acquire", "GET /v1/locks/a", "GET /v1/locks/b", "POST /v1/multilock/release"],
        )


# -- the renewal loop ------------------------------------------------------------------


class FakeTime:
    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


class Stop(Exception):
    pass


class Renewing(unittest.TestCase):
    """``renewing.Renewals`` on a fake clock: each sleep moves it on, each renewal is scripted."""

    def keep(self, renew, ttl=3.0, sleeps=50):
        clock_now = FakeTime(100.0)
        calls, lost = [], _Flag()

        def renewal(read_timeout, deadline):
            calls.append((clock_now.now, read_timeout, deadline))
            return renew(len(calls))

        renewals = Renewals(renewal, LeaseClock(ttl, 100.0, timeout=10.0, backoff=0.1), lost, "lock 'k'")

        class Clocked(Runner):
            def do_sleep(self, step):
                if len(slept) == sleeps:
                    raise Stop
                slept.append(step.seconds)
                clock_now.now += step.seconds

        slept: List[float] = []
        with mock.patch("lockbroker.renewing.time", clock_now):
            try:
                Clocked().run(renewals._keep())
            except Stop:
                pass
        return renewals, calls, lost

    def test_renewed_a_third_of_the_ttl_after_each_confirmed_send(self):
        renewals, calls, lost = self.keep(lambda n: None, sleeps=3)
        self.assertEqual([at for at, _, _ in calls], [101.0, 102.0, 103.0])
        at, read_timeout, deadline = calls[0]
        self.assertAlmostEqual(read_timeout, 1.7, msg="until lost_at (a tenth of the TTL before it ends)")
        self.assertAlmostEqual(deadline, at + read_timeout)
        self.assertEqual((renewals.renewals, lost.set_), (3, False))

    def test_a_refusal_loses_the_lease_at_once(self):
        def refuse(n):
            raise lockbroker.LeaseLost(409, "lease_lost", "gone")

        with self.assertLogs("lockbroker", "WARNING"):
            renewals, calls, lost = self.keep(refuse)
        self.assertEqual(len(calls), 1)
        self.assertTrue(lost.set_)
        self.assertIsInstance(renewals.last_error, lockbroker.LeaseLost)

    def test_transient_failures_are_retried_until_the_lease_would_be_lost(self):
        def unavailable(n):
            raise lockbroker.Unavailable(503, "unavailable", "down")

        with self.assertLogs("lockbroker", "WARNING"):
            renewals, calls, lost = self.keep(unavailable)
        self.assertGreater(len(calls), 2, "retried")
        self.assertLess(calls[-1][0], 102.7, "none sent past lost_at")
        self.assertTrue(lost.set_)
        self.assertIsInstance(renewals.last_error, lockbroker.Unavailable)

    def test_a_transient_failure_that_passes_keeps_the_lease(self):
        def flaky(n):
            if n % 2:
                raise lockbroker.Unreachable(None, "unreachable", "reset")

        renewals, _, lost = self.keep(flaky, sleeps=8)
        self.assertEqual((renewals.renewals, lost.set_), (4, False))


class _Flag:
    set_ = False

    def set(self) -> None:
        self.set_ = True

    def is_set(self) -> bool:
        return self.set_


# -- the resuming streams ---------------------------------------------------------------


class Streams(unittest.TestCase):
    def feed(self, bodies, stream_type=EventFeed, **kw):
        """A stream over scripted responses: each a list of lines (``b""`` ends it)."""
        responses = [Lines(lines) for lines in bodies]
        opened = []

        def open_(call):
            opened.append(call)
            if not responses:
                raise lockbroker.Unreachable(None, "unreachable", "refused")
            return responses.pop(0)

        calls = Calls(open_)
        script = Script(lambda step: step.response.readline() if type(step).__name__ == "ReadLine" else None)
        if stream_type is EventFeed:
            stream = EventFeed(calls, "p/", kw.get("after"), kw.get("timeout", 10.0), 5.0)
        else:
            stream = LeaderWatch(calls, "e", kw.get("timeout", 10.0), 5.0)
        return stream, script, opened

    def test_the_event_stream_resumes_after_the_last_id(self):
        granted = [b"id: 5\n", b"event: granted\n", b'data: {"id": 5, "token": 9}\n', b"\n", b""]
        released = [b"id: 6\n", b"event: released\n", b'data: {"id": 6, "token": 9}\n', b"\n"]
        stream, script, opened = self.feed([granted, released], after=3)
        got = [script.run(stream._next()) for _ in range(2)]
        self.assertEqual([(e.event, e.id) for e in got], [("granted", 5), ("released", 6)])
        self.assertEqual([c.headers.get("Last-Event-ID") for c in opened], ["3", "5"])
        self.assertEqual((stream.last_id, stream.reconnects), (6, 1))
        self.assertNotIn("Sleep", script.verbs(), "a first break reconnects at once")

    def test_a_stream_that_keeps_ending_is_given_the_backoff(self):
        event = [b"event: reset\n", b"data: {}\n", b"\n"]
        stream, script, _ = self.feed([[b""], [b""], [b""], event])
        self.assertEqual(script.run(stream._next()).event, "reset")
        sleeps = [s.seconds for s in script.steps if type(s).__name__ == "Sleep"]
        self.assertEqual(len(sleeps), 2, "from the second break on")
        self.assertTrue(0.05 <= sleeps[0] <= 0.1 and 0.1 <= sleeps[1] <= 0.2)

    def test_failing_to_connect_raises_unless_the_stream_is_over(self):
        stream, script, _ = self.feed([])
        with self.assertRaises(lockbroker.Unreachable):
            script.run(stream._next())
        stream, script, _ = self.feed([[b""]], timeout=0.0)
        self.assertIsNone(script.run(stream._next()), "past its timeout: it ends")

    def test_observe_gives_each_leader_once_across_reconnects(self):
        vacant = [b"event: leader\n", b'data: {"name": "e", "leader": null, "term": null}\n', b"\n"]
        led = [b"event: leader\n", b'data: {"name": "e", "leader": "a", "term": 1}\n', b"\n"]
        watch, script, opened = self.feed([vacant + led + [b""], led + [b""]], stream_type=LeaderWatch)
        seen = [script.run(watch._next()) for _ in range(2)]
        self.assertEqual([(s.leader, s.term) for s in seen], [(None, None), ("a", 1)])
        with self.assertRaises(lockbroker.Unreachable):  # the third connection is refused
            script.run(watch._next())
        self.assertEqual(len(opened), 3, "the repeated leader of the second stream is not given again")

    def test_observe_ends_quietly_at_the_callers_deadline(self):
        calls = Calls(lambda call: (_ for _ in ()).throw(lockbroker.DeadlineExceeded(None, "deadline_exceeded", "passed")))
        watch = LeaderWatch(calls, "e", None, 5.0)
        self.assertEqual(list(Runner().iterate(watch.each())), [])


# -- the listing ---------------------------------------------------------------------------


class Listing(unittest.TestCase):
    def test_pages_are_asked_for_as_they_are_needed_and_no_more_than_the_limit(self):
        pages = [([1, 2], "c1"), ([3, 4], "c2"), ([5], None)]
        calls = Calls(lambda call: pages.pop(0))
        items = Runner().iterate(listing.pages(calls, LOCKS, "p", 3, 2))
        self.assertEqual(next(items), 1)
        self.assertEqual(len(calls.sent), 1)
        self.assertEqual(list(items), [2, 3])
        self.assertEqual([c.path for c in calls.sent], ["/v1/locks?prefix=p&limit=2", "/v1/locks?prefix=p&limit=1&cursor=c1"])


if __name__ == "__main__":
    unittest.main()
