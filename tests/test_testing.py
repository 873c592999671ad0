"""The testing toolkit: virtual clock, its pytest fixture, schedule previews, testing mode.

Nothing here sleeps for real: every sleep runs under the virtual clock or in testing mode
(or goes to a recording ``sleep=``), and no test measures real time.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib.metadata
import math
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import tenacity
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tenacity_budget import (
    BackoffPolicy,
    BudgetExhausted,
    ExhaustionReport,
    Hedge,
    JitterMode,
    StopReason,
    remaining,
)

# Aliased: pytest would collect a module-level name starting with "test" as a test.
from tenacity_budget._config import testing_attempts as current_bound
from tenacity_budget.testing import VirtualClock, set_testing, testing_mode, virtual_clock

pytest_plugins = ["pytester"]

START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
JITTERS: list[JitterMode] = ["none", "full", "equal", "decorrelated"]
POLICIES: dict[str, dict[str, Any]] = {
    "small": {"base": 1, "factor": 2, "cap": 8, "max_elapsed": 30},
    "timed_attempts": {
        "base": 0.5,
        "factor": 3,
        "cap": 20,
        "max_elapsed": 120,
        "attempt_duration": 0.75,
    },
    "one_hour": {"base": 60, "factor": 2, "cap": 600, "max_elapsed": 3600},
}
REPO = Path(__file__).resolve().parents[1]
MISSING_FREEZEGUN = (
    "tenacity_budget.testing.virtual_clock needs freezegun: pip install 'tenacity-budget[testing]'"
)


@pytest.fixture(autouse=True)
def _testing_mode_off() -> Iterator[None]:
    """Every test starts and ends with the testing mode off, whatever another test did."""
    set_testing(False)
    yield
    set_testing(False)


def _real_sleep_functions() -> tuple[object, object, object, object]:
    return (time.sleep, asyncio.sleep, time.monotonic, dt.datetime)


class Down(Exception):
    """The failure every attempt of the functions under test raises."""


# -- the clock itself ---------------------------------------------------------------------


def test_sleeps_move_the_clock_at_once_and_are_recorded() -> None:
    with virtual_clock(START) as clock:
        mono0, wall0 = time.monotonic(), time.time()
        time.sleep(3600)  # virtual clock: allow-sleep
        time.sleep(0.25)  # virtual clock: allow-sleep
        time.sleep(0)
        assert clock.sleeps == [3600.0, 0.25, 0.0]
        assert clock.elapsed == 3600.25
        assert clock.slept == 3600.25
        assert time.monotonic() - mono0 == 3600.25
        assert clock.monotonic() - mono0 == 3600.25
        assert time.time() - wall0 == 3600.25
        assert clock.now() == START + timedelta(seconds=3600.25)
        assert datetime.now(UTC) == clock.now()
        assert clock.now().tzinfo is not None
        assert clock.start == START


def test_advance_moves_the_clock_without_recording_a_sleep() -> None:
    with virtual_clock(START) as clock:
        mono0 = clock.monotonic()
        clock.advance(7)
        clock.advance(timedelta(minutes=1))
        assert clock.sleeps == []
        assert clock.elapsed == 67.0
        assert clock.monotonic() - mono0 == 67.0
        assert clock.now() == START + timedelta(seconds=67)
        time.sleep(3)  # virtual clock: allow-sleep
        assert clock.sleeps == [3.0]
        assert clock.elapsed == 70.0


@pytest.mark.parametrize(
    ("value", "error"),
    [(-1, ValueError), (math.nan, ValueError), (math.inf, ValueError), ("1", TypeError)],
)
def test_invalid_durations_are_refused(value: Any, error: type[Exception]) -> None:
    with virtual_clock(START) as clock:
        with pytest.raises(error):
            clock.advance(value)
        with pytest.raises(error):
            time.sleep(value)
        assert clock.sleeps == []
        assert clock.elapsed == 0.0
        assert clock.now() == START


def test_a_clock_not_yet_started_has_no_time() -> None:
    clock = virtual_clock(START)
    assert not clock.running
    for read in (clock.now, clock.monotonic, lambda: clock.start):
        with pytest.raises(RuntimeError, match="not started"):
            read()


def test_start_must_be_aware() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        virtual_clock(datetime(2026, 3, 2, 9, 0))
    with pytest.raises(TypeError, match="timezone-aware datetime"):
        virtual_clock("2026-03-02")  # type: ignore[arg-type]


def test_default_start_is_a_whole_second_in_utc() -> None:
    with virtual_clock() as clock:
        assert clock.start.microsecond == 0
        assert clock.start.utcoffset() == timedelta(0)
        assert clock.now() == clock.start


def test_non_utc_start_is_the_same_instant() -> None:
    tokyo = dt.timezone(timedelta(hours=9))
    with virtual_clock(START.astimezone(tokyo)) as clock:
        assert clock.now() == START
        assert clock.start == START


def test_everything_is_restored_on_exit_even_when_the_block_raises() -> None:
    before = _real_sleep_functions()
    clock = virtual_clock(START)
    inside: list[tuple[object, object, object, object]] = []

    def block() -> None:
        with clock:
            inside.append(_real_sleep_functions())
            time.sleep(5)  # virtual clock: allow-sleep
            raise Down

    with pytest.raises(Down):
        block()
    assert clock.sleeps == [5.0]
    assert all(fake is not real for fake, real in zip(inside[0], before, strict=True))
    assert _real_sleep_functions() == before
    assert not clock.running  # sleeps stay readable after the block
    assert clock.elapsed == 5.0
    assert clock.now() == START + timedelta(seconds=5)  # the instant it stopped at
    assert clock.now() == clock.now()  # and frozen there, not real time
    assert clock.monotonic() == clock.monotonic()
    assert time.monotonic() != clock.monotonic()
    with pytest.raises(RuntimeError, match="not running"):
        clock.advance(1)
    with pytest.raises(RuntimeError, match="runs once"), clock:
        pass


def test_clocks_do_not_nest() -> None:
    with virtual_clock(START) as outer:
        with pytest.raises(RuntimeError, match="do not nest"), virtual_clock(START):
            pass
        time.sleep(2)  # the outer clock still owns the sleeps (virtual clock: allow-sleep)
        assert outer.sleeps == [2.0]
    with virtual_clock(START) as again:  # and a new one can start afterwards
        assert again.running


def test_missing_freezegun_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _real_sleep_functions()
    monkeypatch.setitem(sys.modules, "freezegun", None)
    monkeypatch.setitem(sys.modules, "freezegun.api", None)
    for _ in range(2):  # a failed start leaves no clock marked as running
        with pytest.raises(ImportError) as caught, virtual_clock(START):
            pass
        assert str(caught.value) == MISSING_FREEZEGUN
        assert isinstance(caught.value.__cause__, ModuleNotFoundError)
    assert _real_sleep_functions() == before
    # The first use is the call: a clock built without the extra is refused at once.
    with pytest.raises(ImportError, match="needs freezegun"):
        virtual_clock()
    monkeypatch.undo()
    with virtual_clock(START) as clock:  # and the clock works once freezegun is back
        assert clock.running


def test_importing_the_toolkit_does_not_need_freezegun() -> None:
    code = (
        "import sys; sys.modules['freezegun'] = None\n"
        "import tenacity_budget.testing, tenacity_budget.pytest_plugin\n"
        "try:\n"
        "    tenacity_budget.testing.virtual_clock().__enter__()\n"
        "except ImportError as exc:\n"
        "    print(type(exc.__cause__).__name__)\n"
        "    print(exc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.splitlines() == ["ModuleNotFoundError", MISSING_FREEZEGUN]


def test_sub_microsecond_sleeps_add_up_on_the_clock() -> None:
    with virtual_clock(START) as clock:
        for _ in range(10):
            # each alone is below freezegun's resolution
            time.sleep(0.4e-6)  # virtual clock: allow-sleep
        assert clock.sleeps == [0.4e-6] * 10
        assert clock.elapsed == pytest.approx(4e-6, rel=1e-12)
        assert clock.now() == START + timedelta(microseconds=4)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(min_value=0, max_value=1e-6),
            st.floats(min_value=0, max_value=10_000),
        ),
        max_size=30,
    )
)
def test_rounding_to_microseconds_never_accumulates(durations: list[float]) -> None:
    with virtual_clock(START) as clock:
        for seconds in durations:
            time.sleep(seconds)
        assert clock.sleeps == durations
        # The exact sum, correctly rounded (issue 9): not a drifting float `+=`.
        exact = math.fsum(durations)
        assert clock.elapsed == exact
        shown = (clock.now() - START).total_seconds()
        assert abs(shown - exact) <= 0.5e-6 + 1e-9 * exact


async def test_async_sleep_moves_the_clock_and_still_yields() -> None:
    ran: list[str] = []

    async def other() -> None:
        ran.append("other")

    with virtual_clock(START) as clock:
        task = asyncio.ensure_future(other())
        assert await asyncio.sleep(30, result="done") == "done"
        assert ran == ["other"]  # the fake sleep let the other task run
        await task
        await asyncio.sleep(-1)  # asyncio treats a negative delay as 0
        assert clock.sleeps == [30.0, 0.0]
        assert clock.now() == START + timedelta(seconds=30)


async def test_concurrent_tasks_share_the_clock() -> None:
    with virtual_clock(START) as clock:
        await asyncio.gather(asyncio.sleep(1), asyncio.sleep(2), asyncio.sleep(4))
        assert sorted(clock.sleeps) == [1.0, 2.0, 4.0]
        assert clock.elapsed == 7.0  # sleeps add up: the clock does not model parallel waits


# -- the clock's event loop ---------------------------------------------------------------


def _on_the_loop(main: Callable[[VirtualClock], Any], start: datetime = START) -> VirtualClock:
    """Run ``main(clock)`` (a coroutine) on a fresh clock's event loop; return the clock."""
    with virtual_clock(start) as clock, clock.event_loop() as loop:
        loop.run_until_complete(main(clock))
    return clock


