"""Tests of :mod:`tenacity_budget.solver`: nominal delays and the closed-form budget solver.

The solver is checked against slow references written here, not against itself:

* :func:`reference_max_attempts` is the definition in exact rational arithmetic: it walks the
  nominal delays below the cap one by one (``Fraction`` sums, no rounding) and counts the
  capped tail with one exact division, since every retry past the cap costs exactly
  ``cap + attempt_duration``. :func:`brute_force_max_attempts` (a pure summing loop, no
  division at all) checks that shortcut on small answers.
* :func:`decimal_max_attempts` evaluates the geometric sum in 80-digit decimals and bisects,
  so it reaches answers of ``10**12`` and more below the cap (a factor a hair above 1), where
  a walk would never end.

A comparison is skipped only where float rounding cannot honestly decide: the budget lies
within ``1e-9`` (relative) of the partial sum on either side of the answer.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget import (
    backoff_delays,
    capped_index,
    compute_max_attempts,
    nominal_delay,
    total_delay,
)

# Relative distance to a boundary partial sum under which float rounding may decide either
# way (the solver's float estimates are accurate to a few ulps, about 1e-15).
UNDECIDABLE = Fraction(1, 10**9)


# -- slow references ---------------------------------------------------------------------


def reference_delays(base: float, factor: float, cap: float) -> Iterator[float]:
    """The nominal delays by definition, ``min(cap, base * factor**n)`` for n = 0, 1, ...

    Once a delay equals the cap every later one is the cap (the powers only grow), so no
    power past that point is computed (it could overflow).
    """
    n = 0
    while True:
        delay = min(cap, base * factor**n)
        if delay == cap:
            break
        yield delay
        n += 1
    while True:
        yield cap


@dataclass(frozen=True)
class Boundary:
    """The exact answer of the budget solver and the two costs around it.

    ``below`` is the cost ``S(answer) + (answer + 1) * attempt_duration`` (``None`` when not
    even the first attempt fits) and ``above`` the cost of one more retry, the first cost
    over the budget.
    """

    answer: int
    below: Fraction | None
    above: Fraction

    def undecidable(self, budget: float) -> bool:
        """Whether ``budget`` is so close to a boundary cost that rounding may decide."""
        tolerance = abs(Fraction(budget)) * UNDECIDABLE
        near_below = self.below is not None and Fraction(budget) - self.below <= tolerance
        return near_below or self.above - Fraction(budget) <= tolerance


def reference_max_attempts(
    budget: float, base: float, factor: float, cap: float, attempt_duration: float = 0.0
) -> Boundary:
    """Largest n with ``S(n) + (n + 1) * attempt_duration <= budget``, exactly.

    Walks the delays below the cap (keep them few), then counts the capped tail with one
    exact division: each retry past the cap costs exactly ``cap + attempt_duration``.
    """
    limit, duration = Fraction(budget), Fraction(attempt_duration)
    cost = duration  # the first attempt, no delay
    if cost > limit:
        return Boundary(0, None, cost)
    n = 0
    delays = reference_delays(base, factor, cap)
    for delay in delays:
        if delay == cap:
            break
        following = cost + Fraction(delay) + duration
        if following > limit:
            return Boundary(n, cost, following)
        cost, n = following, n + 1
    step = Fraction(cap) + duration
    tail = int((limit - cost) // step)
    return Boundary(n + tail, cost + tail * step, cost + (tail + 1) * step)


def brute_force_max_attempts(
    budget: float, base: float, factor: float, cap: float, attempt_duration: float = 0.0
) -> int:
    """The definition as a plain summing loop (no division): for small answers only."""
    limit, duration = Fraction(budget), Fraction(attempt_duration)
    if limit <= 0 or duration > limit:
        return 0
    cost = duration
    for n, delay in enumerate(reference_delays(base, factor, cap)):
        cost += Fraction(delay) + duration
        if cost > limit:
            return n
        assert n < 1_000_000, "brute force is for small answers"
    raise AssertionError("unreachable: the delays are endless")  # pragma: no cover


def float_capped_index(base: float, factor: float, cap: float) -> int:
    """Smallest k with ``base * factor**k >= cap``, by bisection on that float predicate."""

    def reached(k: int) -> bool:
        try:
            return base * factor**k >= cap
        except OverflowError:  # factor**k alone is too big for a float; split the power
            half = k // 2
            try:
                return base * factor**half * factor ** (k - half) >= cap
            except OverflowError:
                return True

    if reached(0):
        return 0
    low, high = 0, 1
    while not reached(high):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        if reached(middle):
            high = middle
        else:
            low = middle
    return high


def decimal_max_attempts(
    budget: float, base: float, factor: float, cap: float, attempt_duration: float = 0.0
) -> tuple[int, Decimal, Decimal]:
    """The solver's answer from the geometric-sum formula in 80-digit decimals.

    Returns the answer and the costs just below and just above the budget. Independent of the
    solver's float code: the index of the cap comes from the float definition of a delay,
    the sum from ``base * (factor**n - 1) / (factor - 1)`` on the exact decimal values of the
    floats, and the answer below the cap from bisection.
    """
    with localcontext() as ctx:
        ctx.prec = 80
        ctx.Emax = 10**8
        ctx.Emin = -(10**8)
        limit, b, f = Decimal(budget), Decimal(base), Decimal(factor)
        c, d = Decimal(cap), Decimal(attempt_duration)
        k = float_capped_index(base, factor, cap)

        def cost(n: int) -> Decimal:
            return b * (f**n - 1) / (f - 1) + (n + 1) * d

        if cost(0) > limit:
            return 0, Decimal(-1), cost(0)
        at_cap = cost(k)
        if at_cap <= limit:
            tail = int((limit - at_cap) // (c + d))
            below = at_cap + tail * (c + d)
            return k + tail, below, below + c + d
        low, high = 0, k  # cost(low) <= limit < cost(high)
        while high - low > 1:
            middle = (low + high) // 2
            if cost(middle) <= limit:
                low = middle
            else:
                high = middle
        return low, cost(low), cost(high)


def decimal_undecidable(budget: float, below: Decimal, above: Decimal) -> bool:
    """Whether ``budget`` is within ``1e-9`` (relative) of either boundary cost."""
    with localcontext() as ctx:
        ctx.prec = 80
        limit = Decimal(budget)
        tolerance = abs(limit) * Decimal("1e-9")
        return (below >= 0 and limit - below <= tolerance) or above - limit <= tolerance


# -- the examples the issue fixes ----------------------------------------------------------


def test_exactly_representable_example_is_exact() -> None:
    # 1 + 2 + 4 + 8 + 16 + 32 == 63: six retries fit exactly, a seventh (60 s) does not.
    assert compute_max_attempts(63, 1, 2, 60) == 6
    assert compute_max_attempts(math.nextafter(63.0, 0.0), 1, 2, 60) == 5
    assert compute_max_attempts(62, 1, 2, 60) == 5


def test_design_notes_example_is_nine_retries_totalling_243() -> None:
    # The design notes' prose says 8 retries summing to 249 s; the definition gives 9 and 243.
    n = compute_max_attempts(300, base=1, factor=2, cap=60)
    assert n == 9
    delays = list(backoff_delays(1, 2, 60, n))
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert sum(delays) == 243
    assert total_delay(n, 1, 2, 60) == 243
    assert sum(backoff_delays(1, 2, 60, n + 1)) == 303 > 300


def test_fifteen_day_budget_with_a_minute_cap() -> None:
    # 63 s below the cap, then (1_296_000 - 63) // 60 == 21598 retries of 60 s.
    assert compute_max_attempts(15 * 86_400, 1, 2, 60) == 21_604
    assert compute_max_attempts(1_296_000.0, 1.0, 2.0, 60.0) == 21_604


def test_astronomical_answers_are_exact_ints_without_overflow() -> None:
    # A loop over attempts would never return from these; the answers are checked exactly.
    everything_capped = compute_max_attempts(1e300, base=1.0, factor=2.0, cap=1.0)
    assert type(everything_capped) is int
    assert everything_capped == int(Fraction(1e300))
    assert everything_capped > 10**299

    tiny_cap = compute_max_attempts(1e308, base=1.0, factor=2.0, cap=1e-300)
    assert tiny_cap == int(Fraction(1e308) // Fraction(1e-300))
    assert tiny_cap > 10**600

    with_prefix = compute_max_attempts(1e300, 1e-3, 2.0, 1.0, attempt_duration=0.5)
    assert with_prefix == reference_max_attempts(1e300, 1e-3, 2.0, 1.0, 0.5).answer
    assert with_prefix > 10**299


@pytest.mark.parametrize(
    ("budget", "base", "factor", "cap", "duration"),
    [
        # 10**9 and more delays below the cap: only a closed form can answer these.
        (1e300, 1e-300, 1.0 + 1e-7, 1e300, 0.0),
        (1e12, 1e-300, 1.0 + 1e-6, 1e300, 0.0),
        (3e7, 1e-6, 1.0 + 3e-8, 1e3, 0.0),
        (1e5, 1e-300, 1.000001, 1e5, 0.7),
    ],
)
def test_huge_answers_below_the_cap_agree_with_decimal_reference(
    budget: float, base: float, factor: float, cap: float, duration: float
) -> None:
    expected, below, above = decimal_max_attempts(budget, base, factor, cap, duration)
    assert not decimal_undecidable(budget, below, above)
    assert compute_max_attempts(budget, base, factor, cap, duration) == expected


def test_zero_or_negative_budget_affords_nothing() -> None:
    for budget in (0, 0.0, -0.0, -1e-300, -1.0, -1e300):
        assert compute_max_attempts(budget, 1, 2, 60) == 0
    # A budget that does not cover even the first attempt affords no retry.
    assert compute_max_attempts(1.0, 1, 2, 60, attempt_duration=2.0) == 0
    # Exactly the first attempt and nothing more.
    assert compute_max_attempts(2.0, 1, 2, 60, attempt_duration=2.0) == 0
    assert compute_max_attempts(5.0, 1, 2, 60, attempt_duration=2.0) == 1


def test_attempt_duration_is_counted_per_call() -> None:
    # n retries cost S(n) + (n + 1) * d. S(9) = 243: 243 + 10 * 5 == 293 fits, 303 + 55 does not.
    assert compute_max_attempts(300, 1, 2, 60, attempt_duration=5) == 9
    # 243 + 10 * 6 == 303 > 300, S(8) + 9 * 6 == 183 + 54 fits.
    assert compute_max_attempts(300, 1, 2, 60, attempt_duration=6) == 8
    # Exactly on the boundary: 63 + 7 * 1 == 70.
    assert compute_max_attempts(70, 1, 2, 60, attempt_duration=1) == 6
    assert compute_max_attempts(math.nextafter(70.0, 0.0), 1, 2, 60, attempt_duration=1) == 5


def test_budget_equal_to_an_exact_sum_affords_that_sum() -> None:
    # 1 + 1.25 + 1.5625 == 3.8125 exactly (all dyadic): three retries fit.
    assert sum(backoff_delays(1.0, 1.25, 10.0, 3)) == 3.8125
    assert compute_max_attempts(3.8125, 1.0, 1.25, 10.0) == 3


def test_never_affords_a_retry_past_the_budget() -> None:
    # 3 + 3.1875 + 3.38671875 == 9.57421875 exactly; one ulp less affords only two retries.
    assert sum(backoff_delays(3.0, 1.0625, 12.0, 3)) == 9.57421875
    budget = math.nextafter(9.57421875, 0.0)
    assert compute_max_attempts(budget, 3.0, 1.0625, 12.0) == 2


@pytest.mark.parametrize(
    ("base", "factor", "cap", "duration"),
    [
        (1.0, 2.0, 60.0, 0.0),
        (0.5, 2.0, 1000.0, 0.25),
        (1.0, 1.5, 100.0, 0.0),
        (1.0, 1.25, 10.0, 0.0),
        (2.0, 1.25, 17.881393432617188, 0.0),
        (0.0625, 1.25, 0.1220703125, 0.0),
        (0.125, 1.25, 0.234375, 0.5),
        (0.0078125, 1.25, 0.0152587890625, 0.125),
        (0.125, 1.75, 4443.100618783635, 0.125),
        (1.0, 3.0, 1000.0, 0.5),
        (0.25, 4.0, 5000.0, 0.0),
        (3.0, 1.0625, 12.0, 0.0),
        # The sum of the 18 delays below the cap is not a float, but later sums are.
        (0.0625, 1.0625, 0.18612337298314144, 0.125),
        (0.25, 1.0625, 0.7444934919325658, 0.0),
    ],
)
def test_exact_on_exactly_representable_partial_sums(
    base: float, factor: float, cap: float, duration: float
) -> None:
    """A budget equal to a partial sum affords exactly that many retries, one ulp less one fewer.

    Only partial sums that are exactly a float are used as budgets, so there is nothing for
    rounding to decide: the exact sum of the float delays is the budget.
    """
    wrong: list[tuple[float, int, int]] = []
    delays = list(itertools.islice(reference_delays(base, factor, cap), 40))
    for n in range(len(delays)):
        exact = sum((Fraction(d) for d in delays[:n]), Fraction(0)) + (n + 1) * Fraction(duration)
        if float(exact) != exact:
            continue
        budget = float(exact)
        for probe, expected in ((budget, n), (math.nextafter(budget, -math.inf), max(n - 1, 0))):
            got = compute_max_attempts(probe, base, factor, cap, attempt_duration=duration)
            if got != expected:
                wrong.append((probe, got, expected))
    assert wrong == [], "(budget, got, expected) where the exact answer is known"


# -- the solver against the references ----------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.integers(-10, 5),
    st.sampled_from([1.0625, 1.125, 1.25, 1.5, 1.75, 2.0, 3.0, 4.0]),
    st.floats(0.5, 2_000.0),
    st.sampled_from([0.0, 0.125, 0.5, 1.0]),
    st.integers(0, 120),
    st.booleans(),
)
def test_exact_whenever_a_partial_sum_is_a_float(
    exponent: int, factor: float, cap_ratio: float, duration: float, n: int, below: bool
) -> None:
    """Dyadic bases and factors: whenever the cost of n retries is a float, it is decided.

    The budget is that cost (n retries fit) or the float just below it (n - 1 fit).
    """
    base = 2.0**exponent
    cap = base * cap_ratio
    delays = itertools.islice(reference_delays(base, factor, cap), n)
    exact = sum((Fraction(d) for d in delays), Fraction(0)) + (n + 1) * Fraction(duration)
    if float(exact) != exact:
        return  # not a float: no budget equals it
    budget = math.nextafter(float(exact), -math.inf) if below else float(exact)
    expected = max(n - 1, 0) if below else n
    assert compute_max_attempts(budget, base, factor, cap, attempt_duration=duration) == expected


@st.composite
def solver_inputs(draw: st.DrawFn) -> tuple[float, float, float, float, float]:
    """(budget, base, factor, cap, attempt_duration) with few delays below the cap.

    The budget is either anywhere (up to 1e300, so answers are often astronomical) or close
    (1e-8 .. 0.3 relative, never closer) to one of the partial sums, where off-by-one errors
    live.
    """
    base = draw(st.floats(1e-4, 1e3))
    factor = draw(
        st.one_of(
            st.floats(1.001, 1.1),
            st.floats(1.1, 10.0),
            st.sampled_from([1.25, 1.5, 2.0, 3.0]),
        )
    )
    below_cap = draw(st.integers(0, min(300, int(250 / math.log10(factor)))))
    cap = base * factor**below_cap * draw(st.floats(0.3, 1.0))
    duration = draw(st.one_of(st.just(0.0), st.floats(0.0, 100.0)))
    where = draw(st.sampled_from(["small", "huge", "near"]))
    if where == "small":
        budget = draw(st.floats(-10.0, 1e4))
    elif where == "huge":
        budget = draw(st.floats(1e4, 1e300))
    else:
        n = draw(st.integers(0, below_cap + 20))
        delays = itertools.islice(reference_delays(base, factor, cap), n)
        exact = sum((Fraction(d) for d in delays), Fraction(0)) + (n + 1) * Fraction(duration)
        nudge = draw(st.sampled_from([1e-8, 1e-6, 1e-3, 0.3]))
        budget = float(exact) * (1.0 + draw(st.sampled_from([-1.0, 1.0])) * nudge)
    return budget, base, factor, cap, duration


@settings(max_examples=400, deadline=None)
@given(solver_inputs())
def test_agrees_with_exact_reference(inputs: tuple[float, float, float, float, float]) -> None:
    budget, base, factor, cap, duration = inputs
    boundary = reference_max_attempts(budget, base, factor, cap, duration)
    if budget > 0 and boundary.undecidable(budget):
        return  # float rounding cannot honestly decide this one
    got = compute_max_attempts(budget, base, factor, cap, attempt_duration=duration)
    assert type(got) is int
    assert got == boundary.answer


@st.composite
def huge_prefix_inputs(draw: st.DrawFn) -> tuple[float, float, float, float, float]:
    """Inputs with up to ~10**13 delays below the cap (a factor barely above 1)."""
    base = draw(st.floats(1e-12, 10.0))
    factor = 1.0 + draw(st.floats(1e-8, 1e-3))
    cap = base * 10.0 ** draw(st.floats(0.0, 200.0))
    duration = draw(st.one_of(st.just(0.0), st.floats(0.0, 10.0)))
    budget = cap * 10.0 ** draw(st.floats(-1.0, 8.0))
    return budget, base, factor, cap, duration


@settings(max_examples=150, deadline=None)
@given(huge_prefix_inputs())
def test_agrees_with_decimal_reference_on_huge_geometric_prefixes(
    inputs: tuple[float, float, float, float, float],
) -> None:
    budget, base, factor, cap, duration = inputs
    expected, below, above = decimal_max_attempts(budget, base, factor, cap, duration)
    if decimal_undecidable(budget, below, above):
        return
    assert compute_max_attempts(budget, base, factor, cap, attempt_duration=duration) == expected


@settings(max_examples=150, deadline=None)
@given(solver_inputs())
def test_references_agree_with_each_other(
    inputs: tuple[float, float, float, float, float],
) -> None:
    """The exact reference's tail division and the decimal formula match plain summation."""
    budget, base, factor, cap, duration = inputs
    budget = min(budget, 2_000 * (cap + duration))  # keep the summing loop short
    boundary = reference_max_attempts(budget, base, factor, cap, duration)
    assert brute_force_max_attempts(budget, base, factor, cap, duration) == boundary.answer
    expected, below, above = decimal_max_attempts(budget, base, factor, cap, duration)
    if budget > 0 and not decimal_undecidable(budget, below, above):
        assert expected == boundary.answer


