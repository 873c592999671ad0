"""Server-dictated waits (``retry_after=``): a Retry-After replaces the backoff delay.

A dictated wait that fits the budget and the deadline is slept in full; one that does not
stops the run at once, without sleeping any part of it.

Time is virtual: freezegun freezes ``time.monotonic()`` and ``datetime.now()`` together, an
attempt that "takes" seven seconds advances the frozen clock by seven seconds, and every
sleep handed to tenacity records its duration and advances the clock by it (the ``clock``
fixture). No test sleeps for real and no test measures real time.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pytest
import tenacity

from tenacity_budget import BackoffPolicy, BudgetExhausted, StopReason, remaining
from tests._helpers import START, Clock, exhaust


class Throttled(Exception):
    """What an HTTP client raises on 429/503: the response headers ride along."""

    def __init__(self, headers: dict[str, str]) -> None:
        """Keep the response ``headers``."""
        super().__init__(f"429 Too Many Requests {headers}")
        self.headers = headers


def retry_after_header(exc: BaseException) -> float | None:
    """Seconds from a ``Retry-After`` header, ``None`` to keep the backoff delay."""
    if isinstance(exc, Throttled) and "Retry-After" in exc.headers:
        return float(exc.headers["Retry-After"])
    return None


def throttled(clock: Clock, headers: list[dict[str, str]], took: float = 1.0) -> Any:
    """Attempt ``i`` takes ``took`` seconds and raises with ``headers[i]`` (last repeats)."""
    calls = 0

    def attempt() -> None:
        nonlocal calls
        clock.tick(took)
        header = headers[min(calls, len(headers) - 1)]
        calls += 1
        raise Throttled(header)

    return attempt


def test_retry_after_replaces_the_backoff_delay(clock: Clock) -> None:
    """Retry i sleeps the server's value when it gives one, else the policy's delay."""
    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=100, jitter="none")
    headers = [{"Retry-After": "5"}, {}, {"Retry-After": "0.5"}, {}, {}, {}]
    fn = policy.retry(sleep=clock.sleep, retry_after=retry_after_header)(throttled(clock, headers))
    exhaust(fn)
    # Retry i waits the server's value when given, else the nominal delay of retry i.
    assert clock.sleeps[:5] == [5.0, 2.0, 0.5, 8.0, 8.0]


def test_retry_after_none_keeps_the_backoff(clock: Clock) -> None:
    """A reader that always answers None leaves the seeded schedule untouched."""
    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=100, jitter="full")
    fn = policy.retry(sleep=clock.sleep, seed=11, retry_after=retry_after_header)(
        throttled(clock, [{}], took=0.0)
    )
    report = exhaust(fn).report
    assert report.reason is StopReason.COUNT
    assert clock.sleeps == policy.schedule(seed=11)


def test_retry_after_with_plain_tenacity_wait(clock: Clock) -> None:
    """policy.wait(retry_after=...) works in plain tenacity.Retrying too."""
    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=100, jitter="none")
    retrying = tenacity.Retrying(
        wait=policy.wait(retry_after=retry_after_header),
        stop=policy.stop(),
        sleep=clock.sleep,
        retry_error_cls=BudgetExhausted,
    )
    with pytest.raises(BudgetExhausted):
        retrying(throttled(clock, [{"Retry-After": "3"}, {}]))
    assert clock.sleeps[:3] == [3.0, 2.0, 4.0]


def test_retry_after_crossing_the_budget_stops_without_sleeping(clock: Clock) -> None:
    """An hour's Retry-After in a 100 s budget: the run stops at once, unslept."""
    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=100, jitter="none")
    fn = policy.retry(sleep=clock.sleep, retry_after=retry_after_header)(
        throttled(clock, [{"Retry-After": "3600"}])
    )
    report = exhaust(fn).report
    assert report.attempts == 1
    assert report.reason in {StopReason.SLEEP_BUDGET, StopReason.WALL_CLOCK}
    assert clock.sleeps == []
    assert clock.elapsed() == 1.0  # the attempt's own second; no part of the hour


