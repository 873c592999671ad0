"""Tests of :mod:`tenacity_budget.solver`: nominal delays and the exact budget solver.

The solver is checked against slow references written here, not against itself:

* :func:`reference_delays` is the definition, literally: the delay before retry ``k`` is
  ``cap`` if the float power ``factor ** k`` raises ``OverflowError``, else
  ``min(cap, base * factor ** k)`` in floats.
* :func:`reference_max_attempts` is the budget solver's definition in exact rational
  arithmetic: it walks the float delays below the cap one by one (``Fraction`` sums, no
  rounding) and counts the capped tail with one exact division, since every retry past the
  cap costs exactly ``cap + attempt_duration`` (the closed form over the capped tail:
  ``S(k)`` exact plus ``(n - k) * cap`` exact). :func:`brute_force_max_attempts` (a pure
  summing loop, no division at all) checks that shortcut on small answers.
* :func:`exact_cost` is the exact cost of ``n`` retries, the same way; budgets exactly at
  it and one ulp either side of it are where an inexact solver goes wrong.
* :func:`decimal_max_attempts` evaluates the *real* geometric sum in 80-digit decimals and
  bisects, so it reaches answers of ``10**9`` and more below the cap, where no walk ends. The
  float delays differ from the real terms by a few ulps, so it is compared only where the
  budget is not within ``1e-9`` of a boundary; everything else is compared exactly.
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tenacity_budget import (
    BackoffPolicy,
    backoff_delays,
    capped_index,
    compute_max_attempts,
    nominal_delay,
    total_delay,
)

MAX = sys.float_info.max
TINY = 5e-324  # the smallest subnormal
MIN_NORMAL = sys.float_info.min


# -- slow references ---------------------------------------------------------------------


def definition_delay(k: int, base: float, factor: float, cap: float) -> float:
    """The delay before retry ``k``, word for word as the definition states it."""
    try:
        power = factor**k
    except OverflowError:
        return cap
    return min(cap, base * power)


def reference_delays(base: float, factor: float, cap: float) -> Iterator[float]:
    """The nominal delays by definition, for k = 0, 1, ...

    Once a delay equals the cap every later one is the cap (the float powers only grow), so
    no power past that point is computed.
    """
    n = 0
    while True:
        delay = definition_delay(n, base, factor, cap)
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


def reference_max_attempts(
    budget: float | int, base: float, factor: float, cap: float, attempt_duration: float = 0.0
) -> Boundary:
    """Largest n with ``S(n) + (n + 1) * attempt_duration <= budget``, exactly.

    Walks the delays below the cap (keep them few), then counts the capped tail with one
    exact division: each retry past the cap costs exactly ``cap + attempt_duration``.
    """
    limit, duration = Fraction(budget), Fraction(attempt_duration)
    cost = duration  # the first attempt, no delay
    if cost > limit or limit <= 0:
        return Boundary(0, None, cost)
    n = 0
    for delay in reference_delays(base, factor, cap):
        if delay == cap:
            break
        following = cost + Fraction(delay) + duration
        if following > limit:
            return Boundary(n, cost, following)
        cost, n = following, n + 1
    step = Fraction(cap) + duration
    tail = int((limit - cost) // step)
    return Boundary(n + tail, cost + tail * step, cost + (tail + 1) * step)


def exact_cost(n: int, base: float, factor: float, cap: float, attempt_duration: float) -> Fraction:
    """``S(n) + (n + 1) * attempt_duration`` exactly: the float delays summed as rationals."""
    below_cap = itertools.takewhile(lambda d: d != cap, reference_delays(base, factor, cap))
    head = list(itertools.islice(below_cap, min(n, sys.maxsize)))
    return (
        sum(map(Fraction, head), Fraction(0))
        + (n - len(head)) * Fraction(cap)
        + (n + 1) * Fraction(attempt_duration)
    )


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
    """Smallest k whose delay is the cap, by bisection on the definition's predicate."""

    def reached(k: int) -> bool:
        return definition_delay(k, base, factor, cap) == cap

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


def near(cost: Fraction, side: int) -> float | None:
    """The float nearest ``cost`` (``side == 0``), or the float one ulp below/above it."""
    if cost > Fraction(MAX) or cost < 0:
        return None
    nearest = float(cost)
    if side == 0:
        return nearest
    probe = math.nextafter(nearest, math.inf if side > 0 else -math.inf)
    return probe if math.isfinite(probe) else None


