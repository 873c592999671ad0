"""BudgetTransport and AsyncBudgetTransport against httpx.MockTransport, on the virtual clock."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from tenacity_budget import BackoffPolicy, BudgetExhausted, StopReason, deadline_scope, remaining
from tenacity_budget.httpx import (
    REPORT_EXTENSION,
    AsyncBudgetTransport,
    BudgetTransport,
    exhaustion_report,
)
from tenacity_budget.retry_budget import RetryBudget
from tenacity_budget.testing import VirtualClock

URL = "http://service.test/items/1"
HEADER = "x-request-timeout-ms"

# 1, 2, 4, 4 s of backoff: four retries in a 12 s budget.
POLICY = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=12, jitter="none")


class Tracked(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A response body that records whether it was read and whether it was closed."""

    def __init__(self, body: bytes = b"body") -> None:
        self.body = body
        self.read = False
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        self.read = True
        yield self.body

    async def __aiter__(self) -> AsyncIterator[bytes]:
        self.read = True
        yield self.body

    @property
    def fate(self) -> str:
        """``discarded`` (closed unread), ``delivered`` (read by the client) or ``open``."""
        if self.read:
            return "delivered"
        return "discarded" if self.closed else "open"

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.closed = True


class Server:
    """A scripted MockTransport handler: one entry per attempt, recording what it got."""

    def __init__(self, *script: int | tuple[int, dict[str, str]] | BaseException) -> None:
        self.script = list(script)
        self.requests: list[httpx.Request] = []
        self.headers: list[str | None] = []
        self.timeouts: list[dict[str, float | None]] = []
        self.left: list[float | None] = []
        self.bodies: list[Tracked] = []
        self.advance: Callable[[], None] | None = None

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        self.headers.append(request.headers.get(HEADER))
        self.timeouts.append(dict(request.extensions.get("timeout", {})))
        self.left.append(remaining())
        if self.advance is not None:
            self.advance()
        step = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(step, BaseException):
            raise step
        status, headers = step if isinstance(step, tuple) else (step, {})
        body = Tracked(f"attempt {len(self.requests)}".encode())
        self.bodies.append(body)
        return httpx.Response(status, headers=headers, stream=body)


def sync_client(server: Server, policy: BackoffPolicy = POLICY, **options: Any) -> httpx.Client:
    transport = BudgetTransport(policy, transport=httpx.MockTransport(server), **options)
    return httpx.Client(transport=transport)


def async_client(server: Any, policy: BackoffPolicy = POLICY, **options: Any) -> httpx.AsyncClient:
    transport = AsyncBudgetTransport(policy, transport=httpx.MockTransport(server), **options)
    return httpx.AsyncClient(transport=transport)


# -- success, and what each attempt carries ------------------------------------------------


def test_a_success_is_sent_once_with_the_time_left(virtual_clock: VirtualClock) -> None:
    server = Server(200)
    with sync_client(server) as client:
        response = client.get(URL)
    assert response.status_code == 200
    assert response.text == "attempt 1"
    assert server.headers == ["12000"]
    assert exhaustion_report(response) is None
    assert virtual_clock.sleeps == []


def test_the_wrapped_transport_sees_the_time_left_of_each_attempt(
    virtual_clock: VirtualClock,
) -> None:
    # remaining() inside the wrapped transport (a handler, an app served in-process) is the
    # time the attempt was given, as the header says.
    server = Server(503, 200)
    with sync_client(server) as client:
        client.get(URL)
    assert server.left == [12.0, 11.0]


async def test_async_the_wrapped_transport_sees_the_time_left_of_each_attempt(
    virtual_clock: VirtualClock,
) -> None:
    server = Server(503, 200)
    async with async_client(server) as client:
        await client.get(URL)
    assert server.left == [12.0, 11.0]


def test_retries_a_retryable_status_then_succeeds(virtual_clock: VirtualClock) -> None:
    server = Server(503, 502, 200)
    with sync_client(server) as client:
        response = client.get(URL)
    assert response.status_code == 200
    assert response.text == "attempt 3"
    assert virtual_clock.sleeps == [1.0, 2.0]
    # The header counts down with the run: whole milliseconds, rounded down.
    assert server.headers == ["12000", "11000", "9000"]
    # The discarded responses were closed unread, the returned one reached the client.
    assert [body.fate for body in server.bodies] == ["discarded", "discarded", "delivered"]