@settings(max_examples=200, deadline=None)
@given(solver_inputs(), st.floats(0.0, 1e6))
def test_monotone_in_budget(inputs: tuple[float, float, float, float, float], more: float) -> None:
    budget, base, factor, cap, duration = inputs
    smaller = compute_max_attempts(budget, base, factor, cap, duration)
    assert compute_max_attempts(budget + more, base, factor, cap, duration) >= smaller


# -- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"budget": math.nan},
        {"budget": math.inf},
        {"base": math.nan},
        {"base": math.inf},
        {"base": 0.0},
        {"base": -1.0},
        {"factor": math.nan},
        {"factor": math.inf},
        {"factor": 1.0},
        {"factor": 0.5},
        {"factor": 0.0},
        {"factor": -2.0},
        {"cap": math.nan},
        {"cap": math.inf},
        {"cap": 0.0},
        {"cap": -60.0},
        {"attempt_duration": math.nan},
        {"attempt_duration": math.inf},
        {"attempt_duration": -1.0},
    ],
)
def test_bad_input_raises_value_error(bad: dict[str, float]) -> None:
    args: dict[str, float] = {
        "budget": 300.0,
        "base": 1.0,
        "factor": 2.0,
        "cap": 60.0,
        "attempt_duration": 0.0,
    }
    args.update(bad)
    (name,) = bad
    with pytest.raises(ValueError, match=name):
        compute_max_attempts(**args)


