"""The solver's error model, its float constants and the conversion of its arguments.

The closed form ``G(n)`` and the relative bracket of ``S(n)`` around it (``_ETA``, derived
below); see docs/concepts.md, "The closed-form solver".
"""

from __future__ import annotations

import math
import sys
from operator import index
from typing import SupportsIndex, cast

# -- error model -------------------------------------------------------------------------
_U = 2.0**-53  # unit roundoff: one correctly rounded float operation errs by at most this

# Assumed relative error of the C library's pow, log1p, expm1, exp and log: two ulps (2**-51
# relative), twice what glibc documents.
_LIB = 4 * _U

# Relative half-width of the bracket of S(n) around the float closed form (n < 2**53;
# u = _U, L = _LIB):
#   a float delay fl(base * pow(factor, k)) is base * factor**k * (1 + e) with
#     |e| <= L + u + L*u, so S(n) is within 5.01 u of G(n) (plus half a unit of 2**-1074
#     per subnormal delay, counted apart);
#   the float closed form is within 14.4 u of G(n): its worst branch takes expm1 of the
#     rounded n * log1p(factor - 1) (x <= ln 2, where expm1 amplifies its argument's
#     relative error by x e**x / (e**x - 1) <= 1.39): 1.39 * (L + 2u) + L + 2u; the pow
#     branch 2L + 4u (factor**n - 1 >= factor**n / 2 there); the split branch 2L + 3u;
#   together (1 + 5.01 u) / (1 - 14.4 u) - 1 <= 19.5 u, and the bound's own arithmetic (a
#     product by 1 +- eta, a sum with the last delay below the cap) adds 2 u.
# 21.5 u in all; 32 u leaves room (a wider band only sends more budgets to the exact path).
_ETA = 32 * _U

# The smallest subnormal, 2**-1074: twice the largest rounding error of a subnormal result
# (2**-1075 itself is no float: it rounds to 0).
_TINY = 2.0**-1074
_MIN_NORMAL = 2.0**-1022
_LN2 = math.log(2.0)
_INF = math.inf
_FLOAT_EXACT = 2**53  # every int up to this is a float exactly
_PLAIN = frozenset((int, float))

# Where factor**k surely overflows: k * log1p(factor - 1) past log(2**1024), with room for
# the logarithm's own error (a few ulps of at most 710).
_LOG_2_1024 = 1024 * _LN2 + 1e-9
_LOG_MAX = math.log(sys.float_info.max)
_EXACT_INDEX = 2**53  # from here on the exponent k is itself rounded to a float by factor**k
_SLACK = 2.0**-1060  # absolute slack of a ratio to the budget (its own underflow)
_FLOAT_INTS = 2.0**50  # below this a float quotient's floor is decided in floats


def _seconds(name: str, value: object) -> float:
    """``value`` as a finite float, or a ``ValueError`` naming ``name``."""
    if type(value) is not float:
        if type(value) is not int and (  # an int, the common literal, needs no look-up
            isinstance(value, str | bytes) or not hasattr(value, "__float__")
        ):
            raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
        try:
            value = float(value)
        except OverflowError:
            raise ValueError(
                f"{name} must be a finite number of seconds, got a number beyond float range"
            ) from None
    assert isinstance(value, float)
    if not -_INF < value < _INF:
        raise ValueError(f"{name} must be a finite number of seconds, got {value!r}")
    return value


def _count(name: str, value: object) -> int:
    """``value`` as an int ``>= 0`` (an integer type, not a bool), or an error naming ``name``."""
    if type(value) is not int:
        if isinstance(value, bool) or not hasattr(type(value), "__index__"):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        value = index(cast(SupportsIndex, value))
    assert isinstance(value, int)
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return value


