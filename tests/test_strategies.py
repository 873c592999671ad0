"""Tests of the tenacity adapters ``wait_budget`` and ``stop_budget`` in plain tenacity code.

Nothing sleeps for real: every ``Retrying`` gets a ``sleep=`` recorder (an ``async`` one for
``AsyncRetrying``). Where a run's measured attempt times could matter (a retry that needs the
whole budget), the clock is frozen with freezegun, so attempts take no time at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import random
import threading
import tracemalloc
import weakref
from collections.abc import Iterator
from fractions import Fraction
from typing import Any, NoReturn

import pytest
from freezegun import freeze_time
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    RetryError,
    Retrying,
    retry,
    retry_if_exception_type,
    retry_if_result,
    stop_after_attempt,
    wait_fixed,
)
from tenacity.stop import stop_all, stop_any, stop_base
from tenacity.wait import wait_base, wait_combine

from tenacity_budget import BackoffPolicy, stop_budget, wait_budget
from tenacity_budget._config import set_testing_attempts, testing_attempts
from tenacity_budget.jitter import JitterMode
from tests._helpers import MODES, policies, solver_is_exact

JITTERED: tuple[JitterMode, ...] = ("full", "equal", "decorrelated")
FROZEN_AT = "2030-01-01T00:00:00+00:00"


def policy_of(jitter: JitterMode = "none", **fields: Any) -> BackoffPolicy:
    """The design notes' example policy (9 retries, 243 s nominal), with changes."""
    values: dict[str, Any] = {"base": 1, "factor": 2, "cap": 60, "max_elapsed": 300}
    values.update(fields)
    return BackoffPolicy(jitter=jitter, **values)


class Attempt(Exception):
    """The failure of one attempt; knows its (1-based) attempt number."""

    def __init__(self, number: int) -> None:
        super().__init__(f"attempt {number} failed")
        self.number = number