def test_every_timeout_phase_is_bounded_by_the_time_left(virtual_clock: VirtualClock) -> None:
    server = Server(503, 503, 503, 200)
    timeout = httpx.Timeout(connect=10.0, read=5.0, write=None, pool=30.0)
    with sync_client(server) as client:
        client.get(URL, timeout=timeout)
    # 12 s left, then 11, 9, 5: each phase is the request's own or the time left, if less.
    assert server.timeouts == [
        {"connect": 10.0, "read": 5.0, "write": 12.0, "pool": 12.0},
        {"connect": 10.0, "read": 5.0, "write": 11.0, "pool": 11.0},
        {"connect": 9.0, "read": 5.0, "write": 9.0, "pool": 9.0},
        {"connect": 5.0, "read": 5.0, "write": 5.0, "pool": 5.0},
    ]


def test_timeouts_within_the_time_left_are_the_requests_own(virtual_clock: VirtualClock) -> None:
    server = Server(503, 200)
    with deadline_scope(4.0), sync_client(server) as client:
        client.get(URL, timeout=3.0)
    # 4 s left, then 3 s: the second attempt's phases are bounded by what is left.
    assert server.timeouts == [
        {"connect": 3.0, "read": 3.0, "write": 3.0, "pool": 3.0},
        {"connect": 3.0, "read": 3.0, "write": 3.0, "pool": 3.0},
    ]
    assert server.left == [4.0, 3.0]


async def test_async_only_the_pool_wait_ends_before_the_time_left(
    virtual_clock: VirtualClock,
) -> None:
    server = Server(200)
    async with async_client(server) as client:
        await client.get(URL, timeout=httpx.Timeout(20.0, pool=1.0))
        await client.get(URL, timeout=20.0)
    assert server.timeouts == [
        {"connect": 20.0, "read": 20.0, "write": 20.0, "pool": 1.0},
        {"connect": 20.0, "read": 20.0, "write": 20.0, "pool": 12.0 - 0.02},
    ]


def test_no_timeout_at_all_becomes_the_time_left(virtual_clock: VirtualClock) -> None:
    server = Server(200)
    with sync_client(server) as client:
        client.get(URL, timeout=None)
    assert server.timeouts == [{"connect": 12.0, "read": 12.0, "write": 12.0, "pool": 12.0}]


def test_a_request_body_is_sent_again_on_each_attempt(virtual_clock: VirtualClock) -> None:
    server = Server(503, 200)
    with sync_client(server) as client:
        assert client.put(URL, content=b"payload").status_code == 200
    assert [request.content for request in server.requests] == [b"payload", b"payload"]


def test_a_one_shot_body_is_sent_once(virtual_clock: VirtualClock) -> None:
    server = Server(503)
    with sync_client(server) as client:
        response = client.put(URL, content=iter([b"chunk-1", b"chunk-2"]))
    assert response.status_code == 503
    # Issue 15: not retried, and the report says why (it said nothing before).
    report = exhaustion_report(response)
    assert report is not None
    assert report.reason is StopReason.NOT_REPLAYABLE
    assert report.attempts == 1
    assert len(server.requests) == 1


async def test_async_a_one_shot_body_is_sent_once(virtual_clock: VirtualClock) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"chunk"

    server = Server(503)
    async with async_client(server) as client:
        response = await client.put(URL, content=chunks())
    assert response.status_code == 503
    report = exhaustion_report(response)
    assert report is not None
    assert report.reason is StopReason.NOT_REPLAYABLE
    assert len(server.requests) == 1


# -- Retry-After ---------------------------------------------------------------------------


def test_retry_after_seconds_replaces_the_backoff(virtual_clock: VirtualClock) -> None:
    server = Server((429, {"Retry-After": "3"}), (503, {"Retry-After": " 0 "}), 200)
    with sync_client(server) as client:
        assert client.get(URL).status_code == 200
    assert virtual_clock.sleeps == [3.0, 0.0]


def test_retry_after_as_an_http_date(virtual_clock: VirtualClock) -> None:
    when = format_datetime(virtual_clock.now() + timedelta(seconds=5), usegmt=True)
    server = Server((503, {"Retry-After": when}), 200)
    with sync_client(server) as client:
        assert client.get(URL).status_code == 200
    assert virtual_clock.sleeps == [5.0]


