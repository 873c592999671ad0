"""The adaptive throttle (issue 18) in the httpx transports, against a real local server."""

from __future__ import annotations

import asyncio
import random
import socket
import threading
from typing import Any

import httpx
import pytest

from tenacity_budget import AdaptiveThrottle, BackoffPolicy, BudgetExhausted, StopReason
from tenacity_budget.exhaustion import Throttled
from tenacity_budget.httpx import AsyncBudgetTransport, BudgetTransport, exhaustion_report
from tenacity_budget.retry_budget import RetryBudget
from tenacity_budget.testing import virtual_clock
from tests._servers import respond, serve
from tests._throttles import TOO_MANY, Counting, Ledger, fed, twin

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


# -- a rejected retry, one throttle per host, the async transport ----------------------------


def _closed_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


def _response_retry_rejected() -> None:
    """Seed 1 with no history: the first attempt is admitted (no draw), its 429 makes
    p = 1/2, and the seed's first draw (0.134) rejects the retry."""
    model = twin(seed=1)
    assert model.admit()
    model.record(TOO_MANY)
    assert not model.admit()


def _error_retry_rejected() -> None:
    """Seed 1 after three 429s: p = 3/4 and the seed's draw admits the first attempt; its
    connection error is an accept, p = (4 - 2) / 5, and the next draw rejects the retry."""
    model = twin(seed=1, overloads=3)
    assert model.admit()
    model.record(httpx.ConnectError("refused"))
    assert not model.admit()


def test_a_rejected_retry_returns_the_last_response_reason_throttled() -> None:
    app = Overloaded(overloaded=10**6)
    with serve(app) as url, virtual_clock() as clock:
        _response_retry_rejected()
        throttle, budget = Counting(seed=1), Ledger()
        transport = BudgetTransport(POLICY, throttle=throttle, budget=budget)
        with httpx.Client(transport=transport) as client:
            response = client.get(url)
    assert response.status_code == 429  # the last response, as for any spent budget
    report = exhaustion_report(response)
    assert report is not None
    assert report.reason is StopReason.THROTTLED
    assert report.attempts == 1
    assert app.seen == 1
    assert throttle.decisions == [True, False]
    assert throttle.recorded == [response]
    # The throttle rejected the retry before the retry budget was asked and before a sleep.
    assert (budget.deposits, budget.withdrawals) == (1, 0)
    assert clock.sleeps == []


def test_a_rejected_retry_after_a_transport_error_raises_its_kind() -> None:
    with virtual_clock() as clock:
        _error_retry_rejected()
        throttle, budget = fed(Counting(seed=1), 3), Ledger()
        transport = BudgetTransport(POLICY, throttle=throttle, budget=budget)
        with (
            httpx.Client(transport=transport) as client,
            pytest.raises(httpx.ConnectError) as caught,
        ):
            client.get(_closed_url())
    error = caught.value
    assert isinstance(error, BudgetExhausted)
    assert error.report.reason is StopReason.THROTTLED
    assert error.report.attempts == 1
    assert isinstance(error.__cause__, httpx.ConnectError)
    assert throttle.decisions[3:] == [True, False]
    assert throttle.recorded[3:] == [error.__cause__]
    assert (budget.deposits, budget.withdrawals) == (1, 0)
    assert clock.sleeps == []


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_one_throttle_per_host(asynchronous: bool) -> None:
    app = Overloaded(overloaded=1)  # a 429, then 200s
    hosts: list[str] = []
    with serve(app) as url, virtual_clock():
        port = url.rsplit(":", 1)[1]
        assert not twin(seed=1, overloads=10).admit()
        overloaded = fed(Counting(seed=1), 10)  # its next draw rejects
        model = twin(seed=0)
        model.admit()
        model.record(TOO_MANY)
        assert model.admit()  # after one 429, p = 1/2: the seed's draw admits the retry
        healthy = Counting(seed=0)
        throttles = {"127.0.0.1": overloaded, "localhost": healthy}

        def throttle_of(host: str) -> AdaptiveThrottle:
            hosts.append(host)
            return throttles[host]

        urls = (f"http://127.0.0.1:{port}/a", f"http://localhost:{port}/b")
        outcomes = (_gets_async if asynchronous else _gets)(throttle_of, urls)
    rejected, response = outcomes
    assert isinstance(rejected, httpx.ConnectError)
    assert isinstance(rejected, BudgetExhausted)
    assert rejected.report.reason is StopReason.THROTTLED
    assert isinstance(response, httpx.Response)
    assert response.status_code == 200  # its 429 retried: the other host's throttle admits
    assert hosts == ["127.0.0.1", "localhost"]  # asked once per request
    assert app.seen == 2  # nothing sent to the overloaded host
    assert overloaded.decisions[10:] == [False]
    assert overloaded.recorded[10:] == []
    assert healthy.decisions == [True, True]
    assert [r.status_code for r in healthy.recorded] == [429, 200]  # type: ignore[attr-defined]