# -- the issue's cases -----------------------------------------------------------------------

ISSUE_CASES = [
    # (args, the exact answer): today's solver returned 958, 1, 64, 45, OverflowError, 412,
    # 2666 and 731.
    ((100, 1e-306, 2, 60, 30), 2),
    ((1e12, 1e9, 1e300, 2e9), 500),
    (
        (
            3.3623008167629866e299,
            1.2385086827331192e-193,
            1.000000000000001,
            1.8659296150597552e60,
            1.242076400725152e296,
        ),
        2706,
    ),
    (
        (3.3372117570494043e283, 1.79e-211, 1.0000000007249579, 2.87e-190, 7.100450546913626e281),
        46,
    ),
    ((1.5e308, 1.5e306, 3, 1.3e308, 1), 4),
    ((5.0952364962085985, 0.01, 1.001, 50.896777613142916), 411),
    ((268.1457858812036, 0.1, 1.0000040521554148, 3.84e189), 2667),
    ((23875094.02853341, 0.11048075672548034, 1.1, 39341.0027613904), 730),
]


@pytest.mark.parametrize(("args", "expected"), ISSUE_CASES)
def test_issue_cases_are_exact(args: tuple[float, ...], expected: int) -> None:
    assert compute_max_attempts(*args) == expected
    # and the independent references agree (the issue checked against two as well)
    assert reference_max_attempts(*args).answer == expected
    assert brute_force_max_attempts(*args) == expected


@pytest.mark.parametrize(("args", "expected"), ISSUE_CASES)
def test_issue_cases_one_ulp_either_side(args: tuple[float, ...], expected: int) -> None:
    """The budget moved to the float at, just below and just above each boundary cost."""
    base, factor, cap = (float(p) for p in args[1:4])
    duration = float(args[4]) if len(args) > 4 else 0.0
    for n in (expected, expected + 1):
        cost = exact_cost(n, base, factor, cap, duration)
        for side in (-1, 0, 1):
            probe = near(cost, side)
            if probe is None:
                continue
            want = reference_max_attempts(probe, base, factor, cap, duration).answer
            assert compute_max_attempts(probe, base, factor, cap, duration) == want


def test_total_delay_at_the_extremes() -> None:
    # factor**1 * 1e9 overflows to inf: the second delay is the cap, the first is 1e9.
    assert total_delay(1, 1e9, 1e300, 2e9) == 1e9
    assert total_delay(2, 1e9, 1e300, 2e9) == 3e9
    assert total_delay(500, 1e9, 1e300, 2e9) == 1e9 + 499 * 2e9
    # a sum past the float range is inf, never OverflowError
    assert total_delay(5, 1.5e306, 3, 1.3e308) == math.inf
    assert total_delay(10**700, 1.0, 2.0, 60.0) == math.inf
    four = list(backoff_delays(1.5e306, 3, 1.3e308, 4))
    assert total_delay(4, 1.5e306, 3, 1.3e308) == float(sum(map(Fraction, four)))


def test_int_budget_beyond_float_range_is_exact() -> None:
    for budget in (10**309, 10**309 + 1, 2**1100 - 1, 10**400):
        for params in (
            (1.0, 2.0, 60.0, 0.0),
            (1e300, 1.5, 1.7e308, 1e305),
            (5e-324, 2.0, 1.0, 0.0),
        ):
            expected = reference_max_attempts(budget, *params).answer
            assert compute_max_attempts(budget, *params) == expected
    assert compute_max_attempts(10**309, 1, 2, 60) == (10**309 - 63) // 60 + 6
    # ints past 2**53 are taken exactly, not rounded to a float first
    assert compute_max_attempts(2**60 + 1, 1.0, 2.0, 1.0) == 2**60 + 1
    assert compute_max_attempts(2**60 + 1, 3.0, 2.0, 3.0) == (2**60 + 1) // 3


def test_near_max_policy_is_valid_with_four_retries() -> None:
    # delays 1.5e306, 4.5e306, 1.35e307, 4.05e307 sum to 6e307; the fifth, 1.215e308, does not fit
    assert compute_max_attempts(1.5e308, 1.5e306, 3, 1.3e308, 1) == 4
    policy = BackoffPolicy(
        base=1.5e306, factor=3, cap=1.3e308, max_elapsed=1.5e308, attempt_duration=1
    )
    assert policy.max_attempts() == 4


