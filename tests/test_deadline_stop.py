"""Absolute deadlines: a run stops before a retry that would end after its deadline.

The deadline comes from ``stop()`` / ``retry()``, from each call's arguments, or from the
policy's own field; the earliest of them always holds. Naive datetimes are refused.

Time is virtual: freezegun freezes ``time.monotonic()`` and ``datetime.now()`` together, an
attempt that "takes" seven seconds advances the frozen clock by seven seconds, and every
sleep handed to tenacity records its duration and advances the clock by it (the ``clock``
fixture). No test sleeps for real and no test measures real time.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import tenacity
from pydantic import ValidationError
from tenacity import RetryCallState

from tenacity_budget import BackoffPolicy, BudgetExhausted, StopReason
from tests._helpers import START, Clock, exhaust, failing, iana_zone

BERLIN = iana_zone("Europe/Berlin")


def test_run_stops_before_a_retry_that_would_end_after_the_deadline(clock: Clock) -> None:
    """Deadline 40 s away, budget 60 s: at 35 the next retry would end at 46 > 40."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, jitter="none")
    deadline = START + timedelta(seconds=40)
    fn = policy.retry(sleep=clock.sleep, deadline=deadline)(failing(clock, [7.0]))
    report = exhaust(fn).report
    assert report.reason is StopReason.DEADLINE
    assert report.deadline == deadline
    assert report.attempts == 4
    assert clock.sleeps == [1.0, 2.0, 4.0]
    assert clock.wall() == START + timedelta(seconds=35)
    assert clock.wall() <= deadline


def test_deadline_in_another_time_zone(clock: Clock) -> None:
    """The same deadline written in Berlin time gives the same run."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, jitter="none")
    deadline = (START + timedelta(seconds=40)).astimezone(BERLIN)
    fn = policy.retry(sleep=clock.sleep, deadline=deadline)(failing(clock, [7.0]))
    report = exhaust(fn).report
    assert report.reason is StopReason.DEADLINE
    assert report.attempts == 4


def test_deadline_with_plain_tenacity_stop(clock: Clock) -> None:
    """policy.stop(deadline=...) in tenacity.Retrying stops the same way."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, jitter="none")
    retrying = tenacity.Retrying(
        wait=policy.wait(),
        stop=policy.stop(deadline=START + timedelta(seconds=40)),
        sleep=clock.sleep,
        retry_error_cls=BudgetExhausted,
    )
    with pytest.raises(BudgetExhausted) as info:
        retrying(failing(clock, [7.0]))
    assert info.value.report.reason is StopReason.DEADLINE
    assert clock.elapsed() == 35.0


def test_policy_deadline_field_is_respected(clock: Clock) -> None:
    """Without deadline=, the policy's own deadline field applies."""
    deadline = START + timedelta(seconds=40)
    policy = BackoffPolicy(
        base=1, factor=2, cap=4, max_elapsed=60, jitter="none", deadline=deadline
    )
    fn = policy.retry(sleep=clock.sleep)(failing(clock, [7.0]))
    report = exhaust(fn).report
    assert report.reason is StopReason.DEADLINE
    assert clock.elapsed() == 35.0


@pytest.mark.parametrize("call_deadline_s", [60.0, 3600.0])
def test_policy_deadline_and_call_deadline_the_earlier_holds(
    clock: Clock, call_deadline_s: float
) -> None:
    """A deadline passed to stop()/retry() never loosens the policy's own deadline."""
    own = START + timedelta(seconds=40)
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=600, jitter="none", deadline=own)
    fn = policy.retry(sleep=clock.sleep, deadline=START + timedelta(seconds=call_deadline_s))(
        failing(clock, [7.0])
    )
    report = exhaust(fn).report
    assert report.reason is StopReason.DEADLINE
    assert report.deadline == own
    assert clock.elapsed() == 35.0


def test_call_deadline_earlier_than_policy_deadline_holds(clock: Clock) -> None:
    """And an earlier per-call deadline tightens it."""
    policy = BackoffPolicy(
        base=1, factor=2, cap=4, max_elapsed=600, jitter="none", deadline=START + timedelta(hours=1)
    )
    early = START + timedelta(seconds=40)
    fn = policy.retry(sleep=clock.sleep, deadline=early)(failing(clock, [7.0]))
    report = exhaust(fn).report
    assert report.reason is StopReason.DEADLINE
    assert report.deadline == early
    assert clock.elapsed() == 35.0


def test_budget_binds_when_the_deadline_is_later(clock: Clock) -> None:
    """A far deadline changes nothing: the wall-clock guard stops the run."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    fn = policy.retry(sleep=clock.sleep, deadline=START + timedelta(hours=1))(failing(clock, [7.0]))
    report = exhaust(fn).report
    assert report.reason is StopReason.WALL_CLOCK
    assert clock.elapsed() == 57.0


def test_deadline_read_from_each_calls_arguments(clock: Clock) -> None:
    """One decorator, each call's own deadline, read through ``rs.kwargs``."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, jitter="none")

    def call_deadline(rs: RetryCallState) -> datetime:
        value = rs.kwargs["deadline"]
        assert isinstance(value, datetime)
        return value

    seen: list[float | None] = []
    fn = policy.retry(sleep=clock.sleep, deadline=call_deadline)(failing(clock, [7.0], seen))

    near = clock.wall() + timedelta(seconds=40)
    report = exhaust(fn, deadline=near).report
    assert report.reason is StopReason.DEADLINE
    assert report.deadline == near
    assert seen == [40.0, 32.0, 23.0, 12.0]
    assert clock.wall() <= near

    seen.clear()
    sooner = clock.wall() + timedelta(seconds=25)
    report = exhaust(fn, deadline=sooner).report
    assert report.deadline == sooner
    assert seen == [25.0, 17.0, 8.0]  # ends at 7, 15 (15 + 2 + 7 fits), 24 (24 + 4 + 7 > 25)
    assert report.attempts == 3
    assert clock.wall() <= sooner


def test_naive_deadline_is_refused_at_stop() -> None:
    """A naive deadline is refused where it is given, not at the first retry."""
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=60)
    naive = datetime(2024, 3, 1, 12, 0)
    with pytest.raises(ValueError, match="timezone-aware"):
        policy.stop(deadline=naive)
    with pytest.raises(ValueError, match="timezone-aware"):
        policy.retry(deadline=naive)
    with pytest.raises(ValidationError):
        BackoffPolicy(base=1, cap=4, max_elapsed=60, deadline=naive)


def test_naive_deadline_from_callable_is_refused(clock: Clock) -> None:
    """A deadline callable returning a naive datetime fails the call clearly."""
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=60)
    fn = policy.retry(sleep=clock.sleep, deadline=lambda rs: datetime(2024, 3, 1, 13, 0))(
        failing(clock, [1.0])
    )
    with pytest.raises(ValueError, match="timezone-aware"):
        fn()


def test_deadline_of_wrong_type_is_refused() -> None:
    """A deadline that is neither a datetime nor a callable is a TypeError."""
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=60)
    with pytest.raises(TypeError):
        policy.stop(deadline=3600)  # type: ignore[arg-type]
