"""Tenacity adapters: the wait and stop strategies a :class:`BackoffPolicy` hands out.

:class:`wait_budget` and :class:`stop_budget` are ordinary tenacity strategies (subclasses
of ``wait_base`` and ``stop_base``), so ``+``, ``|`` and ``&`` compose them with any other.
Neither computes anything itself: the delay is :func:`~tenacity_budget.solver.nominal_delay`,
the randomness :func:`~tenacity_budget.jitter.jitter_for`, the decision
:func:`~tenacity_budget.decision.decide`. What they remember about a run lives in its one
:class:`~tenacity_budget.state.RunState`, so one strategy object serves any number of
concurrent runs, in threads or tasks, and nothing outlives a run. :class:`BudgetState` is
the read-only view of that record for hooks.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeAlias

from tenacity import RetryCallState
from tenacity.stop import stop_any, stop_base
from tenacity.wait import wait_base

from ._config import TESTING as _TESTING
from ._validate import aware as check_aware
from ._validate import one_generator
from ._validate import seed as check_seed
from .context import Horizon, current_horizon, earliest
from .decision import decide
from .exhaustion import StopReason
from .jitter import jitter_for
from .solver import add_compensated, nominal_delay
from .state import RECORD_ATTR as _RECORD
from .state import RunState, begin, observe, run_state

if TYPE_CHECKING:
    from .policy import BackoffPolicy

__all__ = [
    "BudgetState",
    "DeadlineSource",
    "RetryAfter",
    "budget_state",
    "stop_budget",
    "wait_budget",
]

DeadlineSource: TypeAlias = datetime | Callable[[RetryCallState], datetime]
"""A timezone-aware deadline, or a callable reading one from the run's ``RetryCallState``."""

RetryAfter: TypeAlias = Callable[[BaseException], float | None]
"""Reads a server-dictated wait (seconds) from an exception, or ``None`` to back off."""

# How many of the first nominal delays a wait keeps in a table (a few hundred bytes).
_TABLED = 64


class wait_budget(wait_base):
    """Wait the policy's jittered, capped exponential delay before each retry.

    Build it with :meth:`BackoffPolicy.wait`. The wait before retry ``n`` (``n = 0`` after
    the first failed attempt) is the jittered nominal delay ``min(cap, base * factor**n)``,
    never more than that nominal delay. Only the retries the budget affords draw a random
    number (one each); a wait asked for past them (under another stop) is the nominal delay.

    Args:
        policy: the policy whose delays to wait.
        rng: a shared generator; its stream continues across runs.
        seed: each run draws from its own ``random.Random(seed)``, so every run of the
            decorated function sleeps exactly ``policy.waits(random.Random(seed))``.
        retry_after: reads a server-dictated wait from the failed attempt's exception (an
            HTTP ``Retry-After``, say); a number replaces the backoff delay of that retry,
            ``None`` keeps it. The budget stop still guards it: a wait that would cross the
            budget or the deadline ends the run instead of being slept.
    """

    def __init__(
        self,
        policy: BackoffPolicy,
        *,
        rng: random.Random | None = None,
        seed: int | None = None,
        retry_after: RetryAfter | None = None,
    ) -> None:
        one_generator(seed, rng)
        if rng is not None and not isinstance(rng, random.Random):
            raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
        check_seed(seed)
        if retry_after is not None and not callable(retry_after):
            raise TypeError("retry_after must be a callable taking the exception")
        self.policy = policy
        self.rng = rng
        self.seed = seed
        self.retry_after = retry_after
        self._base = policy.base
        self._factor = policy.factor
        self._cap = policy.cap
        self._budget = policy.max_elapsed
        self._capped_from = policy.capped_index()
        self._affordable = policy.max_attempts()
        # The first nominal delays, from the one formula, looked up on the per-retry path.
        self._delays = tuple(
            nominal_delay(i, self._base, self._factor, self._cap)
            for i in range(min(self._capped_from, self._affordable, _TABLED))
        )
        self._drawn = policy.jitter != "none"
        self._jitter = jitter_for(policy.jitter)

    def __repr__(self) -> str:
        return f"<wait_budget {self.policy!r} seed={self.seed!r}>"

    def __call__(self, retry_state: RetryCallState) -> float:
        record: RunState | None = getattr(retry_state, _RECORD, None)
        if record is None:
            record = begin(retry_state, self._budget, self._affordable)
            record.stop_asked_first = _asks_budget_first(retry_state.retry_object.stop)
        # Asked first after every attempt (tenacity waits, then stops), before the wait of
        # this retry replaces it: upcoming_sleep still holds the sleep just taken. Where the
        # budget stop will be asked anyway, it observes, and this costs nothing.
        if not record.stop_asked_first and record.observed != retry_state.attempt_number:
            observe(retry_state, record, retry_state.upcoming_sleep)
        if _TESTING.attempts is not None:
            return 0.0
        if self.retry_after is not None:
            dictated = self._dictated(retry_state)
            if dictated is not None:
                record.previous_wait = dictated
                return dictated
        index = retry_state.attempt_number - 1
        if index < len(self._delays):
            delay = self._delays[index]
        elif index >= self._capped_from:
            delay = self._cap
        else:
            delay = nominal_delay(index, self._base, self._factor, self._cap)
        if not self._drawn or index >= self._affordable:
            # Past the affordable retries the budget stop ends the run anyway: draw nothing,
            # so a shared generator's stream stays exactly policy.waits() run after run.
            return delay
        rng = record.rng
        if rng is None:
            rng = record.rng = random.Random(self.seed) if self.seed is not None else self.rng
        wait = self._jitter(delay, record.previous_wait, self._base, rng)
        record.previous_wait = wait
        return wait

    def _dictated(self, retry_state: RetryCallState) -> float | None:
        assert self.retry_after is not None
        outcome = retry_state.outcome
        if outcome is None or not outcome.failed:
            return None
        exc = outcome.exception()
        assert exc is not None
        value = self.retry_after(exc)
        if value is None:
            return None
        seconds = float(value)
        if math.isnan(seconds):
            return None
        # An infinite dictated wait is kept as it is: the stop ends the run (sleep_budget).
        return max(0.0, seconds)


