"""Benchmark: ``BudgetTransport`` and ``AsyncBudgetTransport`` against plain httpx, requests/s.

One client sends sequential GETs to a real local uvicorn app (in a process of its own, so
the server does not share the client's interpreter) that answers 200 with a small body.
Three clients of each kind talk to it, each with its own connection pool: plain
``httpx.Client`` / ``httpx.AsyncClient``; the same sending the deadline header on every
request (what the header itself costs, in httpx, h11 and the server); and the same with a
budget transport (a default ``BackoffPolicy``, the header on). Their batches are timed
interleaved, one batch of each in turn (the order rotated from group to group), on the
wall clock, on the client thread's CPU clock and on the server process's (which the
server reports); the garbage collector is off during a batch. The target's figure,
``rps_ratio``, is the requests per second that the CPU of client and server together
allow (a loaded machine cannot disturb it), budget client over plain client (above 1 is
faster): the median over a round's batch groups, then over the rounds, with the rounds'
lowest and highest as the spread. Target (issue 16): at least 0.97x plain httpx's
requests per second, sync and async. Run::

    python -m benchmarks.transport [--rounds 7] [--pairs 10] [--batch 50] [--quick]
                                   [--instructions]

``--instructions`` adds each client's instructions per request, counted by valgrind's
callgrind (a figure the machine's load does not move).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AsyncExitStack, ExitStack, contextmanager
from typing import Any

import httpx

from tenacity_budget import BackoffPolicy
from tenacity_budget.httpx import AsyncBudgetTransport, BudgetTransport

from ._common import CLOCK, callgrind_per_unit, command_line, write_results

__all__ = ["TARGET", "ainterleaved", "counted", "interleaved", "main", "run", "serve", "summary"]

TARGET = 0.97
"""The lowest ratio of requests per second (budget transport / plain httpx) the issue accepts."""

BODY = b'{"ok": true}'

APP = f"""
import sys, time, uvicorn

async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = {BODY!r}
    if scope["path"] == "/cpu":  # the server's own CPU time so far, in ns
        body = str(time.process_time_ns()).encode()
    await send({{"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json")]}})
    await send({{"type": "http.response.body", "body": body}})

uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning",
            access_log=False, lifespan="off")
"""

POLICY = BackoffPolicy(base=0.1, cap=2, max_elapsed=10)

PLAIN = "httpx"
WITH_HEADER = "httpx + deadline header"
BUDGET = "BudgetTransport"
HEADER = {"X-Request-Timeout-Ms": "10000"}
"""What the second candidate, a plain client, sends on every request: the same header as
the budget transport, so that its figures show what sending the header itself costs."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@contextmanager
def serve() -> Iterator[str]:
    """A uvicorn app in a child process answering 200 with a small body; yields its URL."""
    port = _free_port()
    child = subprocess.Popen([sys.executable, "-c", APP, str(port)])
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(1000):  # a bounded wait for the server to listen
            try:
                if httpx.get(url, timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.01)
        else:
            raise RuntimeError("the uvicorn child did not start within 10 s")
        yield url
    finally:
        child.terminate()
        child.wait(timeout=10)


Sample = tuple[float, float, float]
"""One batch: wall seconds, the client thread's CPU seconds, the server process's CPU seconds."""

Rounds = list[list[dict[str, Sample]]]
"""Each round's batch groups: one timed batch of every candidate, by name."""


def _stats(ratios: list[float]) -> dict[str, Any]:
    median = statistics.median(ratios)
    return {
        "ratio": round(median, 4),
        "ratio_rounds": [round(r, 4) for r in ratios],
        "spread": [round(min(ratios), 4), round(max(ratios), 4)],
        "spread_pct": round((max(ratios) - min(ratios)) / median * 100, 1),
    }


def _per_request(samples: list[Sample], index: int, batch: int) -> float:
    """The median over batches of one figure of a sample, in microseconds a request."""
    return statistics.median(sample[index] for sample in samples) / batch * 1e6


