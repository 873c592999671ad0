"""Benchmark: the tail at scale, cut by hedged requests (issue 18).

A server answers in 10 ms for 99% of requests and in 1 s for 1%, drawn independently for
every attempt. Each request is one call of ``hedged_call`` (what ``policy.retry(hedge=...)``
runs) under one of:

* ``none``: no hedging (``Hedge(0, max_attempts=1)``: the first attempt only);
* ``p95``: ``Hedge(delay="p95")``, the delay learned from the hedge's own latencies;
* ``fixed``: ``Hedge(delay=<the server's p95>)``, a fixed delay (Dean and Barroso's 10 ms).

Measured for each: p50, p99 and p99.9 latency, and the extra requests sent (attempts per
request, minus 1). Goals: p99.9 at least 10x lower than without hedging, with at most 5%
extra requests for the fixed delay and at most 6% for ``"p95"`` (Dean and Barroso: hedging
after 10 ms took a BigTable read's p99.9 from 1,800 ms to 74 ms for 2% more requests).

**Simulated**, on the library's virtual clock (:func:`tenacity_budget.testing.virtual_clock`)
driven by its event loop (:meth:`~tenacity_budget.testing.VirtualClock.event_loop`), which
moves the clock to the next timer instead of waiting for it: requests arrive at a fixed rate
and overlap as they would, every latency exact, seeded per request and attempt (so the three
candidates meet the same server). **Real**: the same scenario against a real aiohttp server
in another process on a loopback port, the candidates' requests interleaved, the fixed delay
set to the p95 measured without hedging first. Run::

    python -m benchmarks.tail              # both parts, writes results/tail.json
    python -m benchmarks.tail --quick      # a smaller simulation, no real part, no file
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import multiprocessing
import random
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tenacity_budget import BackoffPolicy, BudgetExhausted, Hedge
from tenacity_budget.hedge import hedged_call
from tenacity_budget.testing import virtual_clock

from ._common import command_line, write_results

__all__ = [
    "CANDIDATES",
    "GOALS",
    "RealParams",
    "SimParams",
    "main",
    "quantile",
    "simulate",
    "summarise",
]

FAST = 0.010
"""Seconds the server takes for 99% of requests."""
SLOW = 1.0
"""Seconds it takes for the other 1%."""
SLOW_SHARE = 0.01
QUANTILES = (0.5, 0.9, 0.95, 0.98, 0.99, 0.995, 0.998, 0.999, 0.9995)
"""The latency curve kept for the figures."""
GOALS = {"tail_ratio": 10.0, "extra_fixed": 0.05, "extra_p95": 0.06}
"""p99.9 at least 10x lower; extra requests at most 5% (fixed delay) and 6% (``"p95"``)."""
POLICY = BackoffPolicy(base=0.1, cap=1.0, max_elapsed=5.0)
"""The calls' budget: 5 s, far beyond any latency here (the run's end never cuts)."""


# -- the scenario ------------------------------------------------------------------------------


@dataclass(frozen=True)
class SimParams:
    requests: int = 50_000
    rate: float = 1000.0  # requests per second, evenly spaced
    seed: int = 18


@dataclass(frozen=True)
class RealParams:
    warmup: int = 1200  # unhedged requests measuring the server's p95 first (the last 2/3)
    requests: int = 9_000  # then the candidates' requests, interleaved
    rate: float = 200.0  # well within what two shared cores serve, client and server
    seed: int = 18


CANDIDATES: dict[str, tuple[str, Callable[[float], Hedge]]] = {
    "none": ("no hedging", lambda p95: Hedge(0, max_attempts=1)),
    "p95": ('Hedge(delay="p95")', lambda p95: Hedge("p95")),
    "fixed": ("Hedge(delay=the server's p95)", lambda p95: Hedge(p95)),
}
"""Name: (label, the hedge given the server's p95 in seconds)."""


def latency(seed: int, request: int, attempt: int) -> float:
    """The server's latency for one attempt: slow with probability 1%, independently."""
    draw = random.Random(seed * 1_000_003 + request * 8 + attempt).random()
    return SLOW if draw < SLOW_SHARE else FAST


def quantile(values: Sequence[float], share: float) -> float:
    """The nearest-rank quantile of sorted ``values``."""
    rank = max(1, math.ceil(share * len(values) - 1e-9))
    return values[rank - 1]


def summarise(latencies: Sequence[float], attempts: int) -> dict[str, Any]:
    ordered = sorted(latencies)
    return {
        "requests": len(ordered),
        "attempts": attempts,
        "extra": attempts / len(ordered) - 1,
        "p50": quantile(ordered, 0.5),
        "p99": quantile(ordered, 0.99),
        "p999": quantile(ordered, 0.999),
        "max": ordered[-1],
        "curve": [[q, quantile(ordered, q)] for q in QUANTILES],
    }


async def _arrivals(
    count: int, rate: float, one: Callable[[int], Awaitable[None]], origin: float
) -> None:
    tasks = []
    for i in range(count):
        wait = origin + i / rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        tasks.append(asyncio.ensure_future(one(i)))
    await asyncio.gather(*tasks)


def simulate(name: str, params: SimParams) -> dict[str, Any]:
    """Run candidate ``name`` in virtual time; its figures."""
    _, make = CANDIDATES[name]
    hedge = make(FAST)
    latencies = [0.0] * params.requests
    sent = itertools.count()
    terms = POLICY.terms

    async def one(i: int) -> None:
        attempts = itertools.count()

        async def attempt() -> int:
            next(sent)
            await asyncio.sleep(latency(params.seed, i, next(attempts)))
            return 200

        began = time.monotonic()
        await hedged_call(hedge, attempt, terms=terms)
        latencies[i] = time.monotonic() - began

    with virtual_clock() as clock, clock.event_loop() as loop:
        loop.run_until_complete(_arrivals(params.requests, params.rate, one, time.monotonic()))
    return {"label": CANDIDATES[name][0], **summarise(latencies, next(sent))}


# -- the real server ---------------------------------------------------------------------------


def _serve(sock: socket.socket, seed: int) -> None:
    """The server process: 10 ms for 99% of requests, 1 s for 1% (its own seeded draws)."""
    from aiohttp import web

    rng = random.Random(seed)

    async def handle(request: web.Request) -> web.Response:
        await asyncio.sleep(SLOW if rng.random() < SLOW_SHARE else FAST)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", handle)
    web.run_app(app, sock=sock, print=None, access_log=None, handle_signals=True)


async def _real(url: str, params: RealParams) -> dict[str, Any]:
    import aiohttp

    terms = POLICY.terms
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:

        async def get() -> int:
            async with session.get(url) as response:
                await response.read()
                return response.status

        async def run(
            hedge: Hedge, count: int, pick: Callable[[int], str]
        ) -> dict[str, list[float]]:
            out: dict[str, list[float]] = {}

            async def one(i: int) -> None:
                name = pick(i)
                counted = out.setdefault(f"{name}/attempts", [])

                async def attempt() -> int:
                    counted.append(1.0)
                    return await get()

                began = time.monotonic()
                try:
                    await hedged_call(hedges.get(name, hedge), attempt, terms=terms)
                except BudgetExhausted:  # cut at 5 s: counted, at the time it took
                    out.setdefault(f"{name}/failed", []).append(1.0)
                out.setdefault(name, []).append(time.monotonic() - began)

            await _arrivals(count, params.rate, one, time.monotonic())
            return out

        hedges: dict[str, Hedge] = {}
        warm = await run(CANDIDATES["none"][1](0.0), params.warmup, lambda i: "warmup")
        settled = warm["warmup"][params.warmup // 3 :]  # once the connections are open
        p95 = quantile(sorted(settled), 0.95)
        hedges.update({name: make(p95) for name, (_, make) in CANDIDATES.items()})
        names = list(CANDIDATES)
        measured = await run(hedges["none"], params.requests, lambda i: names[i % len(names)])
    return {
        "server_p95": p95,
        "candidates": {
            name: {
                "label": CANDIDATES[name][0],
                **summarise(measured[name], len(measured[f"{name}/attempts"])),
                "failed": len(measured.get(f"{name}/failed", [])),
            }
            for name in names
        },
    }


def real_run(params: RealParams) -> dict[str, Any]:
    """The scenario against a real aiohttp server in another process (loopback)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    server = multiprocessing.get_context("fork").Process(
        target=_serve, args=(sock, params.seed), daemon=True
    )
    server.start()
    try:
        return asyncio.run(_real(f"http://127.0.0.1:{port}/", params))
    finally:
        server.terminate()
        server.join(timeout=10)
        sock.close()


# -- verdicts and the command ------------------------------------------------------------------


def verdicts(candidates: dict[str, Any]) -> dict[str, bool]:
    """Whether each goal is met by these figures."""
    none = candidates["none"]["p999"]
    return {
        "tail_fixed": none / candidates["fixed"]["p999"] >= GOALS["tail_ratio"],
        "tail_p95": none / candidates["p95"]["p999"] >= GOALS["tail_ratio"],
        "extra_fixed": candidates["fixed"]["extra"] <= GOALS["extra_fixed"],
        "extra_p95": candidates["p95"]["extra"] <= GOALS["extra_p95"],
    }


def _print(title: str, candidates: dict[str, Any]) -> bool:
    print(title)
    print(f"  {'candidate':<34} {'p50':>9} {'p99':>9} {'p99.9':>9} {'extra':>7}")
    for figures in candidates.values():
        ms = [f"{figures[key] * 1e3:>7.1f}ms" for key in ("p50", "p99", "p999")]
        print(f"  {figures['label']:<34} {' '.join(ms)} {figures['extra']:>7.2%}")
    met = verdicts(candidates)
    none = candidates["none"]["p999"]
    for name in ("fixed", "p95"):
        ratio = none / candidates[name]["p999"]
        goal = GOALS[f"extra_{name}"]
        print(
            f"  {name}: p99.9 {ratio:.1f}x lower (goal >= {GOALS['tail_ratio']:g}x: "
            f"{'met' if met[f'tail_{name}'] else 'NOT MET'}), extra "
            f"{candidates[name]['extra']:.2%} (goal <= {goal:.0%}: "
            f"{'met' if met[f'extra_{name}'] else 'NOT MET'})"
        )
    return all(met.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="20,000 simulated, no real part")
    parser.add_argument("--no-real", action="store_true", help="skip the real server")
    args = parser.parse_args(argv)
    sim = SimParams(requests=20_000) if args.quick else SimParams()
    started = time.perf_counter()
    simulated = {name: simulate(name, sim) for name in CANDIDATES}
    took = time.perf_counter() - started
    ok = _print(f"simulated: {sim.requests:,} requests per candidate ({took:.1f} s)", simulated)
    real: dict[str, Any] = {"skipped": "not run (--quick or --no-real)"}
    if not (args.quick or args.no_real):
        params = RealParams()
        started = time.perf_counter()
        real = {"params": asdict(params), **real_run(params)}
        real["seconds"] = round(time.perf_counter() - started, 1)
        title = (
            f"real: {params.requests:,} requests at {params.rate:g}/s, interleaved, against "
            f"an aiohttp server (p95 measured {real['server_p95'] * 1e3:.1f} ms)"
        )
        ok = _print(title, real["candidates"]) and ok
        real["met"] = verdicts(real["candidates"])
    if not args.quick:
        path = write_results(
            "tail",
            command_line("benchmarks.tail"),
            {
                "params": {
                    **asdict(sim),
                    "fast": FAST,
                    "slow": SLOW,
                    "slow_share": SLOW_SHARE,
                    "goals": GOALS,
                },
                "simulated": simulated,
                "simulated_met": verdicts(simulated),
                "real": real,
            },
        )
        print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