@dataclass(frozen=True, slots=True)
class BudgetState:
    """How a run stands against its budget at the latest budget decision.

    Attributes:
        attempt: calls made so far (tenacity's ``attempt_number``).
        affordable: retries the budget affords in all (``max_attempts()``).
        retries_left: retries still affordable after the upcoming one is made.
        budget: the policy's ``max_elapsed``.
        elapsed: seconds since the first attempt began.
        slept: seconds slept so far (before the upcoming sleep).
        upcoming_sleep: the sleep about to be taken.
        deadline: the run's absolute deadline, if any.
    """

    attempt: int
    affordable: int
    retries_left: int
    budget: float
    elapsed: float
    slept: float
    upcoming_sleep: float
    deadline: datetime | None

    @property
    def budget_left(self) -> float:
        """Seconds of budget left after the upcoming sleep (never negative)."""
        return max(0.0, self.budget - self.elapsed - self.upcoming_sleep)


def budget_state(retry_state: RetryCallState) -> BudgetState | None:
    """The run's standing at its latest budget decision, or ``None`` without a budget.

    Meant for ``before_sleep`` and ``after`` hooks: tenacity asks the stop before it sleeps,
    so in ``before_sleep`` this describes the retry about to be made.
    """
    record = run_state(retry_state)
    if record is None or record.budget is None or record.affordable is None:
        return None
    return BudgetState(
        attempt=record.attempts,
        affordable=record.affordable,
        retries_left=max(0, record.affordable - record.attempts),
        budget=record.budget,
        elapsed=record.elapsed,
        slept=record.total_slept,
        upcoming_sleep=record.upcoming_sleep,
        deadline=record.deadline,
    )


