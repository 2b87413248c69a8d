"""The client's pure parts: the renewal thread's rules, the event-stream
reader, time parsing, the retry and lease-clock rules, options, and the async
client's HTTP reading, without a broker (the shared plans: ``test_plans.py``)."""

import asyncio
import json
import threading
import time
import unittest
from datetime import datetime, timezone

import lockbroker
from lockbroker.errors import error_for
from lockbroker.models import parse_time
from lockbroker.clock import LeaseClock
from lockbroker.renewal import Renewer
from lockbroker.running import Runner
from lockbroker.sse import MAX_EVENT_LINES, Messages
from lockbroker.steps import Broke


def renewer(renew, ttl, lost):
    clock = LeaseClock(ttl, time.monotonic(), timeout=5.0, backoff=0.01)
    return Renewer(lambda timeout, deadline: renew(timeout), clock, lost, what="test").start()


class Renewal(unittest.TestCase):
    def test_renews_every_third_of_the_ttl(self):
        calls = []
        lost = threading.Event()
        r = renewer(lambda timeout: calls.append(time.monotonic()), 0.6, lost)
        self.addCleanup(r.stop)
        deadline = time.monotonic() + 5
        while len(calls) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        r.stop()
        self.assertGreaterEqual(len(calls), 4)
        gaps = [b - a for a, b in zip(calls, calls[1:])]
        self.assertTrue(all(0.15 <= g <= 0.5 for g in gaps), f"every 0.2 s: {gaps}")
        self.assertFalse(lost.is_set())

    def test_a_refusal_loses_the_lease_at_once(self):
        lost = threading.Event()

        def refuse(timeout):
            raise lockbroker.LeaseLost(409, "lease_lost", "gone")

        started = time.monotonic()
        r = renewer(refuse, 3.0, lost)
        self.addCleanup(r.stop)
        self.assertTrue(lost.wait(5))
        self.assertLess(time.monotonic() - started, 2.0, "at the first renewal (1 s), not at the deadline (3 s)")
        self.assertIsInstance(r.last_error, lockbroker.LeaseLost)

    def test_transient_failures_are_retried_until_the_deadline_then_lost(self):
        lost = threading.Event()
        calls = []

        def unavailable(timeout):
            calls.append(time.monotonic())
            raise lockbroker.Unavailable(503, "unavailable", "down")

        started = time.monotonic()
        r = renewer(unavailable, 1.2, lost)
        self.addCleanup(r.stop)
        self.assertTrue(lost.wait(5))
        at = time.monotonic() - started
        self.assertLessEqual(at, 1.2 + 0.4, "lost by the deadline (the TTL after the grant was asked)")
        self.assertGreaterEqual(at, 0.4, "not before the first renewal was due")
        self.assertGreater(len(calls), 1, "retried before giving up")

    def test_a_transient_failure_that_passes_keeps_the_lease(self):
        lost = threading.Event()
        calls = []

        def flaky(timeout):
            calls.append(time.monotonic())
            if len(calls) % 2 == 1:
                raise lockbroker.Unreachable(None, "unreachable", "reset")

        r = renewer(flaky, 0.3, lost)
        self.addCleanup(r.stop)
        deadline = time.monotonic() + 5
        while r.renewals < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        r.stop()
        self.assertGreaterEqual(r.renewals, 4)
        self.assertFalse(lost.is_set())

    def test_stop_does_not_count_as_lost(self):
        lost = threading.Event()
        r = renewer(lambda timeout: None, 0.3, lost)
        r.stop()
        self.assertFalse(lost.is_set())


def read_events(lines):
    """The events the shared reader (``sse.Messages``) makes of ``lines``, walked by the sync runner;
    an exception in ``lines`` is what the read raises."""
    script = iter(lines)

    class Lines(Runner):
        def do_read_line(self, step):
            line = next(script)
            if isinstance(line, BaseException):
                raise line
            return line

    messages = Messages(response=None, end=None, idle_timeout=5.0, what="the test stream")
    runner, got = Lines(), []
    while True:
        message = runner.run(messages.next())
        if message is None:
            return got
        got.append(message)


