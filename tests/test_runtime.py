"""policy.retry(): retry_with, hooks installed only when needed, remaining() outside runs.

Every test runs on the virtual clock, so attempts take no time and each figure is exact.
"""

from __future__ import annotations

import pytest

from tenacity_budget import BackoffPolicy, BudgetExhausted, remaining
from tenacity_budget.testing import VirtualClock


def always_fails() -> None:
    raise OSError("down")


@pytest.mark.usefixtures("virtual_clock")  # attempts take no time: the schedules are exact
def test_retry_with_swaps_the_policy_and_tenacity_options() -> None:
    small = BackoffPolicy(base=1, cap=4, max_elapsed=10, jitter="none")
    large = BackoffPolicy(base=1, cap=4, max_elapsed=100, jitter="none")
    first: list[float] = []
    fn = small.retry(sleep=first.append)(always_fails)
    with pytest.raises(BudgetExhausted) as info:
        fn()
    assert first == small.waits()
    assert info.value.report.affordable == small.max_attempts()

    second: list[float] = []
    again = fn.retry_with(policy=large, sleep=second.append)  # type: ignore[attr-defined]
    with pytest.raises(BudgetExhausted) as info:
        again()
    assert second == large.waits()
    assert info.value.report.affordable == large.max_attempts() > small.max_attempts()


@pytest.mark.usefixtures("virtual_clock")  # attempts take no time: the schedules are exact
def test_user_hooks_still_run_when_ours_are_not_installed() -> None:
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=10, jitter="none")
    befores: list[int] = []
    sleeps: list[float] = []
    fn = policy.retry(
        sleep=lambda _s: None,
        before=lambda rs: befores.append(rs.attempt_number),
        before_sleep=lambda rs: sleeps.append(rs.upcoming_sleep),
    )(always_fails)
    with pytest.raises(BudgetExhausted):
        fn()
    calls = policy.max_attempts() + 1
    assert befores == list(range(1, calls + 1))
    assert sleeps == policy.waits()


def test_remaining_is_none_outside_and_set_inside_a_run(virtual_clock: VirtualClock) -> None:
    """On the frozen clock the first attempt of a 10 s run has exactly 10 s left."""
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=10, jitter="none")
    seen: list[float | None] = []

    @policy.retry(sleep=lambda _s: None)
    def work() -> str:
        seen.append(remaining())
        return "ok"

    assert remaining() is None
    assert work() == "ok"
    assert remaining() is None
    assert seen == [10.0]


def test_a_hard_deadline_run_arms_one_timer_for_all_its_attempts(
    virtual_clock: VirtualClock,
) -> None:
    import asyncio
    from unittest import mock

    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=60, jitter="none")
    calls: list[float | None] = []

    @policy.retry(hard_deadline=True)
    async def flaky() -> str:
        calls.append(remaining())
        if len(calls) < 4:
            raise OSError("down")
        return "ok"

    real = asyncio.timeout
    with mock.patch("asyncio.timeout", side_effect=real) as made:
        assert asyncio.run(flaky()) == "ok"
    assert made.call_count == 1  # one timer for the run, not one per attempt
    assert calls == [60.0, 59.0, 57.0, 53.0]