def test_a_malformed_retry_after_falls_back_to_the_backoff(virtual_clock: VirtualClock) -> None:
    server = Server((503, {"Retry-After": "soon"}), 200)
    with sync_client(server) as client:
        assert client.get(URL).status_code == 200
    assert virtual_clock.sleeps == [1.0]


def test_a_retry_after_longer_than_the_budget_returns_the_response_at_once(
    virtual_clock: VirtualClock,
) -> None:
    server = Server((503, {"Retry-After": "3600"}))
    with sync_client(server) as client:
        response = client.get(URL)
    assert response.status_code == 503
    assert response.text == "attempt 1"  # still readable: not closed
    assert virtual_clock.sleeps == []
    report = exhaustion_report(response)
    assert report is not None
    assert report.reason is StopReason.SLEEP_BUDGET
    assert report.attempts == 1
    assert report.last_exception is None  # the run gave up on a response
    assert response.extensions[REPORT_EXTENSION] is report
    with pytest.raises(httpx.HTTPStatusError):
        response.raise_for_status()


# -- the budget spent ----------------------------------------------------------------------


def test_spent_on_a_status_the_last_response_is_returned(virtual_clock: VirtualClock) -> None:
    server = Server(503)
    with sync_client(server) as client:
        response = client.get(URL)
    assert response.status_code == 503
    assert len(server.requests) == POLICY.max_attempts() + 1 == 5
    assert response.text == "attempt 5"
    assert [body.fate for body in server.bodies] == ["discarded"] * 4 + ["delivered"]
    assert virtual_clock.sleeps == POLICY.waits()
    report = exhaustion_report(response)
    assert report is not None
    assert report.reason is StopReason.COUNT
    assert report.attempts == 5


def test_spent_on_a_transport_error_raises_budget_exhausted_from_it(
    virtual_clock: VirtualClock,
) -> None:
    server = Server(503, httpx.ConnectError("refused"))
    with sync_client(server) as client, pytest.raises(BudgetExhausted) as info:
        client.get(URL)
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    assert info.value.report.reason is StopReason.COUNT
    assert info.value.report.attempts == 5
    assert isinstance(info.value.report.last_exception, httpx.ConnectError)
    assert server.bodies[0].fate == "discarded"


@pytest.mark.parametrize(
    "error",
    [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.RemoteProtocolError("eh")],
)
def test_spent_on_a_transport_error_the_error_is_of_its_kind_and_budget_exhausted(
    virtual_clock: VirtualClock, error: httpx.TransportError
) -> None:
    # Issue 17: `except httpx.HTTPError` (and the error's own kind) catches a spent run, as
    # `except BudgetExhausted` does.
    server = Server(error)
    with sync_client(server) as client, pytest.raises(type(error)) as info:
        client.get(URL)
    exc = info.value
    assert isinstance(exc, httpx.TransportError)
    assert isinstance(exc, httpx.HTTPError)
    assert isinstance(exc, BudgetExhausted)
    assert exc.__cause__ is exc.report.last_exception
    assert type(exc.__cause__) is type(error)
    assert exc.last_attempt.exception() is exc.report.last_exception
    assert exc.report.reason is StopReason.COUNT
    assert exc.report.attempts == 5
    assert exc.request is server.requests[-1]
    assert str(exc).startswith("time budget exhausted (count): 5 attempts, slept ")
    assert str(exc).endswith(f"last: {exc.report.last_exception!r}")
    assert type(exc).__name__ == f"BudgetExhausted[{type(error).__name__}]"
    # One class per kind, built once.
    with sync_client(Server(error)) as client, pytest.raises(type(error)) as again:
        client.get(URL)
    assert type(again.value) is type(exc)


def test_a_subclass_of_an_httpx_error_is_caught_as_its_httpx_kind(
    virtual_clock: VirtualClock,
) -> None:
    class Refused(httpx.ConnectError):
        """A transport's own kind of connection error."""

    server = Server(Refused("no"))
    with sync_client(server) as client, pytest.raises(httpx.ConnectError) as info:
        client.get(URL)
    assert isinstance(info.value, BudgetExhausted)
    assert isinstance(info.value.__cause__, Refused)


async def test_async_spent_on_a_transport_error_is_of_its_kind_and_budget_exhausted(
    virtual_clock: VirtualClock,
) -> None:
    server = Server(httpx.ReadError("reset"))
    async with async_client(server) as client:
        with pytest.raises(httpx.ReadError) as info:
            await client.get(URL)
    assert isinstance(info.value, BudgetExhausted)
    assert info.value.report.attempts == 5
    assert isinstance(info.value.__cause__, httpx.ReadError)