class EventStream(unittest.TestCase):
    def test_events_comments_and_multi_line_data(self):
        lines = [
            b": keep-alive\n",
            b"\n",
            b"event: leader\n",
            b'data: {"leader": "a",\n',
            b'data:  "term": 1}\n',
            b"\n",
            b"event: leader\r\n",
            b'data: {"leader": null}\r\n',
            b"\r\n",
            b"event: leader\n",
            b'data: {"leader": "cut off"}\n',
            b"",
        ]
        got = read_events(lines)
        self.assertEqual(got, [("leader", {"leader": "a", "term": 1}, None), ("leader", {"leader": None}, None)])

    def test_an_id_holds_until_the_next_one(self):
        lines = [b"id: 7\n", b"event: granted\n", b'data: {"token": 1}\n', b"\n",
                 b"event: reset\n", b"data: {}\n", b"\n",
                 b"id: 9\n", b"data: {}\n", b"\n", b""]
        self.assertEqual([(m.event, m.id) for m in read_events(lines)], [("granted", "7"), ("reset", "7"), ("message", "9")])

    def test_silence_and_a_break_are_unreachable(self):
        with self.assertRaises(lockbroker.Unreachable) as caught:
            read_events([b"event: leader\n", Broke(TimeoutError("timed out"), timed_out=True)])
        self.assertIn("nothing for 5.0 s on the test stream", str(caught.exception))
        with self.assertRaises(lockbroker.Unreachable) as caught:
            read_events([Broke(ConnectionResetError("reset by peer"), timed_out=False)])
        self.assertIn("the test stream broke: reset by peer", str(caught.exception))

    def test_an_endless_event_is_not_an_event_stream(self):
        with self.assertRaises(ValueError):
            read_events([b"data: 1\n"] * (MAX_EVENT_LINES + 1))


class Times(unittest.TestCase):
    def test_broker_times_parse_to_utc(self):
        self.assertEqual(
            parse_time("2026-11-21T10:00:00.5Z"), datetime(2026, 11, 21, 10, 0, 0, 500000, tzinfo=timezone.utc)
        )
        self.assertEqual(parse_time("2026-11-21T10:00:00Z").tzinfo, timezone.utc)
        self.assertEqual(parse_time("2026-11-21T10:00:00.123456789Z").microsecond, 123456)
        self.assertIsNone(parse_time(None))

class ErrorMapping(unittest.TestCase):
    """Codes pick the exception class; a code a newer broker added still
    raises a LockbrokerError that keeps the code, by its status if known."""

    def test_known_codes_get_their_class(self):
        e = error_for(409, "lock_held", "held", 120)
        self.assertIsInstance(e, lockbroker.LockHeld)
        self.assertEqual((e.code, e.retry_after_ms), ("lock_held", 120))

    def test_an_unknown_code_with_a_known_status_keeps_its_code(self):
        e = error_for(429, "from_a_newer_broker", "over quota")
        self.assertIsInstance(e, lockbroker.LockbrokerError)
        self.assertIsInstance(e, lockbroker.TooManyWaiters)
        self.assertEqual((e.status, e.code, e.message), (429, "from_a_newer_broker", "over quota"))
        self.assertIsInstance(error_for(429, "quota_exceeded", "q"), lockbroker.QuotaExceeded)
        self.assertIsInstance(error_for(429, "rate_limited", "r", 40), lockbroker.RateLimited)

    def test_too_many_streams_is_a_too_many_waiters(self):
        e = error_for(429, "too_many_streams", "16 open")
        self.assertIsInstance(e, lockbroker.TooManyStreams)
        self.assertIsInstance(e, lockbroker.TooManyWaiters)

    def test_a_deadlock_carries_its_cycle_and_is_not_retried(self):
        from lockbroker.retry import retryable_answer
        from lockbroker.wire import error_from

        step = {"session": "s-b", "owner": "b", "kind": "lock", "storage_key": "k1", "newer": 1}
        raw = b'{"error": {"code": "deadlock", "message": "cycle", "cycle": [%s, 7]}}' % json.dumps(step).encode()
        e = error_from(409, raw, None)
        self.assertIsInstance(e, lockbroker.DeadlockError)
        self.assertIsInstance(e, lockbroker.Busy)
        self.assertNotIsInstance(e, lockbroker.LockHeld)
        self.assertEqual((e.status, e.code, e.message), (409, "deadlock", "cycle"))
        self.assertEqual(e.cycle, [lockbroker.CycleStep("s-b", "b", "lock", "k1")], "unknown fields and non-objects skipped")
        self.assertFalse(retryable_answer(e))
        self.assertEqual(error_for(409, "deadlock", "no cycle sent").cycle, [])

    def test_an_unknown_code_and_status_is_the_base_class(self):
        e = error_for(418, "teapot", "short and stout")
        self.assertIs(type(e), lockbroker.LockbrokerError)
        self.assertEqual(e.code, "teapot")
        self.assertIn("teapot", str(e))


