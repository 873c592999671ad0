"""Deadlines that nest and travel: scopes, nested runs, remaining(default), hard stops.

Issue 12's core: a :func:`deadline_scope` or an enclosing budgeted run is every run's
deadline; :func:`remaining` never exceeds the enclosing time left; ``hard_deadline=True``
cancels an async attempt still running when the run's time is up. Time is the virtual clock
throughout: nothing here waits for real.
"""

from __future__ import annotations

import asyncio
import math
import threading
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tenacity import Retrying, stop_after_attempt

from tenacity_budget import BackoffPolicy, BudgetExhausted, StopReason, deadline_scope, remaining
from tenacity_budget.runtime import ambient_deadline
from tenacity_budget.testing import VirtualClock, virtual_clock

POLICY = BackoffPolicy(base=1, factor=2, cap=60, max_elapsed=300, jitter="none")


# -- remaining(default) -------------------------------------------------------------------


def test_remaining_outside_any_run_or_scope_is_the_default() -> None:
    assert remaining() is None
    assert remaining(30.0) == 30.0
    assert ambient_deadline() is None


def test_remaining_inside_a_scope_counts_down(virtual_clock: VirtualClock) -> None:
    with deadline_scope(10):
        assert remaining(30.0) == 10.0
        virtual_clock.advance(4)
        assert remaining(30.0) == 6.0
        virtual_clock.advance(10)
        assert remaining(30.0) == 0.0
    assert remaining(30.0) == 30.0


def test_an_absolute_deadline_scope(virtual_clock: VirtualClock) -> None:
    end = virtual_clock.now() + timedelta(seconds=20)
    with deadline_scope(deadline=end):
        assert remaining() == 20.0
        assert ambient_deadline() == end


def test_seconds_and_deadline_together_take_the_earlier(virtual_clock: VirtualClock) -> None:
    with deadline_scope(5, deadline=virtual_clock.now() + timedelta(seconds=20)):
        assert remaining() == 5.0
    with deadline_scope(50, deadline=virtual_clock.now() + timedelta(seconds=20)):
        assert remaining() == 20.0


def test_scopes_nest_and_only_tighten(virtual_clock: VirtualClock) -> None:
    with deadline_scope(10):
        with deadline_scope(100):
            assert remaining() == 10.0
        with deadline_scope(3):
            assert remaining() == 3.0
        assert remaining() == 10.0


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        ((), {}, TypeError),
        ((math.nan,), {}, ValueError),
        ((-1,), {}, ValueError),
        ((True,), {}, TypeError),
        (("5",), {}, TypeError),
        ((), {"deadline": datetime(2030, 1, 1)}, ValueError),  # naive
        ((), {"deadline": 5}, TypeError),
    ],
)
def test_bad_scopes_are_refused_at_construction(
    args: tuple[object, ...], kwargs: dict[str, object], error: type[Exception]
) -> None:
    with pytest.raises(error):
        deadline_scope(*args, **kwargs)  # type: ignore[arg-type]


def test_a_scope_beyond_any_clock_has_no_end_from_seconds() -> None:
    with deadline_scope(10**400):
        assert remaining(30.0) == 30.0
    with deadline_scope(1e308):
        assert remaining() is None


def test_scopes_are_per_thread(virtual_clock: VirtualClock) -> None:
    seen: list[float | None] = []
    with deadline_scope(10):
        thread = threading.Thread(target=lambda: seen.append(remaining()))
        thread.start()
        thread.join()
        assert remaining() == 10.0
    assert seen == [None]


def test_scopes_are_per_task_and_work_with_async_with(virtual_clock: VirtualClock) -> None:
    async def inner(seconds: float) -> float | None:
        async with deadline_scope(seconds):
            await asyncio.sleep(0)
            return remaining()

    async def main() -> list[float | None]:
        return list(await asyncio.gather(inner(3), inner(7), inner(5)))

    assert asyncio.run(main()) == [3.0, 7.0, 5.0]


# -- budgeted runs inside scopes ----------------------------------------------------------


def test_a_policy_retry_run_never_ends_after_its_scope(virtual_clock: VirtualClock) -> None:
    seen: list[float | None] = []

    @POLICY.retry()
    def fetch() -> None:
        seen.append(remaining())
        raise OSError("down")

    with deadline_scope(10), pytest.raises(BudgetExhausted) as caught:
        fetch()
    report = caught.value.report
    assert report.reason is StopReason.DEADLINE
    assert virtual_clock.sleeps == [1.0, 2.0, 4.0]  # 7 s slept; 8 more would pass 10 s
    assert seen == [10.0, 9.0, 7.0, 3.0]
    assert report.deadline == virtual_clock.start + timedelta(seconds=10)


def test_plain_tenacity_with_the_policy_stop_respects_the_scope(
    virtual_clock: VirtualClock,
) -> None:
    def fails() -> None:
        raise OSError("down")

    retrying = Retrying(wait=POLICY.wait(), stop=POLICY.stop(), retry_error_cls=BudgetExhausted)
    with deadline_scope(10), pytest.raises(BudgetExhausted) as caught:
        retrying(fails)
    assert caught.value.report.reason is StopReason.DEADLINE
    assert virtual_clock.sleeps == [1.0, 2.0, 4.0]


