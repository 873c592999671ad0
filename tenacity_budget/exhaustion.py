"""What a budgeted run reports when it gives up: the reason, the figures and the error.

:class:`BudgetExhausted` is a :class:`tenacity.RetryError`, so code that already catches
tenacity's error keeps working; it adds :attr:`BudgetExhausted.report`, an immutable
:class:`ExhaustionReport` of how the budget was spent, for logs and dead-letter queues.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from tenacity import RetryError

if TYPE_CHECKING:
    from tenacity import Future

__all__: list[str] = []  # every public name here is the package's (tenacity_budget)

RECORD_ATTR = "_tenacity_budget_run"
"""The attribute under which a run's record sits on its ``RetryCallState`` and on each
attempt's ``Future`` (what tenacity hands ``BudgetExhausted``, with nothing else of the
run). Read it with :func:`tenacity_budget.state.run_state`."""


class StopReason(enum.StrEnum):
    """Why a budgeted run stopped retrying."""

    COUNT = "count"
    """The run made every retry the budget affords (``max_attempts()``)."""
    SLEEP_BUDGET = "sleep_budget"
    """The next sleep would have taken the total slept past ``max_elapsed``."""
    WALL_CLOCK = "wall_clock"
    """Elapsed time plus the next sleep and attempt would have passed ``max_elapsed``."""
    DEADLINE = "deadline"
    """The next sleep and attempt would have ended after the absolute deadline."""
    RETRY_BUDGET = "retry_budget"
    """A retry budget (:class:`~tenacity_budget.RetryBudget`) refused the retry: the
    dependency's retry traffic is already at its cap."""
    OTHER = "other"
    """Another stop strategy composed with the budget ended the run."""
    THROTTLED = "throttled"
    """An adaptive throttle (:class:`~tenacity_budget.AdaptiveThrottle`) rejected the attempt
    locally, without sending it: the dependency is overloaded (it refuses part of its
    traffic) and the client sheds its share before the server has to."""
    NOT_REPLAYABLE = "not_replayable"
    """The attempt failed in a way worth retrying, but its request body cannot be sent
    again (a generator, a file that cannot seek back): it was sent once, never re-sent
    truncated or empty."""


def _headline(reason: StopReason) -> str:
    """What gave out, for messages: ``"time budget exhausted (count)"``.

    The time budget (the policy's ``max_elapsed``, its deadline) is what every reason but
    one names; ``"retry budget"`` is for a :class:`~tenacity_budget.RetryBudget`'s refusal
    only: ``"retry budget exhausted (retry_budget)"``. The reason's value is in parentheses.
    """
    if reason is StopReason.NOT_REPLAYABLE:
        return f"not retried ({reason.value}): the request body cannot be sent again"
    if reason is StopReason.THROTTLED:
        return f"rejected locally ({reason.value}): the dependency is overloaded"
    spent = "retry budget" if reason is StopReason.RETRY_BUDGET else "time budget"
    return f"{spent} exhausted ({reason.value})"


class _Run(Protocol):
    """The facts of a run a report is made of (a :class:`~tenacity_budget.state.RunState`)."""

    attempts: int
    affordable: int | None
    elapsed: float
    budget: float | None
    deadline: datetime | None
    reason: StopReason | None

    @property
    def total_slept(self) -> float:
        """Seconds slept so far."""
        ...


