"""The public delay functions: the nominal delay, the capped index, the delays and their sum."""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator

from ._exact import _UNITS, _head_at_cap, _units, _window
from ._floats import _INF, _LOG_MAX, _count, _geometric, _params


def add_compensated(total: float, error: float, x: float) -> tuple[float, float]:
    """One step of Neumaier's compensated summation: ``(total, error) + x``.

    ``total + error`` tracks the exact sum of the added floats far more closely than a
    running float total, which drifts: ``0.1`` added 16 times is ``1.6000000000000003``,
    though the exact sum of those sixteen floats is the float ``1.6``. Budget checks compare
    ``total + error`` with the budget, so a schedule that exactly fills it is not cut short.
    """
    t = total + x
    if abs(total) >= abs(x):
        error += (total - t) + x
    else:
        error += (x - t) + total
    return t, error


def nominal_delay(n: int, base: float, factor: float, cap: float) -> float:
    """The nominal (pre-jitter) delay before retry ``n`` (0-based), by the definition.

    ``cap`` if the float power ``factor ** n`` raises ``OverflowError``, else
    ``min(cap, base * factor ** n)`` in floats (a product that overflows to ``inf`` is
    ``cap``). Never raises ``OverflowError``. The wait calls this on every retry, so it
    checks nothing but ``n``: pass floats, as :class:`~tenacity_budget.BackoffPolicy` does.
    """
    if type(n) is not int or n < 0:
        n = _count("retry index", n)
    try:
        delay = base * factor**n
    except OverflowError:
        return cap
    return delay if delay < cap else cap


def _reached(base: float, factor: float, cap: float, k: int) -> bool:
    """Whether the delay before retry ``k`` is ``cap``."""
    try:
        return base * factor**k >= cap
    except OverflowError:
        return True


def capped_index(base: float, factor: float, cap: float) -> int:
    """Index of the first nominal delay that is ``cap``, in (nearly) constant time.

    Delays ``0 .. k - 1`` are below the cap and grow; every delay from ``k`` on is exactly
    ``cap`` (the float power is monotone in its exponent).
    """
    b, f, c = _params(base, factor, cap)
    return _capped_index(b, f, c, math.log1p(f - 1.0))


def _capped_index(base: float, factor: float, cap: float, lam: float) -> int:
    if base >= cap:
        return 0
    # The first k with base * factor**k >= cap, or with factor**k past the float range. The
    # logarithms are accurate to a few ulps of themselves, so the estimate is off by a step
    # or two, except for a factor within ~1e-12 of 1, where k is huge and a few ulps of
    # log(cap / base) are many steps: there one correction from the float delay at the
    # estimate (the log of a ratio near 1 is accurate to an ulp of 1) comes within a step.
    guess = min(math.log(cap) - math.log(base), _LOG_MAX) / lam
    k = max(1, math.ceil(guess))
    if guess > 2.0**40:
        k = _corrected(base, factor, cap, lam, k)
    if _reached(base, factor, cap, k):
        if not _reached(base, factor, cap, k - 1):
            return k
        hi, step = k - 1, 1
        lo = max(0, hi - step)
        while lo > 0 and _reached(base, factor, cap, lo):
            hi, step = lo, step * 2
            lo = max(0, hi - step)
    else:
        lo, step = k, 1
        hi = lo + step
        while not _reached(base, factor, cap, hi):
            lo, step = hi, step * 2
            hi = lo + step
    while hi - lo > 1:  # not reached at lo, reached at hi
        mid = (lo + hi) // 2
        if _reached(base, factor, cap, mid):
            hi = mid
        else:
            lo = mid
    return hi


def _corrected(base: float, factor: float, cap: float, lam: float, k: int) -> int:
    """A better estimate of the capped index near ``k``, from the float power at ``k``."""
    try:
        power = factor**k
    except OverflowError:
        return k
    delay = base * power
    if not 0.0 < delay < _INF:
        return k
    # steps to the cap, and to the power's overflow (factor**k > max float)
    to_cap = math.log(cap / delay) / lam
    to_overflow = math.log(sys.float_info.max / power) / lam
    return max(1, k + math.ceil(min(to_cap, to_overflow)))


def backoff_delays(base: float, factor: float, cap: float, attempts: int) -> Iterator[float]:
    """Yield the nominal delay before each of ``attempts`` retries, lazily.

    The floats of :func:`nominal_delay`: ``min(cap, base * factor**n)`` for ``n = 0, 1,
    ...``, and ``cap`` where the power overflows. Once a delay reaches the cap every later
    one is exactly ``cap`` and no more powers are computed, so this never raises
    ``OverflowError`` however many delays are asked for, and it holds no list: walking a
    schedule of ``10**9`` retries costs constant memory.

    Raises:
        ValueError: for a non-finite or non-positive ``base``/``cap``, a ``factor <= 1``, or
            a negative ``attempts`` (checked at the call, not at the first ``next()``).
    """
    b, f, c = _params(base, factor, cap)
    return _delays(b, f, c, _count("attempts", attempts))


def _delays(base: float, factor: float, cap: float, attempts: int) -> Iterator[float]:
    n = 0
    while n < attempts:
        try:
            delay = base * factor**n
        except OverflowError:
            break
        if delay >= cap:
            break
        yield delay
        n += 1
    for _ in range(attempts - n):
        yield cap


# Up to this many delays below the cap, total_delay sums them exactly (correctly rounded).
_EXACT_TOTAL = 4096


def total_delay(n: int, base: float, factor: float, cap: float) -> float:
    """Sum of the first ``n`` nominal delays, ``S(n)``, as a float, in (nearly) constant time.

    Correctly rounded when at most 4096 delays are below the cap (it sums them exactly),
    else within ``3.6e-15`` (relative) of the exact sum (closed form). Never raises
    ``OverflowError``: a sum past the float range is ``inf``. ``total_delay(1, 1e9, 1e300,
    2e9) == 1e9``.
    """
    b, f, c = _params(base, factor, cap)
    n = _count("n", n)
    lam = math.log1p(f - 1.0)
    k = _capped_index(b, f, c, lam)
    head = min(n, k)
    try:
        if head <= _EXACT_TOTAL:
            units = _window(b, f, 0, head) + (n - head) * _units(c)
            return units / (1 << _UNITS)  # int / int: correctly rounded
        cn, cd = c.as_integer_ratio()
        tail = (n - head) * cn / cd
        if head == k:
            m, e, _ = _head_at_cap(k, b, f, lam)
        else:
            m, e = _geometric(head, f, lam, b, f - 1.0)
        return (math.ldexp(m, e) if e < 1030 else math.inf) + tail
    except OverflowError:
        return math.inf
