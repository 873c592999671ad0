"""Benchmark 3: memory, flat in the number of retries and in the number of concurrent runs.

Peak memory is measured with :mod:`tracemalloc` (Python allocations, above a baseline taken
just before the measured work) and leftovers with a snapshot diff after the runs end and
the garbage collector has run, counting only blocks allocated from ``tenacity`` or
``tenacity_budget`` code.

* **Long run.** A policy that affords exactly ``10**6`` retries (``base=1 ms, cap=1 s``):
  an always-failing function under ``policy.retry()`` with a no-op sleep makes all
  ``10**6`` retries and ends with ``BudgetExhausted``. Shorter runs (``10**3``..``10**5``
  retries, then success) show the peak does not grow with the number of retries; walking
  ``policy.iter_waits()`` over the same ``10**6`` waits shows no list is built either.
* **Concurrent runs.** ``N`` (up to 10,000) asyncio tasks run one ``policy.retry()``
  decorated async function at once, each failing 3 times then succeeding, sleeping with a
  no-op that only yields to the event loop (``asyncio.sleep(0)``), so all ``N`` runs are in
  flight together. The peak per run stays constant as ``N`` grows and nothing is left once
  the tasks end. tenacity's own ``AsyncRetrying`` (``wait_random_exponential`` +
  ``stop_after_attempt``) is measured the same way for scale.

Run::

    python -m benchmarks.memory [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import tenacity

from tenacity_budget import BackoffPolicy, BudgetExhausted, StopReason
from tenacity_budget.solver import total_delay

from ._common import command_line, noop_sleep, write_results

__all__ = [
    "Measurement",
    "Tracer",
    "concurrent_runs",
    "long_run",
    "main",
    "million_retry_policy",
    "traced",
    "walk_waits",
]

RETRIES = 10**6
"""Retries the long-run policy affords, exactly."""

_TRACKED = ("/tenacity/", "/tenacity_budget/")


def million_retry_policy(retries: int = RETRIES) -> BackoffPolicy:
    """A policy affording exactly ``retries`` retries: base 1 ms, cap 1 s, budget to match."""
    # The float sum of the delays may round a hair below the exact one; a relative margin of
    # 1e-12 (far less than one more 1 s retry) makes the count exact.
    budget = total_delay(retries, 0.001, 2.0, 1.0) * (1 + 1e-12)
    policy = BackoffPolicy(base=0.001, factor=2.0, cap=1.0, max_elapsed=budget, jitter="full")
    if policy.max_attempts() != retries:
        raise RuntimeError(f"policy affords {policy.max_attempts()} retries, not {retries}")
    return policy


@dataclass(slots=True)
class Measurement:
    """What one traced piece of work allocated, relative to a baseline taken just before it.

    Attributes:
        peak_bytes: peak traced memory above the baseline while the work ran.
        retained_bytes: traced memory above the baseline after each step of the work ended
            and ``gc.collect()`` ran (one entry per run or batch).
        tracked_retained_bytes: the part of the last ``retained_bytes`` allocated by
            ``tenacity`` or ``tenacity_budget`` code.
        seconds: wall time of the work (under tracemalloc, several times slower than untraced).
        info: figures the work itself reports.
    """

    peak_bytes: int = 0
    retained_bytes: list[int] = field(default_factory=list)
    tracked_retained_bytes: int = 0
    seconds: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """Plain values for the JSON result file."""
        return {
            "peak_bytes": self.peak_bytes,
            "retained_bytes": self.retained_bytes,
            "tracked_retained_bytes": self.tracked_retained_bytes,
            "seconds": round(self.seconds, 2),
            **self.info,
        }


class Tracer:
    """The running trace: marks a step's end (retained memory) and the peak so far."""

    def __init__(self, measurement: Measurement, baseline: int) -> None:
        self.measurement = measurement
        self.baseline = baseline

    def step_done(self) -> None:
        """Record the peak so far and, after a full collection, the memory still held."""
        _, peak = tracemalloc.get_traced_memory()
        self.measurement.peak_bytes = max(self.measurement.peak_bytes, peak - self.baseline)
        gc.collect()
        current, _ = tracemalloc.get_traced_memory()
        self.measurement.retained_bytes.append(current - self.baseline)
        tracemalloc.reset_peak()


