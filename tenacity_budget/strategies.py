"""Tenacity adapters: the wait and stop strategies a :class:`BackoffPolicy` hands out.

:class:`wait_budget` and :class:`stop_budget` are ordinary tenacity strategies, so ``+``,
``|`` and ``&`` compose them with any other. They read the policy's frozen terms
(``_terms.Terms``), compute nothing themselves (the delay is the solver's, the randomness
:mod:`~tenacity_budget.jitter`'s, the decision :func:`~tenacity_budget.decision.decide`'s)
and keep what they remember of a run in per-run objects on tenacity's ``RetryCallState``,
so one strategy object serves any number of concurrent runs. :class:`BudgetState` is the
read-only view of a run's record for hooks. See docs/concepts.md.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

from tenacity import RetryCallState
from tenacity.stop import stop_any, stop_base
from tenacity.wait import wait_base

from ._config import TESTING as _TESTING
from ._terms import HasTerms, Terms, terms_of
from ._validate import aware as check_aware
from ._validate import one_generator
from ._validate import seed as check_seed
from .context import Horizon, current_horizon, earliest
from .decision import decide
from .exhaustion import RECORD_ATTR
from .jitter import jitter_for
from .solver import add_compensated
from .state import RunState, begin, observe, run_state, tag

__all__: list[str] = []  # every public name here is the package's (tenacity_budget)

DeadlineSource: TypeAlias = datetime | Callable[[RetryCallState], datetime]
"""A timezone-aware deadline, or a callable reading one from the run's ``RetryCallState``."""

RetryAfter: TypeAlias = Callable[[BaseException], float | None]
"""Reads a server-dictated wait (seconds) from an exception, or ``None`` to back off."""


def reads_results(reader: Callable[[Any], float | None]) -> Callable[[Any], float | None]:
    """Mark ``reader`` (a ``retry_after=``) as reading a result too, not only an exception.

    The hooks see the attempt's outcome: a reader so marked is handed the failed attempt's
    exception or, for a run retried on a result (``retry_if_result``), the result itself
    (an HTTP response with a retryable status, say). An unmarked reader keeps receiving
    exceptions only.
    """
    reader.reads_results = True  # type: ignore[attr-defined]
    return reader


# Where the run's record sits on its RetryCallState (the one attribute the package adds:
# a second would de-optimise every attribute read tenacity makes on it).
_RECORD = RECORD_ATTR