class stop_budget(stop_base):
    """Stop before a retry the budget cannot afford.

    Build it with :meth:`BackoffPolicy.stop`. Before each retry it measures the attempt
    that just ended (:func:`~tenacity_budget.state.observe`) and asks the one decision
    function, :func:`~tenacity_budget.decision.decide`, which stops the run when any of
    these holds, in this order (the first is the report's ``reason``):

    1. ``count``: the run has made every retry the budget affords (``max_attempts()``);
    2. ``sleep_budget``: the upcoming sleep is NaN or infinite, or the total slept plus it
       would exceed ``max_elapsed`` (this also bounds composed waits such as
       ``policy.wait() + wait_fixed(1)``);
    3. ``wall_clock``: time from the start of the first attempt to the end of the last one,
       plus the upcoming sleep, plus the estimated next attempt would exceed ``max_elapsed``
       (monotonic clock);
    4. ``deadline``: now plus the upcoming sleep plus the estimated next attempt would be
       after the deadline: the call's, the policy's, or an enclosing one (a
       :func:`~tenacity_budget.deadline_scope`, or the run whose attempt this run is in).

    The next attempt is estimated as the larger of the policy's ``attempt_duration`` and
    the longest attempt seen so far in this run.

    Args:
        policy: the policy whose budget to enforce.
        deadline: a timezone-aware ``datetime``, or a callable taking the run's
            ``RetryCallState`` and returning one (read once, at the run's first decision).
            A policy with a ``deadline`` of its own respects the earlier of the two.
    """

    def __init__(self, policy: BackoffPolicy, *, deadline: DeadlineSource | None = None) -> None:
        if isinstance(deadline, datetime):
            check_aware(deadline)
        elif deadline is not None and not callable(deadline):
            raise TypeError(
                "deadline must be a timezone-aware datetime or a callable taking the "
                f"RetryCallState and returning one, got {type(deadline).__name__}"
            )
        self.policy = policy
        self.deadline = deadline
        self._max_attempts = policy.max_attempts()
        self._max_elapsed = policy.max_elapsed
        self._duration = policy.attempt_duration

    def __repr__(self) -> str:
        return f"<stop_budget {self.policy!r} deadline={self.deadline!r}>"

    def run_state(self, retry_state: RetryCallState) -> RunState:
        """This run's record, created (and its deadline resolved) on first use."""
        record = begin(retry_state, self._max_elapsed, self._max_attempts)
        if not record.resolved:
            self._resolve(retry_state, record)
        return record

    def _resolve(self, retry_state: RetryCallState, record: RunState) -> None:
        """Fix the run's deadline: its own, its policy's and any enclosing one."""
        deadline = self.deadline
        if deadline is not None and not isinstance(deadline, datetime):
            deadline = check_aware(deadline(retry_state), "the deadline callable's result")
        horizon = current_horizon()
        if horizon is not None and horizon.run is record:
            horizon = horizon.outer  # the run's own horizon is its budget, checked apart
        own = earliest(deadline, self.policy.deadline)
        wall_end = own.timestamp() if own is not None else math.inf
        if record.horizon is None:
            record.horizon = Horizon(horizon, wall_end=wall_end)
        else:  # prepared by policy.retry() with its fixed deadlines: add the callable's
            record.horizon.tighten(wall_end=wall_end)
        record.deadline = earliest(own, horizon.deadline() if horizon is not None else None)
        if record.repair_statistics:
            record.statistics = _tenacity_statistics(retry_state)
        record.resolved = True

    def __call__(self, retry_state: RetryCallState) -> bool:
        # Runs before every retry: the record by one attribute read, helpers only where
        # there is work (the first decision, an attempt the wait did not observe).
        record: RunState | None = getattr(retry_state, _RECORD, None)
        if record is None or not record.resolved:
            record = self.run_state(retry_state)
        attempt = retry_state.attempt_number
        if record.observed != attempt:
            observe(retry_state, record, record.upcoming_sleep)
        sleep = record.upcoming_sleep = retry_state.upcoming_sleep
        testing = _TESTING.attempts
        if testing is not None:
            reason = StopReason.COUNT if attempt >= testing else None
        else:
            until = record.horizon.left()  # type: ignore[union-attr]  # resolved
            longest = record.longest
            total, error = add_compensated(record.slept, record.slept_error, sleep)
            record.next_slept, record.next_slept_error = total, error
            record.decided = attempt
            reason = decide(
                attempt,
                self._max_attempts,
                sleep,
                total + error,
                record.elapsed,
                self._duration if self._duration > longest else longest,
                self._max_elapsed,
                until,
            )
        stats = record.statistics
        if stats is not None and ("idle_for" not in stats or "attempt_number" not in stats):
            _repair_statistics(stats, retry_state)
        record.reason = reason
        return reason is not None


def _asks_budget_first(stop: object) -> bool:
    """Whether tenacity asks a :class:`stop_budget` first, before any other stop, every time.

    True for a bare budget stop and for ``budget | other ...`` (tenacity's ``|`` asks left
    to right); not for ``other | budget`` or any ``&``, which may skip it.
    """
    while isinstance(stop, stop_any) and stop.stops:
        stop = stop.stops[0]
    return isinstance(stop, stop_budget)


def _tenacity_statistics(retry_state: RetryCallState) -> dict[str, object] | None:
    """The statistics dict of the run's tenacity controller, which may need repairs.

    tenacity's ``@retry`` shares one statistics dict between concurrent calls of a
    function, and another thread's ``begin()`` may clear it between this stop and the
    ``+=`` tenacity does right after, raising ``KeyError`` (jd/tenacity#701). This is the
    package's one access to a private tenacity attribute, made once per run; it can go,
    with :func:`_repair_statistics`, once tenacity keeps statistics per call (the fix of
    #701).
    """
    try:
        stats: dict[str, object] = retry_state.retry_object._local.statistics  # tenacity 9
    except AttributeError:
        return None
    return stats


def _repair_statistics(stats: dict[str, object], retry_state: RetryCallState) -> None:
    """Put back the statistics keys another thread's run has just cleared (see above)."""
    stats.setdefault("idle_for", retry_state.idle_for)
    stats.setdefault("attempt_number", retry_state.attempt_number)
