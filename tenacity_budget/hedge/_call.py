"""``policy.retry(hedge=...)``'s call: one hedged run of a coroutine function, as a budgeted run.

:func:`hedged_call` gives the call its frame of the ambient deadline (the policy's budget
and deadlines, within every enclosing one), runs the engine, tells the observers, and
returns the winner's result or raises the fatal exception, or
:class:`~tenacity_budget.BudgetExhausted` with the run's report (``hedges``, ``hedges_won``)
when the run gave up. :func:`check_target` refuses a sync function. See docs/hedging.md.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, NoReturn, Protocol, TypeVar, cast

import tenacity

from .._terms import Terms
from ..context import Horizon, _enter, _leave, current_horizon, earliest, utc_instant
from ..exhaustion import BudgetExhausted, ExhaustionReport
from ..state import RunState, tag
from ._engine import HedgedOutcome
from ._hedge import Hedge

__all__: list[str] = []

T = TypeVar("T")


def check_target(fn: object, name: str) -> None:
    """Refuse a function that is not a coroutine function, saying why (at decoration).

    Raises:
        TypeError: for a sync function: its attempts cannot run side by side in one thread,
            nor a loser be cancelled.
    """
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(
            f"hedge= needs a coroutine function, and {name} is not one: a hedge runs "
            "beside the attempt still running and the losers are cancelled, which only "
            "asyncio tasks allow. Decorate an async def, or drop hedge= to retry it"
        )


def _record(hedge: Hedge, terms: Terms, outer: Horizon | None, deadline_ts: float) -> RunState:
    record = RunState(terms.budget, hedge.max_attempts - 1)
    fixed = None if deadline_ts == math.inf else utc_instant(deadline_ts)
    record.deadline = earliest(fixed, outer.deadline() if outer is not None else None)
    return record


class _HedgedRecord(Protocol):
    """A run's record with the slots only hedged runs fill (``RunState`` leaves them unset)."""

    hedges: int
    hedges_won: int


def _report(record: RunState, outcome: HedgedOutcome[Any]) -> ExhaustionReport:
    record.attempts = record.observed = outcome.attempts
    record.elapsed = outcome.elapsed
    record.reason = outcome.reason
    hedged = cast(_HedgedRecord, record)
    hedged.hedges = outcome.hedges
    hedged.hedges_won = outcome.hedges_won
    return record.report(outcome.exception)


async def hedged_call(
    hedge: Hedge,
    fn: Callable[..., Awaitable[T]],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    terms: Terms,
    deadline_ts: float = math.inf,
    budget: Any = None,
    throttle: Any = None,
    observers: Sequence[Any] = (),
    name: str = "",
    on_exhausted: Callable[[ExhaustionReport], Any] | None = None,
) -> T:
    """One call of ``fn(*args, **kwargs)`` hedged by ``hedge`` under the policy's ``terms``.

    The call's frame ends ``terms.budget`` seconds from now and at ``deadline_ts`` (epoch
    seconds: the policy's and the decorator's fixed deadlines merged), within every
    enclosing frame; :func:`~tenacity_budget.remaining` works in each attempt. Observers
    get ``on_call``, then ``on_success(name, attempts)`` or ``on_exhausted(name, report)``,
    and ``on_hedge(name, won)`` per hedge (if they have it); ``on_exhausted`` is called with
    the report before the error is raised (what it raises propagates).

    Returns:
        the result the run ended with (a good one).

    Raises:
        BudgetExhausted: the run gave up (its ``last_attempt`` is the last outcome, its
            report has ``hedges`` and ``hedges_won``), chained from its last exception.
        BaseException: a fatal exception of an attempt, as raised.
    """
    started = time.monotonic()
    outer = current_horizon()
    record = _record(hedge, terms, outer, deadline_ts)
    horizon = Horizon(outer, mono_end=started + terms.budget, wall_end=deadline_ts, run=record)
    call_kwargs = dict(kwargs or {})
    token = _enter(horizon)
    try:
        for observer in observers:
            observer.on_call(name)
        outcome = await hedge.run(
            lambda: fn(*args, **call_kwargs),
            horizon=horizon,
            estimate=terms.attempt_duration,
            max_elapsed=terms.budget,
            started=started,
            budget=budget,
            throttle=throttle,
            observers=observers,
            name=name,
        )
    finally:
        _leave(horizon, token)
    if outcome.reason is None:
        if outcome.exception is not None:
            raise outcome.exception
        for observer in observers:
            observer.on_success(name, outcome.attempts)
        return cast(T, outcome.value)  # a good outcome's result
    _give_up(record, outcome, observers, name, on_exhausted)


def _give_up(
    record: RunState,
    outcome: HedgedOutcome[Any],
    observers: Sequence[Any],
    name: str,
    on_exhausted: Callable[[ExhaustionReport], Any] | None,
) -> NoReturn:
    report = _report(record, outcome)
    failed = outcome.exception is not None
    last = tenacity.Future.construct(
        max(1, outcome.attempts), outcome.exception if failed else outcome.value, failed
    )
    tag(last, record)
    for observer in observers:
        observer.on_exhausted(name, report)
    if on_exhausted is not None:
        on_exhausted(report)
    raise BudgetExhausted(last, report) from outcome.exception
