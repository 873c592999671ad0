"""Tests of the contention simulator (benchmarks/contention.py), at a reduced size.

The full sweep (N = 10..190, 100 runs per point) is ``python -m benchmarks.contention``;
here the published reference point is checked qualitatively at 100 clients with fewer runs,
and the simulator's bookkeeping is checked as invariants over many small seeded runs. The
simulation is discrete-event: nothing sleeps and nothing here depends on the clock.
"""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.contention import (
    ALL_MODES,
    MODES,
    Backoff,
    SimParams,
    reference_ratio,
    run_point,
    simulate,
    sweep,
)
from tenacity_budget import nominal_delay

PARAMS = SimParams()
SETTINGS = settings(max_examples=40, deadline=None)

modes = st.sampled_from(ALL_MODES)
small_clients = st.integers(min_value=1, max_value=24)
seeds = st.integers(min_value=0, max_value=2**32 - 1)


# -- the published reference point -------------------------------------------------------


def test_full_jitter_needs_less_than_half_the_writes_of_exponential_at_100_clients() -> None:
    """Brooker (2015): at 100 clients full jitter does less than half the work of plain
    exponential backoff. Reduced to 10 runs per point; the seed keeps it reproducible."""
    full = run_point("full", 100, runs=10, budgeted=False)
    expo = run_point("exponential", 100, runs=10, budgeted=False)
    assert full.writes_mean < expo.writes_mean
    assert full.writes_mean / expo.writes_mean < 0.5


def test_jitter_beats_no_jitter_on_time_and_backoff_beats_none_on_work() -> None:
    """The post's other qualitative findings, at 50 clients: plain exponential backoff
    takes far longer than any jittered mode, and every backoff does less work than none."""
    points = {mode: run_point(mode, 50, runs=10, budgeted=False) for mode in MODES}
    for mode in ("full", "equal", "decorrelated"):
        assert points[mode].completion_ms_mean < points["exponential"].completion_ms_mean / 2
        assert points[mode].writes_mean < points["none"].writes_mean
    # Equal jitter keeps half of every wait: it takes longer than full jitter.
    assert points["equal"].completion_ms_mean > points["full"].completion_ms_mean


def test_reduced_sweep_yields_every_point_in_order_and_the_reference_ratio() -> None:
    points = sweep([10, 100], runs=4, modes=MODES)
    assert [(p.clients, p.mode) for p in points] == [(n, m) for n in (10, 100) for m in MODES]
    ratio = reference_ratio(points)
    by = {(p.mode, p.clients): p for p in points}
    assert ratio == by[("full", 100)].writes_mean / by[("exponential", 100)].writes_mean
    assert reference_ratio(points, clients=50) is None


def test_budget_share_is_a_share_and_more_clients_miss_a_tight_budget() -> None:
    few = run_point("full", 10, runs=10)
    many = run_point("full", 100, runs=10)
    for point in (few, many):
        for share in (
            point.within_budget_share,
            point.budgeted_within_share,
            point.budgeted_gave_up_share,
        ):
            assert 0.0 <= share <= 1.0
        assert point.budgeted_within_share + point.budgeted_gave_up_share <= 1.0
    assert few.within_budget_share == 1.0  # ten clients all finish well within 2 s
    assert many.within_budget_share < few.within_budget_share


# -- invariants of one run ----------------------------------------------------------------


@SETTINGS
@given(mode=modes, clients=small_clients, seed=seeds)
def test_every_client_succeeds_exactly_once_without_a_budget(
    mode: str, clients: int, seed: int
) -> None:
    result = simulate(mode, clients, seed=seed)
    assert result.succeeded == clients
    assert result.final_version == clients  # one version bump per successful write
    assert result.gave_up == 0
    # Every write either succeeded or failed, and every failure led to exactly one retry.
    assert result.writes == result.succeeded + result.retries
    assert result.writes >= clients
    assert all(math.isfinite(t) and t > 0 for t in result.finish_ms)
    assert result.completion_ms == max(result.finish_ms)
    assert result.within(math.inf) == clients


@SETTINGS
@given(mode=modes, clients=small_clients, seed=seeds, budget=st.floats(1.0, 3000.0))
def test_giving_up_accounts_for_every_client(
    mode: str, clients: int, seed: int, budget: float
) -> None:
    result = simulate(mode, clients, seed=seed, give_up_after_ms=budget)
    assert result.succeeded + result.gave_up == clients
    assert result.final_version == result.succeeded
    assert result.writes == result.succeeded + result.retries + result.gave_up
    assert sum(1 for t in result.finish_ms if math.isfinite(t)) == result.succeeded
    assert result.within(budget) <= result.succeeded


