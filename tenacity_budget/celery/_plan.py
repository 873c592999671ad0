"""The pure retry plan of a budgeted Celery task: seeds, the run deadline, the decision.

Also the walk of a task's seeded schedule: replayed from retry 0, or continued in O(1)
from the cursor each retry's message carries. Nothing here imports celery: a plan is a
function of plain values (the glue passes the clock), tested on numbers alone. See
``docs/celery.md``.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import itertools
import math
import random
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

from .._validate import seconds
from ..context import check_aware, earliest
from ..decision import decide
from ..exhaustion import StopReason
from ..jitter import jitter_for
from ..policy import BackoffPolicy
from ..solver import add_compensated, nominal_delay

# Wall-clock instants are datetimes, exact to a microsecond. The decision allows that much
# (it is handed the elapsed time minus it and the time to the deadline plus it), so a plan
# that fits its budget exactly is not refused for the rounding of its instants.
_RESOLUTION = 1e-6

# The latest and earliest instants a datetime holds, in UTC: an instant computed past them
# (a run's start plus a huge ``max_elapsed``, a far deadline in another zone) is held at
# them. Either is beyond anything a run can reach, so it behaves as no deadline.
_LATEST = datetime.max.replace(tzinfo=UTC)
_EARLIEST = datetime.min.replace(tzinfo=UTC)


def _after(instant: datetime, span: float) -> datetime:
    """``instant + span`` seconds, held at :data:`_LATEST` when past ``datetime.max``."""
    try:
        return instant + timedelta(seconds=span)
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


def _add_exact(partials: list[float], value: float) -> None:
    """Add ``value`` to ``partials`` (non-overlapping floats summing exactly to a sum).

    Shewchuk's exact summation, the running form of :func:`math.fsum`: ``fsum(partials)``
    is the correctly rounded sum of every value added, bit for bit what ``fsum`` of them
    all returns, in constant time per value (a handful of partials for any run).
    """
    kept = 0
    for partial in partials:
        if abs(value) < abs(partial):
            value, partial = partial, value
        high = value + partial
        low = partial - (high - value)
        if low:
            partials[kept] = low
            kept += 1
        value = high
    partials[kept:] = [value]


@dataclass(frozen=True, slots=True)
class _Cursor:
    """A run's place in its seeded schedule before retry ``retries`` is drawn.

    All that continuing the schedule exactly takes: the sums of the countdowns already
    made (compensated, as the schedule's sleep check keeps it, and exact), the previous
    countdown (decorrelated jitter grows from it) and the generator's state. It travels in
    the schedule header, so that a retry costs O(1) instead of a replay from retry 0.
    """

    retries: int
    total: float  # compensated sum of the countdowns so far: total + error
    error: float
    partials: tuple[float, ...]  # their exact sum (see _add_exact)
    previous: float  # the last countdown (0.0 before the first retry)
    rng: tuple[int, ...] | None  # random.Random's state (None: the jitter draws nothing)

    @property
    def slept(self) -> float:
        """The countdowns of the retries already made, summed exactly (``math.fsum``)."""
        return math.fsum(self.partials)

    def after(self, countdown: float, rng: random.Random | None) -> _Cursor:
        """The cursor once retry ``retries`` is drawn (``countdown``, leaving ``rng`` so)."""
        total, error = add_compensated(self.total, self.error, countdown)
        state = None if rng is None else rng.getstate()[1]
        partials = list(self.partials)
        _add_exact(partials, countdown)
        return _Cursor(self.retries + 1, total, error, tuple(partials), countdown, state)


@dataclass(frozen=True, slots=True)
class _SchedulePosition:
    """Where a task stands in its seeded schedule before retry ``n``, and after it."""

    slept: float  # the countdowns of the retries already made, summed exactly (fsum)
    total: float  # the same sum as the schedule itself keeps it: a compensated sum...
    error: float  # ...total + error (solver.add_compensated)
    countdown: float | None  # retry n's countdown; None when the schedule has no retry n
    after: _Cursor | None = None  # the cursor once retry n is taken (None without it)


def _replay_schedule(
    policy: BackoffPolicy, task_id: str, retries: int, *, cursor: bool = False
) -> _SchedulePosition:
    """The countdowns a task has slept before retry ``retries``, and that retry's countdown.

    Walks the task's seeded schedule (``policy.iter_waits``) from retry 0 without keeping
    it: constant memory, O(retries) time; the reference the cursor path must agree with,
    and the path of a message without the schedule header. The sum is kept twice:
    exactly, for reports, and compensated as the schedule's own sleep check keeps it, so
    the decision's sleep check repeats that check bit for bit. With ``cursor``, the exact
    sum is kept as partials, slower, to hand on the cursor after retry ``retries``.
    """
    rng = random.Random(seed_for(task_id))
    waits = policy.iter_waits(rng)
    total = error = previous = 0.0
    partials: list[float] = []

    def taken() -> Iterator[float]:
        nonlocal total, error, previous
        for wait in itertools.islice(waits, retries):
            total, error = add_compensated(total, error, wait)
            if cursor:
                _add_exact(partials, wait)
            previous = wait
            yield wait

    slept = math.fsum(taken())
    countdown = next(waits, None)
    after = None
    if cursor and countdown is not None:
        before = _Cursor(retries, total, error, tuple(partials), previous, None)
        after = before.after(countdown, rng if policy.jitter != "none" else None)
    return _SchedulePosition(slept, total, error, countdown, after)


def _continue_schedule(policy: BackoffPolicy, cursor: _Cursor) -> _SchedulePosition:
    """:func:`_replay_schedule` from a cursor: retry ``cursor.retries`` drawn in O(1).

    The step of ``policy.iter_waits``: the nominal delay of the retry (``cap`` from the
    capped index on), jittered from the restored generator, and the schedule's own sleep
    check on the compensated sum (past it, or past the affordable retries, it has no more).
    """
    n = cursor.retries
    position = functools.partial(_SchedulePosition, cursor.slept, cursor.total, cursor.error)
    if n >= policy.max_attempts():
        return position(None)
    if n >= policy.capped_index():
        delay = policy.cap
    else:
        delay = nominal_delay(n, policy.base, policy.factor, policy.cap)
    rng = None
    if cursor.rng is not None:
        rng = _generator()
        rng.setstate((3, cursor.rng, None))
    countdown = jitter_for(policy.jitter)(delay, cursor.previous, policy.base, rng)
    total, error = add_compensated(cursor.total, cursor.error, countdown)
    if total + error > policy.max_elapsed:
        return position(None)
    return position(countdown, cursor.after(countdown, rng))


_GENERATORS = threading.local()


def _generator() -> random.Random:
    """This thread's generator for continuing schedules (its state is set before each use)."""
    rng: random.Random | None = getattr(_GENERATORS, "rng", None)
    if rng is None:
        rng = _GENERATORS.rng = random.Random(0)
    return rng


def _fingerprint(policy: BackoffPolicy, task_id: str) -> str:
    """What a cursor belongs to: the task's seed and every term the schedule depends on."""
    terms = (
        seed_for(task_id),
        policy.base,
        policy.factor,
        policy.cap,
        policy.max_elapsed,
        policy.jitter,
        policy.max_attempts(),
    )
    return hashlib.sha256(repr(terms).encode("utf-8")).hexdigest()[:16]


_CURSOR_VERSION = "1"
_MT_WORDS = 625  # random.Random's state: 624 words of the Mersenne Twister and its index


def _encode_cursor(cursor: _Cursor, fingerprint: str) -> str:
    """The the schedule header value of ``cursor``: text, exact (floats in hex)."""
    rng = "-"
    if cursor.rng is not None:
        rng = base64.b64encode(struct.pack(f"<{_MT_WORDS}I", *cursor.rng)).decode("ascii")
    return " ".join(
        (
            _CURSOR_VERSION,
            fingerprint,
            str(cursor.retries),
            cursor.total.hex(),
            cursor.error.hex(),
            cursor.previous.hex(),
            ",".join(p.hex() for p in cursor.partials),
            rng,
        )
    )


def _decode_cursor(value: object, fingerprint: str, retries: int) -> _Cursor | None:
    """The cursor a schedule header ``value`` holds for retry ``retries`` of the run
    ``fingerprint`` names, or ``None`` (no header, another run's or policy's, malformed):
    the header only saves a replay, so anything but an exact match is replayed instead."""
    if not isinstance(value, str):
        return None
    fields = value.split(" ")
    if len(fields) != 8 or fields[:3] != [_CURSOR_VERSION, fingerprint, str(retries)]:
        return None
    try:
        total, error, previous = (float.fromhex(f) for f in fields[3:6])
        partials = tuple(float.fromhex(p) for p in fields[6].split(",")) if fields[6] else ()
        rng = None if fields[7] == "-" else _decode_state(fields[7])
    except (ValueError, TypeError, struct.error, binascii.Error):
        return None
    if not all(map(math.isfinite, (total, error, previous, *partials))):
        return None
    return _Cursor(retries, total, error, partials, previous, rng)


def _decode_state(text: str) -> tuple[int, ...]:
    """A generator state as :func:`_encode_cursor` wrote it (raises for anything else)."""
    state: tuple[int, ...] = struct.unpack(
        f"<{_MT_WORDS}I", base64.b64decode(text.encode("ascii"), validate=True)
    )
    if state[-1] > _MT_WORDS - 1:  # the index random.Random.setstate accepts
        raise ValueError("generator state index out of range")
    return state


def _schedule_position(
    policy: BackoffPolicy, task_id: str, retries: int, header: object = None
) -> tuple[_SchedulePosition, str]:
    """Where the task stands before retry ``retries``: from the message's cursor when it
    has a valid one (O(1)), else by replaying the schedule; and the run's fingerprint."""
    fingerprint = _fingerprint(policy, task_id)
    cursor = _decode_cursor(header, fingerprint, retries)
    if cursor is None or (cursor.rng is None) != (policy.jitter == "none"):
        return _replay_schedule(policy, task_id, retries, cursor=True), fingerprint
    return _continue_schedule(policy, cursor), fingerprint


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
    throttle: Callable[[], bool] | None = None,
) -> StopReason | None:
    """The one decision: :func:`~tenacity_budget.decision.decide`, time budget, throttle,
    then retry budget.

    ``position`` is ``None`` for an attempt about to start (no sleep ahead of it). The
    datetimes are exact to a microsecond: the elapsed time is handed over less
    ``_RESOLUTION`` and the time to the deadline plus it, so a plan ending exactly at the
    budget's end or at the deadline is not refused for the rounding of its instants.
    ``throttle`` (an adaptive throttle's ``admit``) is asked once the time budget allows
    the attempt, and ``grant`` (a retry budget's ``try_withdraw``) last, only when every
    other check allows the retry: a run the policy ends never spends it.
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
        None,
        None,
        grant,
        throttle,
    )
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
    throttled: bool = False,
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
    has one and no throttle, is asked only after this plan allows the retry; with a
    throttle, it is asked when the retry runs (:func:`admit_attempt`), after the throttle.

    Args:
        policy: the budget.
        task_id: the Celery task id; seeds the schedule (:func:`seed_for`).
        retries: retries made before the failed attempt (Celery's ``request.retries``).
        started: when the run started (timezone-aware).
        now: the current time (timezone-aware).
        deadline: an explicit absolute deadline, if any.
        longest: the longest attempt of the run so far, in seconds.
        throttled: the attempt was rejected by the task's throttle (never run): it is
            retried like a failed one, on the time budget alone (no retry budget is asked:
            nothing was sent), and a refusal's reason is ``throttled``.
    """
    return _plan_retry(
        policy,
        task_id=task_id,
        retries=retries,
        started=started,
        now=now,
        deadline=deadline,
        longest=longest,
        throttled=throttled,
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
    position: _SchedulePosition | None = None,
    throttled: bool = False,
) -> RetryPlan:
    """:func:`plan_retry`, with a retry budget's ``grant`` asked last (see _stop_reason),
    and the task's ``position`` in its schedule when the caller has it (else replayed).
    A ``throttled`` attempt's plan never asks ``grant``."""
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries!r}")
    check_aware(now, "now")
    end = run_deadline(policy, started, deadline)
    need_attempt = _attempt_estimate(policy, longest)
    if position is None:
        position = _replay_schedule(policy, task_id, retries)
    reason = _stop_reason(
        policy,
        attempts=retries + 1,
        position=position,
        started=started,
        now=now,
        deadline=deadline,
        next_attempt=need_attempt,
        grant=None if throttled else grant,
    )
    if reason is not None and throttled:
        # The time budget is spent on the heels of a rejection: the throttle ended the run.
        reason = StopReason.THROTTLED
    countdown = position.countdown if reason is None else None
    elapsed = (now - started).total_seconds()
    return RetryPlan(retries + 1, countdown, reason, position.slept, elapsed, end)


