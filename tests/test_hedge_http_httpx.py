"""AsyncBudgetTransport(hedge=...) against real local servers.

On the virtual clock's event loop the server is aiohttp's, in the same loop (its sleeps are
timers of the clock: a hedge goes out at exactly its delay, no real time passes); which
attempt is slow is told by the deadline header each carries (the first has the whole
budget). Against uvicorn (tests/_servers.py, real time, its own thread) the slow attempt is
held until its client hangs up, and ``Hedge(0)`` hedges at once: nothing waits for time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pytest
from aiohttp import web

from tenacity_budget import BackoffPolicy, BudgetExhausted, Hedge, RetryBudget, StopReason
from tenacity_budget.exhaustion import Throttled
from tenacity_budget.httpx import AsyncBudgetTransport, BudgetTransport, exhaustion_report
from tenacity_budget.testing import virtual_clock
from tests._hedging import FakeThrottle, SlowFirstServer, serving
from tests._servers import respond, serve

T = TypeVar("T")
POLICY = BackoffPolicy(base=0.1, cap=1, max_elapsed=10, jitter="none")
HEADER = "X-Request-Timeout-Ms"


@dataclass
class Server(SlowFirstServer):
    latency: float = 2.0


def in_use(transport: AsyncBudgetTransport) -> list[Any]:
    """The connections of the wrapped httpx transport's pool still in use by a request."""
    pool: Any = transport.transport._pool  # type: ignore[attr-defined]
    return [c for c in pool.connections if not c.is_idle() and not c.is_closed()]