@pytest.mark.parametrize(
    ("name", "value"),
    [("base", 10**400), ("factor", 10**400), ("cap", 10**400), ("attempt_duration", 10**400)],
)
def test_ints_beyond_float_range_are_value_errors_naming_the_argument(
    name: str, value: int
) -> None:
    args: dict[str, object] = {"budget": 300, "base": 1, "factor": 2, "cap": 60}
    args[name] = value
    with pytest.raises(ValueError, match=name):
        compute_max_attempts(**args)  # type: ignore[arg-type]


def test_undecidable_in_bounded_work_is_a_value_error_naming_the_budget() -> None:
    # 2.4e17 delays below the cap (factor one ulp above 1): the budget lies within float
    # rounding of the capped tail's boundaries, and only summing them all could tell. The
    # solver says so instead of running for years or guessing.
    with pytest.raises(ValueError, match="budget"):
        compute_max_attempts(1e300, 5e-324, 1 + 2**-52, 1e-300)


def test_past_the_line_of_delays_summed_a_value_error_says_why() -> None:
    # 20000 nearly equal delays (factor 1 + 2**-40): a budget one ulp either side of their
    # exact sum is decided only by summing (almost) all of them, past the 2**14 line. Under
    # the old 2**20 line this took about 4 ms per call; now the solver refuses, naming the
    # budget and the line, and so does the policy at construction.
    base, factor, n = 1.0, 1.0 + 2**-40, 20_000
    cost = exact_cost(n, base, factor, 1e4, 0.0)
    for side in (-1, 1):
        budget = near(cost, side)
        assert budget is not None
        with pytest.raises(ValueError, match=r"budget .* needs more than 16384 .* delays"):
            compute_max_attempts(budget, base, factor, 1e4)
        with pytest.raises(ValueError, match="needs more than 16384"):
            BackoffPolicy(base=base, factor=factor, cap=1e4, max_elapsed=budget, jitter="none")
    # the same budget moved off the boundary is decided in closed form, exactly
    budget = float(cost) * (1 + 1e-9)
    expected = reference_max_attempts(budget, base, factor, 1e4, 0.0).answer
    assert compute_max_attempts(budget, base, factor, 1e4) == expected == n


def test_subnormal_base_with_a_factor_near_one_is_refused_past_the_line() -> None:
    # 202402 subnormal delays of one unit (2**-1074) each below a cap of 1e-320: deciding the
    # count needs every one of them summed, past the line (under 2**20 it took ~0.1 s). A
    # budget of 3036 units is inside the line and stays exact.
    with pytest.raises(ValueError, match="needs more than 16384"):
        BackoffPolicy(base=TINY, factor=1.0 + 2**-40, cap=1e-320, max_elapsed=1e-318)
    budget = 1.5e-320
    expected = reference_max_attempts(budget, TINY, 1.0 + 2**-40, 1e-320, 0.0).answer
    assert compute_max_attempts(budget, TINY, 1.0 + 2**-40, 1e-320) == expected
    policy = BackoffPolicy(base=TINY, factor=1.0 + 2**-40, cap=1e-320, max_elapsed=budget)
    assert policy.max_attempts() == expected


@pytest.mark.parametrize(
    ("budget", "base", "factor", "cap", "duration", "answer"),
    [
        # subnormal delays: every count near the answer is decided by summing all the delays
        # before it, several times over; each decision within the line, all of them together
        # within it only because a neighbouring count reuses the window summed before
        (1.482e-320, TINY, 1.000001, 5e-323, 0.0, 3000),
        (7.905e-320, TINY, 1.0001, 5e-323, 1e-323, 5013),
        (4.051625e-318, 2.5e-322, 1.0000000000000284, 2.52e-321, 0.0, 16079),
    ],
)
def test_many_exact_decisions_within_the_line_stay_exact(
    budget: float, base: float, factor: float, cap: float, duration: float, answer: int
) -> None:
    expected = reference_max_attempts(budget, base, factor, cap, duration).answer
    assert expected == answer
    assert compute_max_attempts(budget, base, factor, cap, duration) == answer


# -- the examples the earlier issues fixed -------------------------------------------------


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

    ratio_pair = compute_max_attempts(1e300, 1e-300, 1.5, 1e10)
    assert ratio_pair == reference_max_attempts(1e300, 1e-300, 1.5, 1e10).answer


