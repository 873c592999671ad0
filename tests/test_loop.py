"""The straight attempt loop (``_loop``) behaves exactly as tenacity's own controllers.

Each test runs one scripted function under tenacity's ``Retrying``/``AsyncRetrying`` and
under ``Loop``/``AsyncLoop`` with the same arguments, and compares everything a user can
see: the hooks' calls in order (with the attempt, sleep and outcome each saw), the sleeps,
the result or error, and the statistics.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

import pytest
import tenacity
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget._loop import AsyncLoop, Loop

# An attempt's outcome: a value returned, or an exception class raised.
OUTCOMES = st.lists(
    st.sampled_from(["ok", "again", ValueError, KeyError, tenacity.TryAgain]),
    min_size=1,
    max_size=6,
)


def _script(outcomes: list[Any]) -> Callable[[], Any]:
    """A function returning or raising the next outcome (the last one repeats)."""
    calls = [0]

    def fn() -> Any:
        outcome = outcomes[min(calls[0], len(outcomes) - 1)]
        calls[0] += 1
        if isinstance(outcome, type):
            raise outcome(f"attempt {calls[0]}")
        return outcome

    return fn


def _seen(log: list[tuple[Any, ...]], name: str) -> Callable[[tenacity.RetryCallState], None]:
    def hook(rs: tenacity.RetryCallState) -> None:
        outcome = rs.outcome
        what = None
        if outcome is not None:
            what = type(outcome.exception()) if outcome.failed else outcome.result()
        log.append((name, rs.attempt_number, rs.upcoming_sleep, rs.idle_for, what))

    return hook


def _options(log: list[tuple[Any, ...]], draw: dict[str, Any]) -> dict[str, Any]:
    sleeps: list[Any] = []
    log.append(("sleeps", sleeps))
    retry = tenacity.retry_if_exception_type(ValueError) | tenacity.retry_if_result(
        lambda r: r == "again"
    )

    def retried(rs: tenacity.RetryCallState) -> bool:
        # The predicate may raise, and sees whatever exception is being handled (none).
        log.append(("retry", rs.attempt_number, sys.exc_info()[0]))
        if rs.attempt_number == draw["raise_at"]:
            raise LookupError("the predicate failed")
        return retry(rs)

    options: dict[str, Any] = {
        "stop": tenacity.stop_after_attempt(draw["attempts"]),
        "wait": tenacity.wait_incrementing(start=1, increment=2),
        "retry": retried,
        "sleep": lambda seconds: sleeps.append((type(seconds).__name__, seconds)),
        "before": _seen(log, "before"),
        "after": _seen(log, "after"),
        "reraise": draw["reraise"],
        "enabled": draw["enabled"],
    }
    if draw["before_sleep"]:
        seen = _seen(log, "before_sleep")

        def before_sleep(rs: tenacity.RetryCallState) -> None:
            seen(rs)
            if rs.attempt_number == draw["give_up_at"]:  # a hook changing its controller
                rs.retry_object.retry = tenacity.retry_never
                rs.retry_object.before = _seen(log, "before, replaced")

        options["before_sleep"] = before_sleep
    if draw["callback"]:
        options["retry_error_callback"] = lambda rs: ("gave up", rs.attempt_number)
    return options


def _ended(call: Callable[[], Any]) -> tuple[Any, ...]:
    try:
        return ("returned", call())
    except tenacity.RetryError as exc:
        return ("retry error", type(exc), exc.last_attempt.attempt_number)
    except Exception as exc:  # with what it was raised during or from
        return ("raised", type(exc), str(exc), type(exc.__context__), type(exc.__cause__))


def _stats(controller: tenacity.BaseRetrying) -> dict[str, Any]:
    stats = dict(controller.statistics)
    stats.pop("start_time", None)  # a clock reading each
    stats.pop("delay_since_first_attempt", None)
    return stats


DRAWS = st.fixed_dictionaries(
    {
        "attempts": st.integers(1, 5),
        "reraise": st.booleans(),
        "enabled": st.booleans(),
        "before_sleep": st.booleans(),
        "callback": st.booleans(),
        "raise_at": st.integers(0, 4),  # 0: the predicate never raises
        "give_up_at": st.integers(0, 4),  # 0: no hook changes the controller
    }
)


@settings(max_examples=300, deadline=None)
@given(outcomes=OUTCOMES, draw=DRAWS)
def test_the_sync_loop_is_tenacity_s_retrying(outcomes: list[Any], draw: dict[str, Any]) -> None:
    runs = []
    for kind in (tenacity.Retrying, Loop):
        log: list[tuple[Any, ...]] = []
        controller = kind(**_options(log, draw))
        ended = _ended(lambda c=controller: c(_script(outcomes)))
        runs.append((ended, log, _stats(controller)))
    assert runs[0] == runs[1]


def _async_options(
    log: list[tuple[Any, ...]], draw: dict[str, Any], awaited: bool
) -> dict[str, Any]:
    options = _options(log, draw)
    sync_sleep = options.pop("sleep")

    async def sleep(seconds: float) -> None:
        sync_sleep(seconds)

    options["sleep"] = sleep
    if awaited:  # every hook a coroutine function, as AsyncRetrying allows
        for name in ("before", "after", "before_sleep", "retry_error_callback"):
            if name in options:
                options[name] = _awaited(options[name])
        options["retry"] = _awaited(options["retry"])
        options["stop"] = _awaited(options["stop"])
        options["wait"] = _awaited(options["wait"])
    return options


def _awaited(hook: Callable[..., Any]) -> Callable[..., Any]:
    async def hook_async(rs: tenacity.RetryCallState) -> Any:
        return hook(rs)

    return hook_async


@settings(max_examples=200, deadline=None)
@given(outcomes=OUTCOMES, draw=DRAWS, awaited=st.booleans(), coroutine=st.booleans())
def test_the_async_loop_is_tenacity_s_async_retrying(
    outcomes: list[Any], draw: dict[str, Any], awaited: bool, coroutine: bool
) -> None:
    runs = []
    for kind in (tenacity.AsyncRetrying, AsyncLoop):
        log: list[tuple[Any, ...]] = []
        controller = kind(**_async_options(log, draw, awaited))
        fn = _script(outcomes)

        async def fn_async(fn: Callable[[], Any] = fn) -> Any:
            return fn()

        target = fn_async if coroutine else fn

        async def run(c: Any = controller, target: Any = target) -> Any:
            return await c(target)

        ended = _ended(lambda run=run: asyncio.run(run()))
        runs.append((ended, log, _stats(controller)))
    assert runs[0] == runs[1]


def test_one_loop_serves_concurrent_runs_each_with_its_own_statistics() -> None:
    loop = Loop(stop=tenacity.stop_after_attempt(3), sleep=lambda s: None)
    inner_stats: dict[str, Any] = {}
    outer_stats: dict[str, Any] = {}

    def inner() -> str:
        return "inner"

    def outer() -> str:
        # A run of the same controller inside a run of it (recursion, another thread).
        assert loop.run(inner, (), {}, inner_stats) == "inner"
        return "outer"

    assert loop.run(outer, (), {}, outer_stats) == "outer"
    assert inner_stats["attempt_number"] == outer_stats["attempt_number"] == 1


@pytest.mark.parametrize("kind", [Loop, AsyncLoop])
def test_copies_keep_the_straight_loop(kind: type[tenacity.BaseRetrying]) -> None:
    # retry_with() and copy() make a controller of the same class.
    assert type(kind().copy(stop=tenacity.stop_after_attempt(2))) is kind


def test_a_hook_reads_the_run_s_statistics_through_its_retry_object() -> None:
    from tenacity_budget import BackoffPolicy

    seen: list[int] = []
    policy = BackoffPolicy(base=0.01, cap=0.01, max_elapsed=60, jitter="none")
    calls = [0]

    @policy.retry(
        sleep=lambda s: None,
        before_sleep=lambda rs: seen.append(rs.retry_object.statistics["attempt_number"]),
    )
    def flaky() -> str:
        calls[0] += 1
        if calls[0] < 3:
            raise ValueError("transient")
        return "ok"

    assert flaky() == "ok"
    assert seen == [2, 3]  # tenacity counts the coming attempt before before_sleep
    assert flaky.statistics["attempt_number"] == 3  # type: ignore[attr-defined]


def test_an_async_loop_follows_a_strategy_replaced_between_runs() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    loop = AsyncLoop(stop=tenacity.stop_after_attempt(2), wait=tenacity.wait_fixed(1), sleep=sleep)
    fails = _script([ValueError, "ok"])
    assert asyncio.run(loop(fails)) == "ok"

    async def wait_async(rs: tenacity.RetryCallState) -> float:
        return 2.0

    loop.wait = wait_async  # now a coroutine function: awaited, as AsyncRetrying would
    assert asyncio.run(loop(_script([ValueError, "ok"]))) == "ok"
    assert slept == [1.0, 2.0]


def test_concurrent_tasks_each_see_their_own_run_through_retry_object() -> None:
    from tenacity_budget import BackoffPolicy

    seen: list[tuple[str, int, int]] = []
    policy = BackoffPolicy(base=0.01, cap=0.01, max_elapsed=60, jitter="none")

    async def no_sleep(seconds: float) -> None:
        await asyncio.sleep(0)  # lets the other task run between attempts

    def note(rs: tenacity.RetryCallState) -> None:
        stats = rs.retry_object.statistics
        seen.append((rs.args[0], rs.attempt_number, stats["attempt_number"]))
        rs.retry_object.stop = tenacity.stop_never  # this run's own controller only

    @policy.retry(sleep=no_sleep, before_sleep=note)
    async def flaky(tag: str, fails: list[int]) -> str:
        if fails[0]:
            fails[0] -= 1
            raise ValueError(tag)
        return tag

    async def both() -> list[str]:
        return list(await asyncio.gather(flaky("A", [3]), flaky("B", [1])))

    assert asyncio.run(both()) == ["A", "B"]
    # Each hook saw its own run's count (tenacity counts the coming attempt first).
    assert sorted(seen) == [("A", 1, 2), ("A", 2, 3), ("A", 3, 4), ("B", 1, 2)]
    assert flaky.retry.stop is not tenacity.stop_never  # type: ignore[attr-defined]
