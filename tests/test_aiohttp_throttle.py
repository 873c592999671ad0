"""The adaptive throttle (issue 18) in the aiohttp middleware, against aiohttp's own server.

Backoff sleeps run on the virtual clock (the ``virtual_clock`` fixture); the throttle's
window is read inside it, where its counts were made.
"""

from __future__ import annotations

import random
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tenacity_budget import (
    AdaptiveThrottle,
    BackoffPolicy,
    BudgetExhausted,
    RetryBudget,
    StopReason,
)
from tenacity_budget.aiohttp import budget_middleware
from tenacity_budget.exhaustion import Throttled
from tenacity_budget.testing import VirtualClock
from tests._servers import aiohttp_serving

POLICY = BackoffPolicy(base=1, cap=1, max_elapsed=10, jitter="none")


@dataclass
class Server:
    """Answers ``statuses`` in turn (then ``then``), counting the requests it saw."""

    statuses: list[int] = field(default_factory=list)
    then: int = 200
    seen: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.seen += 1
        status = self.statuses.pop(0) if self.statuses else self.then
        return web.Response(status=status, text=str(status))


@asynccontextmanager
async def serving(server: Server) -> AsyncIterator[str]:
    async with aiohttp_serving(server.handle) as url:
        yield f"{url}/"


def session(**options: Any) -> aiohttp.ClientSession:
    policy = options.pop("policy", POLICY)
    return aiohttp.ClientSession(middlewares=(budget_middleware(policy, **options),))


class Scripted:
    """A throttle that admits as scripted (then always), recording what it is told."""

    def __init__(self, *admits: bool, probability: float = 0.5) -> None:
        self.admits = list(admits)
        self.asked = 0
        self.recorded: list[object] = []
        self.name = "scripted"
        self.probability = probability

    def admit(self) -> bool:
        self.asked += 1
        return self.admits.pop(0) if self.admits else True

    def record(self, outcome: object) -> None:
        self.recorded.append(outcome)

    def statuses(self) -> list[int | str]:
        return [getattr(o, "status", type(o).__name__) for o in self.recorded]


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def _throttle(seed: int = 1) -> AdaptiveThrottle:
    return AdaptiveThrottle(k=2.0, window=60.0, name="items", rng=random.Random(seed))


# -- construction ----------------------------------------------------------------------------


@pytest.mark.parametrize("throttle", [object(), 3, "items"])
def test_bad_throttles_are_refused_at_construction(throttle: object) -> None:
    with pytest.raises(TypeError, match="throttle must be an adaptive throttle"):
        budget_middleware(POLICY, throttle=throttle)


def test_the_throttle_is_kept() -> None:
    throttle = _throttle()
    assert budget_middleware(POLICY, throttle=throttle).throttle is throttle


# -- every attempt asks it, every outcome is recorded once -----------------------------------


async def test_every_attempt_asks_and_every_outcome_is_recorded_once(
    virtual_clock: VirtualClock,
) -> None:
    server = Server(statuses=[503, 502])
    throttle = Scripted()
    async with (
        serving(server) as url,
        session(throttle=throttle) as client,
        client.get(url) as response,
    ):
        assert response.status == 200
    assert server.seen == 3
    assert throttle.asked == 3  # the first attempt and two retries; the replay is not asked
    assert throttle.statuses() == [503, 502, 200]  # the replayed first not recorded again


async def test_a_success_at_once_is_asked_and_recorded_once(virtual_clock: VirtualClock) -> None:
    server = Server()
    throttle = Scripted()
    async with (
        serving(server) as url,
        session(throttle=throttle) as client,
        client.get(url) as response,
    ):
        assert response.status == 200
    assert (throttle.asked, throttle.statuses()) == (1, [200])


async def test_connection_errors_are_recorded_once_per_attempt(
    virtual_clock: VirtualClock,
) -> None:
    throttle = Scripted()
    # Each retry's wait plus an attempt fits: no attempt is cut (a cut one has no outcome).
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=12, jitter="none")
    async with session(policy=policy, throttle=throttle) as client:
        with pytest.raises(aiohttp.ClientConnectorError) as info:
            await client.get(f"http://127.0.0.1:{closed_port()}/")
    attempts = info.value.report.attempts  # type: ignore[attr-defined]
    assert attempts == policy.max_attempts() + 1
    assert throttle.asked == attempts
    assert throttle.statuses() == ["ClientConnectorError"] * attempts


# -- a rejected first attempt ----------------------------------------------------------------


