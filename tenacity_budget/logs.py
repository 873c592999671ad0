"""Logging retries: :func:`log_retry`, a ``before_sleep`` hook for the stdlib :mod:`logging`.

One line per retry says which function failed, on which attempt, with what, how long the
run will sleep and how it stands against its budget::

    policy.retry(before_sleep=log_retry(logging.getLogger("billing")))

The same values travel as ``extra=`` fields on the record (:data:`EXTRA_FIELDS`, each
always present, ``None`` where it does not apply); docs/observability.md describes each.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tenacity import RetryCallState

from .strategies import budget_state

__all__ = ["retry_fields"]

DEFAULT_LOGGER_NAME = "tenacity_budget"
"""The logger :func:`log_retry` writes to when given none."""

EXTRA_FIELDS: tuple[str, ...] = (
    "retry_fn",
    "retry_attempt",
    "retry_exception",
    "retry_exception_type",
    "retry_result",
    "retry_sleep",
    "retry_slept",
    "retry_elapsed",
    "retry_budget",
    "retry_budget_left",
    "retry_affordable",
    "retry_retries_left",
    "retry_deadline",
)
"""The names of the ``extra=`` fields every retry record carries (see the module docs)."""


def retry_fields(retry_state: RetryCallState) -> dict[str, Any]:
    """The values :func:`log_retry` logs for the retry ``retry_state`` is about to make.

    Keys are :data:`EXTRA_FIELDS`. Useful on its own for a hook writing to another sink
    (structlog, an event bus).
    """
    return {
        "retry_fn": retry_state.get_fn_name(),
        "retry_attempt": retry_state.attempt_number,
        **_outcome_fields(retry_state),
        "retry_sleep": float(retry_state.upcoming_sleep),
        # tenacity adds the upcoming sleep to idle_for just before calling before_sleep
        "retry_slept": max(0.0, float(retry_state.idle_for - retry_state.upcoming_sleep)),
        **_budget_fields(retry_state),
    }


def _outcome_fields(retry_state: RetryCallState) -> dict[str, Any]:
    """The failed attempt's exception (its ``repr`` and class) or returned value."""
    exception: BaseException | None = None
    result: str | None = None
    outcome = retry_state.outcome
    if outcome is not None:
        if outcome.failed:
            exception = outcome.exception()
        else:
            result = repr(outcome.result())
    if exception is None:
        return {"retry_exception": None, "retry_exception_type": None, "retry_result": result}
    kind = type(exception)
    return {
        "retry_exception": repr(exception),
        "retry_exception_type": f"{kind.__module__}.{kind.__qualname__}",
        "retry_result": None,
    }


def _budget_fields(retry_state: RetryCallState) -> dict[str, Any]:
    """How the run stands against its budget (``None`` each without a budget stop)."""
    state = budget_state(retry_state)
    if state is None:
        return {
            "retry_elapsed": _seconds_since_start(retry_state),
            "retry_budget": None,
            "retry_budget_left": None,
            "retry_affordable": None,
            "retry_retries_left": None,
            "retry_deadline": None,
        }
    return {
        "retry_elapsed": state.elapsed,
        "retry_budget": state.budget,
        "retry_budget_left": state.budget_left,
        "retry_affordable": state.affordable,
        "retry_retries_left": state.retries_left,
        "retry_deadline": state.deadline.isoformat() if state.deadline else None,
    }


def _seconds_since_start(retry_state: RetryCallState) -> float | None:
    seconds = retry_state.seconds_since_start
    return float(seconds) if seconds is not None else None


def _message(fields: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
    """The %-style message and its arguments for one retry (formatted lazily by logging)."""
    if fields["retry_exception"] is not None:
        what = "raised %s"
        what_arg = fields["retry_exception"]
    else:
        what = "returned %s"
        what_arg = fields["retry_result"]
    head = "Retrying %s in %.3f s: attempt %d " + what
    args: tuple[Any, ...] = (fields["retry_fn"], fields["retry_sleep"], fields["retry_attempt"])
    args += (what_arg,)
    if fields["retry_budget"] is None:
        return head + "; no budget", args
    tail = "; budget %.3f s used, %.3f s left; %d retries left"
    args += (fields["retry_elapsed"], fields["retry_budget_left"], fields["retry_retries_left"])
    if fields["retry_deadline"] is not None:
        tail += "; deadline %s"
        args += (fields["retry_deadline"],)
    return head + tail, args


def log_retry(
    logger: logging.Logger | None = None,
    level: int = logging.WARNING,
    *,
    exc_info: bool = False,
) -> Callable[[RetryCallState], None]:
    """A tenacity ``before_sleep`` hook logging one line per retry to ``logger``.

    Use it with ``policy.retry(before_sleep=log_retry())`` or plain
    ``tenacity.retry(..., stop=policy.stop(), before_sleep=log_retry())``. The line reads::

        Retrying app.fetch in 1.200 s: attempt 2 raised ConnectionError('reset');
        budget 3.400 s used, 25.400 s left; 3 retries left

    and the record carries every value as an ``extra=`` field (:data:`EXTRA_FIELDS`,
    described in :mod:`tenacity_budget.logs`).

    Args:
        logger: where to write; defaults to ``logging.getLogger("tenacity_budget")``.
        level: the records' level (``WARNING`` by default).
        exc_info: attach the failed attempt's exception and traceback to the record.
    """
    target = logger if logger is not None else logging.getLogger(DEFAULT_LOGGER_NAME)

    def before_sleep(retry_state: RetryCallState) -> None:
        if not target.isEnabledFor(level):
            return
        fields = retry_fields(retry_state)
        message, args = _message(fields)
        error: BaseException | None = None
        if exc_info and retry_state.outcome is not None and retry_state.outcome.failed:
            error = retry_state.outcome.exception()
        target.log(level, message, *args, extra=fields, exc_info=error)

    before_sleep.__qualname__ = f"log_retry({target.name!r})"
    return before_sleep
