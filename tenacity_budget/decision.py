"""Where a run stops: the one decision "may this run make another attempt?".

:func:`decide` is a pure function of one observation (plain numbers, plus the testing
bound, the user's own stop and the retry budget, asked last): every place that decides
whether a budgeted run retries asks it, and :func:`cut` says why a hard-deadline attempt
is cut off. Nothing here reads a clock, touches tenacity or keeps state, so the rules are
tested on numbers alone. The checks are listed once, in docs/concepts.md.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

from .exhaustion import StopReason

__all__ = ["decide"]

_INF = math.inf
# The elapsed time is a difference of two clock readings, each rounded to a float: a run
# that fills its budget exactly can read a few ulps over it. That much is not over.
_READING = 2.0**-50


def decide(
    attempts: int,
    affordable: int,
    sleep: float,
    slept_through: float,
    elapsed: float,
    next_attempt: float,
    budget: float,
    until_deadline: float,
    testing: int | None = None,
    other: Callable[[], bool] | None = None,
    grant: Callable[[], bool] | None = None,
    throttle: Callable[[], bool] | None = None,
) -> StopReason | None:
    """Why the run must stop before its next attempt, or ``None`` to let it retry.

    The checks, in order (the first that holds is the reason; docs/concepts.md states
    them): ``count`` (``attempts`` past ``affordable``, or past ``testing`` in testing
    mode, which replaces the next three), ``sleep_budget`` (a non-finite ``sleep``, or
    ``slept_through`` past ``budget``), ``wall_clock`` (``elapsed`` plus the sleep and
    ``next_attempt`` past ``budget``, beyond the rounding of two clock readings),
    ``deadline`` (the sleep and next attempt past ``until_deadline``), ``other`` (the
    user's own stop, asked only then), ``throttled`` (``throttle``, an adaptive throttle's
    admission of the attempt, after the time budget) and ``retry_budget`` (``grant``, a
    retry budget's withdrawal, asked last: a retry refused before never spends the shared
    budget).

    Args:
        attempts: calls made so far, the one that just failed included.
        affordable: retries the budget affords (the solver's ``max_attempts()``).
        sleep: the sleep about to be taken.
        slept_through: seconds slept so far plus ``sleep``, as a compensated sum.
        elapsed: seconds from the start of the first attempt to now.
        next_attempt: the estimated duration of the next attempt.
        budget: the run's ``max_elapsed``.
        until_deadline: seconds from now to the earliest deadline (``inf``: none).
        testing: the testing mode's attempt bound (``None``: off).
        other: another stop of the run; true ends it (reason ``other``).
        grant: a retry budget's withdrawal; false ends the run (``retry_budget``).
        throttle: an adaptive throttle's admission (``AdaptiveThrottle.admit``, which
            counts the attempt); false rejects it locally and ends the run (``throttled``).

    Every argument may be passed by position: this runs before every retry.
    """
    if testing is not None:
        if attempts >= testing:
            return StopReason.COUNT
    elif attempts > affordable:
        return StopReason.COUNT
    elif not -_INF < sleep < _INF or slept_through > budget:  # NaN fails every comparison
        return StopReason.SLEEP_BUDGET
    else:
        need = sleep + next_attempt
        if elapsed + need > budget + budget * _READING:
            return StopReason.WALL_CLOCK
        if need > until_deadline:
            return StopReason.DEADLINE
    if other is throttle is grant is None:  # none of the three given: no call to make
        return None
    return _asked(other, throttle, grant)


def _asked(
    other: Callable[[], bool] | None,
    throttle: Callable[[], bool] | None,
    grant: Callable[[], bool] | None,
) -> StopReason | None:
    """:func:`decide`'s last checks, once the time budget allows the retry: the user's stop,
    then the throttle, then the retry budget (each asked only if the one before allows)."""
    if other is not None and other():
        return StopReason.OTHER
    if throttle is not None and not throttle():
        return StopReason.THROTTLED
    return None if grant is None else withdraw(grant)


def admit(throttle: Callable[[], bool] | None) -> StopReason | None:
    """The decision for a run's first attempt: ``throttled`` when the throttle rejects it.

    A first attempt has no sleep, count or retry budget to check; only an adaptive
    throttle may keep it from being sent (before the call's deposit in a retry budget).
    """
    return None if throttle is None or throttle() else StopReason.THROTTLED


def withdraw(grant: Callable[[], bool]) -> StopReason | None:
    """The last check: ``retry_budget`` when the retry budget refuses the retry."""
    return None if grant() else StopReason.RETRY_BUDGET


async def awithdraw(grant: Callable[[], Awaitable[bool]]) -> StopReason | None:
    """:func:`withdraw` for an asyncio retry budget (its withdrawal is awaited)."""
    return None if await grant() else StopReason.RETRY_BUDGET


def cut(budget_left: float, wall_left: float, mono_left: float) -> StopReason | None:
    """Whether an attempt of a ``hard_deadline`` run is cut, and why, from the time left.

    ``budget_left`` is the time left in the run's own budget, ``wall_left`` and
    ``mono_left`` until its deadlines on the wall and monotonic clocks (``inf``: none).
    ``None`` while none has run out; ``deadline`` when a deadline ran out (an enclosing
    monotonic end only if it came no later than the budget's), else ``wall_clock``.
    """
    if budget_left >= 0 and wall_left >= 0 and mono_left >= 0:
        return None
    return cut_reason(budget_left, wall_left, mono_left)


def cut_reason(budget_left: float, wall_left: float, mono_left: float) -> StopReason:
    """Which end ran out for an attempt cut off (its timer expired): see :func:`cut`."""
    if wall_left <= 0 or (mono_left <= 0 and mono_left <= budget_left):
        return StopReason.DEADLINE
    return StopReason.WALL_CLOCK
