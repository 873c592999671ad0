"""One converter per kind of input: seconds, aware datetime, attempt count, seed, throttle.

Every public entry point that takes one of these checks it here, so the same input is
refused everywhere with the same message (tenacity's ``_utils.to_seconds`` is the model).
Nothing here imports another module of the package.
"""

from __future__ import annotations

from datetime import datetime

_INF = float("inf")


def seconds(value: object, what: str, *, allow_inf: bool = False, positive: bool = False) -> float:
    """``value`` as a float number of seconds, or a clear error naming ``what``.

    Any real number is taken (int, float, ``Decimal``, ``Fraction``); a bool or text is
    not a number of seconds. ``allow_inf`` admits ``inf`` (meaning "none"), ``positive``
    refuses 0.

    Raises:
        TypeError: for a bool, text or any other non-number.
        ValueError: for NaN, a negative number (0 too with ``positive``), ``inf`` without
            ``allow_inf``, or a number beyond float range.
    """
    number = value if type(value) is float else _as_float(value, what, allow_inf)
    if (0.0 < number < _INF) or (number == 0.0 and not positive) or (number == _INF and allow_inf):
        return number
    least = "> 0" if positive else ">= 0"
    kind = "a number of seconds" if allow_inf else "a finite number of seconds"
    raise ValueError(f"{what} must be {kind} {least}, got {number!r}")


def _as_float(value: object, what: str, allow_inf: bool) -> float:
    """A number that is not a float, as one (past float range: ``inf`` if allowed)."""
    if type(value) is not int and (
        isinstance(value, bool | str | bytes) or not hasattr(value, "__float__")
    ):
        raise TypeError(f"{what} must be a number of seconds, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        if allow_inf and value > 0:  # type: ignore[operator]
            return _INF  # beyond any clock: none
        raise ValueError(
            f"{what} must be a finite number of seconds, got a number beyond float range"
        ) from None


def aware(value: object, what: str = "deadline") -> datetime:
    """``value`` if it is a timezone-aware datetime, else a clear error naming ``what``.

    Raises:
        TypeError: when ``value`` is not a :class:`~datetime.datetime`.
        ValueError: for a naive datetime, which is ambiguous.
    """
    if not isinstance(value, datetime):
        raise TypeError(f"{what} must be a timezone-aware datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(
            f"{what} must be timezone-aware, got the naive datetime {value.isoformat()}: "
            "a naive time is ambiguous; pass e.g. datetime(..., tzinfo=timezone.utc)"
        )
    return value


def attempts(value: object, what: str = "attempts") -> int:
    """``value`` as a count of attempts (an int >= 1, not a bool), or a clear error.

    Raises:
        TypeError: for anything but an int (a bool included).
        ValueError: for a count below 1.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int >= 1, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{what} must be an int >= 1, got {value!r}")
    return value


def seed(value: object) -> int | None:
    """``value`` if it is ``None`` or an int (not a bool), else a ``TypeError`` saying so."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"seed must be an int or None, got {type(value).__name__}")
    return value


def one_generator(seed: object, rng: object) -> None:
    """Refuse ``seed=`` and ``rng=`` together (one message for every place that takes both)."""
    if seed is not None and rng is not None:
        raise ValueError("pass rng= (one shared generator) or seed= (one per run), not both")


def is_throttle(value: object) -> bool:
    """Whether ``value`` is an adaptive throttle: it has ``admit()`` and ``record()``."""
    return all(callable(getattr(value, name, None)) for name in ("admit", "record"))


def throttle(value: object, *, per_host: bool = False) -> object:
    """``value`` if it is ``None`` or an adaptive throttle (``admit()`` and ``record()``, as
    :class:`~tenacity_budget.AdaptiveThrottle` has), or, with ``per_host``, a callable mapping
    a request's host to one (the HTTP transports'); else a ``TypeError`` saying what it takes.
    """
    if value is None or is_throttle(value):
        return value
    if per_host and callable(value):
        return value
    host = " or a callable mapping a request's host to one" if per_host else ""
    raise TypeError(
        "throttle must be an adaptive throttle (AdaptiveThrottle or RedisAdaptiveThrottle: "
        f"admit(), record()){host}, got {type(value).__name__}"
    )
