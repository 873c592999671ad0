"""Tests for tenacity_budget.stats.RetryStats: counters, derived rates, threads, integration."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator

import pytest
from freezegun.api import FrozenDateTimeFactory
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget import (
    BackoffPolicy,
    BudgetExhausted,
    ExhaustionReport,
    RetryObserver,
    RetryStats,
    RetryStatsSnapshot,
    StopReason,
)
from tests._helpers import sleeper

# Affords 5 retries (sleeps 1, 2, 4, 8, 8) when attempts are instant.
POLICY = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=30, jitter="none")
AFFORDABLE = POLICY.max_attempts()
REPORT = ExhaustionReport(
    attempts=AFFORDABLE + 1,
    affordable=AFFORDABLE,
    slept=23.0,
    elapsed=23.0,
    budget=30.0,
    deadline=None,
    reason=StopReason.COUNT,
    last_exception=OSError("down"),
)


@pytest.fixture
def busy_switching() -> Iterator[None]:
    """Switch threads as often as the interpreter allows, so lost updates would show."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def counts(stats: RetryStats) -> tuple[int, int, int, int, int]:
    s = stats.snapshot()
    return (s.calls, s.first_try_successes, s.successes_after_retry, s.retries, s.exhausted)


# -- the collector on its own --------------------------------------------------------------


def test_fresh_stats_are_zero_and_rates_are_defined() -> None:
    stats = RetryStats()
    assert isinstance(stats, RetryObserver)
    assert counts(stats) == (0, 0, 0, 0, 0)
    assert stats.retry_rate == 0.0
    assert stats.success_after_retry_rate == 0.0
    assert repr(stats) == (
        "RetryStats(calls=0, first_try_successes=0, successes_after_retry=0, retries=0, "
        "exhausted=0)"
    )


@st.composite
def call_outcomes(draw: st.DrawFn) -> list[tuple[int, bool]]:
    """Per call: (retries made, gave up?)."""
    return draw(
        st.lists(
            st.tuples(st.integers(min_value=0, max_value=6), st.booleans()),
            max_size=40,
        )
    )


@settings(max_examples=60, deadline=None)
@given(outcomes=call_outcomes())
def test_counters_and_rates_follow_the_hooks(outcomes: list[tuple[int, bool]]) -> None:
    stats = RetryStats()
    for retries, gave_up in outcomes:
        stats.on_call("f")
        for attempt in range(1, retries + 1):
            stats.on_retry("f", attempt, 0.5)
        if gave_up:
            stats.on_exhausted("f", REPORT)
        else:
            stats.on_success("f", retries + 1)

    calls = len(outcomes)
    retries_total = sum(r for r, _ in outcomes)
    first = sum(1 for r, g in outcomes if not g and r == 0)
    after = sum(1 for r, g in outcomes if not g and r > 0)
    exhausted = sum(1 for _, g in outcomes if g)
    assert counts(stats) == (calls, first, after, retries_total, exhausted)
    assert stats.retry_rate == (retries_total / calls if calls else 0.0)
    assert stats.success_after_retry_rate == (after / (first + after) if first + after else 0.0)
    assert 0.0 <= stats.success_after_retry_rate <= 1.0
    snap = stats.snapshot()
    assert isinstance(snap, RetryStatsSnapshot)
    assert (snap.retry_rate, snap.success_after_retry_rate) == (
        stats.retry_rate,
        stats.success_after_retry_rate,
    )
    stats.reset()
    assert counts(stats) == (0, 0, 0, 0, 0)
    # the snapshot taken before the reset is unaffected by it
    assert (snap.calls, snap.retries) == (calls, retries_total)


def test_snapshot_is_immutable() -> None:
    snap = RetryStats().snapshot()
    with pytest.raises(AttributeError):
        snap.calls = 3  # type: ignore[misc]


# -- threads -------------------------------------------------------------------------------


class WideRaceStats(RetryStats):
    """RetryStats whose counter reads run Python code.

    On CPython with the GIL, ``self.calls += 1`` does not give the interpreter a chance to
    switch threads between the read and the write, so a missing lock would go unnoticed.
    Routing reads through ``__getattribute__`` opens that window (as a free-threaded build
    does): without ``RetryStats``' lock this test loses thousands of updates per run.
    """

    def __getattribute__(self, name: str) -> object:
        # Python code runs on every read: the interpreter may switch threads on return.
        return object.__getattribute__(self, name)