def summary(
    rounds: Rounds, batch: int, *, plain: str = PLAIN, judged: str = BUDGET
) -> dict[str, Any]:
    """Each candidate's figures, and its ratios to ``plain`` (its requests/s over plain's);
    ``target_met`` judges the candidate ``judged``.

    ``rps_ratio`` (the target's figure) counts the CPU a request costs the client thread and
    the server process together: the requests per second of one client on an idle machine,
    which a machine shared with other processes cannot disturb. ``wall_ratio`` is the same
    on the wall clock, as disturbed as the machine is; ``client_cpu_ratio`` counts the
    client's CPU alone (the transport's overhead against the client's share of the work).
    Each is the median over a round's batch groups (one batch of each candidate, timed in
    turn) of plain's figure over the candidate's, then the median over rounds.
    """
    figures: dict[str, Callable[[Sample], float]] = {
        "rps_ratio": lambda sample: sample[1] + sample[2],
        "wall_ratio": lambda sample: sample[0],
        "client_cpu_ratio": lambda sample: sample[1],
    }
    result: dict[str, Any] = {}
    for name in rounds[0][0]:
        samples = [group[name] for groups in rounds for group in groups]
        client, server = _per_request(samples, 1, batch), _per_request(samples, 2, batch)
        row: dict[str, Any] = {
            "wall_us": round(_per_request(samples, 0, batch), 1),
            "client_cpu_us": round(client, 1),
            "server_cpu_us": round(server, 1),
            "rps": round(1e6 / (client + server), 1),
        }
        if name != plain:
            for key, figure in figures.items():
                row[key] = _stats(
                    [
                        statistics.median(figure(g[plain]) / figure(g[name]) for g in groups)
                        for groups in rounds
                    ]
                )
            row["client_overhead_us"] = round(client - result[plain]["client_cpu_us"], 1)
        result[name] = row
    result["target_met"] = bool(result[judged]["rps_ratio"]["ratio"] >= TARGET)
    return result


def _server_cpu(probe: httpx.Client) -> float:
    """The server process's CPU time so far, in seconds."""
    return int(probe.get("cpu").content) / 1e9


def _timed(send: Callable[[], object], batch: int, probe: httpx.Client) -> Sample:
    server = _server_cpu(probe)
    gc.disable()
    try:
        wall, cpu = time.perf_counter(), CLOCK()
        for _ in range(batch):
            send()
        wall, cpu = time.perf_counter() - wall, CLOCK() - cpu
    finally:
        gc.enable()
    return wall, cpu, _server_cpu(probe) - server


async def _atimed(send: Callable[[], Awaitable[object]], batch: int, probe: httpx.Client) -> Sample:
    server = _server_cpu(probe)  # a blocking call: nothing else runs on this loop meanwhile
    gc.disable()
    try:
        wall, cpu = time.perf_counter(), CLOCK()
        for _ in range(batch):
            await send()
        wall, cpu = time.perf_counter() - wall, CLOCK() - cpu
    finally:
        gc.enable()
    return wall, cpu, _server_cpu(probe) - server


NAMES = (PLAIN, WITH_HEADER, BUDGET)
"""The candidates of each kind, in the order their batches run."""


def _options(name: str, asynchronous: bool) -> dict[str, Any]:
    """The client options of candidate ``name``: none, the header, or the budget transport."""
    if name == WITH_HEADER:
        return {"headers": HEADER}
    if name == BUDGET:
        return {"transport": (AsyncBudgetTransport if asynchronous else BudgetTransport)(POLICY)}
    return {}


def sync_client(name: str) -> httpx.Client:
    """One sync candidate, by name: plain, with the header, or through the transport."""
    return httpx.Client(**_options(name, False))


def async_client(name: str) -> httpx.AsyncClient:
    """One async candidate, by name (made inside the loop that uses it)."""
    return httpx.AsyncClient(**_options(name, True))