def test_a_nested_run_sees_the_outer_runs_time_left(virtual_clock: VirtualClock) -> None:
    outer_policy = BackoffPolicy(base=1, cap=1, max_elapsed=10, jitter="none")
    inner_policy = BackoffPolicy(base=1, cap=60, max_elapsed=300, jitter="none")
    inner_seen: list[float | None] = []
    inner_reports: list[BudgetExhausted] = []

    @inner_policy.retry()
    def inner() -> None:
        inner_seen.append(remaining())
        raise OSError("inner down")

    @outer_policy.retry(stop=stop_after_attempt(1))
    def outer() -> None:
        virtual_clock.advance(2)
        try:
            inner()
        except BudgetExhausted as exc:
            inner_reports.append(exc)
            raise

    with pytest.raises(BudgetExhausted):
        outer()
    # The inner run started with 8 s of the outer's 10 s left, not its own 300 s.
    assert inner_seen[0] == 8.0
    assert all(left is not None and left <= 8.0 for left in inner_seen)
    assert inner_reports[0].report.reason is StopReason.DEADLINE
    assert inner_reports[0].report.elapsed <= 8.0


@settings(max_examples=40, deadline=None)
@given(
    scope=st.floats(min_value=0.5, max_value=400),
    attempt=st.floats(min_value=0.0, max_value=20),
)
def test_no_run_inside_a_scope_ends_after_it(scope: float, attempt: float) -> None:
    policy = BackoffPolicy(base=1, cap=30, max_elapsed=300, jitter="full", attempt_duration=attempt)
    seen: list[float | None] = []
    with virtual_clock() as clock:

        @policy.retry(seed=3)
        def fetch() -> None:
            seen.append(remaining())
            clock.advance(attempt)
            raise OSError("down")

        with deadline_scope(scope), pytest.raises(BudgetExhausted) as caught:
            fetch()
    if caught.value.report.attempts > 1 or attempt <= scope:
        # The first attempt always runs; every later one was admitted to fit.
        assert clock.elapsed <= max(scope, attempt) + 1e-9
    assert all(left is not None and left <= scope for left in seen)


# -- hard_deadline ------------------------------------------------------------------------


def test_hard_deadline_on_a_sync_function_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="coroutine function"):

        @POLICY.retry(hard_deadline=True)
        def sync() -> None: ...


def test_hard_deadline_cancels_an_attempt_that_overruns_the_budget(
    virtual_clock: VirtualClock,
) -> None:
    policy = BackoffPolicy(base=1, cap=5, max_elapsed=30, jitter="none")
    calls: list[float | None] = []

    @policy.retry(hard_deadline=True)
    async def slow() -> str:
        calls.append(remaining())
        await asyncio.sleep(3600)  # far past the budget: cancelled at its end
        return "too late"

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(slow())
    report = caught.value.report
    assert calls == [30.0]
    assert report.reason is StopReason.WALL_CLOCK
    assert report.attempts == 1
    assert isinstance(caught.value.__cause__, TimeoutError)


def test_hard_deadline_reports_the_deadline_when_a_scope_is_what_ran_out(
    virtual_clock: VirtualClock,
) -> None:
    @POLICY.retry(hard_deadline=True)
    async def slow() -> None:
        await asyncio.sleep(100)

    async def main() -> None:
        async with deadline_scope(5):
            await slow()

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(main())
    assert caught.value.report.reason is StopReason.DEADLINE


def test_hard_deadline_cancels_a_real_hang(virtual_clock: VirtualClock) -> None:
    # An attempt that never returns (an event nobody sets) is cancelled by the timeout
    # the run sets from its time left; the virtual clock is not involved in that timer.
    policy = BackoffPolicy(base=0.01, cap=0.01, max_elapsed=0.05, jitter="none")

    @policy.retry(hard_deadline=True)
    async def hangs() -> None:
        await asyncio.Event().wait()

    async def main() -> None:
        await asyncio.wait_for(hangs(), timeout=30)

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(main())
    assert caught.value.report.reason is StopReason.WALL_CLOCK


def test_hard_deadline_leaves_fast_attempts_alone(virtual_clock: VirtualClock) -> None:
    attempts: list[int] = []

    @POLICY.retry(hard_deadline=True)
    async def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise OSError("blip")
        return "ok"

    assert asyncio.run(flaky()) == "ok"
    assert virtual_clock.sleeps == [1.0, 2.0]


def test_time_left_never_exceeds_the_scope_in_the_first_attempt(
    virtual_clock: VirtualClock,
) -> None:
    seen: list[float | None] = []
    end = datetime.now(UTC) + timedelta(seconds=42)

    @POLICY.retry(deadline=end)
    def fetch() -> str:
        seen.append(remaining())
        return "ok"

    with deadline_scope(12):
        fetch()
    fetch()
    assert seen == [12.0, 42.0]


def test_hard_deadline_report_counts_the_sleep_before_the_cut_attempt(
    virtual_clock: VirtualClock,
) -> None:
    policy = BackoffPolicy(base=1, cap=5, max_elapsed=30, jitter="none")
    calls: list[int] = []

    @policy.retry(hard_deadline=True)
    async def flaky_then_hangs() -> None:
        calls.append(1)
        if len(calls) < 3:
            raise OSError("blip")
        await asyncio.sleep(3600)

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(flaky_then_hangs())
    report = caught.value.report
    assert virtual_clock.sleeps[:2] == [1.0, 2.0]
    assert report.attempts == 3
    assert report.slept == 3.0
    assert report.reason is StopReason.WALL_CLOCK


def test_hard_deadline_cut_in_the_first_attempt_reports_the_scope_deadline(
    virtual_clock: VirtualClock,
) -> None:
    @POLICY.retry(hard_deadline=True)
    async def hangs() -> None:
        await asyncio.sleep(100)

    async def main() -> None:
        async with deadline_scope(deadline=virtual_clock.now() + timedelta(seconds=5)):
            await hangs()

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(main())
    report = caught.value.report
    assert report.reason is StopReason.DEADLINE
    assert report.deadline == virtual_clock.start + timedelta(seconds=5)
    assert report.attempts == 1
