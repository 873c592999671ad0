"""A request's hedged run in the async HTTP clients (``hedge=``): the engine, as a client runs it.

:func:`check_hedge` validates a client's ``hedge=`` and pairs the hedge with the client's
non-fatal rule (:class:`ClientHedge`); :func:`hedged_request` runs one request's hedged
run with the engine in the run's frame and builds its report when it gives up. The
transports and the middleware send the attempts and map the end to their own errors.
See docs/hedging.md ("HTTP clients").
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .context import Horizon, _frame, current_horizon, earliest
from .exhaustion import ExhaustionReport

if TYPE_CHECKING:
    from .hedge import Hedge, HedgedOutcome
    from .policy import BackoffPolicy

__all__: list[str] = []


def check_hedge(hedge: Any, non_fatal: Callable[[object], bool]) -> ClientHedge | None:
    """A client's ``hedge=`` (``None``, or a :class:`~tenacity_budget.Hedge`) as the engine
    runs it, with the client's ``non_fatal`` rule unless the hedge has its own.

    Raises:
        TypeError: for anything else.
    """
    if hedge is None:
        return None
    from .hedge import Hedge  # the engine is imported only where hedge= is given

    if not isinstance(hedge, Hedge):
        raise TypeError(f"hedge must be a tenacity_budget.Hedge, got {type(hedge).__name__}")
    return ClientHedge(hedge, non_fatal)


class ClientHedge:
    """A :class:`~tenacity_budget.Hedge` as a client runs it: the hedge's delay, count and
    learned latencies, and the client's non-fatal rule (its ``retry_statuses`` and the
    transport errors :func:`retry_cures` retries) unless the hedge was given its own."""

    __slots__ = ("hedge", "max_attempts", "non_fatal", "sketch")

    def __init__(self, hedge: Hedge, non_fatal: Callable[[object], bool]) -> None:
        from .hedge import non_fatal as default

        self.hedge = hedge
        self.max_attempts = hedge.max_attempts
        self.sketch = hedge.sketch
        self.non_fatal = non_fatal if hedge.non_fatal is default else hedge.non_fatal

    def delay_now(self) -> float:
        """The hedge's delay as of now (:meth:`Hedge.delay_now`)."""
        return self.hedge.delay_now()


async def hedged_request(
    hedge: ClientHedge,
    attempt: Callable[[Horizon], Awaitable[Any]],
    policy: BackoffPolicy,
    deadline_ts: float,
    *,
    budget: Any,
    throttle: Any,
    release: Callable[[Any], Any],
) -> tuple[HedgedOutcome[Any], ExhaustionReport | None]:
    """One request's hedged run by the engine, in the run's frame; its report if it gave up.

    The frame ends ``policy.max_elapsed`` from now and at ``deadline_ts`` (epoch seconds),
    within every enclosing one; ``attempt(frame)`` sends one attempt (the frame says the
    time left). The throttle and the retry budget are asked by the engine.
    """
    from .hedge._engine import run_hedged

    started = time.monotonic()
    outer = current_horizon()
    horizon = Horizon(outer, started + policy.max_elapsed, deadline_ts)
    with _frame(horizon):
        outcome = await run_hedged(
            hedge,
            lambda: attempt(horizon),
            horizon=horizon,
            estimate=policy.attempt_duration,
            max_elapsed=policy.max_elapsed,
            started=started,
            budget=budget,
            throttle=throttle,
            release=release,
        )
        if outcome.reason is None:
            return outcome, None
        report = ExhaustionReport(
            attempts=outcome.attempts,
            affordable=hedge.max_attempts - 1,
            slept=0.0,
            elapsed=outcome.elapsed,
            budget=policy.max_elapsed,
            deadline=earliest(policy.deadline, None if outer is None else outer.deadline()),
            reason=outcome.reason,
            last_exception=outcome.exception,
            hedges=outcome.hedges,
            hedges_won=outcome.hedges_won,
        )
    return outcome, report