class AlwaysFails:
    """A function that fails every call, counting them."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> NoReturn:
        self.calls += 1
        raise Attempt(self.calls)


def failed_run(
    wait: wait_base, stop: stop_base, **kwargs: Any
) -> tuple[int, list[float], RetryError]:
    """Run an always-failing function under ``Retrying``; its calls, sleeps and error."""
    sleeps: list[float] = []
    function = AlwaysFails()
    try:
        Retrying(wait=wait, stop=stop, sleep=sleeps.append, **kwargs)(function)
    except RetryError as error:
        return function.calls, sleeps, error
    raise AssertionError("an always-failing function cannot succeed")


@pytest.fixture(autouse=True)
def testing_mode_off() -> Iterator[None]:
    """These tests are about the real schedule: make sure the zero-wait switch is off."""
    before = testing_attempts()
    set_testing_attempts(None)
    yield
    set_testing_attempts(before)


# -- what the strategies are --------------------------------------------------------------


def test_strategies_are_tenacity_strategies() -> None:
    policy = policy_of()
    assert issubclass(wait_budget, wait_base)
    assert issubclass(stop_budget, stop_base)
    assert isinstance(policy.wait(), wait_budget)
    assert isinstance(policy.wait(seed=1), wait_budget)
    assert isinstance(policy.wait(rng=random.Random(1)), wait_budget)
    assert isinstance(policy.stop(), stop_budget)
    assert isinstance(policy.wait() + wait_fixed(1), wait_combine)
    assert isinstance(policy.stop() | stop_after_attempt(2), stop_any)
    assert isinstance(policy.stop() & stop_after_attempt(2), stop_all)


def test_wait_refuses_seed_and_rng_together() -> None:
    with pytest.raises(ValueError, match="seed"):
        policy_of("full").wait(seed=1, rng=random.Random(1))


# -- the core semantics -------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy",
    [
        policy_of(),
        policy_of(max_elapsed=63),
        policy_of(max_elapsed=15 * 60),
        policy_of(base=0.5, factor=3, cap=40, max_elapsed=500),
        policy_of(base=60, cap=60, max_elapsed=300),
        policy_of(attempt_duration=5),
        policy_of(attempt_duration=6),
        policy_of(base=300, cap=300, max_elapsed=300),
    ],
    ids=repr,
)
def test_always_failing_function_is_called_max_attempts_plus_one_times(
    policy: BackoffPolicy,
) -> None:
    sleeps: list[float] = []
    calls = 0

    @retry(wait=policy.wait(), stop=policy.stop(), sleep=sleeps.append)
    def always_fails() -> NoReturn:
        nonlocal calls
        calls += 1
        raise Attempt(calls)

    with freeze_time(FROZEN_AT), pytest.raises(RetryError) as caught:
        always_fails()
    assert calls == policy.max_attempts() + 1
    assert sleeps == policy.waits()
    assert math.fsum(sleeps) <= policy.max_elapsed
    last = caught.value.last_attempt
    assert last.attempt_number == calls
    assert isinstance(last.exception(), Attempt)


def run_policies(modes: tuple[JitterMode, ...] = ("none",)) -> st.SearchStrategy[BackoffPolicy]:
    """Valid policies affording at most a few hundred retries, without attempt durations.

    Half of the budgets are an exact partial sum of the nominal delays (the float nearest
    to it), the boundary where a float running total can disagree with the solver.
    """
    return policies(
        modes,
        cap_ratio=(0.5, 100.0),
        budget_ratio=(1.0, 100.0),
        exact_budgets=2,
        durations="none",
        most_retries=500,
    )


@settings(max_examples=100, deadline=None)
@given(run_policies())
def test_any_policy_makes_exactly_its_affordable_calls(policy: BackoffPolicy) -> None:
    assume(solver_is_exact(policy))
    with freeze_time(FROZEN_AT):
        calls, sleeps, _ = failed_run(policy.wait(), policy.stop())
    assert calls == policy.max_attempts() + 1
    assert sleeps == list(policy.nominal_delays())
    assert sleeps == policy.waits()


def test_a_budget_exactly_spent_is_spent() -> None:
    # 16 * 0.1 == 1.6 exactly, so the solver affords 16 retries of 0.1 s; tenacity's float
    # running total (idle_for) reaches 1.6000000000000003 and must not cut the 16th.
    assert 16 * Fraction(0.1) == Fraction(1.6)
    policy = BackoffPolicy(base=0.1, cap=0.1, max_elapsed=1.6, jitter="none")
    assert policy.max_attempts() == 16
    with freeze_time(FROZEN_AT):
        calls, sleeps, _ = failed_run(policy.wait(), policy.stop())
    assert (calls, sleeps) == (17, [0.1] * 16)


@pytest.mark.parametrize("mode", MODES)
def test_seed_replays_the_seeded_schedule_in_every_run(mode: JitterMode) -> None:
    policy = policy_of(mode)
    expected = policy.waits(random.Random(1234))
    sleeps: list[float] = []
    calls = 0

    @retry(wait=policy.wait(seed=1234), stop=policy.stop(), sleep=sleeps.append)
    def always_fails() -> NoReturn:
        nonlocal calls
        calls += 1
        raise Attempt(calls)

    for _ in range(3):
        sleeps.clear()
        calls = 0
        with pytest.raises(RetryError):
            always_fails()
        assert sleeps == expected
        assert calls == policy.max_attempts() + 1
    if mode != "none":
        assert expected != policy.waits(random.Random(4321))


@pytest.mark.usefixtures("module_random")
@pytest.mark.parametrize("mode", JITTERED)
def test_seeded_runs_leave_the_module_generator_alone(mode: JitterMode) -> None:
    policy = policy_of(mode)
    random.seed(5)
    failed_run(policy.wait(seed=9), policy.stop())
    untouched = random.Random(5)
    assert random.random() == untouched.random()


@pytest.mark.usefixtures("module_random")
@pytest.mark.parametrize("mode", JITTERED)
def test_shared_rng_stream_continues_across_runs(mode: JitterMode) -> None:
    policy = policy_of(mode)
    shared = random.Random(77)
    wait = policy.wait(rng=shared)
    _, first, _ = failed_run(wait, policy.stop())
    _, second, _ = failed_run(wait, policy.stop())
    continuation = random.Random(77)
    assert first == policy.waits(continuation)
    assert second == policy.waits(continuation)
    assert shared.getstate() == continuation.getstate()
    assert first != second


@pytest.mark.usefixtures("module_random")
@pytest.mark.parametrize("mode", JITTERED)
def test_shared_rng_draws_only_from_that_rng(mode: JitterMode) -> None:
    policy = policy_of(mode)
    random.seed(5)
    failed_run(policy.wait(rng=random.Random(1)), policy.stop())
    assert random.random() == random.Random(5).random()


@pytest.mark.parametrize("mode", JITTERED)
@pytest.mark.parametrize("shape", ["budget alone", "budget | other", "other | budget"])
def test_two_waits_of_one_run_each_draw_from_their_own_generator(
    mode: JitterMode, shape: str
) -> None:
    policy = policy_of(mode)
    wait = policy.wait(rng=random.Random(1)) + policy.wait(rng=random.Random(2))
    other = stop_after_attempt(1_000)
    stop: stop_base = policy.stop()
    if shape == "budget | other":
        stop = stop | other
    elif shape == "other | budget":
        stop = other | stop
    _, sleeps, _ = failed_run(wait, stop)
    each = zip(policy.waits(random.Random(1)), policy.waits(random.Random(2)), strict=True)
    assert sleeps
    assert sleeps == [first + second for first, second in each][: len(sleeps)]


def test_the_stop_decides_without_an_outcome_or_a_controller() -> None:
    stop = policy_of().stop()
    no_outcome = RetryCallState(Retrying(stop=stop), fn=None, args=(), kwargs={})
    no_outcome.upcoming_sleep = math.inf  # a sleep no budget affords
    assert stop(no_outcome) is True
    no_controller = RetryCallState(None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    no_controller.upcoming_sleep = 1.0
    assert stop(no_controller) is False


@pytest.mark.usefixtures("module_random")
@pytest.mark.parametrize("mode", JITTERED)
def test_no_rng_draws_from_the_module_generator(mode: JitterMode) -> None:
    policy = policy_of(mode)
    random.seed(31)
    _, sleeps, _ = failed_run(policy.wait(), policy.stop())
    assert sleeps == policy.waits(random.Random(31))


# -- no state outlives a run --------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "how"),
    [("decorrelated", "seed"), ("full", "seed"), ("decorrelated", "rng"), ("equal", "none")],
)
def test_runs_leave_nothing_behind(mode: JitterMode, how: str) -> None:
    policy = BackoffPolicy(base=1, cap=1, max_elapsed=3, jitter=mode)
    if how == "seed":
        wait = policy.wait(seed=3)
    elif how == "rng":
        wait = policy.wait(rng=random.Random(3))
    else:
        wait = policy.wait()
    stop = policy.stop()
    states: list[weakref.ref[RetryCallState]] = []

    def remember(retry_state: RetryCallState) -> None:
        states.append(weakref.ref(retry_state))

    def run() -> None:
        with contextlib.suppress(RetryError):
            Retrying(wait=wait, stop=stop, sleep=lambda _: None, before=remember)(AlwaysFails())

    wait_attributes, stop_attributes = dict(vars(wait)), dict(vars(stop))
    for _ in range(50):  # warm caches (tenacity, typing) before measuring
        run()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        for _ in range(1_000):
            run()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    ours = [tracemalloc.Filter(True, "*tenacity_budget*")]
    growth = sum(
        stat.size_diff
        for stat in after.filter_traces(ours).compare_to(before.filter_traces(ours), "filename")
    )
    assert growth < 8_000, f"{growth} bytes allocated by tenacity_budget stayed alive"
    assert len(states) == 1_050 * 4  # every run made its 4 attempts
    assert all(ref() is None for ref in states), "a RetryCallState outlived its run"
    assert vars(wait) == wait_attributes
    assert vars(stop) == stop_attributes


# -- composition --------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(
    run_policies(modes=MODES),
    st.floats(0.0, 1.0),
    st.integers(0, 2**32),
)
def test_composed_wait_never_sleeps_past_the_budget(
    policy: BackoffPolicy, share: float, seed: int
) -> None:
    extra = share * policy.max_elapsed
    with freeze_time(FROZEN_AT):
        calls, sleeps, _ = failed_run(policy.wait(seed=seed) + wait_fixed(extra), policy.stop())
    assert math.fsum(sleeps) <= policy.max_elapsed
    assert calls == len(sleeps) + 1 <= policy.max_attempts() + 1
    drawn = policy.waits(random.Random(seed))
    assert sleeps == [wait + extra for wait in drawn[: len(sleeps)]]
    if len(sleeps) < min(policy.max_attempts(), len(drawn)):
        # It stopped before the count ran out: only because the next sleep would cross.
        refused = drawn[len(sleeps)] + extra
        assert math.fsum([*sleeps, refused]) > policy.max_elapsed


def test_composed_wait_stops_before_the_crossing_sleep() -> None:
    policy = policy_of()  # waits 1, 2, 4, 8, 16, 32, 60, 60, 60
    calls, sleeps, _ = failed_run(policy.wait() + wait_fixed(10), policy.stop())
    # 11 + 12 + 14 + 18 + 26 + 42 + 70 == 193; the next (70) would make 263 <= 300: allowed;
    # then 70 more would make 333: stopped.
    assert sleeps == [11.0, 12.0, 14.0, 18.0, 26.0, 42.0, 70.0, 70.0]
    assert calls == 9
    assert sum(sleeps) == 263


def test_stop_or_attempt_count() -> None:
    policy = policy_of()
    calls, sleeps, _ = failed_run(policy.wait(), policy.stop() | stop_after_attempt(2))
    assert (calls, sleeps) == (2, [1.0])
    calls, sleeps, _ = failed_run(policy.wait(), stop_after_attempt(20) | policy.stop())
    assert (calls, sleeps) == (10, policy.waits())


def test_stop_and_attempt_count() -> None:
    policy = policy_of()
    # Both must agree: the budget's stop comes later than the second attempt.
    calls, sleeps, _ = failed_run(policy.wait(), policy.stop() & stop_after_attempt(2))
    assert (calls, sleeps) == (10, policy.waits())
    calls, sleeps, _ = failed_run(wait_fixed(1), stop_after_attempt(3) & policy.stop())
    assert (calls, sleeps) == (10, [1.0] * 9)


# -- every tenacity entry point -----------------------------------------------------------


def test_retrying_called_with_arguments() -> None:
    policy = policy_of("full")
    sleeps: list[float] = []
    seen: list[tuple[int, str]] = []

    def flaky(x: int, *, label: str) -> str:
        seen.append((x, label))
        if len(seen) < 4:
            raise Attempt(len(seen))
        return f"{label}{x}"

    retrying = Retrying(wait=policy.wait(seed=8), stop=policy.stop(), sleep=sleeps.append)
    assert retrying(flaky, 5, label="ok") == "ok5"
    assert seen == [(5, "ok")] * 4
    assert sleeps == policy.waits(random.Random(8))[:3]


def test_retrying_iterated() -> None:
    policy = policy_of("equal")
    sleeps: list[float] = []
    calls = 0

    def iterate() -> None:
        nonlocal calls
        for attempt in Retrying(wait=policy.wait(seed=2), stop=policy.stop(), sleep=sleeps.append):
            with attempt:
                calls += 1
                raise Attempt(calls)

    with pytest.raises(RetryError) as caught:
        iterate()
    assert calls == policy.max_attempts() + 1
    assert sleeps == policy.waits(random.Random(2))
    assert caught.value.last_attempt.attempt_number == calls

    sleeps.clear()
    tries = 0
    for attempt in Retrying(wait=policy.wait(seed=2), stop=policy.stop(), sleep=sleeps.append):
        with attempt:
            tries += 1
            if tries < 3:
                raise Attempt(tries)
    assert tries == 3
    assert sleeps == policy.waits(random.Random(2))[:2]


def test_async_retrying_awaited_and_iterated() -> None:
    policy = policy_of("decorrelated")
    expected = policy.waits(random.Random(6))
    sleeps: list[float] = []

    async def record(seconds: float) -> None:
        sleeps.append(seconds)

    calls = 0

    async def always_fails() -> NoReturn:
        nonlocal calls
        calls += 1
        raise Attempt(calls)

    async def iterate() -> None:
        nonlocal calls
        async for attempt in AsyncRetrying(
            wait=policy.wait(seed=6), stop=policy.stop(), sleep=record
        ):
            with attempt:
                calls += 1
                raise Attempt(calls)

    async def main() -> None:
        nonlocal calls
        retrying = AsyncRetrying(wait=policy.wait(seed=6), stop=policy.stop(), sleep=record)
        with pytest.raises(RetryError):
            await retrying(always_fails)
        assert (calls, sleeps) == (policy.max_attempts() + 1, expected)

        sleeps.clear()
        calls = 0
        with pytest.raises(RetryError):
            await iterate()
        assert (calls, sleeps) == (policy.max_attempts() + 1, expected)

    asyncio.run(main())


def test_async_tasks_each_get_the_seeded_schedule() -> None:
    policy = policy_of("full")
    expected = policy.waits(random.Random(12))
    sleeps: dict[int, list[float]] = {}
    calls: dict[int, int] = {}

    def task_id() -> int:
        task = asyncio.current_task()
        assert task is not None
        return id(task)

    async def record(seconds: float) -> None:
        sleeps.setdefault(task_id(), []).append(seconds)
        await asyncio.sleep(0)  # let the other tasks' runs interleave with this one

    @retry(wait=policy.wait(seed=12), stop=policy.stop(), sleep=record)
    async def always_fails() -> NoReturn:
        calls[task_id()] = calls.get(task_id(), 0) + 1
        await asyncio.sleep(0)
        raise Attempt(calls[task_id()])

    async def one() -> None:
        with pytest.raises(RetryError):
            await always_fails()

    async def main() -> None:
        await asyncio.gather(*(one() for _ in range(16)))

    asyncio.run(main())
    assert len(sleeps) == 16
    assert all(run == expected for run in sleeps.values())
    assert set(calls.values()) == {policy.max_attempts() + 1}


def test_retry_with_keeps_or_replaces_the_budget() -> None:
    policy = policy_of("full")
    sleeps: list[float] = []
    calls = 0

    @retry(wait=policy.wait(seed=4), stop=policy.stop(), sleep=sleeps.append)
    def always_fails() -> NoReturn:
        nonlocal calls
        calls += 1
        raise Attempt(calls)

    with pytest.raises(RetryError):
        always_fails.retry_with(stop=stop_after_attempt(3))()
    assert (calls, sleeps) == (3, policy.waits(random.Random(4))[:2])

    other: list[float] = []
    calls = 0
    with pytest.raises(RetryError):
        always_fails.retry_with(sleep=other.append)()
    assert (calls, other) == (policy.max_attempts() + 1, policy.waits(random.Random(4)))

    tighter = policy_of("none", max_elapsed=63)
    calls = 0
    other.clear()
    with pytest.raises(RetryError):
        always_fails.retry_with(wait=tighter.wait(), stop=tighter.stop(), sleep=other.append)()
    assert (calls, other) == (7, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0])


def test_retry_predicate_decides_what_is_retried() -> None:
    policy = policy_of()
    sleeps: list[float] = []
    raised: list[type[Exception]] = []

    @retry(
        wait=policy.wait(),
        stop=policy.stop(),
        sleep=sleeps.append,
        retry=retry_if_exception_type(IOError),
    )
    def fails_with() -> NoReturn:
        raise raised[-1]("boom")

    raised.append(ValueError)
    with pytest.raises(ValueError, match="boom"):
        fails_with()
    assert sleeps == []

    raised.append(OSError)
    with pytest.raises(RetryError):
        fails_with()
    assert sleeps == policy.waits()

    sleeps.clear()
    results: list[None] = []

    @retry(
        wait=policy.wait(),
        stop=policy.stop(),
        sleep=sleeps.append,
        retry=retry_if_result(lambda result: result is None),
    )
    def returns_none() -> None:
        results.append(None)

    with pytest.raises(RetryError):
        returns_none()
    assert len(results) == policy.max_attempts() + 1
    assert sleeps == policy.waits()


def test_reraise_raises_the_last_exception() -> None:
    policy = policy_of()
    sleeps: list[float] = []
    calls = 0

    @retry(wait=policy.wait(), stop=policy.stop(), sleep=sleeps.append, reraise=True)
    def always_fails() -> NoReturn:
        nonlocal calls
        calls += 1
        raise Attempt(calls)

    with pytest.raises(Attempt) as caught:
        always_fails()
    assert not isinstance(caught.value, RetryError)
    assert caught.value.number == calls == policy.max_attempts() + 1
    assert sleeps == policy.waits()


@pytest.mark.parametrize("mode", MODES)
def test_sixteen_threads_each_get_the_seeded_schedule(mode: JitterMode) -> None:
    policy = policy_of(mode)
    expected = policy.waits(random.Random(2025))
    threads = 16
    barrier = threading.Barrier(threads)
    lock = threading.Lock()
    sleeps: dict[int, list[float]] = {}
    calls: dict[int, int] = {}
    errors: list[BaseException] = []

    def record(seconds: float) -> None:
        with lock:
            sleeps.setdefault(threading.get_ident(), []).append(seconds)

    @retry(wait=policy.wait(seed=2025), stop=policy.stop(), sleep=record)
    def always_fails() -> NoReturn:
        me = threading.get_ident()
        with lock:
            calls[me] = calls.get(me, 0) + 1
            mine = calls[me]
        if mine == 1:
            barrier.wait(timeout=30)  # every thread is inside its run at once
        raise Attempt(mine)

    def worker() -> None:
        try:
            always_fails()
        except RetryError:
            pass
        except BaseException as error:  # surfaced below, not lost in the thread
            errors.append(error)

    workers = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=60)
    assert errors == []
    assert len(sleeps) == threads
    assert all(run == expected for run in sleeps.values())
    assert set(calls.values()) == {policy.max_attempts() + 1}


# -- the hooks see the outcome: a marked retry_after reads results too -----------------------


def test_a_marked_retry_after_reads_a_result_and_an_unmarked_one_only_exceptions() -> None:
    from tenacity import retry_if_result

    from tenacity_budget.strategies import reads_results

    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=60, jitter="none")
    seen: list[object] = []

    def reader(outcome: object) -> float | None:
        seen.append(outcome)
        return 0.25

    for marked, expected in ((True, [0.25, 0.25]), (False, [1.0, 2.0])):
        seen.clear()
        sleeps: list[float] = []
        answers = iter(["busy", "busy", "ok"])
        read = reads_results(reader) if marked else (lambda exc: reader(exc))

        @policy.retry(
            retry=retry_if_result(lambda r: r == "busy"), retry_after=read, sleep=sleeps.append
        )
        def call(answers: Iterator[str] = answers) -> str:
            return next(answers)

        assert call() == "ok"
        assert sleeps == expected
        assert seen == (["busy", "busy"] if marked else [])