async def test_a_rejected_first_attempt_sends_nothing_and_raises_aiohttps_own_error(
    virtual_clock: VirtualClock,
) -> None:
    server = Server()
    throttle = Scripted(False, probability=0.75)
    budget = RetryBudget(ratio=1.0, min_per_second=0.0, ttl=60.0)
    async with serving(server) as url, session(throttle=throttle, budget=budget) as client:
        with pytest.raises(aiohttp.ClientConnectionError) as info:
            await client.get(url)
        balance = budget.balance
    error = info.value
    assert isinstance(error, BudgetExhausted)
    assert error.report.reason is StopReason.THROTTLED
    assert error.report.attempts == 0
    rejection = error.last_attempt.exception()
    assert isinstance(rejection, Throttled)
    assert (rejection.throttle, rejection.probability) == ("scripted", 0.75)
    assert isinstance(error.__cause__, Throttled)
    assert server.seen == 0
    assert throttle.recorded == []
    assert balance == 0  # no deposit for a call that sent nothing


async def test_the_probability_rises_and_rejected_first_attempts_send_nothing(
    virtual_clock: VirtualClock,
) -> None:
    throttle = _throttle()
    budget = RetryBudget(ratio=0.2, min_per_second=0.0, ttl=60.0)
    server = Server(then=429)  # every request answered 429
    outcomes: list[int | str] = []
    async with serving(server) as url, session(throttle=throttle, budget=budget) as client:
        for _ in range(60):  # a POST is sent once: the first attempt alone asks
            try:
                async with client.post(url, data=b"x") as response:
                    outcomes.append(response.status)
            except BudgetExhausted as exc:
                assert isinstance(exc, aiohttp.ClientConnectionError)  # noqa: PT017
                assert exc.report.reason is StopReason.THROTTLED  # noqa: PT017
                outcomes.append("rejected")
        # Read on the virtual clock, where the windows' counts were made.
        probability, balance = throttle.probability, budget.balance
    rejected = outcomes.count("rejected")
    sent = 60 - rejected
    assert outcomes[0] == 429  # no history: the first call is always sent
    assert 0 < rejected < 60
    assert server.seen == sent
    assert probability == pytest.approx(60 / 61)  # 60 asked, none accepted
    assert balance == sent // 5  # one deposit (0.2) per call sent


# -- a rejected retry ------------------------------------------------------------------------


async def test_a_rejected_retry_on_a_status_returns_the_last_response(
    virtual_clock: VirtualClock,
) -> None:
    server = Server(then=503)
    throttle = Scripted(True, False)
    async with (
        serving(server) as url,
        session(throttle=throttle) as client,
        client.get(url) as response,
    ):
        assert response.status == 503
        assert await response.text() == "503"
    assert server.seen == 1
    assert throttle.asked == 2
    assert throttle.statuses() == [503]


async def test_a_rejected_retry_on_a_connection_error_raises_aiohttps_error(
    virtual_clock: VirtualClock,
) -> None:
    throttle = Scripted(True, True, False)
    async with session(throttle=throttle) as client:
        with pytest.raises(aiohttp.ClientConnectorError) as info:
            await client.get(f"http://127.0.0.1:{closed_port()}/")
    error = info.value
    assert isinstance(error, BudgetExhausted)
    assert error.report.reason is StopReason.THROTTLED
    assert error.report.attempts == 2
    assert throttle.statuses() == ["ClientConnectorError"] * 2


async def test_a_rejected_retry_never_spends_the_retry_budget(
    virtual_clock: VirtualClock,
) -> None:
    server = Server(then=503)
    budget = RetryBudget(ratio=1.0, min_per_second=0.0, ttl=60.0)
    async with serving(server) as url, session(throttle=Scripted(True, False), budget=budget) as c:
        async with c.get(url) as response:
            assert response.status == 503
        balance = budget.balance
    assert balance == 1  # the call's deposit, nothing withdrawn


# -- a throttle per host ---------------------------------------------------------------------


async def test_a_callable_maps_each_host_to_its_throttle(virtual_clock: VirtualClock) -> None:
    server = Server()
    throttles = {"127.0.0.1": Scripted(), "localhost": Scripted()}
    async with (
        serving(server) as url,
        session(throttle=throttles.__getitem__) as client,
        client.get(url) as response,
    ):
        assert response.status == 200
    assert throttles["127.0.0.1"].asked == 1
    assert throttles["localhost"].asked == 0


async def test_a_callable_returning_no_throttle_is_refused(virtual_clock: VirtualClock) -> None:
    server = Server()
    async with serving(server) as url, session(throttle=lambda host: object()) as client:
        with pytest.raises(TypeError, match="throttle must be an adaptive throttle"):
            await client.get(url)
    assert server.seen == 0
