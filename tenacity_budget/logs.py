"""Logging retries: :func:`log_retry`, a ``before_sleep`` hook for the stdlib :mod:`logging`.

One line per retry says which function failed, on which attempt, with what, how long the
run will sleep, and how the run stands against its budget::

    policy.retry(before_sleep=log_retry(logging.getLogger("billing")))

    # Retrying app.fetch in 1.200 s: attempt 2 raised ConnectionError('reset');
    #   budget 3.400 s used, 25.400 s left; 3 retries left

The same values travel as ``extra=`` fields on the :class:`logging.LogRecord`, so a
structured (JSON) handler gets them as keys. Every field is always present, ``None`` when
it does not apply:

========================== =====================================================================
``retry_fn``               the function's name (``retry_state.get_fn_name()``: module.qualname)
``retry_attempt``          the attempt that just failed (1 for the first call)
``retry_exception``        ``repr()`` of that attempt's exception, ``None`` for a result
``retry_exception_type``   the exception's class, ``module.QualName``; ``None`` for a result
``retry_result``           ``repr()`` of the returned value when retrying on a result, else ``None``
``retry_sleep``            seconds the run is about to sleep
``retry_slept``            seconds slept before this sleep
``retry_elapsed``          budget used: seconds since the first attempt began
``retry_budget``           the policy's ``max_elapsed``
``retry_budget_left``      seconds of budget left after this sleep
``retry_affordable``       retries the budget affords in all (``policy.max_attempts()``)
``retry_retries_left``     retries still affordable after the one about to be made
``retry_deadline``         the run's absolute deadline (ISO 8601), if any
========================== =====================================================================

The budget figures come from :func:`tenacity_budget.budget_state`; in a run without a
budget stop (plain tenacity strategies) ``retry_budget``, ``retry_budget_left``,
``retry_affordable``, ``retry_retries_left`` and ``retry_deadline`` are ``None``, the line
says ``no budget``, and ``retry_elapsed`` is tenacity's own time since the first attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from tenacity import RetryCallState

from .strategies import budget_state

__all__ = ["DEFAULT_LOGGER_NAME", "EXTRA_FIELDS", "log_retry", "retry_fields"]

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
    exception: BaseException | None = None
    result: Any = None
    outcome = retry_state.outcome
    has_result = False
    if outcome is not None:
        if outcome.failed:
            exception = outcome.exception()
        else:
            has_result = True
            result = outcome.result()
    state = budget_state(retry_state)
    exc_type = type(exception) if exception is not None else None
    return {
        "retry_fn": retry_state.get_fn_name(),
        "retry_attempt": retry_state.attempt_number,
        "retry_exception": repr(exception) if exception is not None else None,
        "retry_exception_type": (
            f"{exc_type.__module__}.{exc_type.__qualname__}" if exc_type is not None else None
        ),
        "retry_result": repr(result) if has_result else None,
        "retry_sleep": float(retry_state.upcoming_sleep),
        # tenacity adds the upcoming sleep to idle_for just before calling before_sleep
        "retry_slept": max(0.0, float(retry_state.idle_for - retry_state.upcoming_sleep)),
        "retry_elapsed": (
            state.elapsed if state is not None else _seconds_since_start(retry_state)
        ),
        "retry_budget": state.budget if state is not None else None,
        "retry_budget_left": state.budget_left if state is not None else None,
        "retry_affordable": state.affordable if state is not None else None,
        "retry_retries_left": state.retries_left if state is not None else None,
        "retry_deadline": (
            state.deadline.isoformat() if state is not None and state.deadline else None
        ),
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
