"""Tests of :mod:`tenacity_budget.jitter`: bounded jitter, one draw per call.

Every jitter function turns a nominal delay into the wait actually slept, and must stay
within that delay whatever the draw, so the budget computed from nominal delays holds.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget import apply_jitter, decorrelated_jitter, equal_jitter, full_jitter
from tenacity_budget.jitter import JitterMode

# The extreme draws random.random() can return: 0 and the largest double below 1.
LOWEST_DRAW = 0.0
HIGHEST_DRAW = 1.0 - 2.0**-53

delays = st.floats(0.0, 1e12, allow_subnormal=True)
seeds = st.integers(0, 2**64)


class FixedDraw(random.Random):
    """A generator whose ``random()`` always returns ``draw`` and counts its calls."""

    def __init__(self, draw: float) -> None:
        super().__init__(0)
        self.draw = draw
        self.calls = 0

    def random(self) -> float:
        """The fixed draw (counted)."""
        self.calls += 1
        return self.draw


def one_draw_state(seed: int) -> object:
    """The state of ``random.Random(seed)`` after exactly one ``random()`` call."""
    reference = random.Random(seed)
    reference.random()
    return reference.getstate()


# -- ranges -------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(delays, seeds)
def test_full_jitter_within_zero_and_delay(delay: float, seed: int) -> None:
    wait = full_jitter(delay, random.Random(seed))
    assert 0.0 <= wait <= delay


@settings(max_examples=300, deadline=None)
@given(delays, seeds)
def test_equal_jitter_within_half_and_delay(delay: float, seed: int) -> None:
    wait = equal_jitter(delay, random.Random(seed))
    assert delay / 2 <= wait <= delay


@settings(max_examples=300, deadline=None)
@given(delays, st.floats(0.0, 1e12), st.floats(1e-6, 1e6), seeds)
def test_decorrelated_jitter_within_base_and_its_nominal_delay(
    delay: float, previous: float, base: float, seed: int
) -> None:
    wait = decorrelated_jitter(delay, previous, base, random.Random(seed))
    assert min(base, delay) <= wait <= delay


@settings(max_examples=300, deadline=None)
@given(st.floats(1e-300, 1e300), st.sampled_from([LOWEST_DRAW, 0.5, HIGHEST_DRAW]))
def test_extreme_draws_stay_in_range(delay: float, draw: float) -> None:
    """The largest draw must not round one ulp past the delay."""
    assert 0.0 <= full_jitter(delay, FixedDraw(draw)) <= delay
    assert delay / 2 <= equal_jitter(delay, FixedDraw(draw)) <= delay
    for previous in (0.0, delay / 3, delay, 10 * delay):
        wait = decorrelated_jitter(delay, previous, delay / 7, FixedDraw(draw))
        assert delay / 7 <= wait <= delay


def test_full_and_equal_jitter_are_uniform_maps_of_the_draw() -> None:
    # Full jitter is uniform on [0, d], equal jitter uniform on [d/2, d].
    for draw in (LOWEST_DRAW, 0.25, 0.5, 0.9, HIGHEST_DRAW):
        assert full_jitter(8.0, FixedDraw(draw)) == pytest.approx(8.0 * draw, abs=1e-15)
        assert equal_jitter(8.0, FixedDraw(draw)) == pytest.approx(4.0 + 4.0 * draw, abs=1e-15)
    assert full_jitter(8.0, FixedDraw(LOWEST_DRAW)) == 0.0
    assert equal_jitter(8.0, FixedDraw(LOWEST_DRAW)) == 4.0


def test_decorrelated_jitter_grows_from_the_previous_wait() -> None:
    # uniform(base, 3 * previous), then capped at this retry's nominal delay.
    big = 1e9
    assert decorrelated_jitter(big, 10.0, 1.0, FixedDraw(LOWEST_DRAW)) == 1.0
    assert decorrelated_jitter(big, 10.0, 1.0, FixedDraw(0.5)) == pytest.approx(15.5)
    assert decorrelated_jitter(big, 10.0, 1.0, FixedDraw(HIGHEST_DRAW)) == pytest.approx(30.0)
    # Before the first retry (previous 0) the draw is within [base, base].
    assert decorrelated_jitter(big, 0.0, 2.0, FixedDraw(0.7)) == 2.0
    # Never above the nominal delay of its retry, however large the previous wait.
    assert decorrelated_jitter(4.0, 1e6, 1.0, FixedDraw(HIGHEST_DRAW)) == 4.0
    # A nominal delay below base wins too: the wait is that delay.
    assert decorrelated_jitter(0.5, 0.0, 1.0, FixedDraw(0.3)) == 0.5


def test_the_draw_matters() -> None:
    # Different seeds spread the waits: a jitter that ignores its generator fails here.
    for jitter in (full_jitter, equal_jitter):
        waits = {jitter(10.0, random.Random(seed)) for seed in range(50)}
        assert len(waits) == 50
    chained = {decorrelated_jitter(1e6, 100.0, 1.0, random.Random(seed)) for seed in range(50)}
    assert len(chained) == 50


# -- generators and draws -----------------------------------------------------------------


@pytest.mark.parametrize(
    "jitter",
    [
        lambda rng: full_jitter(10.0, rng),
        lambda rng: equal_jitter(10.0, rng),
        lambda rng: decorrelated_jitter(10.0, 3.0, 1.0, rng),
        lambda rng: apply_jitter("full", 10.0, 0.0, 1.0, rng),
        lambda rng: apply_jitter("equal", 10.0, 0.0, 1.0, rng),
        lambda rng: apply_jitter("decorrelated", 10.0, 3.0, 1.0, rng),
    ],
    ids=["full", "equal", "decorrelated", "apply-full", "apply-equal", "apply-decorrelated"],
)
def test_exactly_one_draw_per_call(jitter: Callable[[random.Random | None], float]) -> None:
    for seed in (0, 1, 12345):
        rng = random.Random(seed)
        jitter(rng)
        assert rng.getstate() == one_draw_state(seed)
        counting = FixedDraw(0.5)
        jitter(counting)
        assert counting.calls == 1


def test_no_jitter_draws_nothing() -> None:
    counting = FixedDraw(0.5)
    assert apply_jitter("none", 7.5, 3.0, 1.0, counting) == 7.5
    assert counting.calls == 0


@pytest.mark.usefixtures("module_random")
@pytest.mark.parametrize(
    "jitter",
    [
        lambda rng: full_jitter(10.0, rng),
        lambda rng: equal_jitter(10.0, rng),
        lambda rng: decorrelated_jitter(10.0, 3.0, 1.0, rng),
    ],
    ids=["full", "equal", "decorrelated"],
)
def test_no_rng_uses_the_module_generator(
    jitter: Callable[[random.Random | None], float],
) -> None:
    random.seed(2024)
    first = jitter(None)
    assert random.getstate() == one_draw_state(2024)
    random.seed(2024)
    assert jitter(None) == first
    # random.seed(S) and random.Random(S) give the same stream.
    assert jitter(random.Random(2024)) == first


@pytest.mark.parametrize("mode", ["full", "equal", "decorrelated"])
def test_apply_jitter_dispatches_to_the_named_jitter(mode: JitterMode) -> None:
    named: dict[str, Callable[[random.Random], float]] = {
        "full": lambda rng: full_jitter(9.0, rng),
        "equal": lambda rng: equal_jitter(9.0, rng),
        "decorrelated": lambda rng: decorrelated_jitter(9.0, 2.0, 1.0, rng),
    }
    for seed in range(20):
        got = apply_jitter(mode, 9.0, 2.0, 1.0, random.Random(seed))
        assert got == named[mode](random.Random(seed))


@settings(max_examples=200, deadline=None)
@given(seeds, st.lists(st.floats(0.0, 1e6), min_size=1, max_size=50))
def test_seeded_generator_replays_the_same_waits(seed: int, nominal: list[float]) -> None:
    def run(rng: random.Random) -> list[float]:
        waits, previous = [], 0.0
        for delay in nominal:
            waits.append(full_jitter(delay, rng))
            waits.append(equal_jitter(delay, rng))
            previous = decorrelated_jitter(delay, previous, 0.5, rng)
            waits.append(previous)
        return waits

    assert run(random.Random(seed)) == run(random.Random(seed))
