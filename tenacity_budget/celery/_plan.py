"""The pure retry plan of a budgeted Celery task: seeds, the run deadline, the decision.

Nothing here imports celery: a plan is a function of plain values (the glue passes the
clock), tested on numbers alone. See ``docs/celery.md``.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from .._config import check_aware, earliest
from .._validate import seconds
from ..decision import decide
from ..exhaustion import StopReason
from ..policy import BackoffPolicy
from ..solver import add_compensated

# Wall-clock instants are datetimes, exact to a microsecond. The decision allows that much
# (it is handed the elapsed time minus it and the time to the deadline plus it), so a plan
# that fits its budget exactly is not refused for the rounding of its instants.
_RESOLUTION = 1e-6

# The latest and earliest instants a datetime holds, in UTC: an instant computed past them
# (a run's start plus a huge ``max_elapsed``, a far deadline in another zone) is held at
# them. Either is beyond anything a run can reach, so it behaves as no deadline.
_LATEST = datetime.max.replace(tzinfo=UTC)
_EARLIEST = datetime.min.replace(tzinfo=UTC)


def _after(instant: datetime, seconds: float) -> datetime:
    """``instant + seconds``, held at :data:`_LATEST` when that is past ``datetime.max``."""
    try:
        return instant + timedelta(seconds=seconds)
    except OverflowError:  # timedelta's own range, or datetime's
        return _LATEST


def seed_for(task_id: str) -> int:
    """The seed of a task's jitter schedule: a stable 64-bit hash of its task id.

    Stable across processes and Python versions (SHA-256, not ``hash()``), so every worker
    draws the same schedule for the same task, and a test can predict it::

        policy.schedule(seed_for(result.id))  # every countdown the task will use
    """
    digest = hashlib.sha256(task_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def run_deadline(
    policy: BackoffPolicy, started: datetime, deadline: datetime | None = None
) -> datetime:
    """The run's absolute deadline: the earliest of ``started + max_elapsed``, ``deadline``
    and the policy's own ``deadline``."""
    check_aware(started, "started")
    end = earliest(_after(started, policy.max_elapsed), _explicit_deadline(policy, deadline))
    assert end is not None  # the budget's end is always there
    return end


def _explicit_deadline(policy: BackoffPolicy, deadline: datetime | None) -> datetime | None:
    """The earliest explicit deadline of a run: the message's and the policy's own."""
    return earliest(None if deadline is None else check_aware(deadline), policy.deadline)


def _attempt_estimate(policy: BackoffPolicy, longest: float) -> float:
    """The next attempt's estimated duration: ``attempt_duration``, or ``longest`` if longer."""
    return max(policy.attempt_duration, seconds(longest, "longest", allow_inf=True))


@dataclass(frozen=True, slots=True)
class _SchedulePosition:
    """Where a task stands in its seeded schedule before retry ``n``."""

    slept: float  # the countdowns of the retries already made, summed exactly (fsum)
    total: float  # the same sum as the schedule itself keeps it: a compensated sum...
    error: float  # ...total + error (solver.add_compensated)
    countdown: float | None  # retry n's countdown; None when the schedule has no retry n


def _replay_schedule(policy: BackoffPolicy, task_id: str, retries: int) -> _SchedulePosition:
    """The countdowns a task has slept before retry ``retries``, and that retry's countdown.

    Walks the task's seeded schedule without keeping it: constant memory however long the
    schedule. The sum is kept twice: exactly, for reports, and compensated as the
    schedule's own sleep check keeps it, so the decision's sleep check repeats that check
    bit for bit and never refuses a countdown the schedule has.
    """
    waits = policy.iter_waits(random.Random(seed_for(task_id)))
    total = error = 0.0

    def taken() -> Iterator[float]:
        nonlocal total, error
        for wait in itertools.islice(waits, retries):
            total, error = add_compensated(total, error, wait)
            yield wait

    slept = math.fsum(taken())
    return _SchedulePosition(slept, total, error, next(waits, None))


def _stop_reason(
    policy: BackoffPolicy,
    *,
    attempts: int,
    position: _SchedulePosition | None,
    started: datetime,
    now: datetime,
    deadline: datetime | None,
    next_attempt: float,
    grant: Callable[[], bool] | None = None,
) -> StopReason | None:
    """The one decision: :func:`~tenacity_budget.decision.decide`, then the retry budget.

    ``position`` is ``None`` for an attempt about to start (no sleep ahead of it). The
    datetimes are exact to a microsecond: the elapsed time is handed over less
    ``_RESOLUTION`` and the time to the deadline plus it, so a plan ending exactly at the
    budget's end or at the deadline is not refused for the rounding of its instants.
    ``grant`` (a retry budget's ``try_withdraw``) is asked last, and only when every other
    check allows the retry: a run the policy ends never spends it.
    """
    explicit = _explicit_deadline(policy, deadline)
    until = math.inf if explicit is None else (explicit - now).total_seconds()
    if position is None:
        sleep = slept_through = 0.0
    else:
        sleep = math.inf if position.countdown is None else position.countdown
        total, error = add_compensated(position.total, position.error, sleep)
        slept_through = total + error
    reason = decide(
        attempts,
        policy.max_attempts(),
        sleep,
        slept_through,
        (now - started).total_seconds() - _RESOLUTION,
        next_attempt,
        policy.max_elapsed,
        until + _RESOLUTION,
    )
    if reason is None and grant is not None and not grant():
        return StopReason.RETRY_BUDGET
    return reason