def _params(base: object, factor: object, cap: object) -> tuple[float, float, float]:
    """The delay parameters as floats, or a ``ValueError`` naming the first bad one."""
    if type(base) is float and type(factor) is float and type(cap) is float:
        b, f, c = base, factor, cap
    else:
        b, f, c = _params_as_floats(base, factor, cap)
    if 0.0 < b < _INF and 1.0 < f < _INF and 0.0 < c < _INF:  # NaN fails every comparison
        return b, f, c
    b, f, c = _seconds("base", b), _seconds("factor", f), _seconds("cap", c)
    if b <= 0:
        raise ValueError(f"base must be > 0 seconds, got {b!r}")
    if f <= 1:
        raise ValueError(f"factor must be > 1 (delays must grow), got {f!r}")
    raise ValueError(f"cap must be > 0 seconds, got {c!r}")


def _params_as_floats(base: object, factor: object, cap: object) -> tuple[float, float, float]:
    """The delay parameters converted to floats, or an error naming the first bad one."""
    if type(base) in _PLAIN and type(factor) in _PLAIN and type(cap) in _PLAIN:
        try:  # ints in the float range: one conversion each
            return float(base), float(factor), float(cap)  # type: ignore[arg-type]
        except OverflowError:
            pass
    return _seconds("base", base), _seconds("factor", factor), _seconds("cap", cap)


def _duration(value: object) -> float:
    if type(value) is float and 0.0 <= value < _INF:
        return value
    d = _seconds("attempt_duration", value)
    if d < 0:
        raise ValueError(f"attempt_duration must be a finite number >= 0, got {d!r}")
    return d


def _budget(budget: object) -> float | int:
    """The budget, exactly: a float, or an ``int`` when no float holds it exactly."""
    if type(budget) is float:
        if -_INF < budget < _INF:
            return budget
        raise ValueError(f"budget must be a finite number of seconds, got {budget!r}")
    if type(budget) is int:
        return float(budget) if -_FLOAT_EXACT <= budget <= _FLOAT_EXACT else budget
    if isinstance(budget, int):  # bool, or an int subclass
        value = int(budget)
        return float(value) if -_FLOAT_EXACT <= value <= _FLOAT_EXACT else value
    return _seconds("budget", budget)


def _eta(n: int, lam: float) -> float:
    """Relative half-width of the bracket of ``S(n)`` around :func:`_geometric`'s value."""
    if n < _EXACT_INDEX:
        return _ETA
    # factor**n rounds n to a float first: each power is off by up to n * u * log(factor)
    # more, in the delays and in the closed form alike.
    return _ETA + 2.1 * _U * (n * lam)


def _geometric(n: int, factor: float, lam: float, base: float, r: float) -> tuple[float, int]:
    """``G(n) = base * (factor**n - 1) / (factor - 1)`` as ``(mantissa, exponent)``.

    The value is ``mantissa * 2**exponent``, never overflowing nor underflowing, within
    14.4 u (relative) of ``G(n)`` for ``n < 2**53``. For ``1 <= n <= capped_index``.
    """
    mb, eb = math.frexp(base)
    mr, er = math.frexp(r)
    x = n * lam  # log(factor**n)
    if x <= _LN2:
        # factor**n - 1 <= 1: expm1 of the rounded logarithm, no cancellation.
        mg, eg = math.frexp(math.expm1(x))
        return mb * mg / mr, eb + eg - er
    try:
        power = factor**n
    except OverflowError:  # only n == capped_index can get here: both halves are in range
        half = n // 2
        m1, e1 = math.frexp(factor**half)
        m2, e2 = math.frexp(factor ** (n - half))
        return mb * (m1 * m2) / mr, eb + e1 + e2 - er  # factor**n - 1 == factor**n here
    mg, eg = math.frexp(power - 1.0)  # power >= 2: the subtraction loses at most half an ulp
    return mb * mg / mr, eb + eg - er


def _ratio(mantissa: float, exponent: int, mb: float, eb: int) -> float:
    """``(mantissa * 2**exponent) / (mb * 2**eb)`` as a float (``inf`` past the range)."""
    shift = exponent - eb
    if shift > 1000:
        return math.inf
    return math.ldexp(mantissa / mb, shift)