@pytest.mark.parametrize(
    ("base", "factor", "cap"),
    [
        (math.nan, 2.0, 60.0),
        (1.0, math.inf, 60.0),
        (1.0, 2.0, math.nan),
        (0.0, 2.0, 60.0),
        (1.0, 1.0, 60.0),
        (1.0, 2.0, -1.0),
    ],
)
def test_backoff_delays_refuses_bad_parameters_at_the_call(
    base: float, factor: float, cap: float
) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - which parameter is in the parametrization
        backoff_delays(base, factor, cap, 3)  # not at the first next()


def test_backoff_delays_refuses_negative_attempts() -> None:
    with pytest.raises(ValueError, match="attempts"):
        backoff_delays(1.0, 2.0, 60.0, -1)
    assert list(backoff_delays(1.0, 2.0, 60.0, 0)) == []


# -- backoff_delays ------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.floats(1e-6, 1e3),
    st.floats(1.0001, 10.0),
    st.floats(1e-6, 1e6),
    st.integers(0, 60),
)
def test_backoff_delays_is_min_of_cap_and_power(
    base: float, factor: float, cap: float, attempts: int
) -> None:
    delays = list(backoff_delays(base, factor, cap, attempts))
    assert delays == [min(cap, base * factor**n) for n in range(attempts)]
    assert all(type(d) is float for d in delays)


