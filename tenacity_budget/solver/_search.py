"""The exact search below the cap: counts the closed-form bracket cannot tell, decided exactly."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple, NoReturn, TypeVar

from ._exact import _FIRST_WINDOW, _MAX_EXACT_TERMS, _UNITS, _mantissa_units, _units, _window
from ._floats import _ETA, _EXACT_INDEX, _LN2, _MIN_NORMAL, _SLACK, _U, _eta, _geometric, _ratio

_T = TypeVar("_T")


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
