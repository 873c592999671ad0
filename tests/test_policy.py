"""Tests of :class:`tenacity_budget.BackoffPolicy`: validation, immutability, derived figures.

Sums of waits are compared with ``max_elapsed`` correctly rounded (``math.fsum``) or exactly
(``fractions.Fraction``), never as a running float total, whose rounding drifts by ulps.
"""

from __future__ import annotations

import itertools
import math
import random
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pydantic
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tenacity_budget import (
    BackoffPolicy,
    backoff_delays,
    compute_max_attempts,
    decorrelated_jitter,
    equal_jitter,
    full_jitter,
)
from tenacity_budget.jitter import JitterMode
from tests._helpers import MODES, policies, solver_is_exact

VALID: dict[str, Any] = {"base": 1.0, "factor": 2.0, "cap": 60.0, "max_elapsed": 300.0}


# -- validation ---------------------------------------------------------------------------

BAD_CONFIGURATIONS: list[tuple[dict[str, Any], str, str]] = [
    # (fields changed from VALID, field the message must name, what it must say)
    ({"base": math.nan}, "base", "finite"),
    ({"base": math.inf}, "base", "finite"),
    ({"factor": math.nan}, "factor", "finite"),
    ({"factor": math.inf}, "factor", "finite"),
    ({"cap": math.nan}, "cap", "finite"),
    ({"cap": -math.inf}, "cap", "finite"),
    ({"max_elapsed": math.nan}, "max_elapsed", "finite"),
    ({"max_elapsed": math.inf}, "max_elapsed", "finite"),
    ({"attempt_duration": math.nan}, "attempt_duration", "finite"),
    ({"attempt_duration": math.inf}, "attempt_duration", "finite"),
    ({"base": Decimal("NaN")}, "base", "finite"),
    ({"base": Decimal("1e400")}, "base", "finite"),
    # Text is not a number (issue 15: "nan" and "1e400" were read as numbers before).
    ({"base": "nan"}, "base", "base must be a number, got the str"),
    ({"base": "1e400"}, "base", "base must be a number, got the str"),
    ({"base": 0.0}, "base", "greater than 0"),
    ({"base": -1.0}, "base", "greater than 0"),
    ({"cap": 0.0}, "cap", "greater than 0"),
    ({"cap": -60.0}, "cap", "greater than 0"),
    ({"max_elapsed": 0.0}, "max_elapsed", "greater than 0"),
    ({"max_elapsed": -300.0}, "max_elapsed", "greater than 0"),
    ({"factor": 1.0}, "factor", "greater than 1"),
    ({"factor": 0.5}, "factor", "greater than 1"),
    ({"factor": -2.0}, "factor", "greater than 1"),
    ({"jitter": "fulll"}, "jitter", "'none', 'full', 'equal' or 'decorrelated'"),
    ({"jitter": "FULL"}, "jitter", "'none', 'full', 'equal' or 'decorrelated'"),
    ({"jitter": None}, "jitter", "'none', 'full', 'equal' or 'decorrelated'"),
    ({"retries": 5}, "retries", "Extra inputs are not permitted"),
    ({"max_elapsd": 300.0}, "max_elapsd", "Extra inputs are not permitted"),
    ({"base": 400.0}, "base", "lower base or raise max_elapsed"),
    ({"base": 301.0, "cap": 60.0}, "base", "lower base or raise max_elapsed"),
    ({"cap": 400.0}, "cap", "lower cap or raise max_elapsed"),
    ({"cap": 300.5}, "cap", "lower cap or raise max_elapsed"),
]


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    BAD_CONFIGURATIONS,
    ids=[f"{next(iter(c))}={next(iter(c.values()))!r}" for c, _, _ in BAD_CONFIGURATIONS],
)
def test_bad_configuration_names_what_to_change(
    changes: dict[str, Any], field: str, says: str
) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        BackoffPolicy(**{**VALID, **changes})
    message = str(caught.value)
    assert field in message
    assert says in message


def test_missing_required_fields_are_named() -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        BackoffPolicy()  # type: ignore[call-arg]
    missing = {error["loc"][0] for error in caught.value.errors() if error["type"] == "missing"}
    assert missing == {"base", "cap", "max_elapsed"}


def test_largest_acceptable_values_are_accepted() -> None:
    # The limits are inclusive: base == cap == max_elapsed is one retry of exactly the budget.
    policy = BackoffPolicy(base=300, cap=300, max_elapsed=300, jitter="none")
    assert policy.max_attempts() == 1
    assert policy.waits() == [300.0]
    # base equal to cap is a constant schedule (base above cap is refused: issue 9).
    assert BackoffPolicy(base=60, cap=60, max_elapsed=300, jitter="none").waits() == [60.0] * 5