def test_retry_after_crossing_the_rest_of_the_budget_stops_without_sleeping(
    clock: Clock,
) -> None:
    """After 1 + 2 s of backoff and three 10 s attempts (ends at 33), 60 s cannot fit in 100."""
    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=100, jitter="none")
    headers = [{}, {}, {"Retry-After": "60"}]
    fn = policy.retry(sleep=clock.sleep, retry_after=retry_after_header)(
        throttled(clock, headers, took=10.0)
    )
    report = exhaust(fn).report
    assert report.attempts == 3
    assert report.reason is StopReason.WALL_CLOCK  # 33 + 60 + 10 > 100; 3 + 60 slept fits
    assert clock.sleeps == [1.0, 2.0]
    assert 60.0 not in clock.sleeps
    assert clock.elapsed() == 33.0


def test_retry_after_crossing_the_deadline_stops_without_sleeping(clock: Clock) -> None:
    """Retry-After 40 s with the deadline 27 s away: stop now, do not sleep."""
    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=100, jitter="none")
    deadline = START + timedelta(seconds=30)
    fn = policy.retry(sleep=clock.sleep, retry_after=retry_after_header, deadline=deadline)(
        throttled(clock, [{}, {"Retry-After": "40"}])
    )
    report = exhaust(fn).report
    assert report.reason is StopReason.DEADLINE
    assert report.attempts == 2
    assert clock.sleeps == [1.0]
    assert clock.wall() == START + timedelta(seconds=3)


def test_retry_after_within_budget_is_slept_in_full(clock: Clock) -> None:
    """A Retry-After that fits the budget is slept exactly."""
    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=100, jitter="none")
    calls: list[float | None] = []

    @policy.retry(sleep=clock.sleep, retry_after=retry_after_header)
    def fetch() -> str:
        calls.append(remaining())
        clock.tick(1)
        if len(calls) == 1:
            raise Throttled({"Retry-After": "90"})  # 1 + 90 + 1 = 92 <= 100
        return "ok"

    assert fetch() == "ok"
    assert clock.sleeps == [90.0]
    assert calls == [100.0, 9.0]


def test_async_deadline_from_call_arguments_and_retry_after(clock: Clock) -> None:
    """Async: a per-call deadline and a Retry-After together."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, jitter="none")

    @policy.retry(
        sleep=clock.async_sleep,
        deadline=lambda rs: rs.kwargs["deadline"],
        retry_after=retry_after_header,
    )
    async def fetch(*, deadline: datetime) -> None:
        clock.tick(2)
        raise Throttled({"Retry-After": "10"})

    async def main() -> BudgetExhausted:
        with pytest.raises(BudgetExhausted) as info:
            await fetch(deadline=START + timedelta(seconds=25))
        return info.value

    report = asyncio.run(main()).report
    # Ends at 2, 14: then 14 + 10 + 2 = 26 > 25.
    assert report.reason is StopReason.DEADLINE
    assert clock.sleeps == [10.0]
    assert clock.elapsed() == 14.0


def test_the_built_in_retry_after_reads_aiohttps_client_response_error(clock: Clock) -> None:
    """Issue 17: aiohttp's ``raise_for_status()`` error carries ``.headers``, not a response.

    Its ``Retry-After: 30`` used to be ignored (the backoff's 0.03 s was slept instead).
    """
    import aiohttp
    from multidict import CIMultiDict, CIMultiDictProxy
    from yarl import URL

    from tenacity_budget.http import retry_after

    url = URL("http://service.test/")
    info = aiohttp.RequestInfo(url, "GET", CIMultiDictProxy(CIMultiDict()), url)
    policy = BackoffPolicy(base=0.03, factor=2, cap=1, max_elapsed=100, jitter="none")
    calls = 0

    @policy.retry(sleep=clock.sleep, retry_after=retry_after)
    def fetch() -> str:
        nonlocal calls
        calls += 1
        if calls == 1:
            headers = CIMultiDictProxy(CIMultiDict({"Retry-After": "30"}))
            raise aiohttp.ClientResponseError(info, (), status=429, headers=headers)
        return "ok"

    assert fetch() == "ok"
    assert clock.sleeps == [30.0]