def test_concurrent_sleeps_overlap_on_the_event_loop() -> None:
    ended: list[tuple[float, float]] = []

    async def sleeper(seconds: float) -> None:
        await asyncio.sleep(seconds)
        ended.append((seconds, time.monotonic()))

    async def main(clock: VirtualClock) -> None:
        await asyncio.gather(sleeper(4), sleeper(1), sleeper(2))
        assert clock.now() == START + timedelta(seconds=4)

    clock = _on_the_loop(main)
    assert ended == [(1, 1.0), (2, 2.0), (4, 4.0)]  # each at its own time, in time order
    assert clock.elapsed == 4.0  # overlapped: the longest, not the sum
    assert clock.sleeps == [4.0, 1.0, 2.0]  # recorded in the order made
    assert clock.slept == 7.0


@st.composite
def _timer_programs(draw: st.DrawFn) -> list[tuple[int, list[int]]]:
    """Tasks, each a start delay then a chain of sleeps, in whole microseconds (so that two
    distinct instants are farther apart than the loop's clock resolution)."""
    micros = st.integers(min_value=0, max_value=5_000_000_000)
    return draw(st.lists(st.tuples(micros, st.lists(micros, max_size=4)), min_size=1, max_size=6))


@settings(max_examples=60, deadline=None)
@given(program=_timer_programs(), offset=st.integers(min_value=0, max_value=10**9))
@example(program=[(177, []), (151, [26])], offset=0)  # two timers a few ulps apart
def test_timers_fire_at_exactly_their_virtual_time_and_the_clock_never_goes_back(
    program: list[tuple[int, list[int]]], offset: int
) -> None:
    fired: list[tuple[float, float, float]] = []  # (when, loop.time(), time.monotonic())
    readings: list[tuple[float, datetime]] = []

    async def task(loop: asyncio.AbstractEventLoop, first: int, chain: list[int]) -> None:
        done = loop.create_future()
        timer: list[asyncio.TimerHandle] = []

        def ring() -> None:
            fired.append((timer[0].when(), loop.time(), time.monotonic()))
            done.set_result(None)

        timer.append(loop.call_later(first / 1e6, ring))
        await done
        for micros in chain:
            due = loop.time() + micros / 1e6
            await asyncio.sleep(micros / 1e6)
            fired.append((due, loop.time(), time.monotonic()))
            readings.append((time.monotonic(), datetime.now(UTC)))

    async def main(clock: VirtualClock) -> None:
        clock.advance(offset / 1e6)  # timers computed from a clock that is not at 0
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(task(loop, first, chain) for first, chain in program))

    clock = _on_the_loop(main)
    # Exactly its time: the loop's clock and the virtual monotonic clock agree, at the timer's
    # instant. asyncio runs together the timers within its clock resolution of each other
    # (1 ns here): one due at 151 + 26 us, a float a few ulps from 177 us, fires with the one
    # due at 177 us, at 177 us.
    resolution = time.get_clock_info("monotonic").resolution
    assert all(at == mono and abs(when - at) <= resolution for when, at, mono in fired)
    assert [at for _, at, _ in fired] == sorted(at for _, at, _ in fired)  # in time order
    assert readings == sorted(readings)  # neither clock ever went back
    assert clock.elapsed == max(at for _, at, _ in fired)  # and never past the last timer