# -- immutability, equality, serialisation ------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [("base", 2.0), ("factor", 3.0), ("cap", 30.0), ("max_elapsed", 10.0), ("jitter", "none")],
)
def test_frozen(field: str, value: object) -> None:
    policy = BackoffPolicy(**VALID)
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        setattr(policy, field, value)
    assert policy == BackoffPolicy(**VALID)
    assert policy.max_attempts() == 9


def test_equal_policies_hash_equal() -> None:
    short = BackoffPolicy(base=1, cap=60, max_elapsed=300)
    spelled_out = BackoffPolicy(base=1.0, factor=2.0, cap=60.0, max_elapsed=300.0, jitter="full")
    assert short == spelled_out
    assert hash(short) == hash(spelled_out)
    assert len({short, spelled_out}) == 1
    assert {short: "a"}[spelled_out] == "a"
    other = BackoffPolicy(base=1, cap=60, max_elapsed=300, jitter="equal")
    assert other != short
    assert len({short, other}) == 2


def test_json_round_trip_of_every_field() -> None:
    deadline = datetime(2030, 5, 17, 12, 30, tzinfo=timezone(timedelta(hours=2)))
    for mode in MODES:
        policy = BackoffPolicy(
            base=0.1,
            factor=1.7,
            cap=12.5,
            max_elapsed=321.75,
            jitter=mode,
            attempt_duration=0.3,
            deadline=deadline,
        )
        text = policy.model_dump_json()
        again = BackoffPolicy.model_validate_json(text)
        assert again == policy
        assert hash(again) == hash(policy)
        assert again.max_attempts() == policy.max_attempts()
        assert again.deadline == deadline
        assert BackoffPolicy.model_validate(policy.model_dump()) == policy


def test_json_with_bad_values_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError, match="lower cap or raise max_elapsed"):
        BackoffPolicy.model_validate_json(
            '{"base": 1, "cap": 600, "max_elapsed": 300, "jitter": "none"}'
        )
    with pytest.raises(pydantic.ValidationError, match="Extra inputs"):
        BackoffPolicy.model_validate_json('{"base": 1, "cap": 6, "max_elapsed": 30, "x": 1}')


@settings(max_examples=100, deadline=None)
@given(policies())
def test_json_round_trip_of_any_policy(policy: BackoffPolicy) -> None:
    again = BackoffPolicy.model_validate_json(policy.model_dump_json())
    assert again == policy
    assert again.max_attempts() == policy.max_attempts()


# -- derived figures ----------------------------------------------------------------------


def test_max_attempts_examples() -> None:
    assert BackoffPolicy(**VALID).max_attempts() == 9  # not the design notes' 8
    assert BackoffPolicy(base=1, cap=60, max_elapsed=63).max_attempts() == 6
    assert BackoffPolicy(base=1, cap=60, max_elapsed=15 * 86_400).max_attempts() == 21_604
    assert BackoffPolicy(**VALID, attempt_duration=5).max_attempts() == 9
    assert BackoffPolicy(**VALID, attempt_duration=6).max_attempts() == 8


@settings(max_examples=100, deadline=None)
@given(policies())
def test_max_attempts_is_the_solver_on_the_fields(policy: BackoffPolicy) -> None:
    expected = compute_max_attempts(
        policy.max_elapsed, policy.base, policy.factor, policy.cap, policy.attempt_duration
    )
    assert policy.max_attempts() == expected
    assert policy.max_attempts() >= 1


def test_budget_that_affords_no_retry_is_refused() -> None:
    # base <= max_elapsed, but one retry also needs two attempts of 200 s each.
    with pytest.raises(pydantic.ValidationError, match="max_elapsed"):
        BackoffPolicy(**VALID, attempt_duration=200)


def test_waits_without_jitter_are_the_nominal_delays() -> None:
    policy = BackoffPolicy(**{**VALID, "jitter": "none"})
    assert policy.waits() == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert sum(policy.waits()) == 243
    assert list(policy.nominal_delays()) == policy.waits()
    assert policy.waits(random.Random(3)) == policy.waits()


@pytest.mark.parametrize("mode", MODES)
def test_waits_are_the_design_notes_draws(mode: JitterMode) -> None:
    """``waits(rng)``: one draw from ``rng`` per affordable retry, in order."""
    policy = BackoffPolicy(**{**VALID, "jitter": mode})
    nominal = list(backoff_delays(1, 2, 60, policy.max_attempts()))
    for seed in (0, 7, 2**40):
        rng = random.Random(seed)
        expected: list[float] = []
        previous = 0.0
        for delay in nominal:
            if mode == "full":
                expected.append(full_jitter(delay, rng))
            elif mode == "equal":
                expected.append(equal_jitter(delay, rng))
            elif mode == "decorrelated":
                previous = decorrelated_jitter(delay, previous, policy.base, rng)
                expected.append(previous)
            else:
                expected.append(delay)
        drawn = random.Random(seed)
        assert policy.waits(drawn) == expected
        assert drawn.getstate() == rng.getstate()  # exactly as many draws
        assert policy.schedule(seed) == expected