def test_a_transport_error_is_retried(virtual_clock: VirtualClock) -> None:
    server = Server(httpx.ReadError("reset"), httpx.ConnectTimeout("slow"), 200)
    with sync_client(server) as client:
        assert client.get(URL).status_code == 200
    assert len(server.requests) == 3


@pytest.mark.parametrize(
    "error", [httpx.UnsupportedProtocol("ftp"), httpx.LocalProtocolError("bad header")]
)
def test_an_error_a_retry_cannot_cure_is_not_retried(
    virtual_clock: VirtualClock, error: httpx.TransportError
) -> None:
    server = Server(error)
    with sync_client(server) as client, pytest.raises(type(error)):
        client.get(URL)
    assert len(server.requests) == 1


def test_a_status_not_listed_is_returned_as_it_is(virtual_clock: VirtualClock) -> None:
    server = Server(500)
    with sync_client(server) as client:
        response = client.get(URL)
    assert response.status_code == 500
    assert exhaustion_report(response) is None
    assert len(server.requests) == 1


def test_retry_statuses_can_be_chosen(virtual_clock: VirtualClock) -> None:
    server = Server(500, 503)
    with sync_client(server, retry_statuses=frozenset({500})) as client:
        response = client.get(URL)
    assert response.status_code == 503
    assert len(server.requests) == 2


def test_a_timeout_that_spends_the_time_left_ends_the_run(virtual_clock: VirtualClock) -> None:
    server = Server(httpx.ReadTimeout("read timed out"))
    server.advance = lambda: virtual_clock.advance(5)  # each attempt waits out 5 s
    with sync_client(server) as client, pytest.raises(BudgetExhausted) as info:
        client.get(URL)
    assert isinstance(info.value.__cause__, httpx.ReadTimeout)
    assert info.value.report.reason is StopReason.WALL_CLOCK
    # 5 s, sleep 1, 5 s: another attempt could not end within the 12 s budget.
    assert server.headers == ["12000", "6000"]
    assert virtual_clock.sleeps == [1.0]


# -- methods -------------------------------------------------------------------------------


def test_a_post_is_sent_once_by_default(virtual_clock: VirtualClock) -> None:
    server = Server(503)
    with sync_client(server) as client:
        response = client.post(URL, content=b"order")
    assert response.status_code == 503
    assert exhaustion_report(response) is None
    assert len(server.requests) == 1
    assert server.headers == ["12000"]  # still tells the server its deadline


def test_a_post_transport_error_propagates_as_it_is(virtual_clock: VirtualClock) -> None:
    server = Server(httpx.ConnectError("refused"))
    with sync_client(server) as client, pytest.raises(httpx.ConnectError):
        client.post(URL)
    assert len(server.requests) == 1


def test_listing_post_retries_it(virtual_clock: VirtualClock) -> None:
    server = Server(503, 200)
    with sync_client(server, methods=frozenset({"post"})) as client:
        assert client.post(URL).status_code == 200
        assert client.get(URL).status_code == 200
    assert [r.method for r in server.requests] == ["POST", "POST", "GET"]


# -- the deadline header -------------------------------------------------------------------


def test_the_header_can_be_renamed_or_disabled(virtual_clock: VirtualClock) -> None:
    server = Server(200)
    with sync_client(server, deadline_header="Grpc-Timeout-Ms") as client:
        client.get(URL)
    assert server.requests[0].headers["grpc-timeout-ms"] == "12000"
    assert HEADER not in server.requests[0].headers
    with sync_client(server, deadline_header=None) as client:
        client.get(URL)
    assert "grpc-timeout-ms" not in server.requests[1].headers
    assert HEADER not in server.requests[1].headers


def test_deadline_headers_sends_the_time_left_in_every_dialect_chosen(
    virtual_clock: VirtualClock,
) -> None:
    server = Server(200)
    chosen = ("X-Request-Timeout-Ms", "x-envoy-upstream-rq-timeout-ms", "grpc-timeout")
    with sync_client(server, deadline_headers=chosen) as client:
        client.get(URL)
    sent = server.requests[0].headers
    assert sent[HEADER] == "12000"
    assert sent["x-envoy-upstream-rq-timeout-ms"] == "12000"
    assert sent["grpc-timeout"] == "12000000u"  # the finest unit within 8 digits
    assert client._transport.config.deadline_header == "X-Request-Timeout-Ms"
    with sync_client(server, deadline_headers=("grpc-timeout",)) as client:
        client.get(URL)
    assert HEADER not in server.requests[1].headers
    assert client._transport.config.deadline_header is None
    with sync_client(server, deadline_headers=()) as client:
        client.get(URL)
    assert not {HEADER, "grpc-timeout"} & set(server.requests[2].headers)


