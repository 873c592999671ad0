"""The report is true under any composition, and a non-finite wait ends the run (issue 9).

tenacity's ``|`` stops at the first stop that says so and ``&`` asks the second stop only
when the first agrees, so the budget stop is not asked before every retry. The run's record
is measured by whichever of the package's strategies tenacity asks first after an attempt
(the wait is always asked before the stop), so the report carries the real figures.
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tenacity import AsyncRetrying, RetryCallState, Retrying, stop_after_attempt, wait_fixed
from tenacity.wait import wait_base

from tenacity_budget import BackoffPolicy, BudgetExhausted, StopReason
from tenacity_budget.decision import decide
from tenacity_budget.state import RunState, run_state
from tenacity_budget.testing import VirtualClock

POLICY = BackoffPolicy(base=1, factor=2, cap=60, max_elapsed=300, jitter="none")


def always_fails() -> None:
    raise OSError("down")


async def always_fails_async() -> None:
    raise OSError("down")


def exhaust(**kwargs: Any) -> tuple[BudgetExhausted, list[float]]:
    sleeps: list[float] = []
    retrying = Retrying(retry_error_cls=BudgetExhausted, sleep=sleeps.append, **kwargs)
    with pytest.raises(BudgetExhausted) as caught:
        retrying(always_fails)
    return caught.value, sleeps


# -- 3. the report is true under any composition -------------------------------------------


@pytest.mark.parametrize(
    "stop",
    [
        stop_after_attempt(4) | POLICY.stop(),
        POLICY.stop() | stop_after_attempt(4),
    ],
    ids=["other | budget", "budget | other"],
)
def test_or_composition_reports_the_real_figures(stop: Any) -> None:
    error, sleeps = exhaust(wait=POLICY.wait(), stop=stop)
    report = error.report
    assert report.attempts == 4
    assert sleeps == [1.0, 2.0, 4.0]
    assert report.slept == 7.0
    assert report.budget == 300.0
    assert report.affordable == POLICY.max_attempts() == 9
    assert report.reason is StopReason.OTHER
    assert report.elapsed >= 0.0
    assert report.last_exception is not None


@pytest.mark.parametrize(
    "stop",
    [
        stop_after_attempt(4) & POLICY.stop(),
        POLICY.stop() & stop_after_attempt(4),
    ],
    ids=["other & budget", "budget & other"],
)
def test_and_composition_reports_what_was_slept(stop: Any) -> None:
    error, sleeps = exhaust(wait=POLICY.wait(), stop=stop)
    report = error.report
    # Both must agree: the budget's own count (9 retries) ends it, at 243 s slept.
    assert report.attempts == 10
    assert math.fsum(sleeps) == 243.0
    assert report.slept == 243.0
    assert report.reason is StopReason.COUNT
    assert report.budget == 300.0
    assert report.affordable == 9


def test_and_with_a_foreign_wait_still_sums_the_sleeps() -> None:
    # The budget stop is asked only from the fourth attempt on and the wait is not ours:
    # the sleeps it missed come from tenacity's own total.
    error, sleeps = exhaust(wait=wait_fixed(2), stop=stop_after_attempt(4) & POLICY.stop())
    assert error.report.slept == math.fsum(sleeps)
    assert error.report.attempts == len(sleeps) + 1


def test_reason_of_an_earlier_decision_does_not_leak_into_the_report() -> None:
    # The budget stop decided "go on" before every retry; the other stop ended the run.
    error, _ = exhaust(wait=POLICY.wait(), stop=POLICY.stop() | stop_after_attempt(2))
    assert error.report.reason is StopReason.OTHER
    assert error.report.attempts == 2


@settings(max_examples=60, deadline=None)
@given(
    limit=st.integers(min_value=1, max_value=12),
    budget_first=st.booleans(),
    use_and=st.booleans(),
    extra=st.sampled_from([0.0, 0.5, 1.0]),
)
def test_report_slept_is_what_was_slept_whatever_the_composition(
    limit: int, budget_first: bool, use_and: bool, extra: float
) -> None:
    budget, other = POLICY.stop(), stop_after_attempt(limit)
    first, second = (budget, other) if budget_first else (other, budget)
    stop = first & second if use_and else first | second
    error, sleeps = exhaust(wait=POLICY.wait() + wait_fixed(extra), stop=stop)
    report = error.report
    assert report.attempts == len(sleeps) + 1
    assert report.slept == math.fsum(sleeps)
    assert report.budget == POLICY.max_elapsed
    assert report.affordable == POLICY.max_attempts()
    if not use_and:
        # With | the budget is never overruled: nothing slept past it.
        assert report.slept <= POLICY.max_elapsed


def test_run_state_is_one_typed_record_on_state_and_attempt() -> None:
    seen: list[RunState | None] = []

    def before_sleep(retry_state: RetryCallState) -> None:
        seen.append(run_state(retry_state))

    error, _ = exhaust(wait=POLICY.wait(), stop=POLICY.stop(), before_sleep=before_sleep)
    assert seen
    assert all(isinstance(record, RunState) for record in seen)
    assert len({id(record) for record in seen}) == 1
    assert run_state(error.last_attempt) is seen[0]
    assert error.report == seen[0].report(error.report.last_exception)


# -- 2. a non-finite wait ends the run, never hangs it -------------------------------------


class once(wait_base):
    """Waits ``value`` before the second retry, nothing otherwise."""

    def __init__(self, value: float) -> None:
        self.value = value

    def __call__(self, retry_state: RetryCallState) -> float:
        return self.value if retry_state.attempt_number == 2 else 0.0


@pytest.mark.parametrize("value", [math.nan, math.inf], ids=["nan", "inf"])
def test_non_finite_sleep_stops_a_sync_run_before_it_sleeps(value: float) -> None:
    error, sleeps = exhaust(wait=POLICY.wait() + once(value), stop=POLICY.stop())
    assert error.report.reason is StopReason.SLEEP_BUDGET
    assert sleeps == [1.0]
    assert error.report.attempts == 2
    assert math.isfinite(error.report.slept)


@pytest.mark.parametrize("value", [math.nan, math.inf], ids=["nan", "inf"])
def test_non_finite_sleep_stops_an_async_run_before_it_sleeps(
    value: float, virtual_clock: VirtualClock
) -> None:
    async def main() -> BudgetExhausted:
        retrying = AsyncRetrying(
            wait=POLICY.wait() + once(value),
            stop=POLICY.stop(),
            retry_error_cls=BudgetExhausted,
        )
        with pytest.raises(BudgetExhausted) as caught:
            await retrying(always_fails_async)
        return caught.value

    # A hang would never return: asyncio.sleep(nan) blocks forever.
    error = asyncio.run(asyncio.wait_for(main(), timeout=60))
    assert error.report.reason is StopReason.SLEEP_BUDGET
    assert virtual_clock.sleeps == [1.0]


@pytest.mark.parametrize("dictated", [math.inf, 1e300])
def test_retry_after_beyond_any_budget_stops_with_sleep_budget(
    dictated: float, virtual_clock: VirtualClock
) -> None:
    policy = BackoffPolicy(base=1, cap=10, max_elapsed=60, jitter="none")

    @policy.retry(retry_after=lambda exc: dictated)
    def fetch() -> None:
        raise OSError("429")

    with pytest.raises(BudgetExhausted) as caught:
        fetch()
    assert caught.value.report.reason is StopReason.SLEEP_BUDGET
    assert virtual_clock.sleeps == []
    assert caught.value.report.slept == 0.0


@given(
    sleep=st.one_of(st.just(math.nan), st.just(math.inf), st.just(-math.inf)),
    slept=st.floats(min_value=0, max_value=1e6),
    elapsed=st.floats(min_value=0, max_value=1e6),
)
def test_decide_stops_on_any_non_finite_sleep(sleep: float, slept: float, elapsed: float) -> None:
    reason = decide(1, 10, sleep, slept + sleep, elapsed, 0.0, 2e6, math.inf)
    assert reason is StopReason.SLEEP_BUDGET


@given(
    sleep=st.floats(min_value=0, max_value=100),
    slept=st.floats(min_value=0, max_value=100),
    elapsed=st.floats(min_value=0, max_value=100),
    next_attempt=st.floats(min_value=0, max_value=100),
    until=st.floats(min_value=-10, max_value=500),
)
def test_decide_allows_a_retry_only_when_every_bound_holds(
    sleep: float, slept: float, elapsed: float, next_attempt: float, until: float
) -> None:
    budget = 200.0
    reason = decide(1, 10, sleep, slept + sleep, elapsed, next_attempt, budget, until)
    reading = budget * 2.0**-50  # the rounding two clock readings are allowed
    if reason is None:
        assert slept + sleep <= budget
        assert elapsed + sleep + next_attempt <= budget + reading
        assert sleep + next_attempt <= until
    else:
        assert (
            slept + sleep > budget
            or elapsed + sleep + next_attempt > budget + reading
            or sleep + next_attempt > until
        )


def test_decide_checks_in_order_count_first() -> None:
    assert decide(11, 10, math.nan, math.nan, 1e9, 0.0, 1.0, -1.0) is StopReason.COUNT
    assert decide(1, 10, 2.0, 2.0, 0.0, 0.0, 1.0, -1.0) is StopReason.SLEEP_BUDGET
    assert decide(1, 10, 0.5, 0.5, 0.6, 0.0, 1.0, -1.0) is StopReason.WALL_CLOCK
    assert decide(1, 10, 0.5, 0.5, 0.0, 0.0, 1.0, 0.4) is StopReason.DEADLINE
    assert decide(1, 10, 0.5, 0.5, 0.0, 0.0, 1.0, 0.5) is None


def test_a_statistics_dict_cleared_mid_run_is_repaired() -> None:
    # tenacity's @retry shares one statistics dict between concurrent calls of a function;
    # another thread's call clears it (jd/tenacity#701). Clear it inside an attempt, as
    # that thread would, and the run still ends as the budget says, not with KeyError.
    from tenacity import RetryError, retry

    calls: list[int] = []

    @retry(wait=POLICY.wait(), stop=POLICY.stop(), sleep=lambda seconds: None)
    def fails() -> None:
        calls.append(1)
        fails.statistics.clear()  # type: ignore[attr-defined]
        raise OSError("down")

    with pytest.raises(RetryError):  # not KeyError: 'idle_for'
        fails()
    assert len(calls) == POLICY.max_attempts() + 1


# -- decide() is the one decision: testing bound, the user's stop, the retry budget last ----


def test_decide_asks_the_users_stop_and_the_retry_budget_only_when_the_rest_allows() -> None:
    asked: list[str] = []

    def other() -> bool:
        asked.append("other")
        return False

    def grant() -> bool:
        asked.append("grant")
        return False

    # Refused by the budget itself: neither the user's stop nor the retry budget is asked.
    assert decide(11, 10, 1.0, 1.0, 0.0, 0.0, 9.0, math.inf, None, other, grant) is (
        StopReason.COUNT
    )
    assert asked == []
    # Allowed by the budget: the user's stop, then the retry budget, last.
    assert decide(1, 10, 1.0, 1.0, 0.0, 0.0, 9.0, math.inf, None, other, grant) is (
        StopReason.RETRY_BUDGET
    )
    assert asked == ["other", "grant"]
    assert decide(1, 10, 1.0, 1.0, 0.0, 0.0, 9.0, math.inf, None, lambda: True, grant) is (
        StopReason.OTHER
    )
    assert asked == ["other", "grant"]  # a user's stop that ends the run spends nothing


def test_decide_in_testing_mode_bounds_the_attempts_alone() -> None:
    # The testing bound replaces the budget checks (a NaN sleep, a past deadline).
    assert decide(2, 10, math.nan, math.nan, 1e9, 0.0, 1.0, -1.0, 3) is None
    assert decide(3, 10, math.nan, math.nan, 1e9, 0.0, 1.0, -1.0, 3) is StopReason.COUNT
    assert decide(1, 10, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 3, None, lambda: False) is (
        StopReason.RETRY_BUDGET
    )


def test_the_hard_deadline_cut_is_decided_from_the_time_left() -> None:
    from tenacity_budget.decision import cut

    assert cut(0.0, math.inf, math.inf) is None  # exactly at the end: started, as admitted
    assert cut(-1.0, math.inf, math.inf) is StopReason.WALL_CLOCK
    assert cut(1.0, -1.0, math.inf) is StopReason.DEADLINE
    # An enclosing monotonic end binds only when it came no later than the budget's.
    assert cut(-1.0, math.inf, -1.0) is StopReason.DEADLINE
    assert cut(-2.0, math.inf, -1.0) is StopReason.WALL_CLOCK


def test_a_users_stop_is_asked_after_the_budget_in_policy_retry(
    virtual_clock: VirtualClock,
) -> None:
    asked: list[int] = []

    def mine(retry_state: RetryCallState) -> bool:
        asked.append(retry_state.attempt_number)
        return retry_state.attempt_number >= 3

    @POLICY.retry(stop=mine)
    def fails() -> None:
        raise OSError("down")

    with pytest.raises(BudgetExhausted) as caught:
        fails()
    assert asked == [1, 2, 3]
    assert caught.value.report.reason is StopReason.OTHER
    assert caught.value.report.attempts == 3