class _WaitRun:
    """What a wait remembers of one run: its randomness, the decorrelated chain, and whether
    it observes the attempts (the budget stop may not be asked after each).

    Each wait of the run (``policy.wait() + other.wait()``) has its own, chained through
    ``next``. No reference back to the record (which holds this): a cycle would outlive
    the run until the garbage collector finds it.
    """

    __slots__ = ("next", "observes", "owner", "previous", "rng")

    def __init__(
        self, owner: object, observes: bool, rng: random.Random | None, next_run: _WaitRun | None
    ) -> None:
        self.owner = owner
        self.observes = observes
        self.rng = rng
        self.previous = 0.0  # the previous wait (the decorrelated chain)
        self.next = next_run


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
        policy: HasTerms | Terms,
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
        terms = self.terms = terms_of(policy)
        self._delays = terms.delays
        self._base = terms.base
        # Retries whose delay is drawn (none without jitter); a run of its own (a generator,
        # the decorrelated chain) only where a seed or the jitter mode needs one.
        self._drawn = terms.affordable if terms.jitter != "none" else 0
        self._per_run = seed is not None or terms.jitter == "decorrelated"
        self._jitter = jitter_for(terms.jitter)

    def __repr__(self) -> str:
        return f"<wait_budget {self.policy!r} seed={self.seed!r}>"

    def _run(self, retry_state: RetryCallState) -> _WaitRun:
        """The run's own randomness and chain and, where the budget stop may not be asked
        after each attempt, the attempt just ended measured and linked to the record."""
        terms = self.terms
        record = begin(retry_state, terms.budget, terms.affordable)
        run: _WaitRun | None = record._wait
        while run is not None and run.owner is not self:
            run = run.next
        if run is None:
            rng = random.Random(self.seed) if self.seed is not None else self.rng
            observes = not _asks_budget_first(retry_state.retry_object.stop)
            run = record._wait = _WaitRun(self, observes, rng, record._wait)
        if run.observes and record.observed != retry_state.attempt_number:
            # upcoming_sleep still holds the sleep just taken (this wait replaces it).
            observe(retry_state, record, retry_state.upcoming_sleep)
            tag(retry_state.outcome, record)
        return run

    def __call__(self, retry_state: RetryCallState) -> float:
        # Asked first after every attempt (tenacity waits, then stops). Under a bare budget
        # stop, which measures every attempt itself, a plain wait keeps no state of the
        # run: the delay is a table read and one draw.
        run = None
        if self._per_run or type(retry_state.retry_object.stop) is not stop_budget:
            run = self._run(retry_state)
        if _TESTING.attempts is not None:
            return 0.0
        if self.retry_after is not None:
            dictated = self._dictated(retry_state)
            if dictated is not None:
                if run is not None:
                    run.previous = dictated
                return dictated
        index = retry_state.attempt_number - 1
        delays = self._delays
        delay = delays[index] if index < len(delays) else self.terms.delay(index)
        if index >= self._drawn:
            # Past the affordable retries the budget stop ends the run anyway: draw nothing,
            # so a shared generator's stream stays exactly policy.waits() run after run.
            return delay
        if run is None:
            return self._jitter(delay, 0.0, self._base, self.rng)
        wait = run.previous = self._jitter(delay, run.previous, self._base, run.rng)
        return wait

    def _dictated(self, retry_state: RetryCallState) -> float | None:
        reader: Any = self.retry_after
        outcome = retry_state.outcome
        if outcome is None:
            return None
        if outcome.failed:
            value = reader(outcome.exception())
        elif getattr(reader, "reads_results", False):  # the built-in reader: a response too
            value = reader(outcome.result())
        else:  # a user's own reader takes the exception, as it always has
            return None
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


class _StopRun:
    """What a stop remembers of one run between its decisions (never a fact of the run).

    No reference back to the record (which holds this), nor to the run's tenacity state:
    a cycle would outlive the run until the garbage collector finds it.

    Attributes:
        decided: the attempt of the latest decision.
        through: the compensated sum ``(total, error)`` through the sleep that decision
            allowed, which the next observation takes over instead of adding that sleep
            again (``None`` before the first decision).
        statistics: the shared tenacity statistics dict to repair (``None``: nothing).
    """

    __slots__ = ("decided", "statistics", "through")

    def __init__(self, statistics: dict[str, object] | None) -> None:
        self.decided = 0
        self.through: tuple[float, float] | None = None
        self.statistics = statistics


