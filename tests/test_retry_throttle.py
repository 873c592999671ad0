"""``policy.retry(throttle=...)``: every attempt, the first included, asks the throttle after
the time budget and before the retry budget; a rejected first attempt is not sent and makes
no deposit; every attempt sent is recorded. The throttle here is a scripted stand-in (our own
logic under test); the real AdaptiveThrottle's rule is tested in its own module."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest

from tenacity_budget import BackoffPolicy, BudgetExhausted, RetryStats, StopReason
from tenacity_budget.exhaustion import Throttled
from tenacity_budget.testing import VirtualClock

POLICY = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, jitter="none")


class Scripted:
    """Admits by a script of answers; records what it is told."""

    name = "scripted"
    probability = 0.5

    def __init__(self, answers: Iterable[bool]) -> None:
        self.answers = list(answers)
        self.asked = 0
        self.recorded: list[object] = []

    def admit(self) -> bool:
        self.asked += 1
        return self.answers.pop(0)

    def record(self, outcome: object) -> None:
        self.recorded.append(outcome)


class Ledger:
    """A retry budget that grants everything and counts."""

    def __init__(self) -> None:
        self.deposits = self.withdrawals = 0

    def deposit(self) -> None:
        self.deposits += 1

    def try_withdraw(self) -> bool:
        self.withdrawals += 1
        return True

    def stop(self) -> object:
        raise NotImplementedError


def test_a_rejected_first_attempt_is_not_sent_and_deposits_nothing(
    virtual_clock: VirtualClock,
) -> None:
    throttle, ledger, stats = Scripted([False]), Ledger(), RetryStats()
    calls: list[int] = []

    @POLICY.retry(throttle=throttle, budget=ledger, stats=stats)
    def call() -> int:
        calls.append(1)
        return 1

    with pytest.raises(BudgetExhausted) as caught:
        call()
    assert calls == []
    assert ledger.deposits == 0
    report = caught.value.report
    assert report.reason is StopReason.THROTTLED
    assert report.attempts == 0
    rejection = caught.value.last_attempt.exception()
    assert isinstance(rejection, Throttled)
    assert (rejection.throttle, rejection.probability) == ("scripted", 0.5)
    assert report.last_exception is rejection
    assert throttle.recorded == []
    snapshot = stats.snapshot()
    assert snapshot.calls == 1
    assert snapshot.exhausted == 1


def test_reraise_raises_the_rejection_itself(virtual_clock: VirtualClock) -> None:
    @POLICY.retry(throttle=Scripted([False]), reraise=True)
    def call() -> None: ...

    with pytest.raises(Throttled):
        call()


def test_a_rejected_retry_ends_the_run_as_throttled_before_the_budget_is_asked(
    virtual_clock: VirtualClock,
) -> None:
    throttle, ledger = Scripted([True, True, False]), Ledger()
    errors = [OSError("one"), OSError("two")]

    @POLICY.retry(throttle=throttle, budget=ledger)
    def call() -> None:
        raise errors[len(throttle.recorded)]

    with pytest.raises(BudgetExhausted) as caught:
        call()
    assert caught.value.report.reason is StopReason.THROTTLED
    assert caught.value.report.attempts == 2
    assert throttle.recorded == errors  # each attempt sent, told once
    assert (ledger.deposits, ledger.withdrawals) == (1, 1)  # the refused retry withdrew nothing


def test_the_time_budget_is_asked_before_the_throttle(virtual_clock: VirtualClock) -> None:
    throttle = Scripted([True, True, True, True, True, True, True, True])
    policy = BackoffPolicy(base=1, factor=2, cap=1, max_elapsed=2, jitter="none")

    @policy.retry(throttle=throttle)
    def call() -> None:
        raise OSError("down")

    with pytest.raises(BudgetExhausted) as caught:
        call()
    # Two retries fit in 2 s; the third is refused by the count before the throttle counts it.
    assert caught.value.report.reason is StopReason.COUNT
    assert throttle.asked == 3


def test_results_are_recorded_and_a_success_returns(virtual_clock: VirtualClock) -> None:
    throttle = Scripted([True])

    @POLICY.retry(throttle=throttle)
    def call() -> str:
        return "ok"

    assert call() == "ok"
    assert throttle.recorded == ["ok"]


@pytest.mark.parametrize("hard", [False, True])
async def test_async_and_hard_deadline_runs_ask_and_record_too(
    virtual_clock: VirtualClock, hard: bool
) -> None:
    throttle = Scripted([True, True])
    seen: list[int] = []

    @POLICY.retry(throttle=throttle, hard_deadline=hard)
    async def call() -> int:
        seen.append(1)
        await asyncio.sleep(0)
        if len(seen) == 1:
            raise OSError("once")
        return 7

    assert await call() == 7
    assert throttle.asked == 2
    assert [type(outcome) for outcome in throttle.recorded] == [OSError, int]

    rejecting = Scripted([False])

    @POLICY.retry(throttle=rejecting, hard_deadline=hard)
    async def never() -> None:
        raise AssertionError("sent")

    with pytest.raises(BudgetExhausted) as caught:
        await never()
    assert caught.value.report.reason is StopReason.THROTTLED


def test_a_throttle_of_the_wrong_kind_is_refused_at_decoration() -> None:
    with pytest.raises(TypeError, match="throttle must be an adaptive throttle"):
        POLICY.retry(throttle=object())


def test_a_rejected_first_attempt_reports_the_runs_deadline(virtual_clock: VirtualClock) -> None:
    from datetime import UTC, datetime, timedelta

    from tenacity_budget import deadline_scope

    deadline = datetime.now(UTC) + timedelta(seconds=30)
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=60, jitter="none", deadline=deadline)

    @policy.retry(throttle=Scripted([False]))
    def call() -> None: ...

    with pytest.raises(BudgetExhausted) as caught:
        call()
    assert caught.value.report.deadline == deadline
    with deadline_scope(5), pytest.raises(BudgetExhausted) as scoped:
        policy.retry(throttle=Scripted([False]))(call)()
    assert scoped.value.report.deadline == datetime.now(UTC) + timedelta(seconds=5)
