""":func:`compute_max_attempts`, in named phases: the capped index, the early answer, the capped
tail in floats, then exactly.
"""

from __future__ import annotations

import contextlib
import math

from ._delays import _capped_index
from ._exact import _head_at_cap, _tail_in_integers
from ._floats import (
    _ETA,
    _EXACT_INDEX,
    _FLOAT_INTS,
    _INF,
    _LN2,
    _LOG_2_1024,
    _LOG_MAX,
    _MIN_NORMAL,
    _TINY,
    _U,
    _budget,
    _duration,
    _eta,
    _params,
)
from ._search import _below_cap, _below_cap_in_floats, _Inputs, _Problem, _settle_hint


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
