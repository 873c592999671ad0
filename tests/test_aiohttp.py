"""tenacity_budget.aiohttp.budget_middleware against aiohttp's own server on a free port.

Backoff sleeps run on the virtual clock; the tests against a server that never answers or
dribbles run on the real clock with budgets of a fraction of a second, and assert what
happened (the attempt was cut, the error's kinds), never how long it took.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
import ssl
import sys
import time
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from aiohttp import web

import tenacity_budget.aiohttp as budget_aiohttp
from tenacity_budget import (
    BackoffPolicy,
    BudgetExhausted,
    ExhaustionReport,
    RetryBudget,
    StopReason,
    deadline_scope,
)
from tenacity_budget.aiohttp import budget_middleware
from tenacity_budget.http import DIALECTS, retry_after
from tenacity_budget.testing import VirtualClock
from tests._servers import aiohttp_serving as serving
from tests._servers import stalled_server

POLICY = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=12, jitter="none")


class Script:
    """An aiohttp handler answering ``statuses`` in turn (then 200), recording headers."""

    def __init__(self, *statuses: int, headers: dict[str, str] | None = None) -> None:
        self.statuses = list(statuses)
        self.headers = headers or {}
        self.seen: list[dict[str, str]] = []
        self.bodies: list[bytes] = []

    async def __call__(self, request: web.Request) -> web.Response:
        self.seen.append(dict(request.headers))
        self.bodies.append(await request.read())
        status = self.statuses.pop(0) if self.statuses else 200
        if status == 200:
            return web.Response(text="ok")
        return web.Response(status=status, text="no", headers=self.headers)


def backoff(clock: VirtualClock) -> list[float]:
    """The sleeps of the runs: aiohttp's own ``asyncio.sleep(0)`` calls share the clock."""
    return [seconds for seconds in clock.sleeps if seconds]


def client(**kwargs: Any) -> aiohttp.ClientSession:
    policy = kwargs.pop("policy", POLICY)
    return aiohttp.ClientSession(middlewares=(budget_middleware(policy, **kwargs),))


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


# -- the module ------------------------------------------------------------------------------


