"""Plain helpers shared by the test modules: clocks, runs, exact sums, hypothesis builders.

Fixtures live in ``tests/conftest.py``; this module holds what tests call directly. Nothing
here sleeps for real: every sleep handed to tenacity records its duration and moves a
frozen clock over it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from typing import Any, Literal, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pydantic
import pytest
from freezegun.api import FrozenDateTimeFactory, StepTickTimeFactory, TickingDateTimeFactory
from hypothesis import assume
from hypothesis import strategies as st

from tenacity_budget import BackoffPolicy, BudgetExhausted, backoff_delays, remaining
from tenacity_budget.jitter import JitterMode

# What ``freeze_time(...)`` yields; the suite's clocks are frozen (``tick=False``).
Factory: TypeAlias = FrozenDateTimeFactory | StepTickTimeFactory | TickingDateTimeFactory

MODES: tuple[JitterMode, ...] = ("none", "full", "equal", "decorrelated")

# The instant the frozen clock starts at (the ``frozen`` and ``clock`` fixtures).
START = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
# Tolerance for the virtual clock itself: freezegun keeps microseconds and reads monotonic
# time as a float of epoch seconds, so a jittered (non-microsecond) sleep lands up to about a
# microsecond off. Every property checked with it is about seconds, so it cannot hide a
# real breach.
EPS = 1e-5


def iana_zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; skips the calling test module where there is no database."""
    try:
        return ZoneInfo(name)
    except ZoneInfoNotFoundError:  # pragma: no cover - depends on the machine
        pytest.skip(
            "needs the IANA time zone database (system zoneinfo or `pip install tzdata`)",
            allow_module_level=True,
        )


# -- sleeping on a frozen clock -----------------------------------------------------------


def sleeper(clock: FrozenDateTimeFactory, sleeps: list[float]) -> Callable[[float], None]:
    """A tenacity ``sleep=`` that records each sleep in ``sleeps`` and ticks ``clock`` by it."""

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.tick(seconds)

    return sleep


def async_sleeper(
    clock: FrozenDateTimeFactory, sleeps: list[float]
) -> Callable[[float], Awaitable[None]]:
    """The async twin of :func:`sleeper`."""

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.tick(seconds)

    return sleep


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


# -- runs that fail -----------------------------------------------------------------------


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


# -- exact arithmetic ---------------------------------------------------------------------


def exact_sum(waits: list[float]) -> Fraction:
    """The exact sum of ``waits``, free of float rounding."""
    return sum((Fraction(w) for w in waits), Fraction(0))


def solver_is_exact(policy: BackoffPolicy) -> bool:
    """Whether ``max_attempts()`` is exactly the definition's answer for this policy.

    False only on a rounding tie (the budget within ulps of a partial sum that is not
    itself that float), which the solver may honestly call either way; its own tests
    check it elsewhere. Everywhere else a run must make exactly the affordable retries.
    """
    m = policy.max_attempts()
    nominal = list(backoff_delays(policy.base, policy.factor, policy.cap, m + 1))
    duration, budget = Fraction(policy.attempt_duration), Fraction(policy.max_elapsed)
    fits = exact_sum(nominal[:m]) + (m + 1) * duration <= budget
    return fits and exact_sum(nominal) + (m + 2) * duration > budget


# -- hypothesis: policies -----------------------------------------------------------------

# Growth factors: any in a range, and the round ones whose sums are most often exact.
FACTORS = st.one_of(st.floats(1.01, 5.0), st.sampled_from([1.5, 2.0, 3.0]))

Durations = Literal["none", "up_to_base", "within_budget"]


@st.composite
def policies(
    draw: st.DrawFn,
    modes: tuple[JitterMode, ...] = MODES,
    *,
    base: tuple[float, float] = (1e-3, 100.0),
    factor: st.SearchStrategy[float] = FACTORS,
    cap_ratio: tuple[float, float] = (0.5, 200.0),
    budget_ratio: tuple[float, float] = (1.0, 300.0),
    exact_budgets: int = 3,
    durations: Durations = "up_to_base",
    most_retries: int | None = 3_000,
    reject_invalid: bool = True,
) -> BackoffPolicy:
    """Valid policies from the space the arguments bound (the defaults: the widest one).

    Args:
        modes: the jitter modes drawn from.
        base: the range of ``base``.
        factor: the strategy drawing ``factor``.
        cap_ratio: the range of ``cap / base``.
        budget_ratio: the range of ``max_elapsed`` over ``max(base, cap)`` (plus two
            attempt durations, for ``durations="up_to_base"``).
        exact_budgets: one budget in ``exact_budgets`` is instead an exact partial sum of
            1 to 60 nominal delays (plus one attempt duration per attempt), the boundary
            where an off-by-one in the count or float rounding in a running total shows;
            ``0``: none is.
        durations: ``attempt_duration`` is ``0`` (``"none"``), ``0`` or up to ``base``
            with room made for it in the budget (``"up_to_base"``), or drawn after the
            budget as a share below 0.999 of what one ``base`` delay leaves for two
            attempts, so at least one retry is affordable by construction
            (``"within_budget"``; meant with ``exact_budgets=0``).
        most_retries: only policies affording at most this many retries (``None``: any).
        reject_invalid: skip drawn fields that the model refuses; ``False`` lets its
            ``ValidationError`` fail the test (for spaces valid by construction).
    """
    low = draw(st.floats(*base))
    growth = draw(factor)
    cap = low * draw(st.floats(*cap_ratio))
    duration = 0.0
    if durations == "up_to_base":
        duration = draw(st.one_of(st.just(0.0), st.floats(0.0, low)))
    if exact_budgets and draw(st.integers(0, exact_budgets - 1)) == 0:
        n = draw(st.integers(1, 60))
        nominal = list(backoff_delays(low, growth, cap, n))
        budget = float(exact_sum(nominal) + (n + 1) * Fraction(duration))
    else:
        budget = max(low, cap) * draw(st.floats(*budget_ratio)) + 2 * duration
    if durations == "within_budget":
        # low + 2 * duration <= budget: at least one retry is affordable.
        duration = draw(st.floats(0, 0.999)) * (budget - low) / 2
    fields: dict[str, Any] = {
        "base": low,
        "factor": growth,
        "cap": cap,
        "max_elapsed": budget,
        "jitter": draw(st.sampled_from(modes)),
        "attempt_duration": duration,
    }
    if reject_invalid:
        try:
            policy = BackoffPolicy(**fields)
        except pydantic.ValidationError:
            assume(False)
            raise  # unreachable: assume(False) ends the example
    else:
        policy = BackoffPolicy(**fields)
    if most_retries is not None:
        assume(policy.max_attempts() <= most_retries)
    return policy
