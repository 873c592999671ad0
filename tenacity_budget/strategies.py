"""Tenacity adapters: the wait and stop strategies a :class:`BackoffPolicy` hands out.

:class:`wait_budget` and :class:`stop_budget` are ordinary tenacity strategies (subclasses
of ``wait_base`` and ``stop_base``), so ``+``, ``|`` and ``&`` compose them with any other.
Both keep what they must remember about a run (a seeded generator, the previous wait, the
longest attempt so far) on tenacity's ``RetryCallState`` of that run, so one strategy
object serves any number of concurrent runs, in threads or tasks, and nothing outlives a
run.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, TypeAlias

from tenacity import RetryCallState
from tenacity.stop import stop_base
from tenacity.wait import wait_base

from .exhaustion import STATE_ATTR, ExhaustionReport, StopReason
from .jitter import apply_jitter
from .solver import nominal_delay

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

# Zero-wait, bounded-attempt mode for test suites; set through tenacity_budget.testing.
_testing_attempts: int | None = None


def set_testing_attempts(attempts: int | None) -> None:
    """Switch every budgeted strategy to zero-wait mode with ``attempts`` calls (``None``: off).

    Prefer :func:`tenacity_budget.testing.set_testing`, which documents this switch.
    """
    global _testing_attempts
    if attempts is not None and attempts < 1:
        raise ValueError(f"testing mode needs attempts >= 1, got {attempts!r}")
    _testing_attempts = attempts


def testing_attempts() -> int | None:
    """The attempt bound of the testing mode, or ``None`` when it is off."""
    return _testing_attempts


testing_attempts.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def check_aware(deadline: datetime, what: str = "deadline") -> datetime:
    """Return ``deadline`` if it is timezone-aware, else raise a ``ValueError`` saying why."""
    if not isinstance(deadline, datetime):
        raise TypeError(f"{what} must be a timezone-aware datetime, got {type(deadline).__name__}")
    if deadline.tzinfo is None or deadline.utcoffset() is None:
        raise ValueError(
            f"{what} must be timezone-aware, got the naive datetime {deadline.isoformat()}: "
            "a naive time is ambiguous; pass e.g. datetime(..., tzinfo=timezone.utc)"
        )
    return deadline


class _WaitRun:
    """What one run of a wait_budget remembers: its own generator and the previous wait."""

    __slots__ = ("previous", "rng")

    def __init__(self, rng: random.Random | None) -> None:
        self.rng = rng
        self.previous = 0.0


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
        if rng is not None and seed is not None:
            raise ValueError("pass rng= (one shared generator) or seed= (one per run), not both")
        if rng is not None and not isinstance(rng, random.Random):
            raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise TypeError(f"seed must be an int, got {type(seed).__name__}")
        if retry_after is not None and not callable(retry_after):
            raise TypeError("retry_after must be a callable taking the exception")
        self.policy = policy
        self.rng = rng
        self.seed = seed
        self.retry_after = retry_after
        self._base = policy.base
        self._factor = policy.factor
        self._cap = policy.cap
        self._capped_from = policy.capped_index()
        self._affordable = policy.max_attempts()
        self._mode = policy.jitter
        # Per-run state is needed only for a per-run generator or the decorrelated chain.
        self._stateful = seed is not None or policy.jitter == "decorrelated"
        self._key = f"_tenacity_budget_wait_{id(self)}"

    def __repr__(self) -> str:
        return f"<wait_budget {self.policy!r} seed={self.seed!r}>"

    def __call__(self, retry_state: RetryCallState) -> float:
        # Runs before every retry: the common modes are computed inline, with exactly the
        # arithmetic of jitter.apply_jitter, so runs replay policy.waits() bit for bit.
        if _testing_attempts is not None:
            return 0.0
        if self.retry_after is not None:
            dictated = self._dictated(retry_state)
            if dictated is not None:
                if self._stateful:
                    self._run(retry_state).previous = dictated
                return dictated
        index = retry_state.attempt_number - 1
        cap = self._cap
        if index >= self._capped_from:
            delay = cap
        else:
            try:
                delay = self._base * self._factor**index  # as solver._raw computes it
            except OverflowError:  # factor**index alone overflows; the product may not
                delay = nominal_delay(index, self._base, self._factor, cap)
            if delay > cap:
                delay = cap
        mode = self._mode
        if mode == "none" or index >= self._affordable:
            # Past the affordable retries the budget stop ends the run anyway: draw nothing,
            # so a shared generator's stream stays exactly policy.waits() run after run.
            return delay
        if self._stateful:
            run = self._run(retry_state)
            wait = apply_jitter(mode, delay, run.previous, self._base, run.rng)
            run.previous = wait
            return wait
        draw = (self.rng or random).random()
        if mode == "full":
            return delay * draw  # never above delay: rounding is monotone, draw < 1
        half = delay / 2
        wait = half + (delay - half) * draw
        return wait if wait < delay else delay

    def _run(self, retry_state: RetryCallState) -> _WaitRun:
        # By attribute, not through __dict__ (see stop_budget.__call__).
        run: _WaitRun | None = getattr(retry_state, self._key, None)
        if run is None:
            rng = random.Random(self.seed) if self.seed is not None else self.rng
            run = _WaitRun(rng)
            setattr(retry_state, self._key, run)
        return run

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
        return max(0.0, seconds)


# Where the latest stop_budget decision of a run is left for hooks (logging, breakers).
_LATEST = "_tenacity_budget_run"


@dataclass(frozen=True, slots=True)
class BudgetState:
    """How a run stands against its budget at the latest ``stop_budget`` decision.

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
    """The run's standing at its latest budget decision, or ``None`` without a budget stop.

    Meant for ``before_sleep`` and ``after`` hooks: tenacity asks the stop before it sleeps,
    so in ``before_sleep`` this describes the retry about to be made.
    """
    run: _StopRun | None = getattr(retry_state, _LATEST, None)
    if run is None:
        return None
    return BudgetState(
        attempt=run.attempts,
        affordable=run.affordable,
        retries_left=max(0, run.affordable - run.attempts),
        budget=run.budget,
        elapsed=run.elapsed,
        slept=run.slept + run.slept_error,
        upcoming_sleep=run.last_sleep,
        deadline=run.deadline,
    )