async def test_async_deadline_headers_sends_every_dialect_chosen(
    virtual_clock: VirtualClock,
) -> None:
    server = Server(200)
    async with async_client(server, deadline_headers=("x-envoy-expected-rq-timeout-ms",)) as c:
        await c.get(URL)
    assert server.requests[0].headers["x-envoy-expected-rq-timeout-ms"] == "12000"
    assert HEADER not in server.requests[0].headers


@pytest.mark.parametrize("kind", [BudgetTransport, AsyncBudgetTransport])
@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"deadline_header": "X-Deadline", "deadline_headers": ("grpc-timeout",)}, TypeError),
        ({"deadline_headers": ("x-deadline",)}, ValueError),
        ({"deadline_headers": "grpc-timeout"}, TypeError),
    ],
)
def test_bad_deadline_headers_are_refused_at_construction(
    kind: Any, options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        kind(POLICY, **options)


def test_retry_after_ms_headers_are_honoured(virtual_clock: VirtualClock) -> None:
    server = Server(
        (429, {"retry-after-ms": "1500"}),
        (503, {"Retry-After": "4", "x-ms-retry-after-ms": "250"}),
        200,
    )
    with sync_client(server) as client:
        assert client.get(URL).status_code == 200
    assert virtual_clock.sleeps == [1.5, 0.25]  # the smallest valid hint wins


def test_the_header_overrides_one_the_caller_set(virtual_clock: VirtualClock) -> None:
    server = Server(200)
    with sync_client(server) as client:
        client.get(URL, headers={"X-Request-Timeout-Ms": "999999"})
    assert server.requests[0].headers.get_list(HEADER) == ["12000"]


def test_an_enclosing_scope_bounds_the_run_and_the_header(virtual_clock: VirtualClock) -> None:
    server = Server(503)
    with deadline_scope(2.5), sync_client(server) as client:
        response = client.get(URL)
    # 2.5 s left, sleep 1 s, 1.5 s left; a 2 s sleep would end after the deadline.
    assert server.headers == ["2500", "1500"]
    assert server.left == [2.5, 1.5]
    report = exhaustion_report(response)
    assert report is not None
    assert report.reason is StopReason.DEADLINE


def test_no_time_left_sends_nothing(virtual_clock: VirtualClock) -> None:
    server = Server(200)
    with deadline_scope(0), sync_client(server) as client, pytest.raises(BudgetExhausted) as info:
        client.get(URL)
    assert server.requests == []
    assert isinstance(info.value.__cause__, httpx.TimeoutException)
    assert info.value.report.reason is StopReason.DEADLINE
    assert isinstance(info.value, httpx.TimeoutException)  # and a BudgetExhausted


# -- retry budget --------------------------------------------------------------------------


def test_every_retry_draws_from_the_retry_budget(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0, min_per_second=0.2, ttl=10)  # two retries in the window
    server = Server(503)
    with sync_client(server, budget=budget) as client:
        response = client.get(URL)
    assert len(server.requests) == 3
    report = exhaustion_report(response)
    assert report is not None
    assert report.reason is StopReason.RETRY_BUDGET


# -- the async transport -------------------------------------------------------------------


async def test_async_retries_a_status_and_honours_retry_after(
    virtual_clock: VirtualClock,
) -> None:
    server = Server((503, {"Retry-After": "2"}), 504, 200)
    async with async_client(server) as client:
        response = await client.get(URL)
    assert response.status_code == 200
    assert virtual_clock.sleeps == [2.0, 2.0]
    assert server.headers == ["12000", "10000", "8000"]
    assert [body.fate for body in server.bodies] == ["discarded", "discarded", "delivered"]


async def test_async_spent_on_a_status_returns_the_last_response(
    virtual_clock: VirtualClock,
) -> None:
    server = Server(429)
    async with async_client(server) as client:
        response = await client.get(URL)
    assert response.status_code == 429
    assert len(server.requests) == 5
    report = exhaustion_report(response)
    assert report is not None
    assert report.reason is StopReason.COUNT
    assert [body.fate for body in server.bodies] == ["discarded"] * 4 + ["delivered"]


async def test_async_spent_on_a_transport_error_raises(virtual_clock: VirtualClock) -> None:
    server = Server(httpx.ConnectError("refused"))
    async with async_client(server) as client:
        with pytest.raises(BudgetExhausted) as info:
            await client.get(URL)
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    assert info.value.report.attempts == 5


async def test_async_an_attempt_that_outruns_the_time_left_ends_the_run(
    virtual_clock: VirtualClock,
) -> None:
    server = Server(503, 200)
    server.advance = lambda: virtual_clock.advance(13 if len(server.requests) == 2 else 0)
    async with async_client(server) as client:
        with pytest.raises(BudgetExhausted) as info:
            await client.get(URL)
    assert info.value.report.reason is StopReason.WALL_CLOCK
    assert isinstance(info.value.__cause__, TimeoutError)
    assert [body.fate for body in server.bodies] == ["discarded", "discarded"]
    # Issue 17: cut by the hard stop, the run ends with an httpx timeout as well.
    assert isinstance(info.value, httpx.TimeoutException)
    assert info.value.report.attempts == 2
    assert info.value.report.last_exception is info.value.__cause__


async def test_async_cancels_an_attempt_that_hangs() -> None:
    # Real time, briefly: a hanging server, a 20 ms deadline, and nothing else to wait for.
    cancelled = asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        raise AssertionError("not reached")

    policy = BackoffPolicy(base=1, cap=4, max_elapsed=30, jitter="none")
    async with async_client(hang, policy) as client:
        with deadline_scope(0.02), pytest.raises(BudgetExhausted) as info:
            await client.get(URL)
    assert cancelled.is_set()
    assert info.value.report.reason is StopReason.DEADLINE
    assert info.value.report.attempts == 1
    assert isinstance(info.value.__cause__, TimeoutError)
    assert isinstance(info.value, httpx.TimeoutException)
    assert str(info.value).startswith("time budget exhausted (deadline): 1 attempts")


async def test_async_a_cancellation_from_outside_an_attempt_stays_a_cancellation() -> None:
    # The hard stop turns only its own cancellation into the end of the run.
    entered = asyncio.Event()

    async def hang(request: httpx.Request) -> httpx.Response:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("not reached")

    async with async_client(hang) as client:
        task = asyncio.ensure_future(client.get(URL))
        await entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert task.cancelled()
        # The transport serves the next request as usual.
        entered.clear()
        with deadline_scope(0.02), pytest.raises(BudgetExhausted) as info:
            await client.get(URL)
    assert info.value.report.reason is StopReason.DEADLINE


async def test_async_a_post_is_sent_once(virtual_clock: VirtualClock) -> None:
    server = Server(503)
    async with async_client(server) as client:
        response = await client.post(URL)
    assert response.status_code == 503
    assert len(server.requests) == 1
    assert server.headers == ["12000"]


async def test_async_concurrent_requests_each_run_their_own_budget(
    virtual_clock: VirtualClock,
) -> None:
    server = Server(200)
    async with async_client(server) as client:

        async def within(seconds: float) -> None:
            with deadline_scope(seconds):
                await client.get(URL)

        await asyncio.gather(within(1.0), within(0.25), within(30.0))
    assert sorted(server.headers, key=lambda h: int(h or 0)) == ["250", "1000", "12000"]


async def test_async_cancelled_in_a_backoff_sleep_closes_the_discarded_body() -> None:
    server = Server(503)
    policy = BackoffPolicy(base=60, cap=60, max_elapsed=600, jitter="none")
    async with async_client(server, policy) as client:
        task = asyncio.ensure_future(client.get(URL))
        while not server.bodies:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert [body.fate for body in server.bodies] == ["discarded"]


# -- construction --------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [BudgetTransport, AsyncBudgetTransport])
def test_the_signature_and_defaults(cls: type[Any]) -> None:
    params = inspect.signature(cls).parameters
    assert list(params) == [
        "policy",
        "transport",
        "retry_statuses",
        "methods",
        "deadline_header",
        "budget",
        "deadline_headers",
        "throttle",  # issue 18
        "hedge",  # issue 18
    ]
    assert params["throttle"].default is None
    assert params["hedge"].default is None
    assert params["transport"].default is None
    assert params["retry_statuses"].default == frozenset({429, 502, 503, 504})
    assert params["methods"].default == frozenset(
        {"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}
    )
    assert params["deadline_header"].default == "X-Request-Timeout-Ms"
    assert params["budget"].default is None
    assert params["deadline_headers"].default is None
    transport = cls(POLICY)
    assert transport.policy is POLICY
    assert transport.retry_statuses == frozenset({429, 502, 503, 504})
    assert transport.deadline_header == "X-Request-Timeout-Ms"


@pytest.mark.parametrize("cls", [BudgetTransport, AsyncBudgetTransport])
def test_the_options_are_one_frozen_config(cls: type[Any]) -> None:
    budget = RetryBudget()
    transport = cls(POLICY, methods=frozenset({"get", "Put"}), budget=budget)
    config = transport.config
    assert config.policy is transport.policy is POLICY
    assert config.methods == transport.methods == frozenset({"GET", "PUT"})
    assert config.retry_statuses == transport.retry_statuses == frozenset({429, 502, 503, 504})
    assert config.deadline_header == transport.deadline_header == "X-Request-Timeout-Ms"
    assert config.budget is transport.budget is budget
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.policy = POLICY


def test_the_public_names() -> None:
    import tenacity_budget.httpx as module

    assert module.__all__ == ["AsyncBudgetTransport", "BudgetTransport", "exhaustion_report"]
    # Still importable, as before issue 16.
    assert module.REPORT_EXTENSION == REPORT_EXTENSION == "tenacity_budget.report"
    assert frozenset({429, 502, 503, 504}) == module.DEFAULT_RETRY_STATUSES
    assert frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}) == module.DEFAULT_METHODS