@pytest.mark.parametrize(
    ("budget", "base", "factor", "cap", "duration"),
    [
        # 10**9 and more delays below the cap: only a closed form can answer these.
        (1e15, 1e-300, 1.0 + 1e-7, 1e300, 0.0),
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


def test_a_power_past_the_float_range_is_the_cap_in_the_count() -> None:
    # 1.0000001**k overflows from k = 7097827480 on: by the definition those delays are the
    # cap (1e300), though 1e-300 * 1.0000001**k would still be far below it. The 7.1e9
    # delays before it sum to about 1.8e15, so a budget of 1e300 affords exactly them.
    k = float_capped_index(1e-300, 1.0 + 1e-7, 1e300)
    assert k == capped_index(1e-300, 1.0 + 1e-7, 1e300) == 7_097_827_480
    assert compute_max_attempts(1e300, 1e-300, 1.0 + 1e-7, 1e300) == k
    assert total_delay(k, 1e-300, 1.0 + 1e-7, 1e300) == pytest.approx(1.79e15, rel=0.01)


def test_zero_or_negative_budget_affords_nothing() -> None:
    for budget in (0, 0.0, -0.0, -1e-300, -1.0, -1e300, -(10**400)):
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


@pytest.mark.parametrize(
    ("base", "factor", "cap", "duration", "n"),
    [
        # Thousands of delays below the cap, nearly equal: the budget one ulp from a partial
        # sum can only be decided by summing (most of) them exactly.
        (0.1, 1.0000040521554148, 3.84e189, 0.0, 2667),
        (0.01, 1.001, 1e10, 0.0, 3000),
        (1e-3, 1.0 + 2**-52, 1.0, 0.0, 2500),
        (1.0, 1.0 + 5 * 2**-52, 1e300, 1e-3, 2000),
        (TINY, 1.001, 1e-300, 0.0, 1500),  # subnormal delays, rounded to whole units
        (1e-310, 1.01, 1e-290, 3e-320, 900),
        (1e300, 1.0 + 2**-40, 1.7e308, 1e300, 1200),
    ],
)
def test_one_ulp_from_a_partial_sum_of_thousands_of_delays(
    base: float, factor: float, cap: float, duration: float, n: int
) -> None:
    for m in (n - 1, n, n + 1):
        cost = exact_cost(m, base, factor, cap, duration)
        for side in (-1, 0, 1):
            budget = near(cost, side)
            assert budget is not None
            expected = reference_max_attempts(budget, base, factor, cap, duration).answer
            assert expected in (m - 1, m, m + 1)
            assert compute_max_attempts(budget, base, factor, cap, duration) == expected


# -- the solver against the references over the whole float range ---------------------------


def _raw(k: int, base: float, factor: float) -> float:
    """``base * factor**k`` in floats, ``inf`` where it overflows (the cap-free delay)."""
    try:
        return base * factor**k
    except OverflowError:
        return math.inf


positive_floats = st.one_of(
    st.floats(TINY, MIN_NORMAL),  # subnormals
    st.floats(1e-300, 1e300),
    st.floats(MIN_NORMAL, MAX),
    st.sampled_from([TINY, 1e-320, 1e-310, 0.001, 0.1, 1.0, 60.0, 1e300, 1.5e306, MAX]),
)
factors = st.one_of(
    st.integers(1, 4).map(lambda ulps: 1.0 + ulps * 2**-52),  # within 1e-15 of 1
    st.floats(1.0 + 2**-52, 1.0 + 1e-12),
    st.floats(1.0 + 1e-12, 1.001),
    st.floats(1.001, 2.0),
    st.floats(2.0, 10.0),
    st.floats(10.0, 1e300),
    st.sampled_from([1.5, 2.0, 3.0, 1e300, MAX]),
)
durations = st.one_of(
    st.just(0.0),
    st.floats(0.0, 1e300),
    st.floats(TINY, MIN_NORMAL),
    st.sampled_from([TINY, 0.5, 1.0, 30.0, 1e300]),
)


@st.composite
def solver_problems(draw: st.DrawFn) -> tuple[float | int, float, float, float, float]:
    """(budget, base, factor, cap, attempt_duration) over the whole float range.

    The cap is drawn so that at most a few hundred delays lie below it (the references walk
    them); the budget is drawn anywhere, or exactly at / one ulp either side of the exact cost
    of some number of retries (before the cap, at it, or far past it), or as an int (also
    beyond the float range).
    """
    base = draw(positive_floats)
    factor = draw(factors)
    below = draw(st.integers(0, 300))
    # the cap lies in (raw(below - 1), raw(below)], so exactly `below` delays precede it
    first = _raw(below - 1, base, factor) if below else 0.0
    while below and first == math.inf:  # past the float range: fewer delays precede the cap
        below -= 1
        first = _raw(below - 1, base, factor) if below else 0.0
    ceiling = min(_raw(below, base, factor), MAX)
    floor_ = math.nextafter(first, math.inf)
    # (no float strictly between: then the cap is raw(below - 1) itself, one delay fewer)
    cap = draw(st.floats(floor_, ceiling)) if floor_ <= ceiling else ceiling
    duration = draw(durations)
    where = draw(st.sampled_from(["anywhere", "near", "near", "near", "int"]))
    if where == "anywhere":
        budget: float | int = draw(st.one_of(st.floats(-10.0, MAX), positive_floats))
    elif where == "int":
        budget = draw(
            st.one_of(st.integers(-10, 10**6), st.integers(2**53, 2**70), st.just(10**309))
        )
    else:
        n = draw(
            st.one_of(st.integers(0, below + 3), st.integers(0, 10**6), st.integers(0, 10**300))
        )
        cost = exact_cost(n, base, factor, cap, duration)
        candidate = near(cost, draw(st.sampled_from([-1, 0, 1])))
        budget = candidate if candidate is not None else draw(positive_floats)
    return budget, base, factor, cap, duration


@settings(max_examples=600, deadline=None)
@given(solver_problems())
@example((100, 1e-306, 2.0, 60.0, 30.0))
@example((1.5e308, 1.5e306, 3.0, 1.3e308, 1.0))
@example((1e12, 1e9, 1e300, 2e9, 0.0))
@example((MAX, MAX, 1.0 + 2**-52, MAX, 0.0))
def test_exact_against_the_reference_over_the_float_range(
    problem: tuple[float | int, float, float, float, float],
) -> None:
    budget, base, factor, cap, duration = problem
    expected = reference_max_attempts(budget, base, factor, cap, duration).answer
    got = compute_max_attempts(budget, base, factor, cap, attempt_duration=duration)
    assert type(got) is int
    assert got == expected


@st.composite
def solver_inputs(draw: st.DrawFn) -> tuple[float, float, float, float, float]:
    """(budget, base, factor, cap, attempt_duration) with few delays below the cap.

    The budget is either anywhere (up to 1e300, so answers are often astronomical) or close
    (1e-8 .. 0.3 relative) to one of the partial sums, where off-by-one errors live.
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


@settings(max_examples=300, deadline=None)
@given(solver_inputs())
def test_agrees_with_exact_reference(inputs: tuple[float, float, float, float, float]) -> None:
    budget, base, factor, cap, duration = inputs
    boundary = reference_max_attempts(budget, base, factor, cap, duration)
    got = compute_max_attempts(budget, base, factor, cap, attempt_duration=duration)
    assert type(got) is int
    assert got == boundary.answer


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
        return  # the real geometric sum is not the float delays' sum to 1e-9: no verdict
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


# -- nominal delays ------------------------------------------------------------------------


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


@settings(max_examples=300, deadline=None)
@given(positive_floats, factors, positive_floats, st.integers(0, 3_000))
def test_every_delay_is_the_definition_over_the_float_range(
    base: float, factor: float, cap: float, attempts: int
) -> None:
    """nominal_delay, backoff_delays and capped_index are the definition, subnormals to MAX."""
    delays = list(backoff_delays(base, factor, cap, attempts))
    assert delays == [definition_delay(n, base, factor, cap) for n in range(attempts)]
    for n in {0, attempts // 2, attempts, attempts + 10**6, 10**20}:
        assert nominal_delay(n, base, factor, cap) == definition_delay(n, base, factor, cap)
    k = capped_index(base, factor, cap)
    assert k == float_capped_index(base, factor, cap)
    assert definition_delay(k, base, factor, cap) == cap
    assert k == 0 or definition_delay(k - 1, base, factor, cap) < cap


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


def test_powers_past_float_range_are_the_cap() -> None:
    assert list(backoff_delays(1.0, 1e300, 1e308, 5)) == [1.0, 1e300, 1e308, 1e308, 1e308]
    # 2.0**1024 overflows: by the definition that delay is the cap, even though
    # 1e-300 * 2**1024 would be an ordinary number (the wait sleeps exactly this float).
    delays = list(backoff_delays(1e-300, 2.0, 1e300, 3_000))
    for n in (0, 500, 1023):
        assert delays[n] == math.ldexp(1e-300, n)
    for n in (1024, 1100, 1500):
        assert delays[n] == 1e300
    assert delays[-1] == 1e300
    assert capped_index(1e-300, 2.0, 1e300) == 1024
    assert nominal_delay(10**9, 1e-300, 2.0, 1e300) == 1e300
    assert nominal_delay(1024, 1e-300, 2.0, 1e300) == 1e300
    # an exponent past the float range (factor**k cannot even convert k): the cap
    assert nominal_delay(10**400, 1.5, 1.0000001, 7.0) == 7.0
    # a product that overflows to inf: the cap
    assert nominal_delay(1, 1e9, 1e300, 2e9) == 2e9


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


@settings(max_examples=200, deadline=None)
@given(positive_floats, factors, st.integers(0, 400), st.integers(0, 10**400))
def test_total_delay_is_the_correctly_rounded_sum(
    base: float, factor: float, below: int, more: int
) -> None:
    """With at most a few thousand delays below the cap, the float nearest the exact sum."""
    cap = min(_raw(below, base, factor), MAX)
    k = capped_index(base, factor, cap)
    assert k <= below
    for n in (0, k // 2, k, k + 1, k + more):
        exact = exact_cost(n, base, factor, cap, 0.0)
        try:
            expected = float(exact)
        except OverflowError:
            expected = math.inf
        assert total_delay(n, base, factor, cap) == expected


def test_total_delay_of_more_retries_than_floats_can_count() -> None:
    # 1e608 retries of 1e-300 s: the count is past the float range, the total is not.
    n = compute_max_attempts(1.7e308, 5e-324, 1e10, 1e-300)
    assert n > 10**600
    total = total_delay(n, 5e-324, 1e10, 1e-300)
    assert math.isfinite(total)
    assert total == pytest.approx(1.7e308, rel=1e-12)


def test_total_delay_of_a_huge_prefix_is_the_closed_form() -> None:
    # 10**6 delays below the cap: not summed, within 3.6e-15 of the exact sum.
    base, factor = 1e-3, 1.0 + 1e-6
    n = 10**6
    expected = Decimal(base) * (Decimal(factor) ** n - 1) / (Decimal(factor) - 1)
    assert total_delay(n, base, factor, 1e300) == pytest.approx(float(expected), rel=1e-14)


# -- issue 15: counts are ints, refused by name otherwise ------------------------------------


class _Index:
    """An integer type that is not an int (as numpy's integers are): it has __index__."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


COUNTED = [
    ("retry index", lambda n: nominal_delay(n, 1.0, 2.0, 60.0)),
    ("attempts", lambda n: list(backoff_delays(1.0, 2.0, 60.0, n))),
    ("n", lambda n: total_delay(n, 1.0, 2.0, 60.0)),
]


@pytest.mark.parametrize(("name", "call"), COUNTED, ids=[name for name, _ in COUNTED])
@pytest.mark.parametrize("bad", [1.5, 2.0, "3", b"3", None, True, False, Fraction(3)], ids=repr)
def test_a_count_that_is_not_an_int_is_refused_by_name(
    name: str, call: Callable[[object], object], bad: object
) -> None:
    with pytest.raises(TypeError) as caught:
        call(bad)
    assert str(caught.value) == f"{name} must be an int, got {type(bad).__name__}"


@pytest.mark.parametrize(("name", "call"), COUNTED, ids=[name for name, _ in COUNTED])
def test_a_negative_count_is_refused_by_name(name: str, call: Callable[[object], object]) -> None:
    for bad in (-1, _Index(-3)):
        with pytest.raises(ValueError, match=rf"^{name} must be >= 0, got -"):
            call(bad)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=40))
def test_an_integer_type_counts_as_its_int(n: int) -> None:
    assert nominal_delay(_Index(n), 1.0, 2.0, 60.0) == nominal_delay(n, 1.0, 2.0, 60.0)
    assert list(backoff_delays(1.0, 2.0, 60.0, _Index(n))) == list(
        backoff_delays(1.0, 2.0, 60.0, n)
    )
    assert total_delay(_Index(n), 1.0, 2.0, 60.0) == total_delay(n, 1.0, 2.0, 60.0)
