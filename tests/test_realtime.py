"""Tests for issue 3: attempt durations, the wall-clock guard, deadlines, remaining(), Retry-After.

Time is virtual throughout: freezegun freezes ``time.monotonic()`` and ``datetime.now()``
together, an attempt that "takes" seven seconds advances the frozen clock by seven seconds,
and every sleep handed to tenacity records its duration and advances the clock by it. No
test sleeps for real and no test measures real time.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pytest
import tenacity
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory, StepTickTimeFactory, TickingDateTimeFactory
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from tenacity import RetryCallState

from tenacity_budget import (
    BackoffPolicy,
    BudgetExhausted,
    StopReason,
    capped_index,
    compute_max_attempts,
    nominal_delay,
    remaining,
)
from tests._helpers import policies

Factory: TypeAlias = FrozenDateTimeFactory | StepTickTimeFactory | TickingDateTimeFactory

START = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
# Tolerance for the virtual clock itself: freezegun keeps microseconds and reads monotonic
# time as a float of epoch seconds, so a jittered (non-microsecond) sleep lands up to about a
# microsecond off. Every property below is about seconds, so this cannot hide a real breach.
EPS = 1e-5

try:
    BERLIN = ZoneInfo("Europe/Berlin")
except ZoneInfoNotFoundError:  # pragma: no cover - depends on the machine
    pytest.skip(
        "needs the IANA time zone database (system zoneinfo or `pip install tzdata`)",
        allow_module_level=True,
    )


class Clock:
    """The frozen clock of one test: attempts tick it, sleeps record and tick it."""

    def __init__(self, frozen: Factory) -> None:
        """Wrap freezegun's factory; the clock's zero is the current frozen instant."""
        self._frozen = frozen
        self.sleeps: list[float] = []
        self.start = time.monotonic()

    def tick(self, seconds: float) -> None:
        """Advance monotonic and wall-clock time together by ``seconds``."""
        self._frozen.tick(timedelta(seconds=seconds))

    def sleep(self, seconds: float) -> None:
        """A tenacity ``sleep=``: record the sleep, then jump the clock over it."""
        self.sleeps.append(seconds)
        self.tick(seconds)

    async def async_sleep(self, seconds: float) -> None:
        """The async ``sleep=``: record, jump the clock, and yield to other tasks once."""
        self.sleeps.append(seconds)
        self.tick(seconds)
        await asyncio.sleep(0)

    def elapsed(self) -> float:
        """Virtual seconds since the clock was created."""
        return time.monotonic() - self.start

    @staticmethod
    def wall() -> datetime:
        """The frozen wall-clock time, timezone-aware."""
        return datetime.now(UTC)


@pytest.fixture
def clock() -> Iterator[Clock]:
    """A frozen clock starting at :data:`START`."""
    with freeze_time(START) as frozen:
        yield Clock(frozen)


def failing(clock: Clock, durations: list[float], seen: list[float | None] | None = None) -> Any:
    """A function whose attempt ``i`` takes ``durations[i]`` (the last one repeats) and fails.

    Each attempt first records :func:`remaining` into ``seen`` when given.
    """
    calls = 0

    def attempt(**_: Any) -> None:
        nonlocal calls
        if seen is not None:
            seen.append(remaining())
        clock.tick(durations[min(calls, len(durations) - 1)])
        calls += 1
        raise OSError(f"attempt {calls} failed")

    return attempt


def exhaust(fn: Callable[..., Any], **kwargs: Any) -> BudgetExhausted:
    """Call ``fn``, which must give up with :class:`BudgetExhausted`, and return the error."""
    with pytest.raises(BudgetExhausted) as info:
        fn(**kwargs)
    return info.value


# -- 1. attempt duration in the solver and the model ------------------------------------------


def fitting_count(budget: float, base: float, factor: float, cap: float, duration: float) -> int:
    """Reference: count retries one by one in exact rational arithmetic."""
    spent = Fraction(duration)  # the first attempt
    limit = Fraction(budget)
    if spent > limit:
        return 0
    n = 0
    while True:
        delay = Fraction(min(cap, base * factor**n))
        if spent + delay + Fraction(duration) > limit:
            return n
        spent += delay + Fraction(duration)
        n += 1


@pytest.mark.parametrize(
    ("budget", "base", "factor", "cap", "duration", "expected"),
    [
        (300, 1, 2, 60, 0.0, 9),  # the seed's figure is unchanged by a zero duration
        (60, 1, 2, 4, 7.0, 5),  # 1+2+4+4+4 = 15 slept + 6 * 7 = 57 <= 60; one more is 68
        (57, 1, 2, 4, 7.0, 5),  # exactly full
        (56.99, 1, 2, 4, 7.0, 4),
        (10, 1, 2, 1, 4.5, 1),  # 1 + 2 * 4.5 = 10: one retry, exactly
        (10, 1, 2, 1, 4.6, 0),
        (10, 1, 2, 1, 10.0, 0),  # the first attempt alone fills the budget
        (10, 1, 2, 1, 10.5, 0),
        (100, 1, 2, 1, 10.0, 8),  # 8 * 1 + 9 * 10 = 98
    ],
)
def test_solver_fits_n_delays_and_n_plus_one_attempts(
    budget: float, base: float, factor: float, cap: float, duration: float, expected: int
) -> None:
    """Hand-computed counts, the boundaries included (exactly full fits; a hair over does not)."""
    assert compute_max_attempts(budget, base, factor, cap, duration) == expected
    assert compute_max_attempts(budget, base, factor, cap, attempt_duration=duration) == expected


@settings(max_examples=300, deadline=None)
@given(
    budget=st.integers(1, 5000),
    base=st.integers(1, 20),
    factor=st.integers(2, 5),
    cap=st.integers(1, 400),
    quarter_seconds=st.integers(0, 400),
)
def test_solver_matches_exact_count_with_durations(
    budget: int, base: int, factor: int, cap: int, quarter_seconds: int
) -> None:
    """Exact inputs: the closed form equals counting one retry at a time."""
    duration = quarter_seconds / 4
    got = compute_max_attempts(budget, base, factor, cap, duration)
    assert got == fitting_count(budget, base, factor, cap, duration)


@settings(max_examples=200, deadline=None)
@given(
    budget=st.floats(1, 1e5),
    base=st.floats(0.01, 50),
    factor=st.floats(1.05, 6),
    cap_ratio=st.floats(1, 100),
    share=st.floats(0, 1),
)
def test_solver_count_is_maximal_with_durations(
    budget: float, base: float, factor: float, cap_ratio: float, share: float
) -> None:
    """Any inputs: n delays and n + 1 attempts fit; n + 1 delays and n + 2 attempts do not."""
    cap = base * cap_ratio
    duration = budget * share / 3
    n = compute_max_attempts(budget, base, factor, cap, duration)

    def spent(retries: int) -> float:
        # Delays below the cap one by one, then every further delay is exactly the cap.
        below = min(retries, capped_index(base, factor, cap))
        slept = math.fsum(nominal_delay(i, base, factor, cap) for i in range(below))
        return slept + (retries - below) * cap + (retries + 1) * duration

    assert spent(n) <= budget * (1 + 1e-9)
    assert spent(n + 1) > budget * (1 - 1e-9)


def test_policy_counts_attempt_duration() -> None:
    """The model's max_attempts() counts the declared duration; it defaults to 0."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, attempt_duration=7)
    assert policy.attempt_duration == 7.0
    assert policy.max_attempts() == 5
    assert BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60).attempt_duration == 0.0