def test_the_default_transports_are_httpx_own() -> None:
    assert isinstance(BudgetTransport(POLICY).transport, httpx.HTTPTransport)
    assert isinstance(AsyncBudgetTransport(POLICY).transport, httpx.AsyncHTTPTransport)
    assert isinstance(BudgetTransport(POLICY), httpx.BaseTransport)
    assert isinstance(AsyncBudgetTransport(POLICY), httpx.AsyncBaseTransport)


def test_closing_closes_the_wrapped_transport() -> None:
    closed: list[str] = []

    class Inner(httpx.MockTransport):
        def close(self) -> None:
            closed.append("sync")

        async def aclose(self) -> None:
            closed.append("async")

    with BudgetTransport(POLICY, transport=Inner(Server(200))):
        pass
    asyncio.run(AsyncBudgetTransport(POLICY, transport=Inner(Server(200))).aclose())
    assert closed == ["sync", "async"]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"retry_statuses": frozenset({1000})}, ValueError),
        ({"retry_statuses": frozenset({"503"})}, TypeError),
        ({"retry_statuses": frozenset({True})}, TypeError),
        ({"retry_statuses": 503}, TypeError),
        ({"methods": "GET"}, TypeError),
        ({"methods": frozenset({"GET "})}, ValueError),
        ({"methods": frozenset({1})}, ValueError),
        ({"deadline_header": ""}, ValueError),
        ({"deadline_header": "X Timeout"}, ValueError),
        ({"deadline_header": 5}, TypeError),
        ({"budget": object()}, TypeError),
        ({"transport": object()}, TypeError),
    ],
)
@pytest.mark.parametrize("cls", [BudgetTransport, AsyncBudgetTransport])
def test_bad_options_are_refused_at_construction(
    cls: type[Any], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        cls(POLICY, **kwargs)


@pytest.mark.parametrize("cls", [BudgetTransport, AsyncBudgetTransport])
def test_the_policy_must_be_a_policy(cls: type[Any]) -> None:
    with pytest.raises(TypeError, match="BackoffPolicy"):
        cls({"base": 1})


def test_the_wrong_kind_of_transport_is_refused() -> None:
    with pytest.raises(TypeError, match="AsyncBaseTransport"):
        AsyncBudgetTransport(POLICY, transport=httpx.HTTPTransport())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="BaseTransport"):
        BudgetTransport(POLICY, transport=httpx.AsyncHTTPTransport())  # type: ignore[arg-type]


def test_importing_the_package_imports_no_httpx() -> None:
    code = (
        "import sys, tenacity_budget, tenacity_budget.http, tenacity_budget.asgi; "
        "print('httpx' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "False"
