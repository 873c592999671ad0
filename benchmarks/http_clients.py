"""requests through BudgetAdapter and aiohttp through budget_middleware, beside the plain clients.

The transport benchmark's method (``benchmarks.transport``), for the two other clients:
sequential GETs from one client to a real local uvicorn app in a process of its own, three
candidates a client: the plain client; the plain client doing what the semantics require
of every request and nothing else (requests: the deadline header and a connect and read
timeout; aiohttp: a middleware that sets the deadline header, so aiohttp's middleware
chain and the header, and a total timeout of the time left); and the budgeted one.
Batches are timed interleaved in groups (the order rotated from group to group) on the
wall clock, the client thread's CPU clock and the server's, the garbage collector off.
The figure, ``rps_ratio``, is the requests per second that client and server CPU together
allow, budgeted over plain (at least 1 is as fast): the median over a round's groups,
then over the rounds, with the rounds' spread. Then the dribbling server: one byte every
0.5 s, a 1 s budget, how far past it each client ends.

    python -m benchmarks.http_clients [--rounds 7] [--pairs 10] [--batch 50]
                                      [--no-dribble] [--instructions]

``--instructions`` also counts the CPU instructions per request of each client under
valgrind (callgrind): a deterministic figure, whatever the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx

from tenacity_budget import BackoffPolicy

from ._common import ROOT, callgrind_per_unit, command_line, write_results
from .transport import TARGET, Rounds, ainterleaved, counted, interleaved, serve, summary

HEADER = "X-Request-Timeout-Ms"
LEFT = 10.0
"""The budget of every budgeted candidate's policy: what a first attempt has left."""

REQUESTS = ("requests", "requests + header and timeouts", "requests + BudgetAdapter")
AIOHTTP = ("aiohttp", "aiohttp + header middleware and timeout", "aiohttp + budget_middleware")


def _policy() -> BackoffPolicy:
    return BackoffPolicy(base=0.1, cap=1, max_elapsed=LEFT)


@contextmanager
def requests_senders(url: str) -> Iterator[dict[str, Callable[[], object]]]:
    """One GET of each requests candidate (:data:`REQUESTS`), by name."""
    import requests

    from tenacity_budget.requests import BudgetAdapter

    plain, floor, budgeted = REQUESTS
    with requests.Session() as bare, requests.Session() as required, requests.Session() as adapted:
        required.headers[HEADER] = str(int(LEFT * 1000))
        adapted.mount("http://", BudgetAdapter(_policy()))
        yield {
            plain: lambda: bare.get(url).content,
            floor: lambda: required.get(url, timeout=(LEFT, LEFT)).content,
            budgeted: lambda: adapted.get(url).content,
        }


@asynccontextmanager
async def aiohttp_senders(url: str) -> AsyncIterator[dict[str, Callable[[], Awaitable[object]]]]:
    """One GET of each aiohttp candidate (:data:`AIOHTTP`), by name."""
    import aiohttp
    from multidict import istr

    from tenacity_budget.aiohttp import budget_middleware

    plain, floor, budgeted = AIOHTTP
    name, value = istr(HEADER), str(int(LEFT * 1000))

    async def header_only(
        request: aiohttp.ClientRequest,
        handler: Callable[[aiohttp.ClientRequest], Awaitable[aiohttp.ClientResponse]],
    ) -> aiohttp.ClientResponse:
        request.headers[name] = value
        return await handler(request)

    def get(session: aiohttp.ClientSession) -> Callable[[], Awaitable[object]]:
        async def send() -> object:
            async with session.get(url) as response:
                return await response.read()

        return send

    # The floor's attempts are cut at the time left too: aiohttp's own total timeout (plain
    # aiohttp arms one per request already, 300 s by default).
    cut = aiohttp.ClientTimeout(total=LEFT)
    async with (
        aiohttp.ClientSession() as bare,
        aiohttp.ClientSession(middlewares=(header_only,), timeout=cut) as required,
        aiohttp.ClientSession(middlewares=(budget_middleware(_policy()),)) as wrapped,
    ):
        yield {plain: get(bare), floor: get(required), budgeted: get(wrapped)}


def run_requests(url: str, *, rounds: int, pairs: int, batch: int) -> dict[str, Any]:
    """Interleaved batches of plain requests, requests doing what the adapter's semantics
    require (the header, the timeouts), and requests through ``BudgetAdapter``."""
    with httpx.Client(base_url=url) as probe, requests_senders(url) as sends:
        results = interleaved(sends, probe, rounds=rounds, pairs=pairs, batch=batch)
    return summary(results, batch, plain=REQUESTS[0], judged=REQUESTS[2])


def run_aiohttp(url: str, *, rounds: int, pairs: int, batch: int) -> dict[str, Any]:
    """Interleaved batches of plain aiohttp, aiohttp with a middleware that only sets the
    deadline header, and aiohttp through ``budget_middleware``."""

    async def main(probe: httpx.Client) -> Rounds:
        async with aiohttp_senders(url) as sends:
            return await ainterleaved(sends, probe, rounds=rounds, pairs=pairs, batch=batch)

    with httpx.Client(base_url=url) as probe:
        results = asyncio.run(main(probe))
    return summary(results, batch, plain=AIOHTTP[0], judged=AIOHTTP[2])


# -- the dribbling server ----------------------------------------------------------------------

# The head is sent at once; the rest one byte every DRIBBLE_EVERY seconds.
DRIBBLE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n"
DRIBBLE_TAIL = b"X-Slow: 12345\r\n\r\nok"
DRIBBLE_EVERY = 0.5
DRIBBLE_BUDGET = 1.0