@pytest.mark.parametrize("duration", [4.6, 5.0, 10.0, 11.0])
def test_policy_whose_budget_affords_no_retry_is_refused(duration: float) -> None:
    """1 s delay + 2 attempts > 10 s: refused, and the message names attempt_duration."""
    with pytest.raises(ValidationError, match="affords no retry") as info:
        BackoffPolicy(base=1, cap=1, max_elapsed=10, attempt_duration=duration)
    assert "attempt_duration" in str(info.value)


def test_policy_with_exactly_one_affordable_retry_is_accepted() -> None:
    """1 + 2 * 4.5 == 10: exactly one retry fits, so the policy is valid."""
    assert BackoffPolicy(base=1, cap=1, max_elapsed=10, attempt_duration=4.5).max_attempts() == 1


@pytest.mark.parametrize("duration", [-1.0, math.inf, math.nan])
def test_policy_refuses_invalid_attempt_duration(duration: float) -> None:
    """Negative and non-finite durations are validation errors."""
    with pytest.raises(ValidationError):
        BackoffPolicy(base=1, cap=1, max_elapsed=10, attempt_duration=duration)


@settings(max_examples=150, deadline=None)
@given(
    base=st.floats(0.01, 10),
    cap_ratio=st.floats(1, 20),
    budget_ratio=st.floats(1, 50),
    duration=st.floats(0, 100),
)
def test_policy_accepts_exactly_the_budgets_affording_a_retry(
    base: float, cap_ratio: float, budget_ratio: float, duration: float
) -> None:
    """Valid exactly when the solver affords a retry, and then it reports that count."""
    cap = base * cap_ratio
    max_elapsed = cap * budget_ratio
    affordable = compute_max_attempts(max_elapsed, base, 2.0, cap, duration)
    if affordable == 0:
        with pytest.raises(ValidationError):
            BackoffPolicy(base=base, cap=cap, max_elapsed=max_elapsed, attempt_duration=duration)
    else:
        policy = BackoffPolicy(
            base=base, cap=cap, max_elapsed=max_elapsed, attempt_duration=duration
        )
        assert policy.max_attempts() == affordable