class KindFields(unittest.TestCase):
    """Each kind asks for its own fields before anything is sent (the URL leads nowhere)."""

    def test_a_kind_takes_its_own_fields_and_no_others(self):
        c = lockbroker.Client("http://127.0.0.1:1", "k", retries=0)
        with self.assertRaises(TypeError):
            c.semaphores.acquire("k", "me")  # no permits
        with self.assertRaises(TypeError):
            c.locks.acquire("k", "me", permits=2)
        with self.assertRaises(TypeError):
            c.semaphores.release("k", "me", 1)  # no slot
        with self.assertRaises(TypeError):
            c.locks.renew("k", "me", 1, slot=0)
        with self.assertRaises(ValueError):
            c.rwlocks.acquire("k", "me", mode="upgrade")


class RetryRules(unittest.TestCase):
    """``retry.RetryPolicy``: what both clients wait before trying again, and when they stop."""

    def policy(self, retries=4):
        from lockbroker.retry import RetryPolicy

        return RetryPolicy(retries, backoff=0.1, max_backoff=1.0)

    def test_the_hint_is_waited_out_and_the_budget_spent(self):
        limited = error_for(429, "rate_limited", "slow down", 400)
        self.assertGreaterEqual(self.policy().delay(limited, 1, 0.0, None), 0.4)
        with self.assertRaises(lockbroker.RateLimited):
            self.policy(retries=2).delay(limited, 3, 0.0, None)

    def test_no_retry_ends_past_the_deadline(self):
        limited = error_for(429, "rate_limited", "slow down", 400)
        with self.assertRaises(lockbroker.RateLimited) as caught:
            self.policy().delay(limited, 1, now=10.0, deadline=10.3)
        self.assertEqual(caught.exception.retry_after_ms, 400, "raised with its hint")
        unavailable = error_for(503, "unavailable", "down")
        self.assertLess(self.policy().delay(unavailable, 1, now=10.0, deadline=10.3), 0.3)

    def test_a_429_hint_past_the_longest_wait_is_not_slept(self):
        from lockbroker.retry import MAX_RETRY_AFTER

        quota = error_for(429, "quota_exceeded", "max_held", int(MAX_RETRY_AFTER * 1000) + 1)
        with self.assertRaises(lockbroker.QuotaExceeded):
            self.policy().delay(quota, 1, 0.0, None)

    def test_which_answers_are_retried(self):
        from lockbroker.retry import retryable_answer

        retried = [(503, "unavailable"), (429, "rate_limited"), (429, "quota_exceeded")]
        final = [(429, "too_many_waiters"), (429, "too_many_streams"), (409, "lock_held"), (400, "bad_request")]
        self.assertTrue(all(retryable_answer(error_for(s, c, "")) for s, c in retried))
        self.assertFalse(any(retryable_answer(error_for(s, c, "")) for s, c in final))


class Wire(unittest.TestCase):
    def test_retry_after_stands_in_for_a_missing_hint(self):
        from email.utils import format_datetime
        from datetime import timedelta

        from lockbroker.wire import error_from, retry_after_header_ms

        self.assertEqual(error_from(429, b'{"error": {"code": "rate_limited", "message": ""}}', "2").retry_after_ms, 2000)
        self.assertEqual(error_from(429, b'{"error": {"code": "rate_limited", "retry_after_ms": 7}}', "2").retry_after_ms, 7)
        in_a_minute = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=60), usegmt=True)
        self.assertTrue(55_000 <= retry_after_header_ms(in_a_minute) <= 60_000)
        self.assertIsNone(retry_after_header_ms("soon"))

    def test_a_waiting_acquire_waits_no_longer_than_the_deadline(self):
        from lockbroker.deadlines import ANSWER_GRACE
        from lockbroker.wire import waiting_body

        body, ends = waiting_body({"wait_ms": 10_000}, 10.0)
        self.assertEqual(body()["wait_ms"], 10_000, "no deadline: the whole wait")
        with lockbroker.deadline(1.0) as until:
            body, ends = waiting_body({"wait_ms": 10_000}, 10.0)
        self.assertAlmostEqual(ends, until - ANSWER_GRACE, delta=0.01)
        self.assertLessEqual(body()["wait_ms"], 1000 - ANSWER_GRACE * 1000)

    def test_deadlines_nest_to_the_sooner(self):
        from lockbroker.deadlines import current

        self.assertIsNone(current())
        with lockbroker.deadline(1.0) as outer:
            with lockbroker.deadline(60.0) as inner:
                self.assertEqual(inner, outer)
                self.assertEqual(current(), outer)
        self.assertIsNone(current())