def _tracked(stat: tracemalloc.StatisticDiff) -> bool:
    return any(part in frame.filename for frame in stat.traceback for part in _TRACKED)


@contextmanager
def traced() -> Iterator[Tracer]:
    """Trace the block; call ``step_done()`` after each run or batch inside it.

    Only allocations made while tracing are seen, so warm the work up before entering: a
    table allocated earlier and re-allocated larger under trace would count in full.
    """
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        baseline, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        measurement = Measurement()
        tracer = Tracer(measurement, baseline)
        started = time.perf_counter()
        yield tracer
        measurement.seconds = time.perf_counter() - started
        if not measurement.retained_bytes:
            tracer.step_done()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    diffs = [d for d in after.compare_to(before, "traceback") if _tracked(d)]
    measurement.tracked_retained_bytes = sum(d.size_diff for d in diffs)


def long_run(policy: BackoffPolicy, retries: int) -> Measurement:
    """Peak and leftovers of one sync run making ``retries`` retries under ``policy.retry()``.

    With ``retries == policy.max_attempts()`` the function never succeeds and the run ends
    with ``BudgetExhausted`` after exactly that many retries; with fewer it then succeeds.
    """
    left = [retries]

    @policy.retry(sleep=noop_sleep)
    def flaky() -> str:
        if left[0]:
            left[0] -= 1
            raise ValueError("transient")
        return "ok"

    left[0] = 1
    flaky()  # warm up: tenacity keeps the last call's statistics on the function
    left[0] = retries
    if retries >= policy.max_attempts():
        left[0] = retries + 1  # never succeeds within the budget
    with traced() as tracer:
        try:
            flaky()
            outcome = {"outcome": "success", "attempts": retries + 1}
        except BudgetExhausted as exc:
            report = exc.report
            if report.reason is not StopReason.COUNT or report.retries != retries:
                raise RuntimeError(f"unexpected end of the long run: {report}") from exc
            outcome = {"outcome": "BudgetExhausted", "attempts": report.attempts}
    tracer.measurement.info = {"retries": retries, **outcome}
    return tracer.measurement


def walk_waits(policy: BackoffPolicy) -> Measurement:
    """Peak of walking every wait of ``policy`` lazily (``iter_waits``), no list built."""
    with traced() as tracer:
        count, total = 0, 0.0
        for wait in policy.iter_waits(random.Random(1)):
            count += 1
            total += wait
    tracer.measurement.info = {"waits": count, "total_s": round(total, 1)}
    return tracer.measurement


async def _yield(seconds: float) -> None:
    """The no-op async sleep: hands control back to the event loop, waits no time."""
    await asyncio.sleep(0)


AsyncWork = Callable[[list[int]], Awaitable[int]]


def _async_flaky(
    failures: int, decorate: Callable[[AsyncWork], AsyncWork]
) -> tuple[Callable[[], Awaitable[int]], dict[str, int]]:
    """One decorated async function, and a call of it that fails ``failures`` times then
    returns 1; the attempts of each run are counted in a list passed as its argument."""
    counters = {"in_flight": 0, "max_in_flight": 0, "calls": 0}

    async def work(attempts: list[int]) -> int:
        attempts[0] += 1
        counters["calls"] += 1
        if attempts[0] <= failures:
            raise ValueError("transient")
        return 1

    decorated = decorate(work)  # once: every run goes through the same decorated function

    async def one_call() -> int:
        counters["in_flight"] += 1
        counters["max_in_flight"] = max(counters["max_in_flight"], counters["in_flight"])
        try:
            return await decorated([0])
        finally:
            counters["in_flight"] -= 1

    return one_call, counters


def _decorator(kind: str) -> Callable[[AsyncWork], AsyncWork]:
    if kind == "ours policy.retry()":
        policy = BackoffPolicy(base=0.1, cap=5.0, max_elapsed=3600.0)
        decorator = policy.retry(sleep=_yield)
        return lambda fn: decorator(fn)
    if kind == "tenacity wait_random_exponential + stop_after_attempt":
        retry = tenacity.retry(
            wait=tenacity.wait_random_exponential(multiplier=0.1, max=5.0),
            stop=tenacity.stop_after_attempt(1000),
            sleep=_yield,
        )
        return lambda fn: retry(fn)
    raise ValueError(f"unknown candidate {kind!r}")