def test_a_timer_set_in_the_past_fires_at_once_without_moving_the_clock_back() -> None:
    seen: list[float] = []

    async def main(clock: VirtualClock) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(10)
        done = loop.create_future()
        loop.call_at(3.0, lambda: (seen.append(loop.time()), done.set_result(None)))
        await done

    clock = _on_the_loop(main)
    assert seen == [10.0]
    assert clock.elapsed == 10.0


def test_blocking_time_in_a_task_makes_due_timers_fire_late() -> None:
    seen: list[float] = []

    async def main(clock: VirtualClock) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(1, lambda: seen.append(loop.time()))
        clock.advance(5)  # a blocking step: the loop cannot run the timer meanwhile
        time.sleep(2)  # so is a blocking sleep (the virtual clock's: allow-sleep)
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    clock = _on_the_loop(main)
    assert seen == [7.0]
    assert clock.sleeps == [2.0, 0.0, 0.0]


def test_event_loop_sleeps_validate_as_the_clock_does() -> None:
    async def main(clock: VirtualClock) -> None:
        assert await asyncio.sleep(-3, result="now") == "now"  # negative: 0, as in asyncio
        with pytest.raises(ValueError, match="sleep length"):
            await asyncio.sleep(math.nan)
        forever = asyncio.ensure_future(asyncio.sleep(math.inf))  # no timer at all
        await asyncio.sleep(1)
        forever.cancel()
        with pytest.raises(asyncio.CancelledError):
            await forever

    clock = _on_the_loop(main)
    assert clock.sleeps == [0.0, 1.0]  # the endless sleep is not a sleep of any length
    assert clock.elapsed == 1.0  # and it did not move the clock


