"""Pure math of budgeted exponential backoff: nominal delays and the exact budget solver.

Nothing here is random and nothing here knows about tenacity or pydantic.

**The definition.** ``base``, ``factor`` and ``cap`` are Python floats. The nominal delay
before retry ``k`` (counting from 0) is the float::

    d(k) = cap                           if the float power factor ** k raises OverflowError
    d(k) = min(cap, base * factor ** k)  otherwise, in Python floats

so a product that overflows to ``inf`` is ``cap`` too. This is exactly the float the wait
strategy sleeps (:func:`nominal_delay` computes it). The budget solver answers: how many
retries does a time budget afford? :func:`compute_max_attempts` returns the largest ``n``
such that the *exact* (rational) sum of the first ``n`` delays, plus ``n + 1`` attempts of
``attempt_duration`` seconds each (an exact product), is at most the budget (exact too)::

    S(n) + (n + 1) * attempt_duration <= budget,    S(n) = d(0) + ... + d(n - 1)

There is no "within float error" escape: the answer is that ``n``, on every finite input.

**How it stays constant time.** The float power is monotone in ``k``, so the delays below
the cap come first (``k < capped_index``) and every later one is exactly ``cap``. Past the
cap the sum is linear: one exact (integer) division counts the capped tail. Below it the
sum is geometric, ``G(n) = base * (factor**n - 1) / (factor - 1)``, inverted with a
logarithm. The float delays are not the real geometric terms, but each is within a known
relative distance of its term (the float power and the product each round once), so the
exact sum ``S(n)`` lies in a bracket ``G(n) * (1 +- eta)`` (plus half of ``2**-1074`` per
subnormal delay) whose width, ``eta = 32 * 2**-53`` (about ``3.6e-15``), is derived at
``_ETA`` below, not estimated. The solver decides with the closed forms and that bracket.
Only when the budget lies *inside* the bracket of a partial sum, where rounding could tip
the answer, does it sum float delays exactly (as integers in units of ``2**-1074``), and
then the largest first: the exact sum of the top delays plus the much narrower bracket of
the prefix before them narrows until the answer is certain. That takes a few dozen delays
for a factor like 2, and up to all of them when the delays are nearly equal (a factor
near 1): about one float power per delay summed. A call whose decisions would need more
than ``_MAX_EXACT_TERMS`` (``2**14``) delays summed in all raises ``ValueError`` naming the
budget instead of running for seconds (or, at ``10**17`` delays, for years); no input
returns an inexact count.

**What it assumes of the platform.** The C library's ``pow``, ``log1p``, ``expm1``,
``exp`` and ``log`` are within two ulps (``_LIB``; glibc documents well under one), and
the float power is monotone in its exponent (true of a ``pow`` within half an ulp or so,
like glibc's: consecutive powers of a float above 1 are at least an ulp apart). The tests
check the solver against the definition summed exactly, term by term.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable, Iterator
from itertools import chain
from operator import index, neg
from typing import NamedTuple, NoReturn, SupportsIndex, TypeVar, cast

__all__ = [
    "add_compensated",
    "backoff_delays",
    "capped_index",
    "compute_max_attempts",
    "nominal_delay",
    "total_delay",
]

_T = TypeVar("_T")

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

# -- exact sums --------------------------------------------------------------------------
# Sums of float delays are taken exactly, as integers in units of 2**-1074 (every float is a
# whole number of them), up to this many delays in all per solver call (over every count it
# must decide exactly): about 3 ms of float powers, so constructing any policy that is
# accepted stays well under 10 ms (measured by ``python -m benchmarks.solver``).
_MAX_EXACT_TERMS = 2**14
_FIRST_WINDOW = 48
_CHUNK = 4096
_CHUNK_SPAN = 16 * _LN2  # log of the largest ratio of two delays summed in one chunk
_UNITS = 1074


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


# -- arguments ---------------------------------------------------------------------------


def _seconds(name: str, value: object) -> float:
    """``value`` as a finite float, or a ``ValueError`` naming ``name``."""
    if type(value) is int:
        try:
            value = float(value)
        except OverflowError:
            raise ValueError(
                f"{name} must be a finite number of seconds, got a number beyond float range"
            ) from None
    elif type(value) is not float:
        if isinstance(value, str | bytes) or not hasattr(value, "__float__"):
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


# -- nominal delays ----------------------------------------------------------------------


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


# -- the closed form and its bracket ------------------------------------------------------


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


# -- exact arithmetic --------------------------------------------------------------------


def _units(x: float) -> int:
    """``x`` as a whole number of ``2**-1074`` (exact: every float is one)."""
    num, den = x.as_integer_ratio()
    return num << (_UNITS + 1 - den.bit_length())


def _mantissa_units(mantissa: float, exponent: int, *, up: bool) -> int:
    """``mantissa * 2**exponent`` in units, rounded down (or ``up``)."""
    whole = int(math.ldexp(mantissa, 60))  # exact: a float mantissa has 53 bits
    shift = exponent - 60 + _UNITS
    if shift >= 0:
        return whole << shift
    if up:
        return -((-whole) >> -shift)
    return whole >> -shift


def _exact_sum(terms: list[float]) -> int:
    """The exact sum of positive floats, in units, at ``math.fsum``'s speed.

    ``math.fsum`` returns the float nearest the exact sum; fsum of the terms less that
    result is the remainder's float, and so on until the remainder is exactly zero (fsum's
    partials are exact, so it returns 0 only for an exact 0). Two or three passes for
    delays within ``2**16`` of each other (what :func:`_window` hands it); the parts add up
    to the sum exactly. A sum past the float range is split in halves until each fits.
    """
    parts: list[float] = []
    try:
        part = math.fsum(terms)
        while part:
            parts.append(part)
            part = math.fsum(chain(terms, map(neg, parts)))
    except OverflowError:  # the sum passes the float range: halves, until each fits
        if len(terms) == 1:
            return _units(terms[0])
        half = len(terms) // 2
        return _exact_sum(terms[:half]) + _exact_sum(terms[half:])
    return sum(map(_units, parts))


def _window(base: float, factor: float, start: int, stop: int) -> int:
    """Exact sum of the delays ``start .. stop - 1`` (all below the cap), in units.

    Summed in chunks whose delays span at most ``2**16`` (or 16 delays), so each chunk's
    exact sum is two or three fsum passes: about 0.25 µs a delay whatever the factor.
    """
    chunk = int(min(_CHUNK, max(16.0, _CHUNK_SPAN / math.log1p(factor - 1.0))))
    total = 0
    for lo in range(start, stop, chunk):
        hi = min(stop, lo + chunk)
        total += _exact_sum([base * factor**i for i in range(lo, hi)])
    return total


def _head_at_cap(k: int, base: float, factor: float, lam: float) -> tuple[float, int, float]:
    """``S(k)`` (``k >= 1``) as ``(m, e, eta)``: within ``eta`` (relative) of ``m * 2**e``.

    ``S(k) = G(k - 1) + d(k - 1)``: ``factor**(k - 1)`` is in range (delay ``k - 1`` is below
    the cap), ``factor**k`` may not be. For a subnormal ``base`` add ``k`` half units.
    """
    lm, le = math.frexp(base * factor ** (k - 1))  # the last delay below the cap, exactly
    if k == 1:
        return lm, le, 0.0
    gm, ge = _geometric(k - 1, factor, lam, base, factor - 1.0)
    eta = _eta(k - 1, lam) + _U
    if ge >= le:
        return gm + math.ldexp(lm, le - ge), ge, eta
    return lm + math.ldexp(gm, ge - le), le, eta


def _tail_in_integers(
    budget: float | int, cap: float, duration: float, k: int, low: int, high: int, exp: int
) -> int | None:
    """The capped-tail count from a bracket ``low * 2**exp <= S(k) <= high * 2**exp``.

    ``floor((budget - S - (k + 1) * duration) / (cap + duration))`` in exact integer
    arithmetic at both ends of the bracket; ``None`` when they differ (the bracket
    straddles a boundary). A negative count means ``S(k)`` with its ``k + 1`` attempts is
    already over the budget.
    """
    if type(budget) is float:
        bn, bd = budget.as_integer_ratio()
        be = 1 - bd.bit_length()
    else:
        bn, be = int(budget), 0
    cn, cd = cap.as_integer_ratio()
    ce = 1 - cd.bit_length()
    z = exp if exp < be else be
    if ce < z:
        z = ce
    if duration:
        dn, dd = duration.as_integer_ratio()
        de = 1 - dd.bit_length()
        if de < z:
            z = de
        d = dn << (de - z)
        room = (bn << (be - z)) - (k + 1) * d
        per = (cn << (ce - z)) + d
    else:
        room = bn << (be - z)
        per = cn << (ce - z)
    shift = exp - z
    if shift:
        low, high = low << shift, high << shift
    if room < low:  # S(k) >= low is over already: no count past the cap fits
        return -1
    most, rest = divmod(room - low, per)
    return most if rest >= high - low else None


class _Inputs(NamedTuple):
    """One solver call's checked figures: the budget (exact), the delays, ``k`` and ``lam``."""

    budget: float | int
    base: float
    factor: float
    cap: float
    duration: float
    k: int  # the capped index
    lam: float  # log(factor), as log1p(factor - 1)

    def plain(self) -> bool:
        """Whether every figure is a normal float (or 0): the plain float paths apply."""
        duration = self.duration
        return (
            type(self.budget) is float
            and self.budget < 2.0**1022
            and self.base >= _MIN_NORMAL
            and (not duration or duration >= _MIN_NORMAL)
        )