@contextmanager
def dribbling_server() -> Iterator[str]:
    """A loopback server answering each request one byte every 0.5 s (threads)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.1)
    stop = threading.Event()

    def handle(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            try:
                conn.sendall(DRIBBLE_HEAD)
                for byte in DRIBBLE_TAIL:
                    if stop.wait(DRIBBLE_EVERY):
                        return
                    conn.sendall(bytes([byte]))
            except OSError:
                return  # the client hung up

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


def dribble(url: str, loop: asyncio.AbstractEventLoop) -> dict[str, Any]:
    """How far past a 1 s budget a run against the dribbling server ends, each client."""
    import aiohttp
    import requests

    from tenacity_budget import BackoffPolicy
    from tenacity_budget.aiohttp import budget_middleware
    from tenacity_budget.requests import BudgetAdapter

    policy = BackoffPolicy(base=0.1, cap=0.2, max_elapsed=DRIBBLE_BUDGET, jitter="none")
    found: dict[str, Any] = {
        "every_s": DRIBBLE_EVERY,
        "bytes_dribbled": len(DRIBBLE_TAIL),
        "budget_s": DRIBBLE_BUDGET,
    }
    session = requests.Session()
    session.mount("http://", BudgetAdapter(policy))
    started = time.perf_counter()
    outcome = _outcome(lambda: session.get(url).status_code)
    found["requests"] = {"ended_after_s": round(time.perf_counter() - started, 3), **outcome}

    async def through_aiohttp() -> Any:
        async with (
            aiohttp.ClientSession(middlewares=(budget_middleware(policy),)) as client,
            client.get(url) as response,
        ):
            return response.status

    started = time.perf_counter()
    outcome = _outcome(lambda: loop.run_until_complete(through_aiohttp()))
    found["aiohttp"] = {"ended_after_s": round(time.perf_counter() - started, 3), **outcome}
    return found


def _outcome(call: Callable[[], object]) -> dict[str, Any]:
    try:
        return {"result": call()}
    except Exception as exc:
        return {"raised": type(exc).__name__}


# -- instructions per request (valgrind) ------------------------------------------------------


def _one(client: str, candidate: int, n: int, url: str) -> None:
    """Send ``n`` sequential GETs with one candidate of one client (``REQUESTS[candidate]``
    or ``AIOHTTP[candidate]``), run under valgrind by :func:`instructions`."""
    if client == "requests":
        with requests_senders(url) as sends:
            send = sends[REQUESTS[candidate]]
            for _ in range(n):
                send()
        return

    async def run() -> None:
        async with aiohttp_senders(url) as sends:
            asend = sends[AIOHTTP[candidate]]
            for _ in range(n):
                await asend()

    asyncio.run(run())


def instructions(url: str) -> dict[str, Any]:
    """Instructions per request of each client's candidates (:func:`transport.counted`),
    counted by callgrind (:func:`~benchmarks._common.callgrind_per_unit`)."""
    return {
        client: counted(
            *(
                callgrind_per_unit("benchmarks.http_clients", "--one", client, str(candidate), url)
                for candidate in range(3)
            )
        )
        for client in ("requests", "aiohttp")
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=7, help="rounds (>= 5)")
    parser.add_argument("--pairs", type=int, default=10, help="batch groups a round")
    parser.add_argument("--batch", type=int, default=50, help="requests a batch")
    parser.add_argument("--no-dribble", action="store_true")
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        client, candidate, url, n = args.one
        _one(client, int(candidate), int(n), url)
        return
    if args.rounds < 5 or args.pairs < 1 or args.batch < 1:
        parser.error("--rounds must be at least 5, --pairs and --batch at least 1")
    sizes = {"rounds": args.rounds, "pairs": args.pairs, "batch": args.batch}
    result: dict[str, Any] = {**sizes, "target": TARGET}
    result["candidates"] = {"requests": list(REQUESTS), "aiohttp": list(AIOHTTP)}
    with serve() as url:
        result["requests"] = run_requests(url, **sizes)
        result["aiohttp"] = run_aiohttp(url, **sizes)
        if args.instructions:
            result["instructions_per_request"] = instructions(url)
            print("instructions per request:", result["instructions_per_request"])
    for names in (REQUESTS, AIOHTTP):
        _print(result[names[0]], names)
    if not args.no_dribble:
        loop = asyncio.new_event_loop()
        with dribbling_server() as url:
            result["dribble"] = dribble(url, loop)
        print("dribbling server:", result["dribble"])
        _close(loop)
    path = write_results("http_clients", command_line("benchmarks.http_clients"), result)
    print(f"wrote {path.relative_to(ROOT)}")


def _print(rows: dict[str, Any], names: tuple[str, str, str]) -> None:
    for name in names:
        row = rows[name]
        line = (
            f"{name:<30} client+server CPU {row['client_cpu_us']:5.0f}+"
            f"{row['server_cpu_us']:3.0f} us a request, wall {row['wall_us']:5.0f} us"
        )
        for key in ("rps_ratio", "wall_ratio", "client_cpu_ratio") if name != names[0] else ():
            stats = row[key]
            low, high = stats["spread"]
            line += f"; {key} {stats['ratio']:.3f}x ({low:.3f}..{high:.3f})"
        print(line)
    print(f"  target: rps_ratio >= {TARGET}x: {'MET' if rows['target_met'] else 'NOT MET'}")


def _close(loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


if __name__ == "__main__":
    main()
