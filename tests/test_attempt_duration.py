"""Attempt durations: counted by the solver and by the model (``attempt_duration``).

A budget holds ``n`` delays and ``n + 1`` attempts; checked against counting one retry at
a time in exact rational arithmetic, the boundaries included.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tenacity_budget import BackoffPolicy, capped_index, compute_max_attempts, nominal_delay


def fitting_count(budget: float, base: float, factor: float, cap: float, duration: float) -> int:
    """Reference: count retries one by one in exact rational arithmetic."""
    spent = Fraction(duration)  # the first attempt
    limit = Fraction(budget)
    if spent > limit:
        return 0
    n = 0
    while True:
        delay = Fraction(min(cap, base * factor**n))
        if spent + delay + Fraction(duration) > limit:
            return n
        spent += delay + Fraction(duration)
        n += 1


@pytest.mark.parametrize(
    ("budget", "base", "factor", "cap", "duration", "expected"),
    [
        (300, 1, 2, 60, 0.0, 9),  # the seed's figure is unchanged by a zero duration
        (60, 1, 2, 4, 7.0, 5),  # 1+2+4+4+4 = 15 slept + 6 * 7 = 57 <= 60; one more is 68
        (57, 1, 2, 4, 7.0, 5),  # exactly full
        (56.99, 1, 2, 4, 7.0, 4),
        (10, 1, 2, 1, 4.5, 1),  # 1 + 2 * 4.5 = 10: one retry, exactly
        (10, 1, 2, 1, 4.6, 0),
        (10, 1, 2, 1, 10.0, 0),  # the first attempt alone fills the budget
        (10, 1, 2, 1, 10.5, 0),
        (100, 1, 2, 1, 10.0, 8),  # 8 * 1 + 9 * 10 = 98
    ],
)
def test_solver_fits_n_delays_and_n_plus_one_attempts(
    budget: float, base: float, factor: float, cap: float, duration: float, expected: int
) -> None:
    """Hand-computed counts, the boundaries included (exactly full fits; a hair over does not)."""
    assert compute_max_attempts(budget, base, factor, cap, duration) == expected
    assert compute_max_attempts(budget, base, factor, cap, attempt_duration=duration) == expected


@settings(max_examples=300, deadline=None)
@given(
    budget=st.integers(1, 5000),
    base=st.integers(1, 20),
    factor=st.integers(2, 5),
    cap=st.integers(1, 400),
    quarter_seconds=st.integers(0, 400),
)
def test_solver_matches_exact_count_with_durations(
    budget: int, base: int, factor: int, cap: int, quarter_seconds: int
) -> None:
    """Exact inputs: the closed form equals counting one retry at a time."""
    duration = quarter_seconds / 4
    got = compute_max_attempts(budget, base, factor, cap, duration)
    assert got == fitting_count(budget, base, factor, cap, duration)


@settings(max_examples=200, deadline=None)
@given(
    budget=st.floats(1, 1e5),
    base=st.floats(0.01, 50),
    factor=st.floats(1.05, 6),
    cap_ratio=st.floats(1, 100),
    share=st.floats(0, 1),
)
def test_solver_count_is_maximal_with_durations(
    budget: float, base: float, factor: float, cap_ratio: float, share: float
) -> None:
    """Any inputs: n delays and n + 1 attempts fit; n + 1 delays and n + 2 attempts do not."""
    cap = base * cap_ratio
    duration = budget * share / 3
    n = compute_max_attempts(budget, base, factor, cap, duration)

    def spent(retries: int) -> float:
        # Delays below the cap one by one, then every further delay is exactly the cap.
        below = min(retries, capped_index(base, factor, cap))
        slept = math.fsum(nominal_delay(i, base, factor, cap) for i in range(below))
        return slept + (retries - below) * cap + (retries + 1) * duration

    assert spent(n) <= budget * (1 + 1e-9)
    assert spent(n + 1) > budget * (1 - 1e-9)


def test_policy_counts_attempt_duration() -> None:
    """The model's max_attempts() counts the declared duration; it defaults to 0."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, attempt_duration=7)
    assert policy.attempt_duration == 7.0
    assert policy.max_attempts() == 5
    assert BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60).attempt_duration == 0.0


@pytest.mark.parametrize("duration", [4.6, 5.0, 10.0, 11.0])
def test_policy_whose_budget_affords_no_retry_is_refused(duration: float) -> None:
    """1 s delay + 2 attempts > 10 s: refused, and the message names attempt_duration."""
    with pytest.raises(ValidationError, match="affords no retry") as info:
        BackoffPolicy(base=1, cap=1, max_elapsed=10, attempt_duration=duration)
    assert "attempt_duration" in str(info.value)


def test_policy_with_exactly_one_affordable_retry_is_accepted() -> None:
    """1 + 2 * 4.5 == 10: exactly one retry fits, so the policy is valid."""
    assert BackoffPolicy(base=1, cap=1, max_elapsed=10, attempt_duration=4.5).max_attempts() == 1


@pytest.mark.parametrize("duration", [-1.0, math.inf, math.nan])
def test_policy_refuses_invalid_attempt_duration(duration: float) -> None:
    """Negative and non-finite durations are validation errors."""
    with pytest.raises(ValidationError):
        BackoffPolicy(base=1, cap=1, max_elapsed=10, attempt_duration=duration)


@settings(max_examples=150, deadline=None)
@given(
    base=st.floats(0.01, 10),
    cap_ratio=st.floats(1, 20),
    budget_ratio=st.floats(1, 50),
    duration=st.floats(0, 100),
)
def test_policy_accepts_exactly_the_budgets_affording_a_retry(
    base: float, cap_ratio: float, budget_ratio: float, duration: float
) -> None:
    """Valid exactly when the solver affords a retry, and then it reports that count."""
    cap = base * cap_ratio
    max_elapsed = cap * budget_ratio
    affordable = compute_max_attempts(max_elapsed, base, 2.0, cap, duration)
    if affordable == 0:
        with pytest.raises(ValidationError):
            BackoffPolicy(base=base, cap=cap, max_elapsed=max_elapsed, attempt_duration=duration)
    else:
        policy = BackoffPolicy(
            base=base, cap=cap, max_elapsed=max_elapsed, attempt_duration=duration
        )
        assert policy.max_attempts() == affordable
