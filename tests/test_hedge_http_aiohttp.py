"""budget_middleware(hedge=...) against aiohttp's own server, on the virtual clock's event loop.

The server runs in the same event loop as the client, so its sleeps are timers of the
virtual clock: a hedge is sent at exactly its delay and the test takes no real time. Which
attempt is slow is told by the deadline header each attempt carries (the first has the
whole budget, a hedge less), never by the order of arrival.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import pytest
from aiohttp import web

from tenacity_budget import BackoffPolicy, BudgetExhausted, Hedge, RetryBudget, StopReason
from tenacity_budget.aiohttp import budget_middleware
from tenacity_budget.exhaustion import Throttled
from tenacity_budget.testing import virtual_clock
from tests._hedging import FakeThrottle, SlowFirstServer, serving

T = TypeVar("T")
POLICY = BackoffPolicy(base=0.1, cap=1, max_elapsed=10, jitter="none")
HEADER = "X-Request-Timeout-Ms"


@dataclass
class Server(SlowFirstServer):
    latency: float = 5.0


@asynccontextmanager
async def session(**options: Any) -> AsyncIterator[aiohttp.ClientSession]:
    """A session through the middleware; on exit, no connection of its connector is in use."""
    policy = options.pop("policy", POLICY)
    connector = aiohttp.TCPConnector()
    middleware = budget_middleware(policy, **options)
    async with aiohttp.ClientSession(connector=connector, middlewares=(middleware,)) as client:
        yield client
        await asyncio.sleep(0)  # one turn: a loser's connection is closed by its own task
        assert not connector._acquired, "a loser's connection is still in use"


async def fetch(
    client: aiohttp.ClientSession, url: str, method: str = "GET", **kwargs: Any
) -> tuple[int, str]:
    """The status and text of one request."""
    async with client.request(method, url, **kwargs) as response:
        return response.status, await response.text()


def simulate(main: Callable[[], Awaitable[T]]) -> T:
    async def run() -> T:
        return await main()

    with virtual_clock() as clock, clock.event_loop() as loop:
        return loop.run_until_complete(run())


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


# -- options ---------------------------------------------------------------------------------


def test_hedge_must_be_a_hedge() -> None:
    with pytest.raises(TypeError, match=r"hedge must be a tenacity_budget\.Hedge"):
        budget_middleware(POLICY, hedge=0.05)
    middleware = budget_middleware(POLICY, hedge=Hedge(0.05))
    assert isinstance(middleware.hedge, Hedge)


# -- a slow first answer -----------------------------------------------------------------------


def test_a_slow_first_response_is_hedged_after_the_delay_and_the_hedge_wins() -> None:
    server = Server()

    async def main() -> tuple[int, str, float]:
        async with serving(server) as url, session(hedge=Hedge(0.05)) as client:
            began = time.monotonic()
            async with client.get(url) as response:
                return response.status, await response.text(), time.monotonic() - began

    status, text, took = simulate(main)
    assert (status, text) == (200, "fast")
    assert took == pytest.approx(0.05)  # virtual seconds: the hedge's answer
    assert server.instants == pytest.approx([0.0, 0.05])
    # Each attempt told the server its own time left.
    assert [left for _, _, left in server.seen] == ["10000", "9950"]


def test_a_first_answer_within_the_delay_sends_no_hedge() -> None:
    server = Server(latency=0.01)

    async def main() -> str:
        async with serving(server) as url, session(hedge=Hedge(0.05)) as client:
            return (await fetch(client, url))[1]

    assert simulate(main) == "slow"
    assert len(server.seen) == 1


def test_a_non_idempotent_method_is_never_hedged() -> None:
    server = Server()

    async def main() -> str:
        async with serving(server) as url, session(hedge=Hedge(0.05)) as client:
            return (await fetch(client, url, "POST", data=b"x"))[1]

    assert simulate(main) == "slow"  # waited for it: nothing was sent beside it
    assert [method for _, method, _ in server.seen] == ["POST"]


def test_a_put_with_a_body_of_bytes_is_hedged_with_the_same_body() -> None:
    bodies: list[bytes] = []
    server = Server()

    async def handle(request: web.Request) -> web.Response:
        bodies.append(await request.read())
        return await Server.handle(server, request)

    server.handle = handle  # type: ignore[method-assign]

    async def main() -> str:
        async with serving(server) as url, session(hedge=Hedge(0.05)) as client:
            return (await fetch(client, url, "PUT", data=b"payload"))[1]

    assert simulate(main) == "fast"
    assert bodies == [b"payload", b"payload"]


# -- non-fatal and fatal outcomes --------------------------------------------------------------


def test_a_retryable_status_sends_the_next_hedge_at_once() -> None:
    server = Server(statuses=[503], slow_header="none")  # nothing slow: a 503, then a 200

    async def main() -> tuple[int, str]:
        async with serving(server) as url, session(hedge=Hedge(1.0, max_attempts=3)) as client:
            return await fetch(client, url)

    assert simulate(main) == (200, "fast")
    assert server.instants == [0.0, 0.0]  # no delay waited after a non-fatal failure


def test_spent_on_a_status_the_last_response_is_returned() -> None:
    server = Server(statuses=[503, 503, 503], slow_header="none")

    async def main() -> tuple[int, str]:
        async with serving(server) as url, session(hedge=Hedge(1.0, max_attempts=3)) as client:
            return await fetch(client, url)

    assert simulate(main) == (503, "fast")
    assert len(server.seen) == 3  # max_attempts, the first included


def test_spent_on_connection_errors_raises_aiohttps_error_with_the_hedges() -> None:
    url = f"http://127.0.0.1:{closed_port()}/"

    async def main() -> BaseException:
        async with session(hedge=Hedge(1.0, max_attempts=3)) as client:
            with pytest.raises(aiohttp.ClientConnectorError) as info:
                await client.get(url)
            return info.value

    error = simulate(main)
    assert isinstance(error, BudgetExhausted)
    assert isinstance(error.__cause__, aiohttp.ClientConnectorError)
    report = error.report
    assert (report.reason, report.attempts, report.hedges, report.hedges_won) == (
        StopReason.COUNT,
        3,
        2,
        0,
    )


def test_the_runs_end_cuts_every_attempt() -> None:
    server = Server(latency=60.0, slow_header="10000")
    server.statuses = []
    policy = BackoffPolicy(base=0.1, cap=1, max_elapsed=1, jitter="none")

    async def slow_all(request: web.Request) -> web.Response:
        server.seen.append((time.monotonic(), request.method, request.headers[HEADER]))
        await asyncio.sleep(60.0)
        return web.Response(text="late")

    server.handle = slow_all  # type: ignore[method-assign]

    async def main() -> BaseException:
        async with serving(server) as url, session(policy=policy, hedge=Hedge(0.25)) as client:
            with pytest.raises(aiohttp.ServerTimeoutError) as info:
                await client.get(url)
            return info.value

    error = simulate(main)
    assert isinstance(error, BudgetExhausted)
    assert error.report.reason is StopReason.WALL_CLOCK
    assert (error.report.attempts, error.report.hedges) == (2, 1)
    assert error.report.elapsed == pytest.approx(1.0)


# -- inside the budget -------------------------------------------------------------------------


@pytest.mark.parametrize(("ratio", "sent"), [(0.0, 1), (1.0, 2)])
def test_every_hedge_withdraws_from_the_retry_budget(ratio: float, sent: int) -> None:
    # The call deposits ``ratio`` once its first attempt is sent; the hedge withdraws 1.
    server = Server()
    budget = RetryBudget(ratio=ratio, min_per_second=0.0, ttl=60.0)

    async def main() -> tuple[str, float]:
        async with serving(server) as url, session(hedge=Hedge(0.05), budget=budget) as client:
            text = (await fetch(client, url))[1]
            return text, budget.balance  # read on the virtual clock

    text, balance = simulate(main)
    assert text == ("slow" if sent == 1 else "fast")
    assert len(server.seen) == sent
    assert balance == 0  # 0 deposited and nothing granted, or 1 deposited and withdrawn


def test_hedging_pauses_while_the_throttle_rejects_anything() -> None:
    server = Server()
    throttle = FakeThrottle(probability=0.25)  # admits, but its probability is above 0

    async def main() -> str:
        async with serving(server) as url, session(hedge=Hedge(0.05), throttle=throttle) as client:
            return (await fetch(client, url))[1]

    assert simulate(main) == "slow"
    assert len(server.seen) == 1
    assert throttle.admitted == 1  # the first attempt alone was asked
    assert [response.status for response in throttle.recorded] == [200]  # type: ignore[attr-defined]


def test_a_throttle_at_zero_admits_the_hedge_and_records_every_outcome() -> None:
    server = Server()
    throttle = FakeThrottle(probability=0.0)

    async def main() -> str:
        async with serving(server) as url, session(hedge=Hedge(0.05), throttle=throttle) as client:
            return (await fetch(client, url))[1]

    assert simulate(main) == "fast"
    assert throttle.admitted == 2
    assert len(throttle.recorded) == 1  # the loser was cancelled: no answer to record


def test_a_throttle_rejecting_the_first_attempt_sends_nothing() -> None:
    server = Server()
    throttle = FakeThrottle(probability=0.9, admits=False, name="items")

    async def main() -> BaseException:
        async with serving(server) as url, session(hedge=Hedge(0.05), throttle=throttle) as client:
            with pytest.raises(aiohttp.ClientConnectionError) as info:
                await client.get(url)
            return info.value

    error = simulate(main)
    assert isinstance(error, BudgetExhausted)
    assert error.report.reason is StopReason.THROTTLED
    assert error.report.attempts == 0
    assert isinstance(error.last_attempt.exception(), Throttled)
    assert server.seen == []
