"""The observer protocols: what a run and a retry budget tell their observers.

Both are runtime-checkable and gain no required method: a new hook is optional and looked
up with ``getattr``, so every observer written today keeps passing ``isinstance``. See
docs/observability.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..exhaustion import ExhaustionReport


@runtime_checkable
class RetryObserver(Protocol):
    """What ``policy.retry(stats=...)`` calls as a run progresses (metrics, counters).

    :class:`~tenacity_budget.RetryStats` and the Prometheus and OpenTelemetry adapters
    implement it; so can any object with these four methods. They are called from the
    thread (or task) running the function and must be cheap and thread-safe.
    """

    def on_call(self, name: str) -> None:
        """A call of the decorated function began (its first attempt is about to run)."""

    def on_retry(self, name: str, attempt: int, sleep: float) -> None:
        """Attempt ``attempt`` failed and the run will sleep ``sleep`` seconds, then retry."""

    def on_success(self, name: str, attempts: int) -> None:
        """The call returned after ``attempts`` attempts (1: first try)."""

    def on_exhausted(self, name: str, report: ExhaustionReport) -> None:
        """The call gave up: its budget (or another stop) ended the run."""


@runtime_checkable
class BudgetObserver(Protocol):
    """What a retry budget tells as it decides (metrics); pass it as ``observers=``.

    :class:`~tenacity_budget.instrumentation.PrometheusObserver` and
    :class:`~tenacity_budget.instrumentation.OpenTelemetryObserver` implement it; so can
    any object with these two methods. They are called from the thread (or task) asking
    for the retry, after the decision, and must be cheap and thread-safe. Deposits are not
    reported: they are one per call, and the call's own metrics count them.
    """

    def on_budget_decision(self, name: str, granted: bool, balance: int | None) -> None:
        """Budget ``name`` granted (``True``) or refused a retry.

        ``balance`` is what the budget would still grant right after this decision, or
        ``None`` when it is not known (a Redis budget deciding on the ``ALWAYS`` or
        ``NEVER`` fallback, ``on_error="allow"`` or ``"deny"``, while Redis is
        unreachable).
        """

    def on_budget_fallback(self, name: str, error: BaseException) -> None:
        """Budget ``name`` made a decision without its shared store (Redis) because of ``error``.

        Called once per decision made on the fallback, right before
        :meth:`on_budget_decision` reports it.
        """