def test_a_sleep_on_another_loop_keeps_the_clock_behaviour() -> None:
    with virtual_clock(START) as clock, clock.event_loop():
        asyncio.run(asyncio.sleep(3))  # a plain loop: the clock jumps, as without the loop
        assert clock.elapsed == 3.0
        assert clock.sleeps == [3.0]


def test_the_event_loop_needs_a_running_clock_and_exits_cleanly() -> None:
    clock = virtual_clock(START)
    with pytest.raises(RuntimeError, match="not running"):
        clock.event_loop().__enter__()
    cleaned: list[float] = []

    async def lingering() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.append(time.monotonic())

    with clock:
        clock_sleep = asyncio.sleep
        with clock.event_loop() as loop:
            loop.run_until_complete(asyncio.sleep(0))
            task = loop.create_task(lingering())
            loop.run_until_complete(asyncio.sleep(1))
        assert task.cancelled()
        assert cleaned == [1.0]  # cancelled, and run to its end, on exit
        assert loop.is_closed()
        assert asyncio.sleep is clock_sleep  # the clock's own sleep again
    with pytest.raises(RuntimeError, match="not running"):
        clock.event_loop().__enter__()


def test_tasks_stuck_for_ever_end_at_once_at_their_timeout() -> None:
    async def main(clock: VirtualClock) -> None:
        never = asyncio.get_running_loop().create_future()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(never, 3600)

    assert _on_the_loop(main).elapsed == 3600.0


# -- real I/O on the clock's event loop


def test_real_io_that_is_ready_is_read_at_the_current_virtual_instant() -> None:
    received: list[tuple[bytes, float]] = []

    async def main(clock: VirtualClock) -> None:
        loop = asyncio.get_running_loop()
        left, right = socket.socketpair()
        with left, right:
            left.setblocking(False)
            right.setblocking(False)

            async def reader() -> None:
                received.append((await loop.sock_recv(left, 10), time.monotonic()))

            async def writer() -> None:
                await asyncio.sleep(5)
                await loop.sock_sendall(right, b"late")

            await asyncio.gather(reader(), writer())

    _on_the_loop(main)
    assert received == [(b"late", 5.0)]