def _gets(throttle_of: Any, urls: tuple[str, ...]) -> list[object]:
    """Each URL's response, or what its request raised, through one sync client."""
    outcomes: list[object] = []
    with httpx.Client(transport=BudgetTransport(POLICY, throttle=throttle_of)) as client:
        for url in urls:
            try:
                outcomes.append(client.get(url))
            except httpx.HTTPError as exc:
                outcomes.append(exc)
    return outcomes


def _gets_async(throttle_of: Any, urls: tuple[str, ...]) -> list[object]:
    """:func:`_gets` through one async client (its own event loop, on the virtual clock)."""

    async def main() -> list[object]:
        outcomes: list[object] = []
        transport = AsyncBudgetTransport(POLICY, throttle=throttle_of)
        async with httpx.AsyncClient(transport=transport) as client:
            for url in urls:
                try:
                    outcomes.append(await client.get(url))
                except httpx.HTTPError as exc:
                    outcomes.append(exc)
        return outcomes

    return asyncio.run(main())


def test_async_a_rejected_first_attempt_sends_nothing_and_deposits_nothing() -> None:
    app = Overloaded(overloaded=0)
    with serve(app) as url, virtual_clock() as clock:
        assert not twin(seed=1, overloads=10).admit()  # the seed's next draw rejects
        throttle, budget = fed(Counting(seed=1), 10), Ledger()
        transport = AsyncBudgetTransport(POLICY, throttle=throttle, budget=budget)

        async def main() -> None:
            async with httpx.AsyncClient(transport=transport) as client:
                await client.get(url)

        with pytest.raises(httpx.ConnectError) as caught:
            asyncio.run(main())
        probability = throttle.probability
    error = caught.value
    assert isinstance(error, BudgetExhausted)
    assert error.report.reason is StopReason.THROTTLED
    assert error.report.attempts == 0  # nothing was sent
    rejection = error.last_attempt.exception()
    assert isinstance(rejection, Throttled)
    assert isinstance(error.__cause__, Throttled)
    assert rejection.probability == probability
    assert app.seen == 0
    assert throttle.decisions[10:] == [False]
    assert throttle.recorded[10:] == []
    assert (budget.deposits, budget.withdrawals) == (0, 0)
    assert clock.sleeps == []


def test_async_a_rejected_retry_ends_the_run_reason_throttled() -> None:
    app = Overloaded(overloaded=10**6)
    with serve(app) as url, virtual_clock() as clock:
        _response_retry_rejected()
        throttle, budget = Counting(seed=1), Ledger()
        transport = AsyncBudgetTransport(POLICY, throttle=throttle, budget=budget)

        async def main() -> httpx.Response:
            async with httpx.AsyncClient(transport=transport) as client:
                return await client.get(url)

        response = asyncio.run(main())
        sleeps = [s for s in clock.sleeps if s]  # asyncio's own sleep(0) calls aside
    assert response.status_code == 429
    report = exhaustion_report(response)
    assert report is not None
    assert report.reason is StopReason.THROTTLED
    assert report.attempts == 1
    assert app.seen == 1
    assert throttle.decisions == [True, False]
    assert throttle.recorded == [response]
    assert (budget.deposits, budget.withdrawals) == (1, 0)
    assert sleeps == []


def test_async_a_rejected_retry_after_a_transport_error_raises_its_kind() -> None:
    with virtual_clock():
        _error_retry_rejected()
        throttle, budget = fed(Counting(seed=1), 3), Ledger()
        transport = AsyncBudgetTransport(POLICY, throttle=throttle, budget=budget)

        async def main() -> None:
            async with httpx.AsyncClient(transport=transport) as client:
                await client.get(_closed_url())

        with pytest.raises(httpx.ConnectError) as caught:
            asyncio.run(main())
    error = caught.value
    assert isinstance(error, BudgetExhausted)
    assert error.report.reason is StopReason.THROTTLED
    assert error.report.attempts == 1
    assert throttle.decisions[3:] == [True, False]
    assert throttle.recorded[3:] == [error.__cause__]
    assert (budget.deposits, budget.withdrawals) == (1, 0)