class _Problem:
    """The exact search of one solver call, for the paths past the common one (built only then)."""

    __slots__ = (
        "base",
        "beta",
        "budget",
        "cap",
        "d_ratio",
        "duration",
        "eb",
        "factor",
        "k",
        "known",
        "lam",
        "log_budget",
        "mb",
        "r",
        "summed",
        "t_ratio",
    )

    def __init__(self, inputs: _Inputs) -> None:
        budget, base, factor, cap, duration, k, lam = inputs
        self.budget = budget
        self.base = base
        self.factor = factor
        self.cap = cap
        self.duration = duration
        self.k = k
        self.lam = lam
        self.r = factor - 1.0
        self.summed = 0  # delays summed exactly so far, over every decision of this call
        # n: (start, the exact sum of delays start .. n - 1 in units), per count decided
        self.known: dict[int, tuple[int, int]] = {}
        # The budget as mb * 2**eb (mb in [0.5, 1)), to within beta (relative).
        if isinstance(budget, int):
            shift = max(0, budget.bit_length() - 64)
            self.mb, e = math.frexp(float(budget >> shift))
            self.eb = e + shift
            self.beta = 2 * _U
        else:
            self.mb, self.eb = math.frexp(budget)
            self.beta = 0.0
        self.log_budget = math.log(self.mb) + self.eb * _LN2
        # duration / budget, and half a unit / budget when products can be subnormal, each
        # rounded up by the most its own underflow could lose.
        self.d_ratio = _ratio(*math.frexp(duration), self.mb, self.eb) if duration else 0.0
        self.t_ratio = 0.0
        if base < _MIN_NORMAL:
            self.t_ratio = math.ldexp(0.5 / self.mb, -1074 - self.eb) * (1 + 2 * _U) + 2.0**-1074

    # -- exact decisions -------------------------------------------------------------------

    def head_bounds_units(self, n: int) -> tuple[int, int]:
        """A bracket ``lo <= S(n) <= hi`` in units, from the closed form (nothing summed)."""
        if n == 0:
            return 0, 0
        m, e = _geometric(n, self.factor, self.lam, self.base, self.r)
        eta = _eta(n, self.lam)
        lo = _mantissa_units(m * (1.0 - eta), e, up=False)
        hi = _mantissa_units(m * (1.0 + eta), e, up=True)
        if self.base < _MIN_NORMAL:  # a subnormal product rounds by up to half a unit
            lo -= (n + 1) // 2
            hi += (n + 1) // 2
        return max(lo, 0), hi

    def settle(self, n: int, decide: Callable[[int, int], _T | None]) -> _T:
        """``decide(lo, hi)`` on ever narrower brackets of ``S(n)`` until it decides.

        The bracket is the exact sum of the largest delays before ``n`` plus the closed-form
        bracket of the prefix before those; the exactly summed window grows fourfold per
        round, down to the whole prefix (where the bracket is a point, and decides). The
        window each count ends with is kept: a later count near one decided before starts
        from that window, moved to it (the delays between the two added or taken off).
        """
        start, exact = self._resume(n)  # (n, 0): first the closed form alone
        while True:
            lo, hi = self.head_bounds_units(start)
            verdict = decide(exact + lo, exact + hi)
            if verdict is not None:
                if start < n:
                    self.known[n] = (start, exact)
                return verdict
            size = max(_FIRST_WINDOW, 3 * (n - start))
            first = max(0, start - size, start - (_MAX_EXACT_TERMS - self.summed))
            if first >= start:
                self._refuse(n)
            exact += _window(self.base, self.factor, first, start)
            self.summed += start - first
            start = first

    def _resume(self, n: int) -> tuple[int, int]:
        """``(start, exact sum of delays start .. n - 1)`` from a kept window near ``n``.

        A window kept for ``m`` serves when ``n`` is within it and closer to ``m`` than the
        window is deep (moving it is less work than ``m`` took); else ``(n, 0)``.
        """
        best, distance = None, n
        for m, (start, _) in self.known.items():
            if start <= n and abs(m - n) < min(distance, m - start):
                best, distance = m, abs(m - n)
        if best is None or distance > _MAX_EXACT_TERMS - self.summed:
            return n, 0
        start, exact = self.known[best]
        self.summed += distance
        if best <= n:
            return start, exact + _window(self.base, self.factor, best, n)
        return start, exact - _window(self.base, self.factor, n, best)

    def _refuse(self, n: int) -> NoReturn:
        budget = self.budget
        shown = repr(budget) if isinstance(budget, float) else f"~2**{budget.bit_length()}"
        raise ValueError(
            f"budget {shown} lies within float rounding ({_ETA:.1e} relative) of the cost of "
            f"some number of retries, and telling exactly which side of it needs more than "
            f"{_MAX_EXACT_TERMS} of the {n} delays before it summed (the solver's line, which "
            "keeps constructing a policy under 10 ms); move the budget slightly or use a "
            "factor further from 1"
        )

    def budget_units(self) -> int:
        b = self.budget
        return b << _UNITS if isinstance(b, int) else _units(b)

    def fits_exactly(self, n: int) -> bool:
        """Whether ``S(n) + (n + 1) * duration <= budget``, exactly (``n <= k``)."""
        room = self.budget_units() - (n + 1) * _units(self.duration)
        if room < 0:
            return False

        def decide(lo: int, hi: int) -> bool | None:
            if hi <= room:
                return True
            if lo > room:
                return False
            return None

        return self.settle(n, decide)

    def tail_exactly(self) -> int:
        """``floor((budget - S(k) - (k + 1) * duration) / (cap + duration))``, exactly."""
        d = _units(self.duration)
        room = self.budget_units() - (self.k + 1) * d
        per = _units(self.cap) + d

        def decide(lo: int, hi: int) -> int | None:
            most = (room - lo) // per
            return most if most < 0 or most == (room - hi) // per else None

        return self.settle(self.k, decide)

    # -- below the cap ---------------------------------------------------------------------

    def probe(self, n: int) -> int:
        """1 if ``C(n) <= budget`` surely, -1 if surely not, 0 if float error could tip it.

        ``C(n) = S(n) + (n + 1) * duration`` for ``1 <= n < k``, bracketed from the closed
        form and compared as a ratio to the budget (so nothing overflows).
        """
        gm, ge = _geometric(n, self.factor, self.lam, self.base, self.r)
        g = _ratio(gm, ge, self.mb, self.eb)
        if g == math.inf:
            return -1
        eta = _eta(n, self.lam)
        fixed = (n + 1) * self.d_ratio
        spread = (n + 1) * 2.0**-1074 if self.duration else 0.0  # d_ratio's own underflow
        tiny = n * self.t_ratio
        hi = (g * (1.0 + eta) + tiny + fixed * (1.0 + 2 * _U) + spread) * (1.0 + 4 * _U)
        if hi + _SLACK <= 1.0 - self.beta:
            return 1
        main = g * (1.0 - eta) + fixed * (1.0 - 2 * _U) - spread
        lo = main - tiny - 4 * _U * (abs(main) + tiny) - _SLACK
        if lo > 1.0 + self.beta:
            return -1
        return 0

    def fits(self, n: int) -> bool:
        verdict = self.probe(n)
        return verdict > 0 if verdict else self.fits_exactly(n)

    def estimate(self) -> float:
        """The real root ``t`` of ``G(t) + (t + 1) * duration = budget`` (a first guess)."""
        lam = self.lam
        # log(A / budget), A = base / (factor - 1): G(t) / budget = exp(la) * (factor**t - 1)
        la = math.log(self.base) - math.log(self.r) - self.log_budget

        def log1p_exp(y: float) -> float:  # log(1 + e**y) without overflow
            return y + math.log1p(math.exp(-y)) if y > 0 else math.log1p(math.exp(y))

        d = self.d_ratio
        t = log1p_exp(math.log1p(-min(d, 0.5)) - la if d else -la) / lam
        if d:
            t = min(t, 1.0 / d - 1.0)
            # G(t) + (t + 1) * d is convex and increasing: Newton from the right walks down.
            for _ in range(100):
                x = t * lam
                if x <= 0.0:
                    return 0.0
                log_growth = math.log(math.expm1(x)) if x < 700.0 else x
                h = math.exp(min(log_growth + la, 700.0)) + (t + 1.0) * d - 1.0
                if h <= 0.0:
                    break
                step = h / (math.exp(min(x + la, 700.0)) * lam + d)
                t -= step
                if step < 0.25 or step < t * 1e-15:
                    break
        return max(t, 0.0)

    def uncapped(self, start: int | None = None) -> int:
        """The answer when it is below the cap: ``C(0) <= budget < C(k)`` is known.

        From ``start`` (a count near the answer), else from :meth:`estimate`: gallop to a
        count that fits and one that does not, then bisect; every count is decided by the
        closed-form bracket, or exactly where that cannot tell.
        """
        lo, hi = 0, self.k  # fits at lo, does not at hi
        n = self._first_count(start)
        if n > lo:
            if self.fits(n):
                lo = n
            else:
                hi = n
        if lo == n or n <= 0:
            lo, hi = self._gallop_up(lo, hi)
        else:
            lo, hi = self._gallop_down(lo, hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.fits(mid):
                lo = mid
            else:
                hi = mid
        return lo

    def _first_count(self, start: int | None) -> int:
        """The count to decide first: ``start``, else the estimate, below ``k``."""
        if start is not None:
            return min(self.k - 1, start)
        guess = self.estimate()
        return min(self.k - 1, math.floor(guess)) if guess < self.k else self.k - 1

    def _gallop_up(self, lo: int, hi: int) -> tuple[int, int]:
        """From ``lo`` that fits, steps doubling, to the first step that does not."""
        step = 1
        while lo + step < hi:
            if not self.fits(lo + step):
                return lo, lo + step
            lo += step
            step *= 2
        return lo, hi

    def _gallop_down(self, lo: int, hi: int) -> tuple[int, int]:
        """From ``hi`` that does not fit, steps doubling, to the first step that does."""
        step = 1
        while hi - step > lo:
            if self.fits(hi - step):
                return hi - step, hi
            hi -= step
            step *= 2
        return lo, hi


# -- the solver --------------------------------------------------------------------------


def compute_max_attempts(
    budget: float,
    base: float,
    factor: float,
    cap: float,
    attempt_duration: float = 0.0,
) -> int:
    """Largest number of retries whose nominal delays and attempts fit in ``budget``, exactly.

    Returns the largest ``n`` such that the exact (rational) sum of the first ``n`` float
    delays of :func:`nominal_delay` (``cap`` where ``factor ** k`` raises
    ``OverflowError``, else ``min(cap, base * factor ** k)`` in Python floats) plus the
    exact product ``(n + 1) * attempt_duration`` is at most ``budget``, compared exactly::

        S(n) + (n + 1) * attempt_duration <= budget

    and 0 when ``budget <= 0`` or not even the first attempt fits. Exact on every finite
    input, with no tolerance: ``compute_max_attempts(63, 1, 2, 60) == 6`` since
    ``1 + 2 + 4 + 8 + 16 + 32 == 63``, and one ulp less affords 5. An ``int`` budget is
    taken exactly, even beyond the float range (``10**309``).

    Constant time whatever ``n`` is: the geometric part is inverted with a logarithm, the
    capped part with one exact integer division. Only a budget within about ``3.6e-15``
    (relative) of a partial sum makes it sum float delays, the largest first, until the
    answer is certain: usually a few dozen, never more than ``2**14`` in all.

    Example:
        >>> compute_max_attempts(300, base=1, factor=2, cap=60)
        9
        >>> compute_max_attempts(15 * 86400, base=1, factor=2, cap=60)
        21604

    Raises:
        ValueError: naming the argument, for a non-finite budget, a non-finite or negative
            ``attempt_duration``, bad delay parameters (see :func:`backoff_delays`); or for
            a budget so close to a partial sum of more than ``2**14`` delays below the cap
            that only summing them all could tell which side of it the budget lies on.
    """
    base, factor, cap = _params(base, factor, cap)
    duration = _duration(attempt_duration)
    limit = _budget(budget)
    if limit <= 0 or duration > limit:
        return 0
    lam = math.log1p(factor - 1.0)
    if base >= cap:  # every delay is the cap: one exact division
        tail = _tail_in_integers(limit, cap, duration, 0, 0, 0, 0)
        assert tail is not None
        return tail
    k, power, last = _capped_index_checked(base, factor, cap, lam)
    inputs = _Inputs(limit, base, factor, cap, duration, k, lam)
    if inputs.plain():
        early = _well_before_the_cap(inputs, power)
        if early is not None:
            return early
    return _from_the_head(inputs, power, last)


def _from_the_head(inputs: _Inputs, power: float, last: float) -> int:
    """The answer from the bracket of ``S(k)``: the capped tail counted, or below the cap."""
    head, eta, exact_head = _head_bracket(inputs, power, last)
    if type(inputs.budget) is float:
        if head < _INF:
            answer = _tail_in_floats(inputs, head, eta)
            if answer is not None:
                return answer
        elif exact_head is not None and exact_head[1] > 1025:
            return _below_cap(inputs)  # S(k) >= 2**1024
    return _tail_exactly(inputs, head, eta, exact_head)


def _capped_index_checked(
    base: float, factor: float, cap: float, lam: float
) -> tuple[int, float, float]:
    """``k``, ``factor**(k - 1)`` and the last delay below the cap, ``d(k - 1)``.

    ``k`` is estimated from logarithms and checked on the float delays (``d(k - 1)`` below
    the cap, ``d(k)`` not); a miss (a factor within ~1e-12 of 1) searches.
    """
    span = math.log(cap) - math.log(base)
    k = math.ceil((span if span < _LOG_MAX else _LOG_MAX) / lam)
    try:
        power = factor ** (k - 1)
        last = base * power
        found = last < cap
    except OverflowError:
        found = False
    if found and k * lam < _LOG_2_1024:  # past it factor**k overflows: d(k) is the cap
        with contextlib.suppress(OverflowError):
            found = base * factor**k >= cap
    if not found:
        k = _capped_index(base, factor, cap, lam)
        power = factor ** (k - 1)
        last = base * power
    return k, power, last


def _well_before_the_cap(inputs: _Inputs, power: float) -> int | None:
    """The answer when the budget runs out well before the cap (plain floats), else None.

    Ignoring the attempts' time, the budget runs out at the real ``t`` with ``G(t) = budget
    - duration``, an upper bound of the answer. Well before the cap (``G(t) < G(k - 1)``,
    i.e. ``room < factor**(k - 1) - 1``, with a margin far past rounding) the answer is
    below it: the counts around ``t`` decide, the cap unseen.
    """
    limit, base, factor, _, duration, k, _ = inputs
    assert type(limit) is float
    r = factor - 1.0
    room = (limit - duration) * r / base
    if room < _INF:
        early = room < (power - 1.0) * 0.999999
    else:  # the same comparison in logarithms
        early = (
            power > 1.0
            and math.log(limit - duration) + math.log(r) - math.log(base)
            < math.log(power - 1.0) - 1e-6
        )
    # (n + 1) * duration <= budget bounds the answer too
    early = early or (duration > 0.0 and limit / duration < (k - 1) * (1.0 - 1e-9))
    if not early:
        return None
    below, hint = _below_cap_in_floats(inputs, room)
    if below is not None:
        return below
    return _settle_hint(_Problem(inputs), hint)


def _head_bracket(
    inputs: _Inputs, power: float, last: float
) -> tuple[float, float, tuple[float, int, float] | None]:
    """``S(k) = G(k - 1) + d(k - 1)`` as ``(head, eta, exact_head)``.

    ``S(k)`` is within ``eta`` (relative) of the float ``head``; out of the plain float range
    (a subnormal ``base``, or ``head`` past ``2**1020``) it is rebuilt as ``exact_head``,
    ``(m, e, eta)`` of :func:`_head_at_cap`, and ``head`` is its float (``inf`` past range).
    """
    _, base, factor, _, _, k, lam = inputs
    eta = 0.0
    if k == 1:
        head = last  # one float delay: exact
    else:
        x = (k - 1) * lam
        r = factor - 1.0
        # The same two roundings as _geometric; base * (power - 1) < d(k - 1) is in range.
        g = base * (power - 1.0) / r if x > _LN2 else base * (math.expm1(x) / r)
        head = g + last
        eta = (_ETA if k <= _EXACT_INDEX else _eta(k - 1, lam)) + _U
    exact_head = None
    if base < _MIN_NORMAL or not head < 2.0**1020:  # out of the float range: rebuild exactly
        exact_head = _head_at_cap(k, base, factor, lam)
        head = math.ldexp(exact_head[0], exact_head[1]) if exact_head[1] <= 1020 else _INF
    return head, eta, exact_head


def _tail_in_floats(inputs: _Inputs, head: float, eta: float) -> int | None:
    """The answer from the capped tail counted in floats, or None when that cannot decide.

    Every rounding bounded: ``|room - exact room| <= err`` (the bracket of ``S(k)``; the
    product, ``k + 1`` past ``2**53``, both subtractions and the ends below; underflow).
    Decides unless the budget is within ``err`` of a boundary.
    """
    limit, base, _, cap, duration, k, _ = inputs
    assert type(limit) is float
    fixed = (k + 1) * duration
    room = limit - head - fixed
    err = eta * head + 4 * _U * (limit + head + fixed) + 2 * _U * fixed + 8 * _TINY
    if base < _MIN_NORMAL:
        err += k * _TINY  # each subnormal delay rounds by up to half of it
    if room + err < 0:
        return _below_cap(inputs)
    if room - err < 0:
        return None
    per = cap + duration
    q_lo = (room - err) / per * (1 - 3 * _U)
    q_hi = (room + err) / per * (1 + 3 * _U)
    if q_hi < _FLOAT_INTS:
        whole = math.floor(q_lo)
        if whole == math.floor(q_hi):
            return k + whole
    return None


def _tail_exactly(
    inputs: _Inputs, head: float, eta: float, exact_head: tuple[float, int, float] | None
) -> int:
    """The answer from the bracket of ``S(k)`` in exact integers, summing delays if need be."""
    k = inputs.k
    m, e, eta = exact_head if exact_head is not None else (*math.frexp(head), eta)
    # The same bracket of S(k) in exact integers: decides unless within it of a boundary.
    low, high = int(math.ldexp(m * (1.0 - eta), 60)), int(math.ldexp(m * (1.0 + eta), 60)) + 1
    exp = e - 60
    if inputs.base < _MIN_NORMAL:  # and k half units (2**-1075) either way
        if exp > -1075:
            low, high, exp = low << (exp + 1075), high << (exp + 1075), -1075
        low, high = low - (k << (-1075 - exp)), high + (k << (-1075 - exp))
    tail = _tail_in_integers(inputs.budget, inputs.cap, inputs.duration, k, low, high, exp)
    if tail is not None:
        return k + tail if tail >= 0 else _below_cap(inputs)
    # the budget is within float error of a boundary: sum delays exactly
    problem = _Problem(inputs)
    tail = problem.tail_exactly()
    return k + tail if tail >= 0 else problem.uncapped()


def _below_cap(inputs: _Inputs) -> int:
    """The answer when it is below the capped index ``k`` (``C(k) > budget`` is known)."""
    if inputs.plain():
        budget, base, factor, _, duration, _, _ = inputs
        room = (budget - duration) * (factor - 1.0) / base
        found, hint = _below_cap_in_floats(inputs, room)
        if found is not None:
            return found
        return _settle_hint(_Problem(inputs), hint)
    return _Problem(inputs).uncapped()


def _settle_hint(problem: _Problem, hint: int | None) -> int:
    """The answer from a hint of :func:`_below_cap_in_floats` that did not decide."""
    if hint is not None and hint < 0:  # n - 1 surely fits, n + 1 surely not: decide n
        n = -hint - 1
        return n if problem.fits_exactly(n) else n - 1
    return problem.uncapped(hint)


def _below_cap_in_floats(inputs: _Inputs, room: float) -> tuple[int | None, int | None]:
    """The common case of :meth:`_Problem.uncapped` in plain floats, or ``None``.

    For plain inputs (:meth:`_Inputs.plain`; the caller checks), ``room = (budget -
    duration) * (factor - 1) / base``: the real root of ``G(t) + (t + 1) * duration =
    budget``, then the two counts around it bracketed as :meth:`_Problem.probe` does,
    without its overflow-proof ratios. Returns ``(answer, hint)``; the answer is ``None``
    when the bracket cannot decide, and then a hint ``h >= 0`` is a count to start
    searching from, a hint ``h < 0`` says the answer is ``-h - 1`` if that many retries fit
    exactly, else one fewer (see :func:`_settle_hint`).
    """
    k = inputs.k
    t = _root_in_floats(inputs, room)
    if t is None:
        return None, None
    n = min(k - 1, math.floor(t)) if t < k else k - 1
    if n < 0:
        return None, None
    here = _verdict_in_floats(inputs, n)
    if here < 0:  # the float root a hair past a whole number: one step back
        n -= 1
        here = _verdict_in_floats(inputs, n)
    return _around(inputs, n, here, _verdict_in_floats(inputs, n + 1))


def _around(inputs: _Inputs, n: int, here: int, after: int) -> tuple[int | None, int | None]:
    """``(answer, hint)`` of :func:`_below_cap_in_floats` from the verdicts at ``n, n + 1``."""
    if here > 0 and after < 0:
        return n, None
    # One count the bracket cannot tell, between one that surely fits and one that surely
    # does not: only that count needs deciding exactly.
    if here > 0 and after == 0 and _verdict_in_floats(inputs, n + 2) < 0:
        return None, -(n + 1) - 1
    if here == 0 and after < 0 and _verdict_in_floats(inputs, n - 1) > 0:
        return None, -n - 1
    return None, max(n, 0)


def _root_in_floats(inputs: _Inputs, room: float) -> float | None:
    """The real root ``t`` of ``G(t) + (t + 1) * duration = budget``, or None (no float)."""
    budget, base, factor, _, duration, _, lam = inputs
    assert type(budget) is float
    r = factor - 1.0
    if room < 2.0**1000:  # the root ignoring the attempts' time, an upper bound
        t = math.log1p(room) / lam
    else:  # log1p(room) == log(room) to far below an ulp (room may be inf: use logs)
        t = (math.log(budget - duration) + math.log(r) - math.log(base)) / lam
    if not duration:
        return t
    t = min(t, budget / duration - 1.0)
    # convex and increasing: Newton from the right walks down to the root
    for _ in range(64):
        x = t * lam
        if not 0.0 < x < 700.0:
            return None
        growth = math.expm1(x)
        h = base * growth / r + (t + 1.0) * duration - budget
        if h <= 0.0:
            break
        step = h / (base * (growth + 1.0) * lam / r + duration)
        t -= step
        if step < 0.25:
            break
    return t


def _verdict_in_floats(inputs: _Inputs, n: int) -> int:
    """1: ``C(n)`` fits surely, -1: surely not, 0: the float bracket cannot tell."""
    budget, base, factor, _, duration, k, lam = inputs
    if n == 0:
        return 1  # duration <= budget was checked
    if n >= k:
        return -1
    if n >= _EXACT_INDEX:
        return 0
    r = factor - 1.0
    x = n * lam  # G(n) with the roundings _geometric has (n < k: factor**n is in range)
    g = base * (math.expm1(x) / r) if x <= _LN2 else base * (factor**n - 1.0) / r
    if g > 2.0**1022:  # past any budget this path takes
        return -1
    fixed = (n + 1) * duration
    cost = g + fixed
    err = _ETA * g + 4 * _U * (fixed + cost)  # n < 2**53; all normal floats
    if cost + err <= budget:
        return 1
    if cost - err > budget:
        return -1
    return 0


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