@dataclass(frozen=True, slots=True)
class RetryPlan:
    """What to do after a failed attempt of a budgeted task.

    Attributes:
        attempts: calls made so far, the failed one included (``retries + 1``).
        countdown: seconds to wait before the next attempt, or ``None`` to give up.
        reason: why the run gives up (``None`` when it retries).
        slept: the countdowns of the retries already made.
        elapsed: seconds from the run's start to ``now``.
        deadline: the run's absolute deadline (see :func:`run_deadline`).
    """

    attempts: int
    countdown: float | None
    reason: StopReason | None
    slept: float
    elapsed: float
    deadline: datetime

    @property
    def exhausted(self) -> bool:
        """Whether the budget is spent (no retry is to be scheduled)."""
        return self.countdown is None


def plan_retry(
    policy: BackoffPolicy,
    *,
    task_id: str,
    retries: int,
    started: datetime,
    now: datetime,
    deadline: datetime | None = None,
    longest: float = 0.0,
) -> RetryPlan:
    """Decide whether, and after which countdown, a failed attempt is retried.

    A pure function of its arguments (the Celery glue passes the clock): the decision is
    :func:`tenacity_budget.decision.decide`, the one the tenacity stop asks, with:

    1. ``count``: ``retries`` already equals the retries the budget affords;
    2. ``sleep_budget``: the seeded schedule has no retry ``retries`` (float rounding);
    3. ``wall_clock``: ``now + countdown + attempt`` is after ``started + max_elapsed``;
    4. ``deadline``: ``now + countdown + attempt`` is after the explicit deadline.

    ``countdown`` is ``policy.schedule(seed_for(task_id))[retries]`` and ``attempt`` the
    larger of ``attempt_duration`` and ``longest``. Instants are compared at the
    microsecond resolution of :class:`~datetime.datetime`. A retry budget, when the task
    has one, is asked only after this plan allows the retry.

    Args:
        policy: the budget.
        task_id: the Celery task id; seeds the schedule (:func:`seed_for`).
        retries: retries made before the failed attempt (Celery's ``request.retries``).
        started: when the run started (timezone-aware).
        now: the current time (timezone-aware).
        deadline: an explicit absolute deadline, if any.
        longest: the longest attempt of the run so far, in seconds.
    """
    return _plan_retry(
        policy,
        task_id=task_id,
        retries=retries,
        started=started,
        now=now,
        deadline=deadline,
        longest=longest,
    )


def _plan_retry(
    policy: BackoffPolicy,
    *,
    task_id: str,
    retries: int,
    started: datetime,
    now: datetime,
    deadline: datetime | None,
    longest: float,
    grant: Callable[[], bool] | None = None,
) -> RetryPlan:
    """:func:`plan_retry`, with a retry budget's ``grant`` asked last (see _stop_reason)."""
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries!r}")
    check_aware(now, "now")
    end = run_deadline(policy, started, deadline)
    need_attempt = _attempt_estimate(policy, longest)
    position = _replay_schedule(policy, task_id, retries)
    reason = _stop_reason(
        policy,
        attempts=retries + 1,
        position=position,
        started=started,
        now=now,
        deadline=deadline,
        next_attempt=need_attempt,
        grant=grant,
    )
    countdown = position.countdown if reason is None else None
    elapsed = (now - started).total_seconds()
    return RetryPlan(retries + 1, countdown, reason, position.slept, elapsed, end)


def admit_attempt(
    policy: BackoffPolicy,
    *,
    started: datetime,
    now: datetime,
    deadline: datetime | None = None,
    longest: float = 0.0,
) -> StopReason | None:
    """Why an attempt starting ``now`` must not run (it would end past the run deadline).

    ``None`` admits it. A retry normally starts in time, as its countdown was planned to;
    one that arrives late (redelivered after a worker crash, or held up behind a backlog)
    and could not finish before the deadline is dead-lettered instead of run. The same
    decision as :func:`plan_retry`, with no sleep ahead (so only ``wall_clock`` and
    ``deadline`` can refuse it).
    """
    check_aware(now, "now")
    check_aware(started, "started")
    return _stop_reason(
        policy,
        attempts=0,
        position=None,
        started=started,
        now=now,
        deadline=deadline,
        next_attempt=_attempt_estimate(policy, longest),
    )