class _Throttle(Protocol):
    def admit(self) -> bool: ...


def admit_attempt(
    policy: BackoffPolicy,
    *,
    started: datetime,
    now: datetime,
    deadline: datetime | None = None,
    longest: float = 0.0,
    throttle: _Throttle | Callable[[], bool] | None = None,
    grant: Callable[[], bool] | None = None,
) -> StopReason | None:
    """Why an attempt starting ``now`` must not run: it would end past the run deadline,
    the task's throttle rejects it, or the retry budget refuses it.

    ``None`` admits it. A retry normally starts in time, as its countdown was planned to;
    one that arrives late (redelivered after a worker crash, or held up behind a backlog)
    and could not finish before the deadline is dead-lettered instead of run. The same
    decision as :func:`plan_retry`, with no sleep ahead (so only ``wall_clock`` and
    ``deadline`` can refuse it), then ``throttle`` (an adaptive throttle, or its
    ``admit``), asked only once the time budget admits the attempt: ``throttled`` when it
    rejects it (the attempt is not run; :func:`plan_retry` with ``throttled=True`` plans
    what follows), then ``grant`` (a retry budget's ``try_withdraw``, for a retry of a
    throttled task: its withdrawal is made when it is sent), asked only once the throttle
    admits it: ``retry_budget`` when it refuses.
    """
    check_aware(now, "now")
    check_aware(started, "started")
    admission = getattr(throttle, "admit", throttle)
    if admission is not None and not callable(admission):
        raise TypeError(
            "throttle must be an adaptive throttle (admit()) or its admission, "
            f"got {type(throttle).__name__}"
        )
    return _stop_reason(
        policy,
        attempts=0,
        position=None,
        started=started,
        now=now,
        deadline=deadline,
        next_attempt=_attempt_estimate(policy, longest),
        grant=grant,
        throttle=admission,
    )