def run_sync(url: str, *, rounds: int, pairs: int, batch: int) -> dict[str, Any]:
    """Interleaved batches of the plain, the plain-with-header and the budget sync clients."""
    clients = {name: sync_client(name) for name in NAMES}
    with httpx.Client(base_url=url) as probe, ExitStack() as stack:
        for client in clients.values():
            stack.enter_context(client)
        sends = {
            name: (lambda client=client: client.get(url).content)
            for name, client in clients.items()
        }
        results = interleaved(sends, probe, rounds=rounds, pairs=pairs, batch=batch)
    return summary(results, batch)


def _order(sends: Mapping[str, Any], group: int) -> list[str]:
    """The candidates in the order a group times them: rotated from group to group, so that
    no candidate always runs after the same other one (the caches it leaves behind)."""
    names = list(sends)
    shift = group % len(names)
    return names[shift:] + names[:shift]


def interleaved(
    sends: Mapping[str, Callable[[], object]],
    probe: httpx.Client,
    *,
    rounds: int,
    pairs: int,
    batch: int,
) -> Rounds:
    """A warm-up batch of each candidate, then ``rounds`` rounds of ``pairs`` batch groups,
    each timing one batch of every candidate in turn (:func:`_order`)."""
    for send in sends.values():  # warm: connected, caches filled
        _timed(send, batch, probe)
    return [
        [
            {name: _timed(sends[name], batch, probe) for name in _order(sends, group)}
            for group in range(pairs)
        ]
        for _ in range(rounds)
    ]


async def ainterleaved(
    sends: Mapping[str, Callable[[], Awaitable[object]]],
    probe: httpx.Client,
    *,
    rounds: int,
    pairs: int,
    batch: int,
) -> Rounds:
    """:func:`interleaved` for coroutine functions, each batch awaited in the running loop."""
    for send in sends.values():
        await _atimed(send, batch, probe)
    results: Rounds = []
    for _ in range(rounds):
        groups: list[dict[str, Sample]] = []
        for group in range(pairs):
            groups.append(
                {name: await _atimed(sends[name], batch, probe) for name in _order(sends, group)}
            )
        results.append(groups)
    return results


def run_async(url: str, *, rounds: int, pairs: int, batch: int) -> dict[str, Any]:
    """Interleaved batches of the plain, the plain-with-header and the budget async clients."""

    async def main(probe: httpx.Client) -> dict[str, Any]:
        clients = {name: async_client(name) for name in NAMES}
        async with AsyncExitStack() as stack:
            for client in clients.values():
                await stack.enter_async_context(client)

            def get(client: httpx.AsyncClient) -> Callable[[], Awaitable[object]]:
                async def send() -> object:
                    return (await client.get(url)).content

                return send

            sends = {name: get(client) for name, client in clients.items()}
            results = await ainterleaved(sends, probe, rounds=rounds, pairs=pairs, batch=batch)
        return summary(results, batch)

    with httpx.Client(base_url=url) as probe:
        return asyncio.run(main(probe))


def run(*, rounds: int, pairs: int, batch: int, count: bool = False) -> dict[str, Any]:
    """Both benchmarks against one uvicorn child (``count``: and :func:`instructions`)."""
    if rounds < 1 or pairs < 1 or batch < 1:
        raise ValueError("rounds, pairs and batch must be >= 1")
    with serve() as url:
        sync = run_sync(url, rounds=rounds, pairs=pairs, batch=batch)
        asynchronous = run_async(url, rounds=rounds, pairs=pairs, batch=batch)
        counts = instructions(url) if count else None
    extra = {} if counts is None else {"instructions_per_request": counts}
    return {
        "rounds": rounds,
        "pairs": pairs,
        "batch": batch,
        "policy": repr(POLICY),
        "body_bytes": len(BODY),
        "sync": sync,
        "async": asynchronous,
        "target": f"requests per second at least {TARGET}x plain httpx's (median of the "
        "rounds' paired ratios), sync and async",
        **extra,
    }


