"""The wall-clock guard: a run stops before a retry that would end past ``max_elapsed``.

The estimate of the next attempt is the longest attempt seen so far, and at least the
declared ``attempt_duration``; sync and async runs guard alike.

Time is virtual: freezegun freezes ``time.monotonic()`` and ``datetime.now()`` together, an
attempt that "takes" seven seconds advances the frozen clock by seven seconds, and every
sleep handed to tenacity records its duration and advances the clock by it (the ``clock``
fixture). No test sleeps for real and no test measures real time.
"""

from __future__ import annotations

import asyncio

import pytest
import tenacity

from tenacity_budget import BackoffPolicy, BudgetExhausted, StopReason, remaining
from tests._helpers import Clock, exhaust, failing


def test_seven_second_attempts_end_before_max_elapsed(clock: Clock) -> None:
    """Attempts of 7 s: the run stops when elapsed + sleep + 7 s would pass max_elapsed.

    Ends of attempts: 7, 15, 24, 35, 46, 57. At 57 the next retry would end at 57 + 4 + 7 = 68
    > 62, although 57 + 4 = 61 alone fits: only the attempt estimate stops it.
    """
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    assert policy.max_attempts() == 16  # the count is far from binding
    fn = policy.retry(sleep=clock.sleep)(failing(clock, [7.0]))
    error = exhaust(fn)
    report = error.report
    assert report.reason is StopReason.WALL_CLOCK
    assert report.attempts == 6
    assert clock.sleeps == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert report.slept == 15.0
    assert report.elapsed == 57.0
    assert clock.elapsed() == 57.0
    assert clock.elapsed() <= policy.max_elapsed
    assert isinstance(report.last_exception, OSError)


def test_same_run_with_plain_tenacity(clock: Clock) -> None:
    """policy.wait() and policy.stop() in tenacity.Retrying guard the same way."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    retrying = tenacity.Retrying(
        wait=policy.wait(),
        stop=policy.stop(),
        sleep=clock.sleep,
        retry_error_cls=BudgetExhausted,
    )
    with pytest.raises(BudgetExhausted) as info:
        retrying(failing(clock, [7.0]))
    assert info.value.report.reason is StopReason.WALL_CLOCK
    assert info.value.report.attempts == 6
    assert clock.elapsed() == 57.0


def test_estimate_is_the_longest_attempt_seen_not_the_last(clock: Clock) -> None:
    """First attempt 7 s, then 1 s each: the estimate stays 7 s.

    Attempt ends: 7, 9, 11, ..., 23; at 23 the next would be 23 + 1 + 7 = 31 > 30. With the
    last attempt as estimate the run would go on to 29; with no estimate, past 30.
    """
    policy = BackoffPolicy(base=1, cap=1, max_elapsed=30, jitter="none")
    fn = policy.retry(sleep=clock.sleep)(failing(clock, [7.0, 1.0]))
    report = exhaust(fn).report
    assert report.reason is StopReason.WALL_CLOCK
    assert report.attempts == 9
    assert clock.elapsed() == 23.0


@pytest.mark.parametrize(
    ("duration", "attempts", "reason", "end"),
    [
        # Estimate max(10, 2) = 10: after attempt 4 (ends 71) 71 + 21 + 10 = 102 > 100.
        (10.0, 4, StopReason.WALL_CLOCK, 71.0),
        # Estimate 2 (the longest seen): attempt 5 runs 92..94; then 105 s slept > 100.
        (0.0, 5, StopReason.SLEEP_BUDGET, 94.0),
    ],
)
def test_estimate_is_at_least_the_declared_attempt_duration(
    clock: Clock, duration: float, attempts: int, reason: StopReason, end: float
) -> None:
    """Attempts of 2 s with a fixed 21 s wait: the declared duration is the estimate."""
    policy = BackoffPolicy(base=1, cap=1, max_elapsed=100, attempt_duration=duration)
    assert policy.max_attempts() >= 8  # the count is not what stops these runs
    fn = policy.retry(sleep=clock.sleep, wait=tenacity.wait_fixed(21))(failing(clock, [2.0]))
    report = exhaust(fn).report
    assert report.attempts == attempts
    assert report.reason is reason
    assert clock.elapsed() == end


def test_count_is_the_reason_when_it_binds_first(clock: Clock) -> None:
    """Instant attempts: the affordable count, not the clock, ends the run."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, jitter="none")
    fn = policy.retry(sleep=clock.sleep)(failing(clock, [0.0]))
    report = exhaust(fn).report
    assert report.reason is StopReason.COUNT
    assert report.attempts == policy.max_attempts() + 1


def test_declared_duration_counted_by_solver_and_guard_together(clock: Clock) -> None:
    """Attempts that take exactly the declared 7 s: all affordable retries are made."""
    policy = BackoffPolicy(
        base=1, factor=2, cap=4, max_elapsed=60, attempt_duration=7, jitter="none"
    )
    fn = policy.retry(sleep=clock.sleep)(failing(clock, [7.0]))
    report = exhaust(fn).report
    assert report.attempts == policy.max_attempts() + 1 == 6
    assert report.reason is StopReason.COUNT
    assert clock.elapsed() == 57.0


def test_successful_run_returns_without_error(clock: Clock) -> None:
    """A run that succeeds on its third 7 s attempt returns its value."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    calls: list[float | None] = []

    @policy.retry(sleep=clock.sleep)
    def flaky() -> str:
        calls.append(remaining())
        clock.tick(7)
        if len(calls) < 3:
            raise OSError("not yet")
        return "done"

    assert flaky() == "done"
    assert calls == [62.0, 54.0, 45.0]
    assert clock.sleeps == [1.0, 2.0]


def test_async_run_with_seven_second_attempts(clock: Clock) -> None:
    """The async decorator guards like the sync one and serves remaining()."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    seen: list[float | None] = []

    @policy.retry(sleep=clock.async_sleep)
    async def fetch() -> None:
        seen.append(remaining())
        clock.tick(7)
        raise OSError("down")

    async def main() -> BudgetExhausted:
        with pytest.raises(BudgetExhausted) as info:
            await fetch()
        return info.value

    report = asyncio.run(main()).report
    assert report.reason is StopReason.WALL_CLOCK
    assert report.attempts == 6
    assert clock.sleeps == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert seen == [62.0, 54.0, 45.0, 34.0, 23.0, 12.0]
    assert clock.elapsed() == 57.0
    assert remaining() is None


def test_async_success_returns_value(clock: Clock) -> None:
    """An async run that succeeds on its third attempt returns its value."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, jitter="none")
    calls = 0

    @policy.retry(sleep=clock.async_sleep)
    async def fetch() -> int:
        nonlocal calls
        calls += 1
        clock.tick(7)
        if calls < 3:
            raise OSError("down")
        return calls

    assert asyncio.run(fetch()) == 3
    assert clock.sleeps == [1.0, 2.0]