# -- 2. the wall-clock guard ------------------------------------------------------------------


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


# -- 3. absolute deadlines --------------------------------------------------------------------


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


# -- for_deadline -----------------------------------------------------------------------------


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


# -- 5. remaining() ---------------------------------------------------------------------------


def test_remaining_is_none_outside_a_run(clock: Clock) -> None:
    """None before, after a run that gave up, and after one that succeeded."""
    assert remaining() is None
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    seen: list[float | None] = []
    fn = policy.retry(sleep=clock.sleep)(failing(clock, [7.0], seen))
    exhaust(fn)
    assert remaining() is None  # after a run that gave up

    @policy.retry(sleep=clock.sleep)
    def ok() -> float | None:
        return remaining()

    assert ok() == 62.0
    assert remaining() is None  # after a run that succeeded


def test_remaining_decreases_and_is_budget_end_minus_now(clock: Clock) -> None:
    """Read twice per attempt: always the budget end minus now, strictly decreasing."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    readings: list[tuple[float | None, float]] = []

    @policy.retry(sleep=clock.sleep)
    def attempt() -> None:
        readings.append((remaining(), clock.elapsed()))
        clock.tick(3)
        readings.append((remaining(), clock.elapsed()))
        clock.tick(4)
        raise OSError("down")

    exhaust(attempt)
    values = [value for value, _ in readings]
    assert all(isinstance(value, float) for value in values)
    assert values == sorted(values, key=lambda v: -(v or 0.0))
    assert len(set(values)) == len(values)  # strictly decreasing: the clock always moved
    for value, at in readings:
        assert value == 62.0 - at


def test_remaining_is_the_earlier_of_budget_end_and_deadline(clock: Clock) -> None:
    """With a deadline before the budget end, remaining() counts down to the deadline."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    readings: list[tuple[float | None, float]] = []
    deadline = START + timedelta(seconds=50)

    @policy.retry(sleep=clock.sleep, deadline=deadline)
    def attempt() -> None:
        readings.append((remaining(), clock.elapsed()))
        clock.tick(7)
        raise OSError("down")

    exhaust(attempt)
    assert readings[0] == (50.0, 0.0)
    for value, at in readings:
        assert value == min(62.0, 50.0) - at


def test_remaining_budget_end_counts_from_the_first_attempt(clock: Clock) -> None:
    """A run started 10 s into the test: its budget ends 62 s after its own start."""
    clock.tick(10)
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    seen: list[float | None] = []
    exhaust(policy.retry(sleep=clock.sleep)(failing(clock, [7.0], seen)))
    assert seen[:3] == [62.0, 54.0, 45.0]