def test_the_module_uses_the_real_aiohttp() -> None:
    assert budget_aiohttp.aiohttp is sys.modules["aiohttp"]
    assert budget_aiohttp.__all__ == ["budget_middleware"]
    assert budget_aiohttp.retry_after is retry_after


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"deadline_header": "X-Deadline", "deadline_headers": ("grpc-timeout",)}, TypeError),
        ({"deadline_headers": ("x-deadline",)}, ValueError),
        ({"deadline_header": "X Bad"}, ValueError),
        ({"retry_statuses": {302}}, ValueError),
        ({"methods": "GET"}, TypeError),
        ({"budget": object()}, TypeError),
    ],
)
def test_bad_options_are_refused_at_once(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        budget_middleware(POLICY, **kwargs)


def test_the_options_are_kept() -> None:
    middleware = budget_middleware(POLICY, methods=frozenset({"get", "POST"}))
    assert middleware.methods == frozenset({"GET", "POST"})
    assert middleware.retry_statuses == frozenset({429, 502, 503, 504})
    assert middleware.policy is POLICY
    with pytest.raises(TypeError, match="BackoffPolicy"):
        budget_middleware("policy")  # type: ignore[arg-type]


# -- aiohttp's own server --------------------------------------------------------------------


async def test_a_503_with_retry_after_then_200(virtual_clock: VirtualClock) -> None:
    script = Script(503, headers={"Retry-After": "3"})
    async with serving(script) as url, client() as session, session.get(url) as response:
        assert response.status == 200
        assert await response.text() == "ok"
    assert backoff(virtual_clock) == [3.0]
    assert [h["X-Request-Timeout-Ms"] for h in script.seen] == ["12000", "9000"]


async def test_waits_in_milliseconds_are_honoured(virtual_clock: VirtualClock) -> None:
    script = Script(429, 503, headers={"x-ms-retry-after-ms": "1500", "Retry-After": "9"})
    async with serving(script) as url, client() as session, session.get(url) as response:
        assert response.status == 200
    assert backoff(virtual_clock) == [1.5, 1.5]


async def test_spent_on_a_status_the_last_response_is_returned_the_others_released(
    virtual_clock: VirtualClock,
) -> None:
    script = Script(*[503] * 20)
    connector = aiohttp.TCPConnector(limit=1)  # one connection: a response not released
    middleware = budget_middleware(POLICY)  # would hold it, and the next attempt would wait
    async with (
        serving(script) as url,
        aiohttp.ClientSession(connector=connector, middlewares=(middleware,)) as session,
    ):
        async with session.get(url) as response:
            assert response.status == 503
            assert await response.text() == "no"
        assert backoff(virtual_clock) == POLICY.waits()
        assert len(script.seen) == len(POLICY.waits()) + 1
        async with session.get(url) as again:  # the connection came back to the pool
            assert again.status == 503


async def test_a_post_is_sent_once(virtual_clock: VirtualClock) -> None:
    script = Script(503)
    async with serving(script) as url, client() as session:
        async with session.post(url, data=b"x") as response:
            assert response.status == 503
        async with session.get(url) as response:
            assert response.status == 200
    assert backoff(virtual_clock) == []
    assert script.seen[0]["X-Request-Timeout-Ms"] == "12000"  # still announced


async def test_a_put_body_of_bytes_is_sent_again(virtual_clock: VirtualClock) -> None:
    script = Script(502)
    async with (
        serving(script) as url,
        client() as session,
        session.put(url, data=b"payload") as response,
    ):
        assert response.status == 200
    assert script.bodies == [b"payload", b"payload"]


async def test_deadline_headers_and_the_callers_scope(virtual_clock: VirtualClock) -> None:
    script = Script(503)
    dialects = ("grpc-timeout", "x-envoy-expected-rq-timeout-ms")
    async with serving(script) as url, client(deadline_headers=dialects) as session:
        with deadline_scope(5):
            async with session.get(url) as response:
                assert response.status == 200
    assert [(h["grpc-timeout"], h["x-envoy-expected-rq-timeout-ms"]) for h in script.seen] == [
        ("5000000u", "5000"),
        ("4000000u", "4000"),
    ]
    assert all("X-Request-Timeout-Ms" not in h for h in script.seen)


async def test_every_dialect_announces_the_whole_budget_without_a_scope(
    virtual_clock: VirtualClock,
) -> None:
    # A first attempt nothing else bounds has the run's whole budget, in each dialect's
    # own format (written once by the middleware); the retry has what is left of it.
    script = Script(503)
    async with serving(script) as url, client(deadline_headers=tuple(DIALECTS)) as session:
        for _ in range(2):
            script.seen.clear()
            script.statuses = [503]
            async with session.get(url) as response:
                assert response.status == 200
            assert [{n: h[d.header] for n, d in DIALECTS.items()} for h in script.seen] == [
                {n: d.format(12.0) for n, d in DIALECTS.items()},
                {n: d.format(11.0) for n, d in DIALECTS.items()},
            ]


@pytest.mark.parametrize("bound", ["a deadline scope", "the policy's deadline"])
async def test_a_first_attempt_bounded_otherwise_announces_its_own_time_left(
    virtual_clock: VirtualClock, bound: str
) -> None:
    # Only a first attempt nothing else bounds has the whole budget: the time left under a
    # scope or a policy deadline, however close to the budget, is written as it is.
    script = Script()
    end = datetime.fromtimestamp(time.time() + 11.9, UTC)
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=12, jitter="none", deadline=end)
    if bound == "a deadline scope":
        policy = POLICY
    dialects = tuple(DIALECTS)
    async with serving(script) as url, client(policy=policy, deadline_headers=dialects) as session:
        with deadline_scope(11.9) if bound == "a deadline scope" else nullcontext():
            async with session.get(url) as response:
                assert response.status == 200
    (seen,) = script.seen
    for dialect in DIALECTS.values():
        left = dialect.parse(seen[dialect.header])
        assert left is not None
        assert 11.89 <= left <= 11.9, (dialect.header, seen[dialect.header])