def test_real_io_with_no_timer_pending_is_awaited_while_the_clock_stands_still() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readline())
        await writer.drain()
        writer.close()

    async def main(clock: VirtualClock) -> None:
        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"over loopback\n")
            assert await reader.readline() == b"over loopback\n"
            writer.close()
            await writer.wait_closed()
        threaded = await asyncio.get_running_loop().run_in_executor(None, sum, range(100))
        assert threaded == 4950  # a thread's result reaches the loop too

    clock = _on_the_loop(main)
    assert clock.elapsed == 0.0


def test_real_io_does_not_hold_the_clock_back_from_a_pending_timer() -> None:
    async def main(clock: VirtualClock) -> None:
        loop = asyncio.get_running_loop()
        left, right = socket.socketpair()
        with left, right:
            left.setblocking(False)
            with pytest.raises(TimeoutError):  # nothing was there: the timeout fires at once
                await asyncio.wait_for(loop.sock_recv(left, 10), timeout=30)

    clock = _on_the_loop(main)
    assert clock.elapsed == 30.0


def test_testing_mode_does_not_change_a_hedged_run() -> None:
    policy = BackoffPolicy(base=0.1, cap=1, max_elapsed=5, jitter="none")
    slow = [1.0, 0.010, 0.010]

    def hedged_run() -> tuple[list[float], float]:
        starts: list[float] = []

        @policy.retry(hedge=Hedge(0.010, max_attempts=3))
        async def read() -> str:
            starts.append(time.monotonic())
            await asyncio.sleep(slow[len(starts) - 1])
            return "ok"

        async def main(clock: VirtualClock) -> None:
            assert await read() == "ok"

        return starts, _on_the_loop(main).elapsed

    plain = hedged_run()
    with testing_mode(attempts=1):  # would allow one call, and no wait, to a retried run
        assert hedged_run() == plain
    assert plain == ([0.0, 0.010], 0.020)  # hedged after 10 ms, which answered 10 ms later


# -- budgets and deadlines under the clock ------------------------------------------------


def _slow_failing(clock: VirtualClock, seconds: float, seen: list[float | None]) -> Any:
    def attempt() -> None:
        seen.append(remaining())
        clock.advance(seconds)
        raise Down

    return attempt


def test_attempts_that_take_time_stop_on_the_wall_clock_budget() -> None:
    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=30, jitter="none")
    assert policy.max_attempts() == 5
    seen: list[float | None] = []
    with virtual_clock(START) as clock:
        fn = policy.retry()(_slow_failing(clock, 7, seen))
        with pytest.raises(BudgetExhausted) as info:
            fn()
    report = info.value.report
    assert report.reason is StopReason.WALL_CLOCK
    assert report.attempts == 3  # t=0..7, 8..15, 17..24; a 4th would end at 35 > 30
    assert report.affordable == 5
    assert clock.sleeps == [1.0, 2.0]
    assert report.slept == 3.0
    assert report.elapsed == pytest.approx(24.0, abs=1e-5)
    assert clock.elapsed == 24.0
    assert seen == pytest.approx([30.0, 22.0, 13.0], abs=1e-5)
    assert isinstance(report.last_exception, Down)


async def test_async_attempts_that_take_time_stop_on_the_wall_clock_budget() -> None:
    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=30, jitter="none")
    seen: list[float | None] = []
    with virtual_clock(START) as clock:

        @policy.retry()
        async def fn() -> None:
            seen.append(remaining())
            clock.advance(7)
            raise Down

        with pytest.raises(BudgetExhausted) as info:
            await fn()
    assert info.value.report.reason is StopReason.WALL_CLOCK
    assert info.value.report.attempts == 3
    assert clock.sleeps == [1.0, 2.0]
    assert seen == pytest.approx([30.0, 22.0, 13.0], abs=1e-5)