def _one(mode: str, name: str, url: str, n: int) -> None:
    """Send ``n`` sequential GETs with one candidate (``mode`` ``sync`` or ``async``, then
    its name), the process :func:`instructions` runs under valgrind."""
    if mode == "sync":
        with sync_client(name) as client:
            for _ in range(n):
                client.get(url).content  # noqa: B018 (the body read, as in the timed batches)
        return

    async def run() -> None:
        async with async_client(name) as client:
            for _ in range(n):
                (await client.get(url)).content  # noqa: B018

    asyncio.run(run())


def counted(plain: float, floor: float, budgeted: float) -> dict[str, Any]:
    """Three candidates' instructions per request (the plain client, the floor, the budgeted
    one), with ``ratio``, the plain client's count over the budgeted one's, and
    ``floor_ratio``, over the floor's (at least 1 is as cheap)."""
    return {
        "plain": round(plain),
        "floor": round(floor),
        "budgeted": round(budgeted),
        "ratio": round(plain / budgeted, 4),
        "floor_ratio": round(plain / floor, 4),
    }


def instructions(url: str) -> dict[str, Any]:
    """Instructions per request of each candidate's client (:func:`counted`; the floor is
    httpx sending the header), sync and async, counted by callgrind
    (:func:`~benchmarks._common.callgrind_per_unit`)."""
    return {
        mode: counted(
            *(
                callgrind_per_unit("benchmarks.transport", "--one", mode, name, url)
                for name in NAMES
            )
        )
        for mode in ("sync", "async")
    }


def _print(result: dict[str, Any]) -> None:
    print(
        f"sequential GETs to a local uvicorn app, {result['rounds']} rounds of "
        f"{result['pairs']} interleaved batch groups of {result['batch']} requests"
    )
    for kind in ("sync", "async"):
        rows = result[kind]
        print(f"{kind}:")
        for name in (PLAIN, WITH_HEADER, BUDGET):
            row = rows[name]
            line = (
                f"  {name:<22} client+server CPU {row['client_cpu_us']:5.0f}+"
                f"{row['server_cpu_us']:3.0f} us a request, wall {row['wall_us']:5.0f} us"
            )
            if name != PLAIN:
                line += f" (client +{row['client_overhead_us']:.1f} us)"
            print(line)
            for key in ("rps_ratio", "wall_ratio", "client_cpu_ratio") if name != PLAIN else ():
                stats = row[key]
                low, high = stats["spread"]
                print(
                    f"    {key:<16} {stats['ratio']:.3f}x  "
                    f"{', '.join(f'{r:.3f}' for r in stats['ratio_rounds'])} "
                    f"({low:.3f}..{high:.3f}, {stats['spread_pct']}%)"
                )
        verdict = "MET" if rows["target_met"] else "NOT MET"
        print(f"  target: {BUDGET} rps_ratio >= {TARGET}x: {verdict}")
        counts = result.get("instructions_per_request", {}).get(kind)
        if counts is not None:
            print(f"  instructions a request: {counts}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=7, help="rounds (>= 5)")
    parser.add_argument("--pairs", type=int, default=10, help="batch pairs a round")
    parser.add_argument("--batch", type=int, default=50, help="requests a batch")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 3 pairs, no file")
    parser.add_argument(
        "--instructions", action="store_true", help="add instructions per request (valgrind)"
    )
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        mode, name, url, n = args.one
        _one(mode, name, url, int(n))
        return 0
    rounds, pairs = (2, 3) if args.quick else (args.rounds, args.pairs)
    result = run(rounds=rounds, pairs=pairs, batch=args.batch, count=args.instructions)
    _print(result)
    if not args.quick:
        path = write_results("transport", command_line("benchmarks.transport"), result)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
