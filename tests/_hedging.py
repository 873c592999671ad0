"""Helpers of the hedging tests: scripted attempts, fake throttles and budgets, a simulator.

Every test runs on the library's virtual clock driven by its event loop
(:meth:`tenacity_budget.testing.VirtualClock.event_loop`, which jumps the clock to its next
timer), so concurrent attempts overlap in virtual time and every instant is exact.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web

from tenacity_budget.testing import virtual_clock
from tests._servers import aiohttp_serving

T = TypeVar("T")


def simulate(main: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``main()`` on a fresh virtual clock (its monotonic clock starts at 0.0)."""
    with virtual_clock() as clock, clock.event_loop() as loop:
        return loop.run_until_complete(main())


@dataclass(frozen=True)
class Response:
    """A response-like result: what the default non-fatal predicate reads."""

    status_code: int
    body: str = ""


@dataclass
class Script:
    """Attempt ``k`` takes ``steps[k][0]`` seconds, then returns or raises ``steps[k][1]``
    (an exception instance is raised, a copy per attempt); past the end, the last step."""

    steps: list[tuple[float, object]]
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)
    seen_remaining: list[float | None] = field(default_factory=list)

    async def __call__(self) -> object:
        from tenacity_budget import remaining

        index = len(self.starts)
        self.starts.append(time.monotonic())
        self.seen_remaining.append(remaining())
        latency, outcome = self.steps[min(index, len(self.steps) - 1)]
        try:
            await asyncio.sleep(latency)
        except asyncio.CancelledError:
            self.cancelled.append(index)
            raise
        self.ends.append(time.monotonic())
        if isinstance(outcome, BaseException):
            raise copy.copy(outcome)
        return outcome


@dataclass
class FakeThrottle:
    """An adaptive throttle's face: ``admit()``, ``record(outcome)``, ``probability``, ``name``."""

    probability: float = 0.0
    admits: bool = True
    name: str = "dependency"
    admitted: int = 0
    recorded: list[object] = field(default_factory=list)

    def admit(self) -> bool:
        self.admitted += 1
        return self.admits

    def record(self, outcome: object) -> None:
        self.recorded.append(outcome)


@dataclass
class CountingBudget:
    """A retry budget granting ``grants`` withdrawals, counting every call."""

    grants: int
    deposits: int = 0
    asked: int = 0
    granted: int = 0

    def deposit(self) -> None:
        self.deposits += 1

    def try_withdraw(self) -> bool:
        self.asked += 1
        if self.granted < self.grants:
            self.granted += 1
            return True
        return False


@dataclass
class AsyncCountingBudget:
    """An asyncio retry budget (``is_async``): its withdrawal is awaited."""

    grants: int
    is_async: bool = True
    deposits: int = 0
    granted: int = 0

    def deposit(self) -> None:
        self.deposits += 1

    async def try_withdraw(self) -> bool:
        await asyncio.sleep(0)
        if self.granted < self.grants:
            self.granted += 1
            return True
        return False


@dataclass
class HedgeObserver:
    """A run observer with the optional ``on_hedge`` hook."""

    hedges: list[tuple[str, bool]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    successes: list[tuple[str, int]] = field(default_factory=list)
    exhausted: list[Any] = field(default_factory=list)

    def on_call(self, name: str) -> None:
        self.calls.append(name)

    def on_retry(self, name: str, attempt: int, sleep: float) -> None:
        raise AssertionError("a hedged run never sleeps to retry")

    def on_success(self, name: str, attempts: int) -> None:
        self.successes.append((name, attempts))

    def on_exhausted(self, name: str, report: Any) -> None:
        self.exhausted.append(report)

    def on_hedge(self, name: str, won: bool) -> None:
        self.hedges.append((name, won))


_HEADER = "X-Request-Timeout-Ms"


@dataclass
class SlowFirstServer:
    """An aiohttp handler for the hedging tests of the HTTP clients: answers ``slow`` after
    ``latency`` s to an attempt with the whole budget (the first), ``fast`` at once to any
    other; ``statuses`` (then 200) in the order requests arrive."""

    latency: float = 5.0
    statuses: list[int] = field(default_factory=list)
    seen: list[tuple[float, str, str]] = field(default_factory=list)
    slow_header: str = "10000"

    async def handle(self, request: web.Request) -> web.Response:
        left = request.headers.get(_HEADER, "")
        self.seen.append((time.monotonic(), request.method, left))
        status = self.statuses.pop(0) if self.statuses else 200
        if left == self.slow_header:
            await asyncio.sleep(self.latency)
            return web.Response(status=status, text="slow")
        return web.Response(status=status, text="fast")

    @property
    def instants(self) -> list[float]:
        return [instant for instant, _, _ in self.seen]


@asynccontextmanager
async def serving(server: SlowFirstServer) -> AsyncIterator[str]:
    """Serve ``server`` with aiohttp's own server on a free loopback port, in the running
    loop (the virtual clock's, where the test runs on it); yield its base URL."""
    async with aiohttp_serving(server.handle) as url:
        yield f"{url}/"