def test_a_run_stops_before_its_deadline() -> None:
    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=100, jitter="none")
    deadline = START + timedelta(seconds=20)
    seen: list[float | None] = []
    with virtual_clock(START) as clock:
        fn = policy.retry(deadline=deadline)(_slow_failing(clock, 2, seen))
        with pytest.raises(BudgetExhausted) as info:
            fn()
        assert clock.now() == START + timedelta(seconds=15)
    report = info.value.report
    # Attempts at 0..2, 3..5, 7..9, 13..15; the next would end at 15 + 8 + 2 = 25 > 20.
    assert report.reason is StopReason.DEADLINE
    assert report.deadline == deadline
    assert report.attempts == 4
    assert clock.sleeps == [1.0, 2.0, 4.0]
    assert seen == pytest.approx([20.0, 17.0, 13.0, 7.0], abs=1e-5)


async def test_async_plain_tenacity_stops_before_the_deadline() -> None:
    with virtual_clock(START) as clock:
        policy = BackoffPolicy.for_deadline(
            clock.now() + timedelta(hours=1), reserve=0.5, base=60, cap=600, jitter="none"
        )
        assert policy.max_elapsed == 1800.0
        deadline = clock.now() + timedelta(minutes=20)  # tighter than the policy's own
        calls = 0

        @tenacity.retry(
            wait=policy.wait(),
            stop=policy.stop(deadline=deadline),
            retry_error_cls=BudgetExhausted,
        )
        async def fn() -> None:
            nonlocal calls
            calls += 1
            clock.advance(300)  # every attempt takes five minutes
            raise Down

        with pytest.raises(BudgetExhausted) as info:
            await fn()
    # Attempts at 0..300 and 360..660 (ends 660 + 120 + 300 = 1080 <= 1200), 780..1080;
    # a 4th would end at 1080 + 240 + 300 = 1620 s, past the 1200 s deadline but within
    # the 1800 s budget.
    assert clock.sleeps == [60.0, 120.0]
    assert calls == 3
    report = info.value.report
    assert report.reason is StopReason.DEADLINE
    assert report.deadline == deadline
    assert report.budget == 1800.0


@pytest.mark.parametrize("plain", [False, True], ids=["policy.retry", "tenacity.retry"])
def test_a_thread_target_sees_the_virtual_clock(plain: bool) -> None:
    # freezegun gives real time to calls made within a few frames of the threading module;
    # a decorated function used directly as a Thread target is that close.
    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=30, jitter="full")
    reports: list[ExhaustionReport] = []

    def give_up(retry_state: tenacity.RetryCallState) -> None:
        assert retry_state.outcome is not None
        reports.append(ExhaustionReport.from_attempt(retry_state.outcome))

    def attempt() -> None:
        raise Down

    fn: Callable[[], None]
    if plain:
        fn = tenacity.retry(
            wait=policy.wait(seed=11), stop=policy.stop(), retry_error_callback=give_up
        )(attempt)
    else:
        fn = policy.retry(seed=11, retry_error_callback=give_up)(attempt)

    with virtual_clock(START) as clock:
        worker = threading.Thread(target=fn)
        worker.start()
        worker.join()
    assert clock.sleeps == policy.schedule(seed=11)
    assert [r.reason for r in reports] == [StopReason.COUNT]
    assert reports[0].elapsed == pytest.approx(clock.elapsed, abs=1e-5)


# -- schedule previews --------------------------------------------------------------------


def _run(fn: Callable[[], Any], error: type[BaseException]) -> None:
    with pytest.raises(error):
        fn()


@pytest.mark.parametrize("jitter", JITTERS)
@pytest.mark.parametrize("name", list(POLICIES))
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**64))
def test_schedule_is_what_a_seeded_run_sleeps(jitter: JitterMode, name: str, seed: int) -> None:
    policy = BackoffPolicy(jitter=jitter, **POLICIES[name])
    expected = policy.schedule(seed=seed)
    assert expected  # every one of these policies affords retries
    with virtual_clock(START) as clock:

        def attempt() -> None:
            clock.advance(policy.attempt_duration)
            raise Down

        budgeted = policy.retry(seed=seed)(attempt)
        plain = tenacity.retry(wait=policy.wait(seed=seed), stop=policy.stop())(attempt)

        async def async_attempt() -> None:
            attempt()

        async_budgeted = policy.retry(seed=seed)(async_attempt)
        async_plain = tenacity.retry(wait=policy.wait(seed=seed), stop=policy.stop())(async_attempt)

        runs: list[tuple[Callable[[], Any], type[BaseException]]] = [
            (budgeted, BudgetExhausted),
            (budgeted, BudgetExhausted),  # a seeded decorator replays the seed every run
            (plain, tenacity.RetryError),
            (lambda: asyncio.run(async_budgeted()), BudgetExhausted),
            (lambda: asyncio.run(async_plain()), tenacity.RetryError),
        ]
        for fn, error in runs:
            clock.sleeps.clear()
            _run(fn, error)
            assert clock.sleeps == expected


