"""The guarantee, as properties: no run ends past its budget or past its deadline.

Attempts are never longer than the longest earlier one (or the declared duration), with
the policy's own waits or a fixed wait that the solver did not count; only the stop's
guard keeps the promise then.

Time is virtual: freezegun freezes ``time.monotonic()`` and ``datetime.now()`` together, an
attempt that "takes" seven seconds advances the frozen clock by seven seconds, and every
sleep handed to tenacity records its duration and advances the clock by it (a fresh
:class:`~tests._helpers.Clock` per example). No test sleeps for real and no test measures
real time.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest
import tenacity
from freezegun import freeze_time
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget import BackoffPolicy, remaining
from tests._helpers import EPS, START, Clock, exhaust, policies


def budget_policies() -> st.SearchStrategy[BackoffPolicy]:
    """Valid policies affording at most a few hundred retries.

    base + 2 * attempt_duration < max_elapsed, so at least one retry is affordable by
    construction: a policy the model refuses fails the test instead of being skipped.
    """
    return policies(
        base=(0.05, 5),
        factor=st.floats(1.1, 4),
        cap_ratio=(1, 20),
        budget_ratio=(1, 15),
        exact_budgets=0,
        durations="within_budget",
        most_retries=None,
        reject_invalid=False,
    )


# Shares of the longest attempt so far; exactly 1.0 (as long as allowed) is the edge case.
SHARES = st.lists(st.just(1.0) | st.floats(0, 1), min_size=1, max_size=6)


SHARES = st.lists(st.just(1.0) | st.floats(0, 1), min_size=1, max_size=6)
# None: the policy's own waits; a number: a fixed wait of that share of the cap instead.
WAIT_SHARES = st.none() | st.floats(0.05, 3)


def micro(seconds: float) -> float:
    """``seconds`` rounded down to whole microseconds, the resolution of the frozen clock."""
    return math.floor(seconds * 1e6) / 1e6


def guarded_run(
    policy: BackoffPolicy,
    seed: int,
    first: float,
    shares: list[float],
    window: float | None,
    wait: float | None,
) -> None:
    """Run ``policy`` on attempts no longer than the longest earlier one; check the promise.

    The first attempt takes ``first`` seconds; attempt ``i > 0`` takes ``shares[i % len]`` of
    the larger of ``attempt_duration`` and the longest attempt so far. With ``wait``, every
    sleep is that fixed wait instead of the policy's (``policy.retry(wait=...)``): the solver's
    count then no longer matches the sleeps, and only the stop's guard keeps the promise.
    """
    options: dict[str, Any] = {} if wait is None else {"wait": tenacity.wait_fixed(wait)}
    with freeze_time(START) as frozen:
        clock = Clock(frozen)
        deadline = None if window is None else START + timedelta(seconds=window)
        end = policy.max_elapsed if window is None else min(policy.max_elapsed, window)
        longest = 0.0
        count = 0
        readings: list[tuple[float | None, float]] = []

        @policy.retry(seed=seed, sleep=clock.sleep, deadline=deadline, **options)
        def attempt() -> None:
            nonlocal longest, count
            readings.append((remaining(), clock.elapsed()))
            if count == 0:
                took = micro(first)
            else:
                bound = max(policy.attempt_duration, longest)
                took = micro(shares[count % len(shares)] * bound)
            longest = max(longest, took)
            count += 1
            clock.tick(took)
            raise OSError("down")

        report = exhaust(attempt).report
        assert clock.elapsed() <= policy.max_elapsed + EPS
        if deadline is not None:
            assert clock.wall() <= deadline + timedelta(seconds=EPS)
        assert report.attempts == count
        previous = math.inf
        for value, at in readings:
            assert value is not None
            assert value <= previous
            assert value == pytest.approx(max(0.0, end - at), abs=EPS)
            previous = value


@settings(max_examples=75, deadline=None)
@given(
    policy=budget_policies(),
    seed=st.integers(0, 2**32),
    first_share=st.floats(0, 1),
    shares=SHARES,
    wait_share=WAIT_SHARES,
)
def test_no_run_ends_past_its_budget(
    policy: BackoffPolicy,
    seed: int,
    first_share: float,
    shares: list[float],
    wait_share: float | None,
) -> None:
    """The first attempt fits the budget, no later attempt outlasts the estimate: no overrun."""
    wait = None if wait_share is None else wait_share * policy.cap
    guarded_run(policy, seed, first_share * policy.max_elapsed, shares, None, wait)


@settings(max_examples=75, deadline=None)
@given(
    policy=budget_policies(),
    seed=st.integers(0, 2**32),
    window_share=st.floats(0.01, 2),
    first_share=st.floats(0, 1),
    shares=SHARES,
    wait_share=WAIT_SHARES,
)
def test_no_run_ends_past_its_deadline(
    policy: BackoffPolicy,
    seed: int,
    window_share: float,
    first_share: float,
    shares: list[float],
    wait_share: float | None,
) -> None:
    """Same with an absolute deadline, before or after the budget's end."""
    window = window_share * policy.max_elapsed
    wait = None if wait_share is None else wait_share * policy.cap
    first = first_share * min(window, policy.max_elapsed)
    guarded_run(policy, seed, first, shares, window, wait)


@settings(max_examples=40, deadline=None)
@given(
    policy=budget_policies(),
    seed=st.integers(0, 2**32),
    shares=SHARES,
    wait_share=WAIT_SHARES,
)
def test_attempts_within_declared_duration_never_overrun(
    policy: BackoffPolicy, seed: int, shares: list[float], wait_share: float | None
) -> None:
    """Every attempt, the first included, no longer than ``attempt_duration``."""
    wait = None if wait_share is None else wait_share * policy.cap
    guarded_run(policy, seed, shares[0] * policy.attempt_duration, shares, None, wait)