@SETTINGS
@given(mode=modes, clients=small_clients, seed=seeds)
def test_an_infinite_budget_changes_nothing(mode: str, clients: int, seed: int) -> None:
    assert simulate(mode, clients, seed=seed, give_up_after_ms=math.inf) == simulate(
        mode, clients, seed=seed
    )


@SETTINGS
@given(mode=modes, clients=small_clients, seed=seeds)
def test_runs_are_reproducible_from_their_seed(mode: str, clients: int, seed: int) -> None:
    assert simulate(mode, clients, seed=seed) == simulate(mode, clients, seed=seed)


def test_different_seeds_give_different_runs() -> None:
    runs = {simulate("full", 20, seed=s).completion_ms for s in range(5)}
    assert len(runs) == 5


@SETTINGS
@given(mode=modes, seed=seeds)
def test_a_lone_client_writes_once_after_four_message_delays(mode: str, seed: int) -> None:
    result = simulate(mode, 1, seed=seed)
    assert (result.writes, result.retries, result.succeeded) == (1, 0, 1)
    # read request + read response + write request + write response, each ~10 ms.
    assert 0 < result.completion_ms < 4 * 10 + 4 * 2 * 8


# -- the delays come from the library and stay within their nominal delay ------------------


@SETTINGS
@given(
    mode=st.sampled_from(("exponential", "full", "equal", "decorrelated-bounded")),
    clients=st.integers(2, 30),
    seed=seeds,
)
def test_bounded_modes_never_wait_past_the_nominal_delay(
    mode: str, clients: int, seed: int
) -> None:
    result = simulate(mode, clients, seed=seed)
    assert result.max_wait_over_nominal <= 1.0
    if mode == "exponential" and result.retries:
        assert result.max_wait_over_nominal == 1.0


def test_the_posts_decorrelated_jitter_outruns_the_nominal_delay_and_ours_does_not() -> None:
    """The AWS formula is capped by the global cap only, so early waits exceed their nominal
    delay; the library's bounded form keeps within it (that is what keeps the budget)."""
    post = simulate("decorrelated", 40, seed=1)
    ours = simulate("decorrelated-bounded", 40, seed=1)
    assert post.max_wait_over_nominal > 1.0
    assert ours.max_wait_over_nominal <= 1.0


def test_no_backoff_mode_never_waits() -> None:
    backoff = Backoff("none", PARAMS, random.Random(0))
    assert [backoff.wait(n) for n in range(1, 20)] == [0.0] * 19


@SETTINGS
@given(n=st.integers(1, 40), seed=seeds)
def test_backoff_waits_match_the_library_functions(n: int, seed: int) -> None:
    nominal = nominal_delay(n, PARAMS.base_ms, 2.0, PARAMS.cap_ms)
    assert Backoff("exponential", PARAMS, random.Random(seed)).wait(n) == nominal
    assert 0.0 <= Backoff("full", PARAMS, random.Random(seed)).wait(n) <= nominal
    assert nominal / 2 <= Backoff("equal", PARAMS, random.Random(seed)).wait(n) <= nominal
    post = Backoff("decorrelated", PARAMS, random.Random(seed))
    first = post.wait(n)
    assert PARAMS.base_ms <= first <= 3 * PARAMS.base_ms  # uniform(base, 3 * base)
    assert PARAMS.base_ms <= post.wait(n + 1) <= min(PARAMS.cap_ms, 3 * first)


def test_the_post_exponent_starts_at_one() -> None:
    """As in the post's simulator, the first wait's nominal delay is 2 * base (10 ms)."""
    backoff = Backoff("exponential", PARAMS, random.Random(0))
    assert [backoff.wait(n) for n in (1, 2, 3)] == [10.0, 20.0, 40.0]
    assert backoff.wait(30) == PARAMS.cap_ms


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: simulate("sideways", 3, seed=0), "unknown mode"),
        (lambda: simulate("full", 0, seed=0), "clients must be >= 1"),
    ],
)
def test_bad_arguments_are_refused(call: object, message: str) -> None:
    assert callable(call)
    with pytest.raises(ValueError, match=message):
        call()