def concurrent_runs(kind: str, n: int, failures: int = 3, batches: int = 5) -> Measurement:
    """Peak and retained memory of batches of ``n`` concurrent runs of one async function.

    An untraced warm-up batch first brings every table that grows to hold ``n`` runs at a
    time (asyncio's task set, the thread's table of ``threading.local`` objects, one per
    tenacity ``Retrying`` copy) to its full size; then ``batches`` traced batches follow.
    Memory retained after each batch that grew from batch to batch would be per-run
    leftovers.
    """
    one_call, counters = _async_flaky(failures, _decorator(kind))

    async def batch() -> list[int]:
        counters["calls"] = counters["max_in_flight"] = 0
        return list(await asyncio.gather(*(one_call() for _ in range(n))))

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(batch())
        with traced() as tracer:
            for _ in range(batches):
                results = loop.run_until_complete(batch())
                if results != [1] * n or counters["calls"] != n * (failures + 1):
                    raise RuntimeError(f"{kind}: runs did not retry as expected")
                del results
                tracer.step_done()
    finally:
        loop.close()
    measurement = tracer.measurement
    retained = measurement.retained_bytes
    measurement.info = {
        "runs": n,
        "batches": batches,
        "failures_per_run": failures,
        "max_in_flight": counters["max_in_flight"],
        "peak_bytes_per_run": round(measurement.peak_bytes / n, 1),
        # The median step between batches: a table that grows once (asyncio's weak set of
        # all tasks, say) makes one step large, a per-run leftover would make every step so.
        "growth_bytes_per_run": round(
            statistics.median(b - a for a, b in itertools.pairwise(retained)) / n, 3
        ),
    }
    return measurement


CONCURRENT_KINDS = (
    "ours policy.retry()",
    "tenacity wait_random_exponential + stop_after_attempt",
)


def run(*, quick: bool = False) -> dict[str, Any]:
    """Every measurement; ``quick`` stops the long run at ``10**4`` and N at 1,000."""
    policy = million_retry_policy()
    steps = (10**3, 10**4) if quick else (10**3, 10**4, 10**5, RETRIES)
    long_runs = [long_run(policy, retries).as_dict() for retries in steps]
    walk = walk_waits(policy).as_dict()
    sizes = (100, 1_000) if quick else (100, 1_000, 10_000)
    concurrent = {
        kind: [concurrent_runs(kind, n).as_dict() for n in sizes] for kind in CONCURRENT_KINDS
    }
    return {
        "policy": {
            "base": policy.base,
            "factor": policy.factor,
            "cap": policy.cap,
            "max_elapsed": policy.max_elapsed,
            "max_attempts": policy.max_attempts(),
        },
        "long_run": long_runs,
        "iter_waits": walk,
        "concurrent": concurrent,
    }


def _kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


def _print(result: dict[str, Any]) -> None:
    print(f"policy affording {result['policy']['max_attempts']:,} retries: {result['policy']}")
    print(f"\n{'retries':>10}  {'outcome':<16} {'peak':>12} {'retained':>12} {'time':>8}")
    for row in result["long_run"]:
        print(
            f"{row['retries']:>10,}  {row['outcome']:<16} {_kib(row['peak_bytes']):>12} "
            f"{_kib(row['retained_bytes'][-1]):>12} {row['seconds']:>7.1f}s"
        )
    walk = result["iter_waits"]
    print(f"\niter_waits over {walk['waits']:,} waits: peak {_kib(walk['peak_bytes'])}")
    for kind, rows in result["concurrent"].items():
        print(f"\nconcurrent runs, {kind}")
        print(
            f"{'runs':>8} {'in flight':>10} {'peak':>12} {'per run':>10} "
            f"{'retained after each batch':>30} {'growth/run':>11}"
        )
        for row in rows:
            retained = ", ".join(_kib(b) for b in row["retained_bytes"])
            print(
                f"{row['runs']:>8,} {row['max_in_flight']:>10,} {_kib(row['peak_bytes']):>12} "
                f"{row['peak_bytes_per_run']:>8,.0f} B {retained:>30} "
                f"{row['growth_bytes_per_run']:>9.2f} B"
            )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, no result file")
    args = parser.parse_args(argv)
    result = run(quick=args.quick)
    _print(result)
    if not args.quick:
        path = write_results("memory", command_line("benchmarks.memory"), result)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