class stop_budget(stop_base):
    """Stop before a retry the budget cannot afford.

    Build it with :meth:`BackoffPolicy.stop`. Before each retry it measures the attempt
    that just ended and asks the one decision, :func:`~tenacity_budget.decision.decide`
    (its checks, in order, are listed in docs/concepts.md: count, sleep budget, wall
    clock, deadline). The next attempt is estimated as the larger of the policy's
    ``attempt_duration`` and the longest attempt seen so far in this run.

    Args:
        policy: the policy whose budget to enforce.
        deadline: a timezone-aware ``datetime``, or a callable taking the run's
            ``RetryCallState`` and returning one (read once, at the run's first decision).
            A policy with a ``deadline`` of its own respects the earlier of the two.
    """

    def __init__(self, policy: HasTerms | Terms, *, deadline: DeadlineSource | None = None) -> None:
        if isinstance(deadline, datetime):
            check_aware(deadline)
        elif deadline is not None and not callable(deadline):
            raise TypeError(
                "deadline must be a timezone-aware datetime or a callable taking the "
                f"RetryCallState and returning one, got {type(deadline).__name__}"
            )
        self.policy = policy
        self.deadline = deadline
        terms = self.terms = terms_of(policy)
        self._affordable = terms.affordable
        self._budget = terms.budget
        self._duration = terms.attempt_duration
        self._deadline_ts = terms.deadline_ts
        self._frame = Horizon(None, wall_end=terms.deadline_ts)
        # Set by compose() (policy.retry): the user's stop, the retry budget's withdrawal,
        # and whether to repair tenacity's shared statistics (policy.retry's loop keeps
        # each call's statistics its own: nothing to repair there).
        self._other: Any = None
        self._grant: Callable[[], bool] | None = None
        self._throttle: Callable[[], bool] | None = None
        self._repair = True

    def __repr__(self) -> str:
        return f"<stop_budget {self.policy!r} deadline={self.deadline!r}>"

    def compose(
        self,
        other: Any = None,
        grant: Callable[[], bool] | None = None,
        throttle: Callable[[], bool] | None = None,
    ) -> stop_budget:
        """This stop for ``policy.retry()``: ``other`` asked after the budget's checks, then
        ``throttle`` (an adaptive throttle's admission), then ``grant`` (a retry budget's
        withdrawal) last, by :func:`decide` itself."""
        stop = stop_budget(self.policy, deadline=self.deadline)
        stop._other, stop._grant, stop._repair = other, grant, False
        stop._throttle = throttle
        return stop

    def run_state(self, retry_state: RetryCallState) -> RunState:
        """This run's record, created (and its deadline resolved) on first use."""
        record: RunState | None = getattr(retry_state, _RECORD, None)
        if record is None or record._stop is None:
            record = self._start(retry_state)
        return record

    def _start(self, retry_state: RetryCallState) -> RunState:
        """The run's first decision: its record, and its deadlines resolved."""
        record = begin(retry_state, self._budget, self._affordable)
        deadline = self.deadline
        if deadline is not None and not isinstance(deadline, datetime):
            deadline = check_aware(deadline(retry_state), "the deadline callable's result")
        horizon = current_horizon()
        if horizon is not None and horizon.run is record:
            horizon = horizon.outer  # the run's own horizon is its budget, checked apart
        own = self.terms.deadline
        wall_end = self._deadline_ts
        if deadline is not None:
            own = earliest(deadline, own)
            wall_end = own.timestamp()  # type: ignore[union-attr]  # not None: deadline
        if record.horizon is None:
            # Nothing encloses the run and its deadline is the policy's: the stop's one
            # frame of that deadline serves every such run (a frame only read, never left).
            plain = horizon is None and deadline is None
            record.horizon = self._frame if plain else Horizon(horizon, wall_end=wall_end)
        else:  # prepared by policy.retry() with its fixed deadlines: add the callable's
            record.horizon.tighten(wall_end=wall_end)
        record.deadline = own if horizon is None else earliest(own, horizon.deadline())
        record.resolved = True
        statistics = _tenacity_statistics(retry_state) if self._repair else None
        record._stop = _StopRun(statistics)
        return record

    def __call__(self, retry_state: RetryCallState) -> bool:
        # Runs before every retry: the run by one attribute read, helpers only where
        # there is work (the first decision, an attempt the wait did not observe).
        record: RunState | None = getattr(retry_state, _RECORD, None)
        if record is None or record._stop is None:
            record = self._start(retry_state)
        run: _StopRun = record._stop
        attempt = retry_state.attempt_number
        if record.observed != attempt:
            through = run.through if run.decided == attempt - 1 else None
            observe(retry_state, record, record.upcoming_sleep, through)
        sleep = record.upcoming_sleep = retry_state.upcoming_sleep
        through = run.through = add_compensated(record.slept, record.slept_error, sleep)
        run.decided = attempt
        longest = record.longest
        reason = record.reason = decide(
            attempt,
            self._affordable,
            sleep,
            through[0] + through[1],
            record.elapsed,
            self._duration if self._duration > longest else longest,
            self._budget,
            record.horizon.left(),  # type: ignore[union-attr]  # resolved by _start
            _TESTING.attempts,
            None if self._other is None else functools.partial(self._other, retry_state),
            self._grant,
            self._throttle,
        )
        if reason is not None or getattr(retry_state.retry_object, "stop", None) is not self:
            # The attempt this stop ends the run on or, with another stop beside it, any
            # attempt (that stop may end the run without asking this one).
            tag(retry_state.outcome, record)
        stats = run.statistics
        if stats is not None and ("idle_for" not in stats or "attempt_number" not in stats):
            _repair_statistics(stats, retry_state)
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