# -- testing mode -------------------------------------------------------------------------


def _always_down(counter: list[int]) -> Callable[[], None]:
    def attempt() -> None:
        counter.append(1)
        raise Down

    return attempt


def test_set_testing_makes_budgeted_runs_instant_and_bounded() -> None:
    policy = BackoffPolicy(base=60, factor=2, cap=600, max_elapsed=3600, jitter="full")
    calls: list[int] = []
    fn = policy.retry()(_always_down(calls))
    with virtual_clock(START) as clock:
        set_testing(True, attempts=2)
        try:
            assert current_bound() == 2
            with pytest.raises(BudgetExhausted) as info:
                fn()
        finally:
            set_testing(False)
        assert current_bound() is None
        assert len(calls) == 2
        assert clock.sleeps == [0.0]
        assert clock.elapsed == 0.0
        assert info.value.report.reason is StopReason.COUNT
        assert info.value.report.attempts == 2

        clock.sleeps.clear()  # off again: the real (virtual) schedule comes back
        calls.clear()
        with pytest.raises(BudgetExhausted):
            fn()
        assert len(calls) == policy.max_attempts() + 1
        assert len(clock.sleeps) == policy.max_attempts()
        assert clock.slept > 0


def test_set_testing_default_is_three_attempts() -> None:
    set_testing(True)
    assert current_bound() == 3
    set_testing(False, attempts=99)  # the bound is ignored when switching off
    assert current_bound() is None


def test_testing_mode_restores_the_previous_setting_and_nests() -> None:
    assert current_bound() is None
    with testing_mode(attempts=2):
        assert current_bound() == 2
        seen: list[int | None] = []

        def block() -> None:
            with testing_mode(attempts=5):
                seen.append(current_bound())
                raise Down

        with pytest.raises(Down):
            block()
        assert seen == [5]
        assert current_bound() == 2
    assert current_bound() is None
    set_testing(True, attempts=4)
    with testing_mode():
        assert current_bound() == 3
    assert current_bound() == 4


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda: set_testing(True, attempts=0), ValueError),
        (lambda: set_testing(True, attempts=True), TypeError),
        (lambda: set_testing(True, attempts=2.0), TypeError),  # type: ignore[arg-type]
        (lambda: set_testing("yes"), TypeError),  # type: ignore[arg-type]
        (lambda: testing_mode(attempts=0).__enter__(), ValueError),
    ],
)
def test_testing_mode_refuses_bad_bounds(call: Callable[[], Any], error: type[Exception]) -> None:
    with testing_mode(attempts=7):
        with pytest.raises(error):
            call()
        assert current_bound() == 7  # a refused call changes nothing


@settings(max_examples=25, deadline=None)
@given(
    attempts=st.integers(min_value=1, max_value=8),
    succeed_on=st.integers(min_value=1, max_value=10),
    name=st.sampled_from(sorted(POLICIES)),
    jitter=st.sampled_from(JITTERS),
)
def test_testing_mode_bounds_every_run(
    attempts: int, succeed_on: int, name: str, jitter: JitterMode
) -> None:
    policy = BackoffPolicy(jitter=jitter, **POLICIES[name])
    slept: list[float] = []
    calls: list[int] = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) < succeed_on:
            raise Down
        return "ok"

    with testing_mode(attempts=attempts):
        budgeted = policy.retry(sleep=slept.append)(attempt)
        plain = tenacity.retry(
            wait=policy.wait(), stop=policy.stop(), sleep=slept.append, reraise=True
        )(attempt)
        for fn in (budgeted, plain):
            calls.clear()
            slept.clear()
            if succeed_on <= attempts:
                assert fn() == "ok"
                assert len(calls) == succeed_on
            else:
                with pytest.raises((BudgetExhausted, Down)):
                    fn()
                assert len(calls) == attempts
            assert slept == [0.0] * (len(calls) - 1)


