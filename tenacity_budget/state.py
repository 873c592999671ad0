"""Where a run's state lives: one typed record of facts per budgeted run, and how to reach it.

Every budgeted run (a tenacity run with :meth:`BackoffPolicy.wait` or :meth:`BackoffPolicy.stop`
in it, a ``policy.retry()`` call, a Celery task run) has exactly one :class:`RunState`: what
the run has measured, the budget it runs under, its deadlines and why it stopped. Reach it
with :func:`run_state`. It is filled by :func:`observe`, before the strategies ask
:func:`~tenacity_budget.decision.decide`; what a strategy remembers between its decisions
lives in its own per-run object. See docs/concepts.md.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from tenacity import Future, RetryCallState

from .context import Horizon
from .exhaustion import RECORD_ATTR, ExhaustionReport, StopReason
from .solver import add_compensated

__all__ = ["RunState", "run_state"]

_ATTR = RECORD_ATTR


class RunState:
    """The record of one budgeted run. Reach it with :func:`run_state`.

    Attributes:
        budget: the run's ``max_elapsed`` (``None`` for a run without a budget stop).
        affordable: retries the budget affords (``None`` without a budget stop).
        deadline: the earliest absolute deadline the run observes (its own, its policy's
            and any enclosing one), once its stop has resolved it.
        attempts: calls made so far (as of the latest observation).
        slept: seconds slept so far (a compensated sum, exact for schedules that fill
            their budget exactly).
        elapsed: seconds from the start of the first attempt to the end of the latest one.
        longest: the longest attempt seen so far, in seconds.
        upcoming_sleep: the sleep about to be taken, as of the latest decision.
        reason: why the run stopped, once it has (``None`` while it runs).
    """

    __slots__ = (
        "_stop",
        "_wait",
        "affordable",
        "attempts",
        "budget",
        "deadline",
        "elapsed",
        "hedges",  # set by a hedged run only (the report reads them with a default)
        "hedges_won",
        "horizon",
        "last_end",
        "longest",
        "observed",
        "reason",
        "resolved",
        "slept",
        "slept_error",
        "upcoming_sleep",
    )

    def __init__(
        self,
        budget: float | None = None,
        affordable: int | None = None,
        deadline: datetime | None = None,
    ) -> None:
        self.budget = budget
        self.affordable = affordable
        self.deadline = deadline
        # The run's deadlines as one frame (its own and every enclosing one, not its budget),
        # once the stop has resolved them: the stop asks it for the time left.
        self.resolved = False
        self.horizon: Horizon | None = None
        self.attempts = 0
        self.observed = 0  # the attempt number of the latest observation
        self.slept = 0.0  # compensated sum of the sleeps taken: slept + slept_error
        self.slept_error = 0.0
        self.elapsed = 0.0
        self.longest = 0.0
        self.last_end: float | None = None
        self.upcoming_sleep = 0.0
        self.reason: StopReason | None = None
        # The wait's and the stop's own per-run objects (what each remembers between its
        # calls; not facts of the run). They hang here because a second attribute on
        # tenacity's RetryCallState would de-optimise every attribute read on it.
        self._wait: Any = None
        self._stop: Any = None

    def __repr__(self) -> str:
        return (
            f"<RunState attempts={self.attempts} slept={self.total_slept!r} "
            f"elapsed={self.elapsed!r} budget={self.budget!r} reason={self.reason}>"
        )

    @property
    def total_slept(self) -> float:
        """Seconds slept so far (``slept`` with its compensation term added)."""
        return self.slept + self.slept_error

    def report(self, last_exception: BaseException | None) -> ExhaustionReport:
        """The report of this run, as it stands (:meth:`ExhaustionReport.of_run`)."""
        return ExhaustionReport.of_run(self, last_exception)


def run_state(source: RetryCallState | Future) -> RunState | None:
    """The record of the run ``source`` belongs to, or ``None`` if no budget took part.

    ``source`` is tenacity's ``RetryCallState`` (in a ``before_sleep``, ``after`` or
    ``retry_error_callback`` hook) or an attempt's ``Future`` (as handed to
    ``retry_error_cls``).
    """
    record: RunState | None = getattr(source, _ATTR, None)
    return record


def begin(retry_state: RetryCallState, budget: float, affordable: int) -> RunState:
    """The record of the run of ``retry_state``, created on the run's first use.

    A record the run was given (``policy.retry()`` sets it before the first attempt) is
    kept; otherwise a new one is made with the given budget figures.
    """
    record: RunState | None = getattr(retry_state, _ATTR, None)
    if record is None:
        record = RunState(budget, affordable)
        setattr(retry_state, _ATTR, record)
    return record


def observe(
    retry_state: RetryCallState,
    record: RunState,
    previous_sleep: float,
    through: tuple[float, float] | None = None,
) -> None:
    """Bring ``record`` up to date with the attempt that just ended, once per attempt.

    Called by each of the package's strategies before it decides; the first one asked
    after an attempt measures it and the others find it measured. ``previous_sleep`` is
    the sleep taken before this attempt, as the caller knows it exactly, and ``through``
    the compensated sum through it when the caller already computed it (its decision
    did); when earlier attempts went unobserved (a budget stop on the right of ``&``,
    say), the sleeps are read from tenacity's own (uncompensated) total instead. The
    attempt is linked to the record by whoever may end the run on it (:func:`tag`).

    Every duration is a difference of tenacity's own monotonic readings (attempt ends and
    the run's start), so they share one clock whatever patches time in tests.
    """
    attempt = retry_state.attempt_number
    end = retry_state.outcome_timestamp
    if end is None:
        end = time.monotonic()
    start = retry_state.start_time
    observed = record.observed
    if observed == attempt - 1:
        # This attempt's duration: after a sleep it began no earlier than the end of the
        # previous attempt plus the sleep.
        last_end = record.last_end
        took = end - start if last_end is None else end - last_end - previous_sleep
        if took > record.longest:
            record.longest = took
        if through is None:
            through = add_compensated(record.slept, record.slept_error, previous_sleep)
        record.slept, record.slept_error = through
    elif observed == attempt:
        return
    else:
        record.slept, record.slept_error = retry_state.idle_for, 0.0
    record.observed = record.attempts = attempt
    record.last_end = end
    record.elapsed = end - start
    # The run's latest reason is about the latest decision only.
    record.reason = None


def observe_cut(record: RunState, elapsed: float) -> None:
    """Bring ``record`` up to date with an attempt cut off when the run's time was up.

    The counterpart of :func:`observe` for ``hard_deadline`` runs, whose last attempt is
    cancelled without tenacity's bookkeeping: it is the attempt after the latest observed
    one, begun after the sleep the latest decision allowed, and ``elapsed`` is measured
    by the caller from the run's start.
    """
    if record.observed:
        record.slept, record.slept_error = add_compensated(
            record.slept, record.slept_error, record.upcoming_sleep
        )
    record.attempts = record.observed = record.observed + 1
    record.elapsed = elapsed


def tag(attempt: Future | None, record: RunState) -> None:
    """Link an attempt's ``Future`` to its run's record (what :func:`run_state` reads)."""
    if attempt is not None:
        setattr(attempt, _ATTR, record)


def stopped_by(retry_state: RetryCallState, reason: StopReason) -> None:
    """Record that ``reason`` ends the run of ``retry_state`` (for stops that decide it).

    A stop other than the budget's own (a retry budget's, say) calls this when it ends the
    run, so the report says why. A run without a record (no budget took part) is left as
    it is.
    """
    record = run_state(retry_state)
    if record is not None:
        record.reason = reason