class _StopRun:
    """What one run of a stop_budget remembers, and the figures of its last decision."""

    __slots__ = (
        "affordable",
        "attempts",
        "budget",
        "deadline",
        "deadline_ts",
        "elapsed",
        "last_end",
        "last_sleep",
        "longest",
        "reason",
        "slept",
        "slept_error",
    )

    def __init__(self, budget: float, affordable: int, deadline: datetime | None) -> None:
        self.budget = budget
        self.affordable = affordable
        self.deadline = deadline
        # An absolute instant is a wall-clock matter: compare it with time.time() (epoch
        # seconds, cheaper than building datetimes on every decision).
        self.deadline_ts = math.inf if deadline is None else deadline.timestamp()
        self.last_end: float | None = None
        self.last_sleep = 0.0
        self.longest = 0.0
        self.attempts = 0
        self.slept = 0.0  # compensated sum of the sleeps taken: slept + slept_error
        self.slept_error = 0.0
        self.elapsed = 0.0
        self.reason = StopReason.OTHER

    def report(self, last_exception: BaseException | None) -> ExhaustionReport:
        return ExhaustionReport(
            attempts=self.attempts,
            affordable=self.affordable,
            slept=self.slept + self.slept_error,
            elapsed=self.elapsed,
            budget=self.budget,
            deadline=self.deadline,
            reason=self.reason,
            last_exception=last_exception,
        )