def test_remaining_is_zero_not_negative_past_the_deadline(clock: Clock) -> None:
    """A deadline already past: remaining() is 0.0 and the run makes no retry."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    seen: list[float | None] = []
    deadline = START - timedelta(seconds=5)
    report = exhaust(
        policy.retry(sleep=clock.sleep, deadline=deadline)(failing(clock, [1.0], seen))
    ).report
    assert seen == [0.0]
    assert report.reason is StopReason.DEADLINE
    assert clock.sleeps == []


def test_remaining_is_per_thread(clock: Clock) -> None:
    """Two threads inside the same decorated function at once, with different deadlines."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, jitter="none")
    both_inside = threading.Barrier(2)
    both_read = threading.Barrier(2)
    seen: dict[str, float | None] = {}

    @policy.retry(sleep=clock.sleep, deadline=lambda rs: rs.kwargs["deadline"])
    def work(name: str, *, deadline: datetime) -> str:
        both_inside.wait(timeout=30)
        seen[name] = remaining()
        both_read.wait(timeout=30)
        return name

    def call(name: str, seconds: float) -> str:
        return work(name, deadline=START + timedelta(seconds=seconds))

    with ThreadPoolExecutor(max_workers=2) as pool:
        near = pool.submit(call, "near", 30)
        far = pool.submit(call, "far", 90)
        assert (near.result(timeout=60), far.result(timeout=60)) == ("near", "far")
    assert seen == {"near": 30.0, "far": 60.0}
    assert remaining() is None


