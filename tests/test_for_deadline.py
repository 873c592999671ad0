"""``BackoffPolicy.for_deadline``: a budget derived from the time left until a deadline.

The window is real elapsed time (daylight-saving changes included); a deadline already
past, a naive datetime or a reserve outside [0, 1) is an error.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from tenacity_budget import BackoffPolicy
from tests._helpers import START, Clock, exhaust, failing, iana_zone

BERLIN = iana_zone("Europe/Berlin")


@pytest.mark.parametrize("reserve", [0.0, 0.25, 0.5, 0.9])
def test_for_deadline_budget_is_window_less_reserve(reserve: float) -> None:
    """max_elapsed == window * (1 - reserve); the deadline stays on the policy."""
    now = START
    deadline = now + timedelta(seconds=1000)
    policy = BackoffPolicy.for_deadline(deadline, reserve=reserve, now=now, base=1, cap=10)
    assert policy.max_elapsed == pytest.approx(1000 * (1 - reserve), abs=1e-9)
    assert policy.deadline == deadline
    assert policy.base == 1.0
    assert policy.cap == 10.0


def test_for_deadline_reads_the_clock_by_default(clock: Clock) -> None:
    """Without now=, the (frozen) clock gives the window: 1000 s left, 25 % kept."""
    clock.tick(100)
    deadline = START + timedelta(seconds=1100)
    policy = BackoffPolicy.for_deadline(deadline, reserve=0.25, base=1, cap=10)
    assert policy.max_elapsed == 750.0


def test_for_deadline_passes_other_fields(clock: Clock) -> None:
    """The other fields reach the model unchanged."""
    policy = BackoffPolicy.for_deadline(
        START + timedelta(seconds=200),
        reserve=0.5,
        base=2,
        factor=3,
        cap=20,
        jitter="none",
        attempt_duration=5,
    )
    assert (policy.factor, policy.jitter, policy.attempt_duration) == (3.0, "none", 5.0)
    assert policy.max_elapsed == 100.0


def test_for_deadline_run_ends_before_the_deadline(clock: Clock) -> None:
    """A run of a for_deadline policy ends within its budget and before its deadline."""
    deadline = START + timedelta(seconds=120)
    policy = BackoffPolicy.for_deadline(deadline, reserve=0.5, base=1, cap=4, jitter="none")
    fn = policy.retry(sleep=clock.sleep)(failing(clock, [7.0]))
    report = exhaust(fn).report
    assert report.deadline == deadline
    assert clock.elapsed() <= policy.max_elapsed == 60.0
    assert clock.wall() <= deadline


@pytest.mark.parametrize("offset", [0.0, -1.0, -86400.0])
def test_for_deadline_already_past_is_an_error(offset: float) -> None:
    """A deadline at or before now is an error, not a policy."""
    with pytest.raises(ValueError, match="past"):
        BackoffPolicy.for_deadline(START + timedelta(seconds=offset), now=START, base=1, cap=10)


def test_for_deadline_already_past_by_the_clock(clock: Clock) -> None:
    """Past by the clock (no now=): an error too."""
    clock.tick(10)
    with pytest.raises(ValueError, match="past"):
        BackoffPolicy.for_deadline(START + timedelta(seconds=5), base=1, cap=1)


def test_for_deadline_refuses_naive_datetimes() -> None:
    """Naive deadline or naive now: refused with a clear message."""
    with pytest.raises(ValueError, match="timezone-aware"):
        BackoffPolicy.for_deadline(datetime(2030, 1, 1), base=1, cap=10)
    with pytest.raises(ValueError, match="timezone-aware"):
        BackoffPolicy.for_deadline(
            datetime(2030, 1, 1, tzinfo=UTC), now=datetime(2029, 1, 1), base=1, cap=10
        )


@pytest.mark.parametrize("reserve", [-0.1, 1.0, 1.5])
def test_for_deadline_refuses_reserve_outside_unit_interval(reserve: float) -> None:
    """The reserve is a fraction in [0, 1)."""
    with pytest.raises(ValueError, match="reserve"):
        BackoffPolicy.for_deadline(
            START + timedelta(hours=1), reserve=reserve, now=START, base=1, cap=10
        )


def test_for_deadline_window_too_short_for_a_retry_is_refused() -> None:
    """5 s of budget cannot hold 1 s + 2 attempts of 3 s: ValidationError."""
    with pytest.raises(ValidationError):
        BackoffPolicy.for_deadline(
            START + timedelta(seconds=10),
            reserve=0.5,
            now=START,
            base=1,
            cap=1,
            attempt_duration=3,
        )


def test_for_deadline_window_is_real_time_across_spring_dst() -> None:
    """Berlin moves its clocks forward on 2024-03-31: noon to noon is 23 hours, not 24."""
    now = datetime(2024, 3, 30, 12, 0, tzinfo=BERLIN)
    deadline = datetime(2024, 3, 31, 12, 0, tzinfo=BERLIN)
    assert deadline.timestamp() - now.timestamp() == 23 * 3600
    policy = BackoffPolicy.for_deadline(deadline, reserve=0.5, now=now, base=1, cap=60)
    assert policy.max_elapsed == 23 * 3600 * 0.5


def test_for_deadline_is_not_past_in_the_repeated_autumn_hour() -> None:
    """02:10 CET (fold=1) on 2024-10-27 is 40 real minutes after 02:30 CEST (fold=0)."""
    now = datetime(2024, 10, 27, 2, 30, tzinfo=BERLIN)
    deadline = datetime(2024, 10, 27, 2, 10, fold=1, tzinfo=BERLIN)
    assert deadline.timestamp() - now.timestamp() == 40 * 60
    policy = BackoffPolicy.for_deadline(deadline, reserve=0.5, now=now, base=1, cap=60)
    assert policy.max_elapsed == 20 * 60


def test_for_deadline_already_past_in_the_repeated_autumn_hour() -> None:
    """02:30 CEST (fold=0) is 40 real minutes before 02:10 CET (fold=1): already past."""
    now = datetime(2024, 10, 27, 2, 10, fold=1, tzinfo=BERLIN)
    deadline = datetime(2024, 10, 27, 2, 30, tzinfo=BERLIN)
    assert deadline.timestamp() < now.timestamp()
    with pytest.raises(ValueError, match="past"):
        BackoffPolicy.for_deadline(deadline, now=now, base=1, cap=60)