@settings(max_examples=200, deadline=None)
@given(
    st.floats(1e-300, 1e3),
    st.floats(1.0001, 1e10),
    st.floats(1e-300, 1e300),
    st.integers(0, 3_000),
)
def test_backoff_delays_reach_the_cap_and_stay_there(
    base: float, factor: float, cap: float, attempts: int
) -> None:
    delays = list(backoff_delays(base, factor, cap, attempts))
    assert len(delays) == attempts
    assert all(0 < d <= cap for d in delays)
    assert all(a <= b for a, b in itertools.pairwise(delays))
    if cap in delays:
        first = delays.index(cap)
        assert all(d == cap for d in delays[first:])
        assert first == min(capped_index(base, factor, cap), attempts)


def test_million_attempts_never_overflow_and_tail_is_exactly_cap() -> None:
    # 2.0 ** 1024 raises OverflowError: a naive generator dies at the 1025th delay.
    delays = backoff_delays(1.0, 2.0, 60.0, 10**6)
    head = list(itertools.islice(delays, 7))
    assert head == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0]
    count, not_cap = 7, 0
    for delay in delays:
        count += 1
        not_cap += delay != 60.0
    assert (count, not_cap) == (10**6, 0)
    tail = list(itertools.islice(backoff_delays(1.0, 2.0, 60.0, 10**6), 10**6 - 5, None))
    assert tail == [60.0] * 5


