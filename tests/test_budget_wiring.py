"""``policy.retry(budget=...)``: a retry budget wired in the right order (issue 11).

The budget's own arithmetic is tested in ``tests/test_retry_budget.py``; here: each call
deposits once, each retry is withdrawn only after the policy would allow it, a refusal ends
the run at once with reason ``retry_budget``, in sync and async functions.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from tenacity import RetryCallState, stop_after_attempt

from tenacity_budget import BackoffPolicy, BudgetExhausted, RetryBudget, StopReason
from tenacity_budget.retry_budget import async_stop_retry_budget
from tenacity_budget.testing import VirtualClock

POLICY = BackoffPolicy(base=1, cap=4, max_elapsed=60, jitter="none")


class Dependency:
    """A dependency that fails its first ``failures`` calls, counting every call."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    def __call__(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise OSError("down")
        return "ok"


def test_each_call_deposits_once_and_each_retry_withdraws_one(
    virtual_clock: VirtualClock,
) -> None:
    budget = RetryBudget(ratio=0.5, min_per_second=0, ttl=10)
    dependency = Dependency(failures=1)
    fetch = POLICY.retry(budget=budget)(dependency)
    with pytest.raises(BudgetExhausted) as caught:
        fetch()  # one call deposited: 0.5 x 1 affords no retry yet
    assert caught.value.report.reason is StopReason.RETRY_BUDGET
    assert dependency.calls == 1
    assert fetch() == "ok"  # a second deposit, a first-try success: nothing withdrawn
    assert budget.balance == 1
    flaky = POLICY.retry(budget=budget)(Dependency(failures=1))
    assert flaky() == "ok"  # a third deposit (1.5, so 1 retry left): the retry is granted
    assert budget.balance == 0


def test_a_refused_retry_ends_the_run_at_once_with_reason_retry_budget(
    virtual_clock: VirtualClock,
) -> None:
    budget = RetryBudget(ratio=0.2, min_per_second=0, ttl=10)
    for _ in range(9):
        budget.deposit()  # 9 earlier calls: with this one, 10 x 0.2 = 2 retries
    dependency = Dependency(failures=100)
    fetch = POLICY.retry(budget=budget)(dependency)
    with pytest.raises(BudgetExhausted) as caught:
        fetch()
    report = caught.value.report
    assert report.reason is StopReason.RETRY_BUDGET
    assert report.reason.value == "retry_budget"
    assert dependency.calls == 3  # the first call and the two retries the budget held
    assert virtual_clock.sleeps == [1.0, 2.0]  # the refusal slept nothing
    assert budget.balance == 0


def test_a_retry_the_policy_refuses_never_spends_the_budget(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0, min_per_second=10, ttl=10)  # 100 retries, no deposits needed
    policy = BackoffPolicy(base=1, cap=1, max_elapsed=3, jitter="none")  # affords 3 retries
    fetch = policy.retry(budget=budget)(Dependency(failures=100))
    with pytest.raises(BudgetExhausted) as caught:
        fetch()
    assert caught.value.report.reason is StopReason.COUNT
    assert budget.balance == 100 - 3


def test_a_user_stop_is_asked_before_the_budget(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0, min_per_second=10, ttl=10)
    fetch = POLICY.retry(budget=budget, stop=stop_after_attempt(2))(Dependency(failures=100))
    with pytest.raises(BudgetExhausted) as caught:
        fetch()
    assert caught.value.report.reason is StopReason.OTHER
    assert budget.balance == 100 - 1


def test_several_functions_share_one_budget(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0, min_per_second=0.3, ttl=10)  # 3 retries in all
    first = POLICY.retry(budget=budget)(Dependency(failures=100))
    second = POLICY.retry(budget=budget)(Dependency(failures=100))
    with pytest.raises(BudgetExhausted):
        first()
    with pytest.raises(BudgetExhausted) as caught:
        second()
    assert caught.value.report.reason is StopReason.RETRY_BUDGET
    assert caught.value.report.attempts == 1  # the first function spent all three


def test_async_function_with_an_in_process_budget(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0, min_per_second=0.1, ttl=10)  # one retry

    calls: list[int] = []

    @POLICY.retry(budget=budget)
    async def fetch() -> str:
        calls.append(1)
        raise OSError("down")

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(fetch())
    assert caught.value.report.reason is StopReason.RETRY_BUDGET
    assert len(calls) == 2


class AwaitedBudget:
    """A budget whose decision is awaited, as an asyncio Redis budget's is (unit test)."""

    is_async = True
    name = "awaited"

    def __init__(self, grants: int) -> None:
        self.grants = grants
        self.deposits = 0
        self.asked = 0

    def deposit(self) -> None:
        self.deposits += 1

    async def try_withdraw(self) -> bool:
        self.asked += 1
        await asyncio.sleep(0)
        if self.grants > 0:
            self.grants -= 1
            return True
        return False

    def stop(self) -> async_stop_retry_budget:
        return async_stop_retry_budget(self)


def test_an_awaited_budget_is_asked_after_the_policy(virtual_clock: VirtualClock) -> None:
    budget = AwaitedBudget(grants=2)

    @POLICY.retry(budget=budget)
    async def fetch() -> None:
        raise OSError("down")

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(fetch())
    assert caught.value.report.reason is StopReason.RETRY_BUDGET
    assert caught.value.report.attempts == 3
    assert (budget.deposits, budget.asked) == (1, 3)


def test_an_awaited_budget_on_a_sync_function_is_refused() -> None:
    with pytest.raises(TypeError, match="asyncio"):
        POLICY.retry(budget=AwaitedBudget(grants=1))(Dependency(failures=1))


def test_something_that_is_not_a_budget_is_refused() -> None:
    with pytest.raises(TypeError, match="retry budget"):
        POLICY.retry(budget=object())


def test_success_at_once_costs_one_deposit_and_no_withdrawal(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0.2, min_per_second=0, ttl=10)
    fetch = POLICY.retry(budget=budget)(Dependency(failures=0))
    for _ in range(10):
        assert fetch() == "ok"
    assert budget.balance == 2


def test_report_of_a_budget_refusal_has_the_policy_figures(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0, min_per_second=0.1, ttl=10)
    seen: list[Any] = []

    def before_sleep(retry_state: RetryCallState) -> None:
        seen.append(retry_state.attempt_number)

    fetch = POLICY.retry(budget=budget, before_sleep=before_sleep)(Dependency(failures=100))
    with pytest.raises(BudgetExhausted) as caught:
        fetch()
    report = caught.value.report
    assert report.budget == POLICY.max_elapsed
    assert report.affordable == POLICY.max_attempts()
    assert report.slept == 1.0
    assert seen == [1]