def test_remaining_is_per_asyncio_task(clock: Clock) -> None:
    """Two tasks interleave attempts and sleeps; each reads its own run's end."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, jitter="none")
    readings: dict[str, list[tuple[float | None, float]]] = {"near": [], "far": []}

    @policy.retry(sleep=clock.async_sleep, deadline=lambda rs: rs.kwargs["deadline"])
    async def work(name: str, *, deadline: datetime) -> None:
        readings[name].append((remaining(), clock.elapsed()))
        await asyncio.sleep(0)  # let the other task run inside its own attempt
        clock.tick(3)
        readings[name].append((remaining(), clock.elapsed()))
        raise OSError(name)

    async def main() -> tuple[BaseException | None, BaseException | None]:
        results = await asyncio.gather(
            work("near", deadline=START + timedelta(seconds=30)),
            work("far", deadline=START + timedelta(seconds=90)),
            return_exceptions=True,
        )
        assert remaining() is None
        return results

    near, far = asyncio.run(main())
    assert isinstance(near, BudgetExhausted)
    assert isinstance(far, BudgetExhausted)
    assert near.report.reason is StopReason.DEADLINE
    assert far.report.reason is StopReason.WALL_CLOCK
    # The tasks really interleaved: each saw the other's ticks inside its own attempts.
    assert len(readings["near"]) >= 4
    assert len(readings["far"]) >= 4
    for name, end in (("near", 30.0), ("far", 60.0)):
        values = [value for value, _ in readings[name]]
        assert values == sorted(values, key=lambda v: -(v or 0.0))
        for value, at in readings[name]:
            assert value == end - at
    assert clock.elapsed() <= 60.0


# -- 6. server-dictated waits -----------------------------------------------------------------


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


# -- async ------------------------------------------------------------------------------------


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


# -- the guarantee, as properties -------------------------------------------------------------


def budget_policies() -> st.SearchStrategy[BackoffPolicy]:
    """Valid policies affording at most a few hundred retries.

    base + 2 * attempt_duration < max_elapsed, so at least one retry is affordable by
    construction: a policy the model refuses fails the test instead of being skipped.
    """
    return policies(
        base=(0.05, 5),
        factor=st.floats(1.1, 4),
        cap_ratio=(1, 20),
        budget_ratio=(1, 15),
        exact_budgets=0,
        durations="within_budget",
        most_retries=None,
        reject_invalid=False,
    )


# Shares of the longest attempt so far; exactly 1.0 (as long as allowed) is the edge case.
SHARES = st.lists(st.just(1.0) | st.floats(0, 1), min_size=1, max_size=6)
# None: the policy's own waits; a number: a fixed wait of that share of the cap instead.
WAIT_SHARES = st.none() | st.floats(0.05, 3)


def micro(seconds: float) -> float:
    """``seconds`` rounded down to whole microseconds, the resolution of the frozen clock."""
    return math.floor(seconds * 1e6) / 1e6


def guarded_run(
    policy: BackoffPolicy,
    seed: int,
    first: float,
    shares: list[float],
    window: float | None,
    wait: float | None,
) -> None:
    """Run ``policy`` on attempts no longer than the longest earlier one; check the promise.

    The first attempt takes ``first`` seconds; attempt ``i > 0`` takes ``shares[i % len]`` of
    the larger of ``attempt_duration`` and the longest attempt so far. With ``wait``, every
    sleep is that fixed wait instead of the policy's (``policy.retry(wait=...)``): the solver's
    count then no longer matches the sleeps, and only the stop's guard keeps the promise.
    """
    options: dict[str, Any] = {} if wait is None else {"wait": tenacity.wait_fixed(wait)}
    with freeze_time(START) as frozen:
        clock = Clock(frozen)
        deadline = None if window is None else START + timedelta(seconds=window)
        end = policy.max_elapsed if window is None else min(policy.max_elapsed, window)
        longest = 0.0
        count = 0
        readings: list[tuple[float | None, float]] = []

        @policy.retry(seed=seed, sleep=clock.sleep, deadline=deadline, **options)
        def attempt() -> None:
            nonlocal longest, count
            readings.append((remaining(), clock.elapsed()))
            if count == 0:
                took = micro(first)
            else:
                bound = max(policy.attempt_duration, longest)
                took = micro(shares[count % len(shares)] * bound)
            longest = max(longest, took)
            count += 1
            clock.tick(took)
            raise OSError("down")

        report = exhaust(attempt).report
        assert clock.elapsed() <= policy.max_elapsed + EPS
        if deadline is not None:
            assert clock.wall() <= deadline + timedelta(seconds=EPS)
        assert report.attempts == count
        previous = math.inf
        for value, at in readings:
            assert value is not None
            assert value <= previous
            assert value == pytest.approx(max(0.0, end - at), abs=EPS)
            previous = value


@settings(max_examples=75, deadline=None)
@given(
    policy=budget_policies(),
    seed=st.integers(0, 2**32),
    first_share=st.floats(0, 1),
    shares=SHARES,
    wait_share=WAIT_SHARES,
)
def test_no_run_ends_past_its_budget(
    policy: BackoffPolicy,
    seed: int,
    first_share: float,
    shares: list[float],
    wait_share: float | None,
) -> None:
    """The first attempt fits the budget, no later attempt outlasts the estimate: no overrun."""
    wait = None if wait_share is None else wait_share * policy.cap
    guarded_run(policy, seed, first_share * policy.max_elapsed, shares, None, wait)


@settings(max_examples=75, deadline=None)
@given(
    policy=budget_policies(),
    seed=st.integers(0, 2**32),
    window_share=st.floats(0.01, 2),
    first_share=st.floats(0, 1),
    shares=SHARES,
    wait_share=WAIT_SHARES,
)
def test_no_run_ends_past_its_deadline(
    policy: BackoffPolicy,
    seed: int,
    window_share: float,
    first_share: float,
    shares: list[float],
    wait_share: float | None,
) -> None:
    """Same with an absolute deadline, before or after the budget's end."""
    window = window_share * policy.max_elapsed
    wait = None if wait_share is None else wait_share * policy.cap
    first = first_share * min(window, policy.max_elapsed)
    guarded_run(policy, seed, first, shares, window, wait)


@settings(max_examples=40, deadline=None)
@given(
    policy=budget_policies(),
    seed=st.integers(0, 2**32),
    shares=SHARES,
    wait_share=WAIT_SHARES,
)
def test_attempts_within_declared_duration_never_overrun(
    policy: BackoffPolicy, seed: int, shares: list[float], wait_share: float | None
) -> None:
    """Every attempt, the first included, no longer than ``attempt_duration``."""
    wait = None if wait_share is None else wait_share * policy.cap
    guarded_run(policy, seed, shares[0] * policy.attempt_duration, shares, None, wait)
