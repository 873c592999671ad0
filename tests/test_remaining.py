"""``remaining()``: the seconds left in the current run, per thread and per asyncio task.

It is the earlier of the budget's end and the deadline, minus now; never negative; and
``None`` outside a run.

Time is virtual: freezegun freezes ``time.monotonic()`` and ``datetime.now()`` together, an
attempt that "takes" seven seconds advances the frozen clock by seven seconds, and every
sleep handed to tenacity records its duration and advances the clock by it (the ``clock``
fixture). No test sleeps for real and no test measures real time.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

from tenacity_budget import BackoffPolicy, BudgetExhausted, StopReason, remaining
from tests._helpers import START, Clock, exhaust, failing


def test_remaining_is_none_outside_a_run(clock: Clock) -> None:
    """None before, after a run that gave up, and after one that succeeded."""
    assert remaining() is None
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    seen: list[float | None] = []
    fn = policy.retry(sleep=clock.sleep)(failing(clock, [7.0], seen))
    exhaust(fn)
    assert remaining() is None  # after a run that gave up

    @policy.retry(sleep=clock.sleep)
    def ok() -> float | None:
        return remaining()

    assert ok() == 62.0
    assert remaining() is None  # after a run that succeeded


def test_remaining_decreases_and_is_budget_end_minus_now(clock: Clock) -> None:
    """Read twice per attempt: always the budget end minus now, strictly decreasing."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    readings: list[tuple[float | None, float]] = []

    @policy.retry(sleep=clock.sleep)
    def attempt() -> None:
        readings.append((remaining(), clock.elapsed()))
        clock.tick(3)
        readings.append((remaining(), clock.elapsed()))
        clock.tick(4)
        raise OSError("down")

    exhaust(attempt)
    values = [value for value, _ in readings]
    assert all(isinstance(value, float) for value in values)
    assert values == sorted(values, key=lambda v: -(v or 0.0))
    assert len(set(values)) == len(values)  # strictly decreasing: the clock always moved
    for value, at in readings:
        assert value == 62.0 - at


def test_remaining_is_the_earlier_of_budget_end_and_deadline(clock: Clock) -> None:
    """With a deadline before the budget end, remaining() counts down to the deadline."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    readings: list[tuple[float | None, float]] = []
    deadline = START + timedelta(seconds=50)

    @policy.retry(sleep=clock.sleep, deadline=deadline)
    def attempt() -> None:
        readings.append((remaining(), clock.elapsed()))
        clock.tick(7)
        raise OSError("down")

    exhaust(attempt)
    assert readings[0] == (50.0, 0.0)
    for value, at in readings:
        assert value == min(62.0, 50.0) - at


def test_remaining_budget_end_counts_from_the_first_attempt(clock: Clock) -> None:
    """A run started 10 s into the test: its budget ends 62 s after its own start."""
    clock.tick(10)
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    seen: list[float | None] = []
    exhaust(policy.retry(sleep=clock.sleep)(failing(clock, [7.0], seen)))
    assert seen[:3] == [62.0, 54.0, 45.0]


def test_remaining_is_zero_not_negative_past_the_deadline(clock: Clock) -> None:
    """A deadline already past: remaining() is 0.0 and the run makes no retry."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=62, jitter="none")
    seen: list[float | None] = []
    deadline = START - timedelta(seconds=5)
    report = exhaust(
        policy.retry(sleep=clock.sleep, deadline=deadline)(failing(clock, [1.0], seen))
    ).report
    assert seen == [0.0]
    assert report.reason is StopReason.DEADLINE
    assert clock.sleeps == []


def test_remaining_is_per_thread(clock: Clock) -> None:
    """Two threads inside the same decorated function at once, with different deadlines."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, jitter="none")
    both_inside = threading.Barrier(2)
    both_read = threading.Barrier(2)
    seen: dict[str, float | None] = {}

    @policy.retry(sleep=clock.sleep, deadline=lambda rs: rs.kwargs["deadline"])
    def work(name: str, *, deadline: datetime) -> str:
        both_inside.wait(timeout=30)
        seen[name] = remaining()
        both_read.wait(timeout=30)
        return name

    def call(name: str, seconds: float) -> str:
        return work(name, deadline=START + timedelta(seconds=seconds))

    with ThreadPoolExecutor(max_workers=2) as pool:
        near = pool.submit(call, "near", 30)
        far = pool.submit(call, "far", 90)
        assert (near.result(timeout=60), far.result(timeout=60)) == ("near", "far")
    assert seen == {"near": 30.0, "far": 60.0}
    assert remaining() is None


def test_remaining_is_per_asyncio_task(clock: Clock) -> None:
    """Two tasks interleave attempts and sleeps; each reads its own run's end."""
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=60, jitter="none")
    readings: dict[str, list[tuple[float | None, float]]] = {"near": [], "far": []}

    @policy.retry(sleep=clock.async_sleep, deadline=lambda rs: rs.kwargs["deadline"])
    async def work(name: str, *, deadline: datetime) -> None:
        readings[name].append((remaining(), clock.elapsed()))
        await asyncio.sleep(0)  # let the other task run inside its own attempt
        clock.tick(3)
        readings[name].append((remaining(), clock.elapsed()))
        raise OSError(name)

    async def main() -> tuple[BaseException | None, BaseException | None]:
        results = await asyncio.gather(
            work("near", deadline=START + timedelta(seconds=30)),
            work("far", deadline=START + timedelta(seconds=90)),
            return_exceptions=True,
        )
        assert remaining() is None
        return results

    near, far = asyncio.run(main())
    assert isinstance(near, BudgetExhausted)
    assert isinstance(far, BudgetExhausted)
    assert near.report.reason is StopReason.DEADLINE
    assert far.report.reason is StopReason.WALL_CLOCK
    # The tasks really interleaved: each saw the other's ticks inside its own attempts.
    assert len(readings["near"]) >= 4
    assert len(readings["far"]) >= 4
    for name, end in (("near", 30.0), ("far", 60.0)):
        values = [value for value, _ in readings[name]]
        assert values == sorted(values, key=lambda v: -(v or 0.0))
        for value, at in readings[name]:
            assert value == end - at
    assert clock.elapsed() <= 60.0