class LeaseTimes(unittest.TestCase):
    """``clock.LeaseClock``: renew at a third, lost a tenth of the TTL before it could end."""

    def test_the_schedule_follows_the_last_confirmed_send(self):
        clock = LeaseClock(ttl=3.0, confirmed_at=100.0, timeout=10.0, backoff=0.1)
        self.assertEqual((clock.next_renewal, clock.held_until), (101.0, 103.0))
        self.assertAlmostEqual(clock.lost_at, 102.7)
        self.assertAlmostEqual(clock.read_timeout(101.0), 1.7, msg="a renewal may take until lost_at")
        clock.confirmed(101.0)
        self.assertEqual((clock.next_renewal, clock.held_until), (102.0, 104.0))

    def test_a_retry_past_lost_at_gives_up(self):
        clock = LeaseClock(ttl=3.0, confirmed_at=100.0, timeout=10.0, backoff=0.1)
        unavailable = error_for(503, "unavailable", "down", 500)
        self.assertIsNone(clock.retry_delay(1, unavailable, now=102.5))
        self.assertGreaterEqual(clock.retry_delay(1, unavailable, now=101.0), 0.5, "the hint is honoured")


class Options(unittest.TestCase):
    def test_tls_settings_come_from_the_environment_for_https_only(self):
        import os
        from unittest import mock

        from lockbroker.options import Options as Built

        def build(url):
            return Built.build(url, "k", 10.0, 0, 0.1, 1.0)

        with mock.patch.dict(os.environ, {"LOCKBROKER_CA_FILE": "/nonexistent/ca.pem"}):
            self.assertIsNone(build("http://127.0.0.1:1").ssl, "plain HTTP ignores them")
            with self.assertRaises(ValueError):
                build("https://127.0.0.1:1")
        with mock.patch.dict(os.environ, {"LOCKBROKER_CLIENT_KEY": "/some/key.pem"}):
            with self.assertRaises(ValueError):
                build("https://127.0.0.1:1")
        self.assertIsNotNone(build("https://127.0.0.1:1").ssl, "the system's CAs by default")
        self.assertEqual(build("https://[::1]/p/").host_header, "[::1]:443")


class AsyncHttp(unittest.IsolatedAsyncioTestCase):
    """``aio/http.py``'s reading of answers, from bytes as a broker sends them."""

    async def answer(self, raw):
        from lockbroker.aio import http

        reader = asyncio.StreamReader()
        reader.feed_data(raw)
        reader.feed_eof()
        head = await reader.readuntil(b"\r\n\r\n")
        status, headers = http._parse_head(head)
        return status, headers, http._Body(reader, headers)

    async def test_a_chunked_stream_is_read_line_by_line(self):
        raw = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"7\r\nevent: \r\n11\r\nleader\ndata: {}\n\n\r\n0\r\n\r\n")
        status, headers, body = await self.answer(raw)
        self.assertEqual((status, headers["content-type"]), (200, "text/event-stream"))
        lines = [await body.readline() for _ in range(4)]
        self.assertEqual(lines, [b"event: leader\n", b"data: {}\n", b"\n", b""])

    async def test_a_body_by_its_length_and_one_cut_short(self):
        status, headers, body = await self.answer(b"HTTP/1.1 409 Conflict\r\ncontent-length: 4\r\nRetry-After: 1\r\n\r\n{}{}extra")
        self.assertEqual((status, headers["retry-after"], await body.read()), (409, "1", b"{}{}"))
        _, _, body = await self.answer(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}")
        with self.assertRaises(asyncio.IncompleteReadError):
            await body.read()

    async def test_not_http_is_a_bad_answer(self):
        from lockbroker.aio.http import BadAnswer

        with self.assertRaises(BadAnswer):
            await self.answer(b"SSH-2.0-OpenSSH\r\n\r\n")


if __name__ == "__main__":
    unittest.main()