class stop_budget(stop_base):
    """Stop before a retry the budget cannot afford.

    Build it with :meth:`BackoffPolicy.stop`. Before each retry it stops the run when any
    of these holds, checked in this order (the first is the report's ``reason``):

    1. ``count``: the run has made every retry the budget affords (``max_attempts()``);
    2. ``sleep_budget``: total slept plus the upcoming sleep would exceed ``max_elapsed``
       (this also bounds composed waits such as ``policy.wait() + wait_fixed(1)``);
    3. ``wall_clock``: time from the start of the first attempt to the end of the last one,
       plus the upcoming sleep, plus the estimated next attempt would exceed ``max_elapsed``
       (monotonic clock);
    4. ``deadline``: now plus the upcoming sleep plus the estimated next attempt would be
       after the deadline (wall clock, as the deadline is an absolute instant).

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
        self._policy_deadline = policy.deadline
        self._max_attempts = policy.max_attempts()
        self._max_elapsed = policy.max_elapsed
        self._duration = policy.attempt_duration
        self._key = f"_tenacity_budget_stop_{id(self)}"

    def __repr__(self) -> str:
        return f"<stop_budget {self.policy!r} deadline={self.deadline!r}>"

    def run_state(self, retry_state: RetryCallState) -> _StopRun:
        """This run's record, created (and its deadline resolved) on first use."""
        run: _StopRun | None = getattr(retry_state, self._key, None)
        if run is None:
            deadline = self.deadline
            if deadline is not None and not isinstance(deadline, datetime):
                deadline = check_aware(deadline(retry_state), "the deadline callable's result")
            # The policy's own deadline (for_deadline) always holds: keep the earlier one.
            own = self._policy_deadline
            if own is not None and (deadline is None or own < deadline):
                deadline = own
            run = _StopRun(self._max_elapsed, self._max_attempts, deadline)
            setattr(retry_state, self._key, run)
            setattr(retry_state, _LATEST, run)
        return run

    def __call__(self, retry_state: RetryCallState) -> bool:
        # This runs before every retry: kept flat (no helper calls on the common path) and
        # reading the retry state by attribute, never through its __dict__, which on
        # CPython 3.11 slows every later attribute access on it, tenacity's own included.
        run: _StopRun | None = getattr(retry_state, self._key, None)
        if run is None:
            run = self.run_state(retry_state)
        # Every duration here is a difference of tenacity's own monotonic readings (attempt
        # ends and the run's start), so they share one clock whatever patches time in tests.
        end = retry_state.outcome_timestamp
        if end is None:
            end = time.monotonic()
        # This attempt's duration. After a sleep the attempt began no earlier than the end of
        # the previous one plus the sleep, so this over-estimates, never under-estimates.
        last_end = run.last_end
        took = end - retry_state.start_time if last_end is None else end - last_end - run.last_sleep
        if took > run.longest:
            run.longest = took
        # Being asked again means the previous sleep was taken. Sum the sleeps compensated
        # (Neumaier; see solver.add_compensated), not as tenacity's drifting float idle_for,
        # so a schedule that exactly fills the budget is not refused its last retry.
        total, error, x = run.slept, run.slept_error, run.last_sleep
        t = total + x
        error += (total - t) + x if total >= x else (x - t) + total
        total = run.slept = t
        run.slept_error = error
        sleep = retry_state.upcoming_sleep
        attempt = retry_state.attempt_number
        run.last_end = end
        run.last_sleep = sleep
        run.attempts = attempt
        elapsed = run.elapsed = end - retry_state.start_time
        outcome = retry_state.outcome
        if outcome is not None:
            setattr(outcome, STATE_ATTR, run)
        # tenacity's @retry shares one statistics dict between concurrent calls of a function
        # and another thread's begin() may have just cleared it, so the `+=` tenacity does
        # right after this stop would raise KeyError (jd/tenacity#701). Put the keys back.
        try:
            stats = retry_state.retry_object._local.statistics  # thread-local, tenacity 9
        except AttributeError:
            pass
        else:
            if "idle_for" not in stats or "attempt_number" not in stats:
                stats.setdefault("idle_for", retry_state.idle_for)
                stats.setdefault("attempt_number", attempt)

        # The four checks, in order; the first that fails is the report's reason.
        if _testing_attempts is not None:
            reason = StopReason.COUNT if attempt >= _testing_attempts else None
        elif attempt > self._max_attempts:
            reason = StopReason.COUNT
        else:
            t = total + sleep
            error += (total - t) + sleep if total >= sleep else (sleep - t) + total
            need = sleep + (self._duration if self._duration > run.longest else run.longest)
            if t + error > self._max_elapsed:
                reason = StopReason.SLEEP_BUDGET
            elif elapsed + need > self._max_elapsed:
                reason = StopReason.WALL_CLOCK
            elif run.deadline_ts != math.inf and time.time() + need > run.deadline_ts:
                reason = StopReason.DEADLINE
            else:
                return False
        if reason is None:
            return False
        run.reason = reason
        return True
