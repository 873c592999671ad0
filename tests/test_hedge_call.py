"""``hedged_call``: what ``policy.retry(hedge=...)`` runs for a call of a coroutine function.

A budgeted run like any other: its frame (``remaining()`` in attempts), the observers, and
``BudgetExhausted`` with the report (``hedges``, ``hedges_won``) when it gives up. Also the
hypothesis properties of every hedged run: it never ends after its deadline, and never sends
more than ``max_attempts`` attempts nor more hedges than the retry budget grants.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget import BackoffPolicy, BudgetExhausted, Hedge, StopReason, deadline_scope
from tenacity_budget.context import Horizon
from tenacity_budget.hedge import HedgedOutcome, check_target, hedged_call
from tenacity_budget.state import run_state
from tests._hedging import CountingBudget, FakeThrottle, HedgeObserver, Response, Script, simulate

POLICY = BackoffPolicy(base=0.1, cap=1.0, max_elapsed=2.0, attempt_duration=0.1)
SLOW = 10.0


def call(hedge: Hedge, script: Script, **options: Any) -> Any:
    async def main() -> Any:
        return await hedged_call(hedge, script, terms=POLICY.terms, name="fetch", **options)

    return simulate(main)


def test_a_sync_function_is_refused_saying_why() -> None:
    def sync() -> None: ...

    async def coroutine() -> None: ...

    check_target(coroutine, "coroutine")
    with pytest.raises(TypeError, match=r"hedge= needs a coroutine function, and m.sync"):
        check_target(sync, "m.sync")


def test_the_winners_result_is_returned_and_observers_told() -> None:
    observer = HedgeObserver()
    script = Script([(SLOW, "slow"), (0.05, "fast")])
    assert call(Hedge(0.1), script, observers=[observer]) == "fast"
    assert observer.calls == ["fetch"]
    assert observer.successes == [("fetch", 2)]
    assert observer.hedges == [("fetch", True)]
    assert observer.exhausted == []


def test_args_and_kwargs_reach_every_attempt() -> None:
    seen: list[tuple[Any, ...]] = []

    async def fn(a: int, *, b: int) -> int:
        seen.append((a, b))
        await asyncio.sleep(0.5 if len(seen) == 1 else 0.01)
        return a + b

    async def main() -> int:
        return await hedged_call(Hedge(0.1), fn, (1,), {"b": 2}, terms=POLICY.terms)

    assert simulate(main) == 3
    assert seen == [(1, 2), (1, 2)]


def test_remaining_inside_attempts_counts_down_to_the_runs_end() -> None:
    script = Script([(SLOW, "slow"), (0.05, "fast")])
    call(Hedge(0.25), script)
    assert script.seen_remaining == [2.0, 1.75]


def test_an_enclosing_scope_bounds_the_run() -> None:
    script = Script([(SLOW, "slow")])

    async def main() -> Any:
        with deadline_scope(0.5):
            return await hedged_call(Hedge(0.1, max_attempts=5), script, terms=POLICY.terms)

    with pytest.raises(BudgetExhausted) as info:
        simulate(main)
    assert info.value.report.reason is StopReason.DEADLINE
    assert info.value.report.elapsed == pytest.approx(0.5)
    # from 0.4 on, 0.1 s (the attempt's estimate) no longer fits before the end at 0.5
    assert script.starts == pytest.approx([0.0, 0.1, 0.2, 0.3])


def test_a_fatal_exception_is_raised_as_it_is() -> None:
    observer = HedgeObserver()
    script = Script([(0.05, KeyError("missing"))])
    with pytest.raises(KeyError, match="missing"):
        call(Hedge(0.1), script, observers=[observer])
    assert observer.successes == []
    assert observer.exhausted == []


def test_a_run_that_gives_up_raises_budget_exhausted_with_the_report() -> None:
    observer = HedgeObserver()
    handed: list[Any] = []
    script = Script([(0.05, ConnectionError("reset"))])
    with pytest.raises(BudgetExhausted) as info:
        call(Hedge(0.1, max_attempts=3), script, observers=[observer], on_exhausted=handed.append)
    report = info.value.report
    assert (report.attempts, report.hedges, report.hedges_won) == (3, 2, 0)  # no hedge won
    assert report.reason is StopReason.COUNT
    assert report.affordable == 2
    assert report.budget == 2.0
    assert report.elapsed == pytest.approx(0.15)
    assert isinstance(report.last_exception, ConnectionError)
    assert isinstance(info.value.__cause__, ConnectionError)
    last = info.value.last_attempt
    assert last.attempt_number == 3
    assert isinstance(last.exception(), ConnectionError)
    assert run_state(last) is not None
    assert handed == [report]
    assert observer.exhausted == [report]
    assert observer.hedges == [("fetch", False), ("fetch", False)]
    assert report.as_dict()["hedges"] == 2


def test_a_run_ending_on_a_retryable_response_holds_it_as_its_last_result() -> None:
    script = Script([(0.05, Response(503))])
    with pytest.raises(BudgetExhausted) as info:
        call(Hedge(1.0), script)
    assert info.value.last_attempt.result() == Response(503)
    assert info.value.report.last_exception is None


def test_the_hard_stop_cuts_at_the_policys_budget() -> None:
    script = Script([(SLOW, "never")])

    async def main() -> tuple[Any, float]:
        try:
            await hedged_call(Hedge(0.5, max_attempts=5), script, terms=POLICY.terms)
        except BudgetExhausted as exc:
            return exc, time.monotonic()
        raise AssertionError("not cut")

    error, ended = simulate(main)
    assert ended == pytest.approx(2.0)
    assert error.report.reason is StopReason.WALL_CLOCK
    assert isinstance(error.report.last_exception, TimeoutError)
    assert script.starts == pytest.approx([0.0, 0.5, 1.0, 1.5])


def test_a_fixed_deadline_is_reported_and_cuts() -> None:
    async def main() -> Any:
        deadline = datetime.now(UTC) + timedelta(seconds=0.3)
        try:
            await hedged_call(
                Hedge(0.1), Script([(SLOW, "x")]), terms=POLICY.terms,
                deadline_ts=deadline.timestamp(),
            )  # fmt: skip
        except BudgetExhausted as exc:
            return exc, deadline
        raise AssertionError("not cut")

    error, deadline = simulate(main)
    assert error.report.reason is StopReason.DEADLINE
    assert error.report.deadline == deadline


def test_a_throttled_first_attempt_gives_up_at_once() -> None:
    throttle = FakeThrottle(probability=0.9, admits=False)
    budget = CountingBudget(grants=3)
    with pytest.raises(BudgetExhausted) as info:
        call(Hedge(0.1), Script([(0.1, "x")]), throttle=throttle, budget=budget)
    assert info.value.report.reason is StopReason.THROTTLED
    assert info.value.report.attempts == 0
    assert budget.deposits == 0


# -- properties -----------------------------------------------------------------------------------

OUTCOMES = st.sampled_from(["ok", Response(503), ConnectionError("reset"), Response(200)])
STEPS = st.lists(
    st.tuples(st.sampled_from([0.0, 0.01, 0.05, 0.1, 0.3, 1.0, SLOW]), OUTCOMES),
    min_size=1,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(
    steps=STEPS,
    delay=st.sampled_from([0.0, 0.02, 0.1, 0.25, 1.0]),
    max_attempts=st.integers(1, 5),
    window=st.sampled_from([0.05, 0.2, 0.5, 1.5, 30.0]),
    estimate=st.sampled_from([0.0, 0.05, 0.3]),
    grants=st.integers(0, 4),
)
def test_a_hedged_run_never_ends_after_its_deadline_nor_exceeds_its_bounds(
    steps: list[tuple[float, object]],
    delay: float,
    max_attempts: int,
    window: float,
    estimate: float,
    grants: int,
) -> None:
    script = Script(steps)
    budget = CountingBudget(grants=grants)

    async def main() -> tuple[HedgedOutcome[object], float, float]:
        began = time.monotonic()
        horizon = Horizon(None, mono_end=began + window)
        outcome = await Hedge(delay, max_attempts).run(
            script, horizon=horizon, estimate=estimate, budget=budget
        )
        return outcome, began, time.monotonic()

    outcome, began, ended = simulate(main)
    assert ended - began <= window + 1e-9  # never after its deadline
    assert outcome.attempts == len(script.starts) <= max_attempts
    assert outcome.hedges == budget.granted <= grants  # each hedge withdrew once
    assert budget.deposits == 1
    for start in script.starts[1:]:  # no hedge that could not finish before the end
        assert start + estimate <= began + window + 1e-9
    if outcome.reason is None:  # ended on an attempt's own outcome, in time
        assert outcome.winner is not None
        assert outcome.exception is None or not isinstance(outcome.exception, ConnectionError)