def test_powers_past_float_range_do_not_overflow() -> None:
    assert list(backoff_delays(1.0, 1e300, 1e308, 5)) == [1.0, 1e300, 1e308, 1e308, 1e308]
    # factor**n overflows (2.0**1100) while base * factor**n is an ordinary number.
    delays = list(backoff_delays(1e-300, 2.0, 1e300, 3_000))
    for n in (0, 500, 1023, 1024, 1100, 1500):
        assert delays[n] == pytest.approx(min(1e300, math.ldexp(1e-300, n)), rel=1e-12)
    assert delays[-1] == 1e300
    assert nominal_delay(10**9, 1e-300, 2.0, 1e300) == 1e300


def test_backoff_delays_is_lazy() -> None:
    # A list of 10**18 delays could never be built: the generator must not try.
    delays = backoff_delays(1.0, 2.0, 60.0, 10**18)
    assert iter(delays) is delays
    assert next(delays) == 1.0
    assert list(itertools.islice(delays, 3)) == [2.0, 4.0, 8.0]
    assert list(itertools.islice(delays, 4)) == [16.0, 32.0, 60.0, 60.0]


# -- the other public helpers ------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    st.floats(1e-4, 1e3),
    st.floats(1.001, 10.0),
    st.floats(1e-4, 1e6),
    st.integers(0, 200),
)
def test_nominal_total_and_capped_index_match_definitions(
    base: float, factor: float, cap: float, n: int
) -> None:
    delays = list(itertools.islice(reference_delays(base, factor, cap), n + 1))
    assert nominal_delay(n, base, factor, cap) == delays[n]
    exact = sum((Fraction(d) for d in delays[:n]), Fraction(0))
    assert total_delay(n, base, factor, cap) == pytest.approx(float(exact), rel=1e-12)
    k = capped_index(base, factor, cap)
    assert k == float_capped_index(base, factor, cap)
    assert all(d < cap for d in itertools.islice(reference_delays(base, factor, cap), k))


def test_total_delay_of_more_retries_than_floats_can_count() -> None:
    # 1e608 retries of 1e-300 s: the count is past the float range, the total is not.
    n = compute_max_attempts(1.7e308, 5e-324, 1e10, 1e-300)
    assert n > 10**600
    total = total_delay(n, 5e-324, 1e10, 1e-300)
    assert math.isfinite(total)
    assert total == pytest.approx(1.7e308, rel=1e-12)