@asynccontextmanager
async def client(**options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client through the transport; on exit, no connection of its pool is in use."""
    policy = options.pop("policy", POLICY)
    transport = AsyncBudgetTransport(policy, **options)
    async with httpx.AsyncClient(transport=transport) as http:
        yield http
        await asyncio.sleep(0)  # one turn: a loser's close runs in its own task
        assert in_use(transport) == [], "a loser's connection is still in use"


def simulate(main: Callable[[], Awaitable[T]]) -> T:
    async def run() -> T:
        return await main()

    with virtual_clock() as clock, clock.event_loop() as loop:
        return loop.run_until_complete(run())


async def fetch(
    http: httpx.AsyncClient, url: str, method: str = "GET", **kw: Any
) -> httpx.Response:
    response = await http.request(method, url, **kw)
    await response.aread()
    return response


# -- options ---------------------------------------------------------------------------------


def test_the_sync_transport_refuses_a_hedge_saying_why() -> None:
    with pytest.raises(TypeError, match="AsyncBudgetTransport"):
        BudgetTransport(POLICY, hedge=Hedge(0.05))
    BudgetTransport(POLICY, hedge=None)  # the default


def test_hedge_must_be_a_hedge() -> None:
    with pytest.raises(TypeError, match=r"hedge must be a tenacity_budget\.Hedge"):
        AsyncBudgetTransport(POLICY, hedge="p95")
    hedge = Hedge(0.05)
    assert AsyncBudgetTransport(POLICY, hedge=hedge).hedge is hedge


# -- on the virtual clock ----------------------------------------------------------------------


def test_a_slow_first_response_is_hedged_after_the_delay_and_the_hedge_wins() -> None:
    server = Server()

    async def main() -> tuple[httpx.Response, float]:
        async with serving(server) as url, client(hedge=Hedge(0.05)) as http:
            began = time.monotonic()
            response = await fetch(http, url)
            return response, time.monotonic() - began

    response, took = simulate(main)
    assert (response.status_code, response.text) == (200, "fast")
    assert took == pytest.approx(0.05)  # virtual seconds
    assert [instant for instant, _, _ in server.seen] == pytest.approx([0.0, 0.05])
    assert [left for _, _, left in server.seen] == ["10000", "9950"]  # each its own time left
    assert exhaustion_report(response) is None


def test_a_non_idempotent_method_is_never_hedged() -> None:
    server = Server()

    async def main() -> str:
        async with serving(server) as url, client(hedge=Hedge(0.05)) as http:
            return (await fetch(http, url, "POST", content=b"x")).text

    assert simulate(main) == "slow"
    assert [method for _, method, _ in server.seen] == ["POST"]


def test_a_body_that_cannot_be_sent_again_is_sent_once() -> None:
    server = Server()

    async def body() -> AsyncIterator[bytes]:
        yield b"once"

    async def main() -> str:
        async with serving(server) as url, client(hedge=Hedge(0.05)) as http:
            return (await fetch(http, url, "PUT", content=body())).text

    assert simulate(main) == "slow"
    assert len(server.seen) == 1


def test_spent_on_a_status_the_last_response_carries_the_report() -> None:
    server = Server(statuses=[503, 503, 503], slow_header="none")

    async def main() -> httpx.Response:
        async with serving(server) as url, client(hedge=Hedge(1.0, max_attempts=3)) as http:
            return await fetch(http, url)

    response = simulate(main)
    assert response.status_code == 503
    assert len(server.seen) == 3
    assert [instant for instant, _, _ in server.seen] == [0.0, 0.0, 0.0]  # non-fatal: at once
    report = exhaustion_report(response)
    assert report is not None
    assert (report.reason, report.attempts, report.hedges, report.hedges_won) == (
        StopReason.COUNT,
        3,
        2,
        0,
    )


def test_the_runs_end_cuts_every_attempt() -> None:
    server = Server(latency=60.0)
    server.slow_header = "10000"
    policy = BackoffPolicy(base=0.1, cap=1, max_elapsed=1, jitter="none")

    async def slow_all(request: web.Request) -> web.Response:
        server.seen.append((time.monotonic(), request.method, request.headers[HEADER]))
        await asyncio.sleep(60.0)
        return web.Response(text="late")

    server.handle = slow_all  # type: ignore[method-assign]

    async def main() -> BaseException:
        async with serving(server) as url, client(policy=policy, hedge=Hedge(0.25)) as http:
            with pytest.raises(httpx.TimeoutException) as info:
                await http.get(url)
            return info.value

    error = simulate(main)
    assert isinstance(error, BudgetExhausted)
    assert error.report.reason is StopReason.WALL_CLOCK
    assert (error.report.attempts, error.report.hedges) == (2, 1)


@pytest.mark.parametrize(("ratio", "sent"), [(0.0, 1), (1.0, 2)])
def test_every_hedge_withdraws_from_the_retry_budget(ratio: float, sent: int) -> None:
    server = Server()
    budget = RetryBudget(ratio=ratio, min_per_second=0.0, ttl=60.0)

    async def main() -> tuple[str, float]:
        async with serving(server) as url, client(hedge=Hedge(0.05), budget=budget) as http:
            return (await fetch(http, url)).text, budget.balance  # read on the virtual clock

    text, balance = simulate(main)
    assert text == ("slow" if sent == 1 else "fast")
    assert len(server.seen) == sent
    assert balance == 0  # nothing deposited and nothing granted, or 1 deposited and withdrawn


def test_hedging_pauses_while_the_throttle_rejects_anything() -> None:
    server = Server()
    throttle = FakeThrottle(probability=0.25)

    async def main() -> str:
        async with serving(server) as url, client(hedge=Hedge(0.05), throttle=throttle) as http:
            return (await fetch(http, url)).text

    assert simulate(main) == "slow"
    assert len(server.seen) == 1
    assert throttle.admitted == 1
    assert len(throttle.recorded) == 1


def test_a_throttle_rejecting_the_first_attempt_sends_nothing() -> None:
    server = Server()
    throttle = FakeThrottle(probability=0.9, admits=False)

    async def main() -> BaseException:
        async with serving(server) as url, client(hedge=Hedge(0.05), throttle=throttle) as http:
            with pytest.raises(httpx.ConnectError) as info:
                await http.get(url)
            return info.value

    error = simulate(main)
    assert isinstance(error, BudgetExhausted)
    assert (error.report.reason, error.report.attempts) == (StopReason.THROTTLED, 0)
    assert isinstance(error.last_attempt.exception(), Throttled)
    assert server.seen == []


# -- against uvicorn, in real time -------------------------------------------------------------


class HeldFirst:
    """An ASGI app holding the first request it gets until its client hangs up; any other
    is answered at once. Records the paths seen and the disconnect of the held one."""

    def __init__(self) -> None:
        self.seen = 0
        self.lock = threading.Lock()
        self.hung_up = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        with self.lock:
            self.seen += 1
            first = self.seen == 1
        if not first:
            await respond(send, 200)
            return
        while (await receive())["type"] != "http.disconnect":
            pass  # the request's body, then its client hanging up
        self.hung_up.set()


def test_against_uvicorn_the_hedge_wins_and_the_loser_hangs_up() -> None:
    app = HeldFirst()

    async def main(url: str) -> int:
        async with client(hedge=Hedge(0)) as http:
            return (await fetch(http, url)).status_code

    with serve(app) as url:
        assert asyncio.run(main(url)) == 200
        assert app.hung_up.wait(10)  # the loser was cancelled: its connection closed
    assert app.seen == 2
