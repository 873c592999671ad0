"""The adaptive throttle (issue 18) in the httpx transports, against a real local server."""

from __future__ import annotations

import random
import threading
from typing import Any

import httpx
import pytest

from tenacity_budget import AdaptiveThrottle, BackoffPolicy, BudgetExhausted, StopReason
from tenacity_budget.exhaustion import Throttled
from tenacity_budget.httpx import AsyncBudgetTransport, BudgetTransport
from tenacity_budget.retry_budget import RetryBudget
from tenacity_budget.testing import virtual_clock
from tests._servers import respond, serve

POLICY = BackoffPolicy(base=1, cap=1, max_elapsed=10, jitter="none")


class Overloaded:
    """An ASGI app answering 429 to the first ``overloaded`` requests, then 200."""

    def __init__(self, overloaded: int) -> None:
        self.overloaded = overloaded
        self.seen = 0
        self.lock = threading.Lock()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        with self.lock:
            self.seen += 1
            status = 429 if self.seen <= self.overloaded else 200
        await respond(send, status)


def _throttle(seed: int = 1) -> AdaptiveThrottle:
    return AdaptiveThrottle(k=2.0, window=60.0, name="items", rng=random.Random(seed))


def test_bad_throttles_are_refused_at_construction() -> None:
    with pytest.raises(TypeError, match="throttle must be"):
        BudgetTransport(POLICY, throttle=object())
    with pytest.raises(TypeError, match="throttle must be"):
        AsyncBudgetTransport(POLICY, throttle=3)


def test_the_probability_rises_and_rejected_first_attempts_send_nothing() -> None:
    throttle = _throttle()
    budget = RetryBudget(ratio=0.2, min_per_second=0.0, ttl=60.0)
    app = Overloaded(overloaded=10**6)  # every request answered 429
    methods = frozenset({"PUT"})  # a POST is sent once: the first attempt alone asks it
    with (
        serve(app) as url,
        virtual_clock(),
        httpx.Client(
            transport=BudgetTransport(POLICY, throttle=throttle, budget=budget, methods=methods)
        ) as client,
    ):
        outcomes: list[int | str] = []
        for _ in range(60):
            try:
                outcomes.append(client.post(url).status_code)
            except BudgetExhausted as exc:
                assert isinstance(exc, httpx.ConnectError)  # noqa: PT017
                assert exc.report.reason is StopReason.THROTTLED  # noqa: PT017
                assert exc.report.attempts == 0  # noqa: PT017  # nothing was sent
                assert isinstance(exc.last_attempt.exception(), Throttled)  # noqa: PT017
                assert isinstance(exc.__cause__, Throttled)  # noqa: PT017
                outcomes.append("rejected")
        # Read on the virtual clock, where the windows' counts were made.
        probability, balance = throttle.probability, budget.balance
    rejected = outcomes.count("rejected")
    sent = 60 - rejected
    assert outcomes[0] == 429  # no history: the first call is always sent
    assert 0 < rejected < 60
    assert app.seen == sent  # nothing sent for a rejected call
    # Every call was asked (60 requests), none accepted: (60 - 2 * 0) / 61.
    assert probability == pytest.approx(60 / 61)
    # The retry budget got one deposit per call sent, none for a rejected one (POSTs are
    # not retried: nothing withdrawn): 0.2 per deposit, whole withdrawals.
    assert balance == sent // 5
