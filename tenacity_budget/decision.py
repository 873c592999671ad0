"""Where a run stops: the one decision "may this run make another attempt?".

:func:`decide` is a pure function of plain numbers: every place that decides whether a
budgeted run retries (the tenacity stop, the Celery integration, any stop added later)
measures what it knows (the sleeps summed with :func:`~tenacity_budget.solver.add_compensated`),
then asks it. Nothing here reads a clock, touches tenacity or keeps state, so the rule is
tested on numbers alone.
"""

from __future__ import annotations

import math

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
) -> StopReason | None:
    """Why the run must stop before its next attempt, or ``None`` to let it retry.

    The checks, in order; the first that holds is the reason:

    1. ``count``: ``attempts`` (calls made so far) exceeds the ``affordable`` retries;
    2. ``sleep_budget``: the upcoming ``sleep`` is not a finite number (NaN or infinite:
       it could never be slept), or the sleeps so far plus it (``slept_through``) would
       exceed ``budget``;
    3. ``wall_clock``: ``elapsed`` (since the first attempt began) plus the sleep plus the
       ``next_attempt`` estimate would exceed ``budget`` (by more than the rounding of
       two clock readings, ``budget * 2**-50``, so an exact fill keeps its last retry);
    4. ``deadline``: the sleep plus the next attempt would take longer than the
       ``until_deadline`` seconds left before the earliest deadline.

    Args:
        attempts: calls made so far, the one that just failed included.
        affordable: retries the budget affords (the solver's ``max_attempts()``).
        sleep: the sleep about to be taken.
        slept_through: seconds slept so far plus ``sleep``, as a compensated sum
            (``total + error`` of :func:`~tenacity_budget.solver.add_compensated`), so a
            schedule that exactly fills the budget is not refused its last retry for
            float drift.
        elapsed: seconds from the start of the first attempt to now.
        next_attempt: the estimated duration of the next attempt.
        budget: the run's ``max_elapsed``.
        until_deadline: seconds from now to the earliest deadline (``inf``: none).

    Every argument is required and may be passed by position: this runs before every
    retry, and a call by keyword costs measurably more there.
    """
    if attempts > affordable:
        return StopReason.COUNT
    if not -_INF < sleep < _INF:  # NaN fails every comparison
        return StopReason.SLEEP_BUDGET
    if slept_through > budget:
        return StopReason.SLEEP_BUDGET
    need = sleep + next_attempt
    if elapsed + need > budget + budget * _READING:
        return StopReason.WALL_CLOCK
    if need > until_deadline:
        return StopReason.DEADLINE
    return None