@pytest.mark.usefixtures("module_random")
@pytest.mark.parametrize("mode", ["full", "equal", "decorrelated"])
def test_waits_without_rng_use_the_module_generator(mode: JitterMode) -> None:
    policy = BackoffPolicy(**{**VALID, "jitter": mode})
    random.seed(99)
    first = policy.waits()
    random.seed(99)
    assert policy.waits() == first
    assert policy.waits(random.Random(99)) == first
    assert policy.waits() != first  # the module stream moved on


def test_schedule_refuses_seed_and_rng_together() -> None:
    with pytest.raises(ValueError, match="seed"):
        BackoffPolicy(**VALID).schedule(1, rng=random.Random(1))


def test_billion_retry_policy_is_walked_lazily() -> None:
    policy = BackoffPolicy(base=1, cap=1, max_elapsed=1e9, jitter="full")
    assert policy.max_attempts() == 10**9
    assert list(itertools.islice(policy.nominal_delays(), 5)) == [1.0] * 5
    first = list(itertools.islice(policy.iter_waits(random.Random(5)), 5))
    reference = random.Random(5)
    assert first == [full_jitter(1.0, reference) for _ in range(5)]
    assert all(0.0 <= w <= 1.0 for w in first)
    # A list of 10**9 floats is refused, not built.
    with pytest.raises(ValueError, match="iter_waits"):
        policy.waits()


def test_astronomical_budget_constructs_without_a_walk() -> None:
    policy = BackoffPolicy(base=1, cap=1, max_elapsed=1e300, jitter="decorrelated")
    assert policy.max_attempts() == int(Fraction(1e300))
    assert list(itertools.islice(policy.nominal_delays(), 3)) == [1.0, 1.0, 1.0]
    assert list(itertools.islice(policy.iter_waits(), 3)) == [1.0, 1.0, 1.0]


def test_total_nominal_is_the_sum_of_affordable_delays() -> None:
    assert BackoffPolicy(**VALID).total_nominal() == 243
    assert BackoffPolicy(base=1, cap=60, max_elapsed=63).total_nominal() == 63


# -- the invariants over many policies ----------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(policies(), st.integers(0, 2**32))
def test_jittered_waits_are_bounded_and_fit_the_budget(policy: BackoffPolicy, seed: int) -> None:
    waits = policy.waits(random.Random(seed))
    nominal = list(policy.nominal_delays())
    assert len(waits) <= len(nominal) == policy.max_attempts()
    for wait, delay in zip(waits, nominal, strict=False):
        assert 0.0 <= wait <= delay
        if policy.jitter == "equal":
            assert wait >= delay / 2
        elif policy.jitter == "decorrelated":
            assert wait >= min(policy.base, delay)
        elif policy.jitter == "none":
            assert wait == delay
    calls = len(waits) + 1
    # The correctly rounded total: an exact sum a few ulps past a budget that is itself a
    # rounded partial sum is a tie float arithmetic cannot honestly decide.
    assert math.fsum([*waits, *[policy.attempt_duration] * calls]) <= policy.max_elapsed
    assert math.fsum(nominal) <= policy.max_elapsed
    assert list(policy.iter_waits(random.Random(seed))) == waits


@settings(max_examples=200, deadline=None)
@given(policies(), st.integers(0, 2**32))
def test_one_wait_per_affordable_retry(policy: BackoffPolicy, seed: int) -> None:
    """``waits()`` has exactly ``max_attempts()`` entries, on the boundary too."""
    assume(solver_is_exact(policy))
    assert len(policy.waits(random.Random(seed))) == policy.max_attempts()


def test_one_wait_per_affordable_retry_when_the_sum_is_exactly_the_budget() -> None:
    # 16 * 0.1 == 1.6 exactly (16 is a power of two), but 0.1 added 16 times in floats
    # is 1.6000000000000003: a running float total wrongly refuses the 16th retry.
    assert 16 * Fraction(0.1) == Fraction(1.6)
    policy = BackoffPolicy(base=0.1, cap=0.1, max_elapsed=1.6, jitter="none")
    assert policy.max_attempts() == 16
    assert policy.waits() == [0.1] * 16


def test_model_copy_with_update_is_validated_and_re_derived() -> None:
    policy = BackoffPolicy(base=1, cap=60, max_elapsed=300, jitter="none")
    longer = policy.model_copy(update={"max_elapsed": 2592000})
    assert longer.max_attempts() == 43204
    assert longer.waits()[-1] == 60.0
    with pytest.raises(pydantic.ValidationError, match="cap"):
        policy.model_copy(update={"max_elapsed": 30})
    assert policy.model_copy() == policy
