"""``policy.retry(hedge=...)``: a coroutine function hedged instead of retried, through the
decorator users write (the engine's own semantics are tested in test_hedge*.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tenacity_budget import (
    BackoffPolicy,
    BudgetExhausted,
    Hedge,
    RetryBudget,
    RetryStats,
    StopReason,
)
from tenacity_budget.exhaustion import Throttled
from tests._hedging import FakeThrottle, HedgeObserver, Response, Script, simulate

POLICY = BackoffPolicy(base=0.1, cap=1.0, max_elapsed=2.0, attempt_duration=0.1)
SLOW = 10.0


def test_a_slow_first_attempt_is_hedged_and_the_hedge_wins() -> None:
    script = Script([(SLOW, "slow"), (0.05, "fast")])
    observer = HedgeObserver()
    fetch = POLICY.retry(hedge=Hedge(0.1), stats=observer)(script.__call__)

    assert simulate(fetch) == "fast"
    assert script.starts == [0.0, 0.1]  # the hedge went out at exactly the delay
    assert script.cancelled == [0]  # the loser was cancelled
    assert observer.hedges == [(observer.calls[0], True)]
    assert observer.successes == [(observer.calls[0], 2)]


def test_a_run_that_gives_up_reports_its_hedges() -> None:
    script = Script([(0.01, Response(503))])
    balances: list[int] = []

    async def main() -> Any:
        # Made on the virtual clock, so its window is the run's.
        budget = RetryBudget(ratio=1.0, min_per_second=0.2, ttl=10.0)  # 2, and 1 per call
        fetch = POLICY.retry(hedge=Hedge(0.1, max_attempts=3), budget=budget)(script.__call__)
        balances.append(budget.balance)
        try:
            return await fetch()
        finally:
            balances.append(budget.balance)

    with pytest.raises(BudgetExhausted) as caught:
        simulate(main)
    report = caught.value.report
    assert report.reason is StopReason.COUNT
    # No hedge won: the run gave up on the last hedge's 503, which it holds as its result.
    assert (report.attempts, report.hedges, report.hedges_won) == (3, 2, 0)
    assert caught.value.last_attempt.result() == Response(503)
    assert balances == [2, 1]  # one deposit, two withdrawals


def test_the_throttle_and_the_budget_are_asked_and_a_rejected_call_sends_nothing() -> None:
    script = Script([(0.01, "ok")])
    throttle, stats = FakeThrottle(probability=0.3, admits=False), RetryStats()
    balances: list[int] = []

    async def main() -> Any:
        budget = RetryBudget(ratio=1.0, min_per_second=0.2, ttl=10.0)
        fetch = POLICY.retry(hedge=Hedge(0.1), throttle=throttle, budget=budget, stats=stats)
        try:
            return await fetch(script.__call__)()
        finally:
            balances.append(budget.balance)

    with pytest.raises(BudgetExhausted) as caught:
        simulate(main)
    assert caught.value.report.reason is StopReason.THROTTLED
    assert isinstance(caught.value.last_attempt.exception(), Throttled)
    assert script.starts == []
    assert balances == [2]  # no deposit: nothing was sent
    assert throttle.admitted == 1
    assert stats.snapshot().exhausted == 1


def test_on_exhausted_gets_the_report() -> None:
    reports: list[Any] = []
    fetch = POLICY.retry(hedge=Hedge(0.1, max_attempts=1), on_exhausted=reports.append)(
        Script([(0.01, OSError("refused"))]).__call__
    )
    with pytest.raises(BudgetExhausted):
        simulate(fetch)
    assert [report.reason for report in reports] == [StopReason.COUNT]


def test_a_sync_function_is_refused_saying_why() -> None:
    def sync() -> None: ...

    with pytest.raises(TypeError, match="hedge= needs a coroutine function"):
        POLICY.retry(hedge=Hedge(0.1))(sync)


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"seed": 3}, "seed"),
        ({"retry_after": lambda exc: None}, "retry_after"),
        ({"before_sleep": print}, "before_sleep"),
        ({"deadline": lambda state: None}, "deadline= as an aware datetime"),
        ({"hedge": object()}, "hedge must be a tenacity_budget.Hedge"),
    ],
)
def test_options_a_hedged_run_cannot_honour_are_refused(
    options: dict[str, Any], named: str
) -> None:
    with pytest.raises(TypeError, match=named):
        POLICY.retry(**{"hedge": Hedge(0.1), **options})


def test_retry_with_keeps_the_hedge() -> None:
    script = Script([(SLOW, "slow"), (0.05, "fast")])
    fetch: Any = POLICY.retry(hedge=Hedge(0.1))(script.__call__)
    again = fetch.retry_with(hedge=Hedge(0.1, max_attempts=1))
    with pytest.raises(BudgetExhausted):
        simulate(again)  # one attempt only, cut at the budget's end