@pytest.mark.usefixtures("busy_switching")
def test_no_update_is_lost_across_threads() -> None:
    stats = WideRaceStats()
    threads_n, per_thread = 8, 3_000
    start = threading.Barrier(threads_n + 1)
    violations: list[RetryStatsSnapshot] = []
    done = threading.Event()

    def worker() -> None:
        start.wait()
        for i in range(per_thread):
            stats.on_call("f")
            if i % 4 == 0:
                stats.on_success("f", 1)
            elif i % 4 == 3:
                stats.on_retry("f", 1, 1.0)
                stats.on_exhausted("f", REPORT)
            else:
                stats.on_retry("f", 1, 1.0)
                stats.on_success("f", 2)

    def reader() -> None:
        start.wait()
        while not done.is_set():
            snap = stats.snapshot()
            # every outcome is recorded after its call began: a torn read would break this
            ended = snap.first_try_successes + snap.successes_after_retry + snap.exhausted
            if ended > snap.calls or snap.successes_after_retry + snap.exhausted > snap.retries:
                violations.append(snap)

    workers = [threading.Thread(target=worker) for _ in range(threads_n)]
    watcher = threading.Thread(target=reader)
    for t in [*workers, watcher]:
        t.start()
    for t in workers:
        t.join()
    done.set()
    watcher.join()

    total = threads_n * per_thread
    assert counts(stats) == (total, total // 4, total // 2, 3 * total // 4, total // 4)
    assert stats.retry_rate == 0.75
    assert stats.success_after_retry_rate == pytest.approx(2 / 3)
    assert violations == []


@pytest.mark.usefixtures("busy_switching", "virtual_clock")
def test_policy_retry_feeds_stats_from_many_threads() -> None:
    """Budgeted calls in several threads feed one RetryStats; call ``i`` of each thread
    fails ``i % 8`` times, so some succeed at once, some after retries, some exhaust.

    Each thread decorates its own function (same policy, same stats): tenacity 9.2 shares
    one statistics dict between concurrent calls of one decorated function and can raise
    ``KeyError: 'idle_for'`` (jd/tenacity#701), which is not what this test is about.
    The clock is virtual (freezegun alone hands real time to calls made near threading
    frames), so however slowly the threads run, only the count ends a run.
    """
    stats = RetryStats()
    sleeps: list[float] = []  # list.append is atomic
    threads_n, per_thread = 6, 40
    start = threading.Barrier(threads_n)
    exhausted_seen: list[int] = []
    errors: list[BaseException] = []

    def work(failures: int, attempts: list[int]) -> int:
        attempts.append(1)
        if len(attempts) <= failures:
            raise ConnectionError("down")
        return len(attempts)

    def worker() -> None:
        budgeted = POLICY.retry(stats=stats, sleep=sleeps.append)(work)
        start.wait()
        for i in range(per_thread):
            try:
                budgeted(i % 8, [])
            except BudgetExhausted as exc:
                exhausted_seen.append(exc.report.attempts)
            except BaseException as exc:  # surfaced below, not lost in the thread
                errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    per_cycle = [min(f, AFFORDABLE) for f in range(8)]  # retries made for failures f
    cycles = threads_n * per_thread // 8
    calls = threads_n * per_thread
    exhausted = cycles * sum(1 for f in range(8) if f > AFFORDABLE)
    first = cycles
    after = calls - first - exhausted
    retries = cycles * sum(per_cycle)
    assert counts(stats) == (calls, first, after, retries, exhausted)
    assert len(sleeps) == retries
    assert exhausted_seen == [AFFORDABLE + 1] * exhausted
    assert stats.retry_rate == retries / calls
    assert stats.success_after_retry_rate == after / (first + after)


# -- through policy.retry(stats=...) -------------------------------------------------------


def test_policy_retry_counts_a_sync_workload(frozen: FrozenDateTimeFactory) -> None:
    stats = RetryStats()
    sleeps: list[float] = []
    failures = {"ok": 0, "flaky": 2, "down": 10**6}
    calls: dict[str, int] = {}

    @POLICY.retry(stats=stats, sleep=sleeper(frozen, sleeps))
    def work(kind: str) -> str:
        calls[kind] = calls.get(kind, 0) + 1
        frozen.tick(0.25)
        if calls[kind] <= failures[kind]:
            raise ConnectionError(kind)
        return kind

    assert work("ok") == "ok"
    assert counts(stats) == (1, 1, 0, 0, 0)
    assert work("flaky") == "flaky"
    assert counts(stats) == (2, 1, 1, 2, 0)
    with pytest.raises(BudgetExhausted) as info:
        work("down")
    made = info.value.report.retries
    assert made == len(sleeps) - 2
    assert counts(stats) == (3, 1, 1, 2 + made, 1)
    assert stats.retry_rate == (2 + made) / 3
    assert stats.success_after_retry_rate == 0.5


def test_one_stats_object_serves_several_functions(frozen: FrozenDateTimeFactory) -> None:
    stats = RetryStats()
    sleeps: list[float] = []
    retry = POLICY.retry(stats=stats, sleep=sleeper(frozen, sleeps))
    flips = {"n": 0}

    @retry
    def steady() -> int:
        return 1

    @retry
    def flaky() -> int:
        flips["n"] += 1
        if flips["n"] % 2:
            raise OSError("odd")
        return 2

    for _ in range(3):
        steady()
        flaky()
    assert counts(stats) == (6, 3, 3, 3, 0)
    assert stats.success_after_retry_rate == 0.5


def test_retry_with_swaps_the_stats(frozen: FrozenDateTimeFactory) -> None:
    first, second = RetryStats(), RetryStats()
    sleeps: list[float] = []

    @POLICY.retry(stats=first, sleep=sleeper(frozen, sleeps))
    def fetch() -> int:
        return 1

    fetch()
    fetch.retry_with(stats=second)()  # type: ignore[attr-defined]
    assert counts(first) == (1, 1, 0, 0, 0)
    assert counts(second) == (1, 1, 0, 0, 0)


async def test_policy_retry_counts_concurrent_async_calls(frozen: FrozenDateTimeFactory) -> None:
    stats = RetryStats()
    sleeps: list[float] = []

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        await asyncio.sleep(0)  # yield to the other tasks, as a real sleep would

    @POLICY.retry(stats=stats, sleep=sleep)
    async def steady() -> int:
        return 0

    tries: dict[int, int] = {}

    @POLICY.retry(stats=stats, sleep=sleep)
    async def flaky(key: int, failures: int) -> int:
        tries[key] = tries.get(key, 0) + 1
        await asyncio.sleep(0)
        if tries[key] <= failures:
            raise ConnectionError(key)
        return tries[key]

    plan = [i % 8 for i in range(64)]
    results = await asyncio.gather(
        *(flaky(key, failures) for key, failures in enumerate(plan)), return_exceptions=True
    )
    assert await steady() == 0  # a first-try success of another function, same stats

    exhausted = [r for r in results if isinstance(r, BudgetExhausted)]
    returned = [r for r in results if isinstance(r, int)]
    assert len(exhausted) == sum(1 for f in plan if f > AFFORDABLE)
    assert returned == [f + 1 for f in plan if f <= AFFORDABLE]
    retries = sum(min(f, AFFORDABLE) for f in plan)
    first = sum(1 for f in plan if f == 0) + 1
    after = sum(1 for f in plan if 0 < f <= AFFORDABLE)
    assert counts(stats) == (len(plan) + 1, first, after, retries, len(exhausted))
    assert len(sleeps) == retries
    assert all(e.report.reason is StopReason.COUNT for e in exhausted)


# -- the instrumentation wing: one home, the old paths kept ------------------------------------


def test_the_old_paths_name_the_wings_objects() -> None:
    import tenacity_budget
    from tenacity_budget import instrumentation, retry_budget, runtime, stats

    assert stats.RetryStats is instrumentation.RetryStats is tenacity_budget.RetryStats
    assert stats.RetryStatsSnapshot is instrumentation.RetryStatsSnapshot
    assert runtime.RetryObserver is instrumentation.RetryObserver is RetryObserver
    assert retry_budget.BudgetObserver is instrumentation.BudgetObserver
    assert (stats.SLEEP_BUCKETS[0], stats.SLEEP_BUCKETS[-1]) == (0.01, 300.0)
    assert {"BudgetObserver", "OpenTelemetryObserver", "PrometheusObserver"} <= set(
        dir(instrumentation)
    )
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        instrumentation.Nothing  # noqa: B018


def test_observers_written_against_the_protocols_still_pass_isinstance() -> None:
    from tenacity_budget.instrumentation import BudgetObserver

    class Minimal:  # the four methods of a RetryObserver, nothing else
        def on_call(self, name: str) -> None: ...
        def on_retry(self, name: str, attempt: int, sleep: float) -> None: ...
        def on_success(self, name: str, attempts: int) -> None: ...
        def on_exhausted(self, name: str, report: ExhaustionReport) -> None: ...

    class MinimalBudget:  # the two methods of a BudgetObserver
        def on_budget_decision(self, name: str, granted: bool, balance: int | None) -> None: ...
        def on_budget_fallback(self, name: str, error: BaseException) -> None: ...

    assert isinstance(Minimal(), RetryObserver)
    assert isinstance(MinimalBudget(), BudgetObserver)
    assert not isinstance(MinimalBudget(), RetryObserver)
    assert not isinstance(Minimal(), BudgetObserver)
