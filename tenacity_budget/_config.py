"""Cross-cutting state and helpers: the testing switch, deadline validation and merging.

Private on purpose (stamina's ``_config.py`` is the model): the public faces of what lives
here are :func:`tenacity_budget.testing.set_testing` / :func:`~tenacity_budget.testing.testing_mode`
and the ``deadline=`` arguments that :func:`check_aware` validates. Nothing here imports
another module of the package.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = [
    "check_aware",
    "check_seed",
    "earliest",
    "one_generator",
    "set_testing_attempts",
    "testing_attempts",
    "utc_instant",
]

# Zero-wait, bounded-attempt mode for test suites (``None``: off). Process-wide on purpose:
# a test suite switches it once for every thread and task.
_testing_attempts: int | None = None


def set_testing_attempts(attempts: int | None) -> None:
    """Switch every budgeted strategy to zero-wait mode with ``attempts`` calls (``None``: off).

    The public switch is :func:`tenacity_budget.testing.set_testing`, which documents it.
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
    """Return ``deadline`` if it is a timezone-aware datetime, else raise saying why.

    Raises:
        TypeError: when ``deadline`` is not a :class:`~datetime.datetime`.
        ValueError: for a naive datetime, which is ambiguous.
    """
    if not isinstance(deadline, datetime):
        raise TypeError(f"{what} must be a timezone-aware datetime, got {type(deadline).__name__}")
    if deadline.tzinfo is None or deadline.utcoffset() is None:
        raise ValueError(
            f"{what} must be timezone-aware, got the naive datetime {deadline.isoformat()}: "
            "a naive time is ambiguous; pass e.g. datetime(..., tzinfo=timezone.utc)"
        )
    return deadline


def earliest(*deadlines: datetime | None) -> datetime | None:
    """The earliest of several aware deadlines, ignoring ``None``; ``None`` when all are.

    The one place where deadlines are merged: a call's deadline, the policy's own, an
    enclosing scope's or a task message's. The earliest always holds, so a deadline can
    only ever tighten a run, never loosen it.
    """
    found: datetime | None = None
    for deadline in deadlines:
        if deadline is not None and (found is None or deadline < found):
            found = deadline
    return found


_EARLIEST = datetime.min.replace(tzinfo=UTC)


def utc_instant(timestamp: float) -> datetime | None:
    """The aware UTC instant of ``timestamp`` (epoch seconds); never raises.

    A timestamp later than any ``datetime`` can hold (past ``datetime.max``, or ``inf``)
    is an end no run can reach: ``None``, no deadline. One earlier than ``datetime.min``
    is long past: ``datetime.min`` (UTC), which every clock reading is after.
    """
    try:
        return datetime.fromtimestamp(timestamp, UTC)
    except (OverflowError, ValueError, OSError):  # out of datetime's (or the C library's) range
        return None if timestamp > 0 else _EARLIEST


def check_seed(seed: object) -> int | None:
    """``seed`` if it is ``None`` or an int (not a bool), else a ``TypeError`` saying so.

    The one check of a seed, shared by :meth:`BackoffPolicy.wait` and
    :meth:`BackoffPolicy.schedule`, so both refuse the same seeds with the same message.
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"seed must be an int or None, got {type(seed).__name__}")
    return seed


def one_generator(seed: object, rng: object) -> None:
    """Refuse ``seed=`` and ``rng=`` together (one message for every place that takes both)."""
    if seed is not None and rng is not None:
        raise ValueError("pass rng= (one shared generator) or seed= (one per run), not both")