async def test_testing_mode_applies_to_async_runs() -> None:
    policy = BackoffPolicy(base=60, factor=2, cap=600, max_elapsed=3600)
    calls = 0

    @policy.retry()
    async def fn() -> None:
        nonlocal calls
        calls += 1
        raise Down

    with virtual_clock(START) as clock, testing_mode(attempts=4):
        with pytest.raises(BudgetExhausted) as info:
            await fn()
        assert calls == 4
        assert clock.sleeps == [0.0, 0.0, 0.0]
        assert info.value.report.reason is StopReason.COUNT


# -- the pytest plugin --------------------------------------------------------------------

QUIET = ("-o", "asyncio_default_fixture_loop_scope=function")
FIXTURE_TESTS = """
    import asyncio
    import time

    import pytest

    from tenacity_budget import BackoffPolicy, BudgetExhausted
    from tenacity_budget.testing import VirtualClock

    def test_fixture_runs_a_clock(virtual_clock):
        assert isinstance(virtual_clock, VirtualClock)
        assert virtual_clock.running
        policy = BackoffPolicy(base=60, cap=600, max_elapsed=3600, jitter="equal")

        @policy.retry(seed=5)
        def fn():
            raise OSError("down")

        with pytest.raises(BudgetExhausted):
            fn()
        assert virtual_clock.sleeps == policy.schedule(seed=5)

    @pytest.mark.asyncio
    async def test_fixture_in_async_code(virtual_clock):
        await asyncio.sleep(120)
        assert virtual_clock.sleeps == [120.0]

    def test_event_loop_fixture_overlaps_sleeps(virtual_clock, virtual_event_loop):
        async def main():
            await asyncio.gather(asyncio.sleep(30), asyncio.sleep(20))
            return time.monotonic()

        assert virtual_event_loop.run_until_complete(main()) == 30.0
        assert virtual_clock.sleeps == [30.0, 20.0]

    def test_after_the_fixture_sleep_is_real_again():
        assert type(time.sleep).__name__ == "builtin_function_or_method"
        assert asyncio.sleep is asyncio.tasks.sleep
"""


def test_fixture_through_the_plugin_module(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(FIXTURE_TESTS)
    result = pytester.runpytest(
        "-p", "tenacity_budget.pytest_plugin", "-p", "pytest_asyncio.plugin", "-q", *QUIET
    )
    result.assert_outcomes(passed=4)


def test_fixture_is_installed_through_the_pytest11_entry_point(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    try:
        importlib.metadata.distribution("tenacity-budget")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - a plain checkout
        pytest.skip("the pytest11 entry point exists once the package is installed")
    # The run below autoloads entry points whatever the outer run was told.
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    points = importlib.metadata.entry_points(group="pytest11")
    assert "tenacity_budget.pytest_plugin" in {p.value for p in points}
    pytester.makepyfile(FIXTURE_TESTS)
    result = pytester.runpytest("-q", *QUIET)  # no -p: the installed entry point provides it
    result.assert_outcomes(passed=4)


def test_conftest_recipe_enables_testing_mode_for_a_whole_suite(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(
        """
        import pytest
        from tenacity_budget.testing import testing_mode

        @pytest.fixture(autouse=True)
        def _budgeted_retries_do_not_wait():
            with testing_mode(attempts=3):
                yield
        """
    )
    pytester.makepyfile(
        """
        import pytest
        from tenacity_budget import BackoffPolicy, BudgetExhausted
        from tenacity_budget.testing import set_testing, testing_mode  # not collected

        def test_code_under_test_retries_without_waiting():
            slept, calls = [], []
            policy = BackoffPolicy(base=3600, cap=3600, max_elapsed=86400)

            @policy.retry(sleep=slept.append)  # records instead of sleeping, mode or not
            def fetch():
                calls.append(1)
                raise OSError("down")

            with pytest.raises(BudgetExhausted):
                fetch()
            assert calls == [1, 1, 1]
            assert slept == [0.0, 0.0]
        """
    )
    result = pytester.runpytest("-q", *QUIET)
    result.assert_outcomes(passed=1)
    assert current_bound() is None  # the recipe restored the setting