async def test_no_deadline_header_when_asked(virtual_clock: VirtualClock) -> None:
    script = Script()
    async with serving(script) as url, client(deadline_header=None) as session, session.get(url):
        pass
    assert "X-Request-Timeout-Ms" not in script.seen[0]


async def test_a_retry_budget_is_drawn_from(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0, min_per_second=0)
    script = Script(503, 503)
    async with (
        serving(script) as url,
        client(budget=budget) as session,
        session.get(url) as response,
    ):
        assert response.status == 503  # the budget refused the retry
    assert len(script.seen) == 1


async def test_a_closed_port_raises_aiohttps_own_error_with_the_report(
    virtual_clock: VirtualClock,
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/"
    async with client() as session:
        with pytest.raises(aiohttp.ClientConnectorError) as info:
            await session.get(url)
    error = info.value
    assert isinstance(error, aiohttp.ClientConnectionError)
    assert isinstance(error, BudgetExhausted)
    assert isinstance(error.report, ExhaustionReport)
    assert error.report.attempts == len(POLICY.waits()) + 1
    assert error.report.reason is StopReason.COUNT
    assert backoff(virtual_clock) == POLICY.waits()
    assert isinstance(error.__cause__, aiohttp.ClientConnectorError)
    assert not isinstance(error.__cause__, BudgetExhausted)
    assert error.host == "127.0.0.1"


async def test_the_error_reads_as_aiohttps_own_and_pickles(virtual_clock: VirtualClock) -> None:
    url = f"http://127.0.0.1:{closed_port()}/"
    async with client() as session:
        with pytest.raises(aiohttp.ClientConnectorError) as info:
            await session.get(url)
    error, original = info.value, info.value.__cause__
    assert isinstance(original, aiohttp.ClientConnectorError)
    assert error.args == original.args != ()
    assert error.errno == original.errno is not None  # ECONNREFUSED
    assert error.strerror == original.strerror
    assert error.os_error is original.os_error
    assert error._conn_key == original._conn_key
    assert (error.host, error.port, error.ssl) == (original.host, original.port, original.ssl)

    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert isinstance(again, aiohttp.ClientConnectorError)
    assert isinstance(again, BudgetExhausted)
    assert repr(again.args) == repr(error.args)
    assert again.errno == error.errno
    assert (again.host, again.port) == (error.host, error.port)
    assert again.report.attempts == error.report.attempts
    assert isinstance(again.report.last_exception, aiohttp.ClientConnectorError)
    assert str(again).partition("last:")[0] == str(error).partition("last:")[0]


async def test_a_tls_failure_is_not_retried(virtual_clock: VirtualClock) -> None:
    # https:// to a plain HTTP server: the TLS handshake fails, and would again.
    async with serving(Script()) as url, client() as session:
        with pytest.raises(aiohttp.ClientSSLError) as info:
            await session.get(url.replace("http://", "https://", 1))
    assert not isinstance(info.value, BudgetExhausted)  # sent once: nothing was retried
    assert backoff(virtual_clock) == []


def test_certificate_errors_are_not_retried_connection_errors_are() -> None:
    from tenacity_budget.aiohttp import _retryable

    key: Any = type("Key", (), {"host": "h", "port": 443, "ssl": True})()
    cert = ssl.SSLCertVerificationError(1, "certificate verify failed")
    assert isinstance(
        aiohttp.ClientConnectorCertificateError(key, cert), aiohttp.ClientConnectionError
    )
    assert not _retryable(aiohttp.ClientConnectorCertificateError(key, cert))
    assert not _retryable(aiohttp.ClientConnectorSSLError(key, ssl.SSLError(1, "handshake")))
    wrapped = aiohttp.ClientOSError(104, "reset")
    wrapped.__cause__ = cert
    assert not _retryable(wrapped)
    assert _retryable(aiohttp.ClientConnectorError(key, ConnectionRefusedError(111, "refused")))
    assert _retryable(aiohttp.ServerDisconnectedError())
    assert _retryable(aiohttp.ServerTimeoutError("slow"))
    assert not _retryable(aiohttp.InvalidURL("x"))


async def test_a_server_that_never_answers_is_cut_when_the_time_is_up() -> None:
    policy = BackoffPolicy(base=0.01, cap=0.02, max_elapsed=0.3, jitter="none")
    async with stalled_server() as server, client(policy=policy) as session:
        with pytest.raises(aiohttp.ServerTimeoutError) as info:
            await session.get(f"{server.url}/hang")
    assert isinstance(info.value, BudgetExhausted)
    assert isinstance(info.value, aiohttp.ClientConnectionError)
    assert info.value.report.reason in (StopReason.DEADLINE, StopReason.WALL_CLOCK)
    assert server.paths["/hang"] >= 1


DRIBBLED = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


async def test_a_dribbling_server_is_cut_by_the_hard_stop() -> None:
    # One byte every 20 ms: ~1.2 s for the response, each read well within any read timeout.
    # The requests adapter waits it out (tests/test_requests.py); here the attempt is cut.
    async def dribble(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        try:
            for byte in DRIBBLED:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.02)
        except ConnectionError:
            pass  # the client hung up
        finally:
            writer.close()

    server = await asyncio.start_server(dribble, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/"
    policy = BackoffPolicy(base=0.01, cap=0.02, max_elapsed=0.3, jitter="none")
    try:
        async with client(policy=policy) as session:
            with pytest.raises(aiohttp.ServerTimeoutError) as info:
                await session.get(url)
    finally:
        server.close()
        await server.wait_closed()
    assert isinstance(info.value, BudgetExhausted)
    assert len(DRIBBLED) * 0.02 > policy.max_elapsed  # the schedule outlasts the budget


async def test_concurrent_attempts_are_each_cut_at_their_own_end() -> None:
    # One watchdog timer serves every attempt of the loop: each is cut at its own end,
    # the ones that answer are left alone, whatever the order of their ends.
    policy = BackoffPolicy(base=0.01, cap=0.02, max_elapsed=5, jitter="none")

    async def hang(session: aiohttp.ClientSession, url: str, seconds: float) -> BaseException:
        with deadline_scope(seconds), pytest.raises(aiohttp.ServerTimeoutError) as info:
            await session.get(url)
        return info.value

    async def ok(session: aiohttp.ClientSession, url: str) -> int:
        with deadline_scope(5):
            async with session.get(url) as response:
                await response.read()
                return response.status

    async with stalled_server() as server, client(policy=policy) as session:
        hung = [hang(session, f"{server.url}/hang", s) for s in (0.4, 0.1, 0.3, 0.05, 0.2)]
        fine = [ok(session, f"{server.url}/ok") for _ in range(3)]
        results = await asyncio.gather(*hung, *fine)
    cut, answered = results[:5], results[5:]
    assert all(isinstance(error, BudgetExhausted) for error in cut)
    assert answered == [200, 200, 200]
    assert server.paths["/hang"] >= 5


async def test_aiohttps_own_read_timeouts_are_retried() -> None:
    policy = BackoffPolicy(base=0.01, cap=0.02, max_elapsed=0.4, jitter="none")
    async with stalled_server() as server, client(policy=policy) as session:
        with pytest.raises(aiohttp.ServerTimeoutError) as info:
            await session.get(f"{server.url}/hang", timeout=aiohttp.ClientTimeout(sock_read=0.05))
    assert isinstance(info.value, BudgetExhausted)
    assert info.value.report.attempts >= 2
    assert server.paths["/hang"] >= 2
