"""Pure math of budgeted exponential backoff: nominal delays and the budget solver.

Nothing here is random and nothing here knows about tenacity or pydantic. The nominal
delay before retry ``n`` (counting from 0) is::

    d(n) = min(cap, base * factor**n)

and the budget solver answers: how many retries does a time budget afford? It returns the
largest ``n`` such that the first ``n`` nominal delays, plus ``n + 1`` attempts of
``attempt_duration`` seconds each, fit in the budget::

    S(n) + (n + 1) * attempt_duration <= budget,    S(n) = d(0) + ... + d(n - 1)

The solver is closed-form. Let ``k`` be the number of delays below the cap. For ``n <= k``
the sum is geometric, ``S(n) = base * (factor**n - 1) / (factor - 1)``, which inverts with a
logarithm; past ``k`` every delay is exactly ``cap`` and the sum is linear, which inverts
with one (exact, rational) division. Neither step loops over attempts, so a budget that
affords ``10**300`` retries is answered as fast as one that affords three.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

__all__ = [
    "add_compensated",
    "backoff_delays",
    "capped_index",
    "compute_max_attempts",
    "nominal_delay",
    "total_delay",
]

# Bounded neighbour corrections after a float estimate. The estimates below are accurate to
# well under one step except for absurd configurations (more than 2**53 delays below the
# cap), where a "step" is below float resolution anyway; the bound keeps every call finite.
_MAX_CORRECTIONS = 64
_LOG_MAX = math.log(1.7976931348623157e308)
# Up to this many delays below the cap, sums are taken over the float delays themselves
# (exactly), so every decision on them is exact; past it, the closed form. Either way the
# work is bounded by this constant, whatever the answer: no loop runs over the retries.
_EXACT_TERMS = 64
# Decisions closer than this (relative) to a boundary are re-decided exactly; the closed
# form's own error is about 1e-12 relative, far inside it.
_REL_TOL = 1e-9
# Below this a float quotient is an exact integer count; above it, divide exactly.
_FLOAT_INTS = 2.0**52


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


def _check(base: float, factor: float, cap: float) -> None:
    for name, value in (("base", base), ("factor", factor), ("cap", cap)):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    if base <= 0:
        raise ValueError(f"base must be > 0 seconds, got {base!r}")
    if factor <= 1:
        raise ValueError(f"factor must be > 1 (delays must grow), got {factor!r}")
    if cap <= 0:
        raise ValueError(f"cap must be > 0 seconds, got {cap!r}")


def _raw(base: float, factor: float, n: int) -> float:
    """``base * factor**n`` in floats, ``inf`` instead of ``OverflowError``."""
    try:
        return base * factor**n
    except OverflowError:
        # factor**n alone overflows, but a tiny base may bring the product back in range.
        log = math.log(base) + n * math.log(factor)
        return math.inf if log >= _LOG_MAX else math.exp(log)


def capped_index(base: float, factor: float, cap: float) -> int:
    """Index of the first nominal delay that equals ``cap``.

    That is the smallest ``k`` with ``base * factor**k >= cap``; delays ``0 .. k - 1`` grow
    geometrically and every delay from ``k`` on is exactly ``cap``. Constant time.
    """
    _check(base, factor, cap)
    return _capped_index(base, factor, cap)


def _capped_index(base: float, factor: float, cap: float) -> int:
    if base >= cap:
        return 0
    # log(cap) - log(base), not log(cap / base): the ratio can overflow.
    estimate = (math.log(cap) - math.log(base)) / math.log1p(factor - 1.0)
    k = max(0, math.ceil(estimate))
    for _ in range(_MAX_CORRECTIONS):
        if k > 0 and _raw(base, factor, k - 1) >= cap:
            k -= 1
        elif _raw(base, factor, k) < cap:
            k += 1
        else:
            break
    return k


def nominal_delay(n: int, base: float, factor: float, cap: float) -> float:
    """The nominal (pre-jitter) delay before retry ``n`` (0-based): ``min(cap, base * factor**n)``.

    Never raises ``OverflowError``: a power too large for a float is simply the cap.
    """
    if n < 0:
        raise ValueError(f"retry index must be >= 0, got {n!r}")
    return min(cap, _raw(base, factor, n))


def backoff_delays(base: float, factor: float, cap: float, attempts: int) -> Iterator[float]:
    """Yield the nominal delay before each of ``attempts`` retries, lazily.

    The delay before retry ``n`` (``n = 0, 1, ...``) is ``min(cap, base * factor**n)``. Once a
    delay reaches the cap every later one is exactly ``cap`` and no more powers are
    computed, so this never raises ``OverflowError`` however many delays are asked for, and
    it holds no list: walking a schedule of ``10**9`` retries costs constant memory.

    Raises:
        ValueError: for a non-finite or non-positive ``base``/``cap``, a ``factor <= 1``, or
            a negative ``attempts`` (checked at the call, not at the first ``next()``).
    """
    _check(base, factor, cap)
    if attempts < 0:
        raise ValueError(f"attempts must be >= 0, got {attempts!r}")
    return _delays(float(base), float(factor), float(cap), attempts)


def _delays(base: float, factor: float, cap: float, attempts: int) -> Iterator[float]:
    n = 0
    while n < attempts:
        delay = _raw(base, factor, n)
        if delay >= cap:
            break
        yield delay
        n += 1
    for _ in range(attempts - n):
        yield cap


def _geometric_sum(base: float, factor: float, n: float) -> float:
    """``base * (factor**n - 1) / (factor - 1)`` for real ``n >= 0``, accurate and overflow-safe."""
    if n <= 0:
        return 0.0
    r = factor - 1.0
    t = n * math.log1p(r)  # ln(factor**n)
    if t < 1e-3:
        # factor**n within 0.1% of 1: pow's rounding would dominate factor**n - 1.
        growth = math.expm1(t)
    elif t < _LOG_MAX - 1.0:
        # Exact whenever factor**n is representable: pow rounds correctly and, for
        # factor**n <= 2, the subtraction is exact (Sterbenz); past 2 it loses < 1 ulp.
        growth = math.pow(factor, n) - 1.0
    else:
        log = math.log(base) + t + math.log1p(-math.exp(-t)) - math.log(r)
        return math.inf if log >= _LOG_MAX else math.exp(log)
    return base * growth / r


def _dyadic_sum(terms: list[float]) -> tuple[int, int]:
    """The exact sum of floats as ``(numerator, denominator)``, the denominator a power of two.

    Floats are dyadic rationals, so exact sums need only integer shifts and additions: no
    ``Fraction`` objects and no gcd per term.
    """
    numerator, denominator = 0, 1
    for term in terms:
        num, den = term.as_integer_ratio()
        if den > denominator:
            numerator *= den // denominator
            denominator = den
        else:
            num *= denominator // den
        numerator += num
    return numerator, denominator


def _excess(base: float, factor: float, n: int, duration: float, budget: float) -> float:
    """``S(n) + (n + 1) * duration - budget``, with an exact sign whenever it matters.

    The closed form is accurate to about 1e-12 relative; when the result is closer to zero
    than ``_REL_TOL`` of the magnitudes involved and there are few delays, the sign is
    decided over the float delays themselves (``math.fsum`` is correctly rounded).
    """
    head = _geometric_sum(base, factor, n)
    fixed = (n + 1.0) * duration
    value = head + fixed - budget
    # The budget is exact; only the closed form and the product carry rounding.
    if abs(value) > _REL_TOL * (head + fixed) + 4 * math.ulp(budget) or n > _EXACT_TERMS:
        return value
    return math.fsum([*(_raw(base, factor, i) for i in range(n)), *[duration] * (n + 1), -budget])


def total_delay(n: int, base: float, factor: float, cap: float) -> float:
    """Sum of the first ``n`` nominal delays, ``S(n)``, in constant time."""
    _check(base, factor, cap)
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n!r}")
    k = _capped_index(base, factor, cap)
    head = _geometric_sum(base, factor, min(n, k))
    if n <= k:
        return head
    # (n - k) can exceed the float range while the product does not: divide big ints.
    num, den = float(cap).as_integer_ratio()
    return head + ((n - k) * num) / den


def _uncapped_count(budget: float, base: float, factor: float, k: int, duration: float) -> int:
    """Largest ``n <= k`` with ``S(n) + (n + 1) * duration <= budget`` (no delay capped)."""
    r = factor - 1.0
    log_f = math.log1p(r)
    log_base = math.log(base)

    # Ignoring the attempts' own time gives an upper bound: invert the geometric sum.
    room = budget - duration
    if room <= 0.0:
        return 0
    log_y = math.log(room) + math.log(r) - log_base
    t = (math.log1p(math.exp(log_y)) if log_y < _LOG_MAX else log_y) / log_f
    t = min(t, float(k))
    if duration > 0.0:
        # S(t) + (t + 1) * duration is convex and increasing in t, so Newton's method started
        # to the right of the root walks monotonically down to it.
        for _ in range(_MAX_CORRECTIONS):
            x = t * log_f  # log(factor**t)
            if x < _LOG_MAX - 1.0 and log_base + x < _LOG_MAX - 1.0:
                growth = math.expm1(x)  # factor**t - 1, no cancellation near 1
                h = base * growth / r + (t + 1.0) * duration - budget
                slope = base * (growth + 1.0) * log_f / r + duration
            else:
                h = _geometric_sum(base, factor, t) + (t + 1.0) * duration - budget
                slope = math.exp(_LOG_MAX - 1.0) * log_f / r + duration
            if h <= 0.0:
                break
            step = h / slope
            t = max(0.0, t - step)
            if step < 0.25:
                break
        # Newton from the right never passes the root: t >= root, so floor(t) + 1 > root
        # and, unless t is within rounding of a whole number, floor(t) is the answer as
        # soon as it fits.
        whole = min(k, math.floor(t))
        slack = _REL_TOL * max(1.0, t)
        if (
            t - whole > slack
            and whole + 1 - t > slack
            and _excess(base, factor, whole, duration, budget) <= 0.0
        ):
            return whole
    elif t < k:
        # Without the attempts' time, t is accurate to ~1e-13 relative: unless it is within
        # rounding of a whole number, its floor is the answer and needs no checking.
        whole = math.floor(t)
        slack = _REL_TOL * max(1.0, t)
        if t - whole > slack and whole + 1 - t > slack:
            return whole
    n = max(0, min(k, math.floor(t)))
    for _ in range(_MAX_CORRECTIONS):
        if n > 0 and _excess(base, factor, n, duration, budget) > 0.0:
            n -= 1
        elif n < k and _excess(base, factor, n + 1, duration, budget) <= 0.0:
            n += 1
        else:
            break
    return n


def compute_max_attempts(
    budget: float,
    base: float,
    factor: float,
    cap: float,
    attempt_duration: float = 0.0,
) -> int:
    """Largest number of retries whose total nominal delay fits within ``budget``.

    Returns the largest ``n`` such that the first ``n`` nominal delays plus ``n + 1``
    attempts of ``attempt_duration`` seconds fit::

        S(n) + (n + 1) * attempt_duration <= budget

    and 0 when ``budget <= 0`` (or when not even the first attempt fits). Constant time
    whatever ``n`` is: the geometric part is inverted with a logarithm and the capped part
    with one exact rational division. Exact whenever the partial sums are exactly
    representable (``compute_max_attempts(63, 1, 2, 60) == 6``, since ``1+2+4+8+16+32 == 63``).

    Example:
        >>> compute_max_attempts(300, base=1, factor=2, cap=60)
        9
        >>> compute_max_attempts(15 * 86400, base=1, factor=2, cap=60)
        21604

    Raises:
        ValueError: for a non-finite budget, a non-finite or negative ``attempt_duration``,
            or bad delay parameters (see :func:`backoff_delays`).
    """
    _check(base, factor, cap)
    if math.isnan(budget) or budget == math.inf:
        raise ValueError(f"budget must be a finite number of seconds, got {budget!r}")
    if not math.isfinite(attempt_duration) or attempt_duration < 0:
        raise ValueError(f"attempt_duration must be a finite number >= 0, got {attempt_duration!r}")
    budget, base, factor, cap = float(budget), float(base), float(factor), float(cap)
    duration = float(attempt_duration)
    if budget <= 0 or duration > budget:
        return 0
    k = _capped_index(base, factor, cap)
    s_k = _geometric_sum(base, factor, k)
    if s_k == math.inf:
        return _uncapped_count(budget, base, factor, k, duration)
    fixed = (k + 1) * duration
    per = cap + duration
    left = budget - s_k - fixed
    # How far off `left` can be: the budget is exact, the closed form and product are not.
    slack = _REL_TOL * (s_k + fixed) + 4 * math.ulp(budget)
    if left < -slack:
        return _uncapped_count(budget, base, factor, k, duration)
    if left > slack:
        # Past the cap every further retry costs exactly cap + duration: one division.
        q = left / per
        if q >= _FLOAT_INTS:
            # Beyond float integers: divide exactly. The prefix's own rounding (~1e-16 of
            # S(k)) could only matter were the quotient that close to a whole number, far
            # below what a budget this large is known to; its float is used as it is.
            return _exact_count(budget, base, factor, cap, duration, k, s_k, exact_prefix=False)
        whole = math.floor(q)
        margin = slack / per + 4 * math.ulp(q)
        if q - whole > margin and whole + 1 - q > margin:
            return k + whole
    # Near a boundary: decide it exactly, over the delays themselves.
    return _exact_count(budget, base, factor, cap, duration, k, s_k, exact_prefix=True)


def _exact_count(
    budget: float,
    base: float,
    factor: float,
    cap: float,
    duration: float,
    k: int,
    s_k: float,
    *,
    exact_prefix: bool,
) -> int:
    """The capped-tail division in exact integer arithmetic (floats are dyadic rationals).

    With ``exact_prefix`` the sum of the delays below the cap is taken exactly too (when
    there are at most ``_EXACT_TERMS`` of them); otherwise its float ``s_k`` is used.
    """
    if exact_prefix and k <= _EXACT_TERMS:
        spent = _dyadic_sum([_raw(base, factor, i) for i in range(k)])
    else:
        spent = s_k.as_integer_ratio()
    (b, b_den), (c, c_den), (d, d_den) = (
        budget.as_integer_ratio(),
        cap.as_integer_ratio(),
        duration.as_integer_ratio(),
    )
    spent_num, spent_den = spent
    den = max(b_den, c_den, d_den, spent_den)
    left = b * (den // b_den) - spent_num * (den // spent_den) - (k + 1) * d * (den // d_den)
    if left < 0:
        return _uncapped_count(budget, base, factor, k, duration)
    return k + left // (c * (den // c_den) + d * (den // d_den))