@dataclass(frozen=True, slots=True)
class ExhaustionReport:
    """An immutable record of how a budgeted run spent its budget.

    Attributes:
        attempts: calls made to the function, the first one included.
        affordable: retries the budget afforded (``policy.max_attempts()``), or ``None``
            when no budget stop took part in the run.
        slept: seconds slept between attempts.
        elapsed: seconds from the start of the first attempt to the decision to stop.
        budget: the policy's ``max_elapsed``, or ``None`` without a budget stop.
        deadline: the absolute deadline the run observed, if any.
        reason: why the run stopped (a :class:`StopReason`).
        last_exception: the exception of the last attempt (``None`` when retrying on a result).
        hedges: hedged attempts sent (``policy.retry(hedge=...)``): attempts sent while an
            earlier one was still running; 0 for a run without hedging.
        hedges_won: of those, how many won: gave the good outcome the run returned.
    """

    attempts: int
    affordable: int | None
    slept: float
    elapsed: float
    budget: float | None
    deadline: datetime | None
    reason: StopReason
    last_exception: BaseException | None
    hedges: int = 0
    hedges_won: int = 0

    @property
    def retries(self) -> int:
        """Retries made: every call after the first."""
        return max(0, self.attempts - 1)

    def as_dict(self) -> dict[str, Any]:
        """Plain, JSON-friendly values (for structured logs and dead-letter payloads)."""
        return {
            "attempts": self.attempts,
            "affordable": self.affordable,
            "slept": self.slept,
            "elapsed": self.elapsed,
            "budget": self.budget,
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "reason": self.reason.value,
            "last_exception": repr(self.last_exception) if self.last_exception else None,
            "hedges": self.hedges,
            "hedges_won": self.hedges_won,
        }

    @classmethod
    def of_run(cls, run: _Run, last_exception: BaseException | None) -> ExhaustionReport:
        """The report of ``run`` (a run's record) as it stands: the one place it is built."""
        return cls(
            attempts=run.attempts,
            affordable=run.affordable,
            slept=run.total_slept,
            elapsed=run.elapsed,
            budget=run.budget,
            deadline=run.deadline,
            reason=run.reason if run.reason is not None else StopReason.OTHER,
            last_exception=last_exception,
            hedges=getattr(run, "hedges", 0),  # set only on hedged runs' records
            hedges_won=getattr(run, "hedges_won", 0),
        )

    @classmethod
    def from_attempt(cls, last_attempt: Future) -> ExhaustionReport:
        """Build the report from the last attempt of a run (what tenacity hands its errors)."""
        exc = last_attempt.exception() if last_attempt.done() else None
        run: _Run | None = getattr(last_attempt, RECORD_ATTR, None)
        if run is not None:
            return cls.of_run(run, exc)
        # No budget took part in the run: only the count is known.
        return cls(last_attempt.attempt_number, None, 0.0, 0.0, None, None, StopReason.OTHER, exc)


class Throttled(Exception):
    """An attempt an adaptive throttle rejected locally: it was never sent.

    The ``last_attempt`` of a run the throttle ended (reason ``throttled``) holds it when the
    rejected attempt was the first; ``throttle`` names the throttle, ``probability`` is its
    rejection probability read right after the rejection (the rejected request counted).
    """

    def __init__(self, throttle: str, probability: float) -> None:
        super().__init__(
            f"attempt rejected locally by throttle {throttle!r} "
            f"(rejection probability {probability:.3f}): the dependency is overloaded"
        )
        self.throttle = throttle
        self.probability = probability

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.throttle, self.probability))


class BudgetExhausted(RetryError):
    """Raised when a budgeted run gives up: a :class:`tenacity.RetryError` with a report.

    ``policy.retry()`` raises it by default; with plain tenacity use
    ``@retry(..., stop=policy.stop(), retry_error_cls=BudgetExhausted)``.
    ``reraise=True`` keeps tenacity's meaning: the last exception is raised instead.
    """

    report: ExhaustionReport

    def __init__(self, last_attempt: Future, report: ExhaustionReport | None = None) -> None:
        super().__init__(last_attempt)
        self.report = report if report is not None else ExhaustionReport.from_attempt(last_attempt)

    def __str__(self) -> str:
        r = self.report
        budget = f"{r.budget:g} s" if r.budget is not None else "no budget"
        return (
            f"{_headline(r.reason)}: {r.attempts} attempts, "
            f"slept {r.slept:.3f} s, elapsed {r.elapsed:.3f} s of {budget}; "
            f"last: {r.last_exception!r}"
        )
