"""Exact arithmetic on float delays: whole numbers of ``2**-1074``, exact sums and the capped tail
counted in integers.
"""

from __future__ import annotations

import math
from itertools import chain
from operator import neg

from ._floats import _LN2, _U, _eta, _geometric

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
