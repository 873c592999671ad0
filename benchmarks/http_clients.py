"""requests through BudgetAdapter and aiohttp through budget_middleware, beside the plain clients.

Sequential requests from one client against a real local uvicorn server (a process of its
own, answering 200 with a 2-byte body): each round times interleaved batches of every
candidate (the order alternating round to round) on the wall clock (requests per second)
and on the client thread's CPU clock; a ratio is the plain client's time over the budgeted
one's (>= 1 is as fast), the median over the rounds with the rounds' spread. Then the
dribbling server: one byte every 0.5 s, a 1 s budget, how far past it each client ends.

    python -m benchmarks.http_clients [--rounds 7] [--batch 300] [--no-dribble] [--instructions]

``--instructions`` also counts the CPU instructions per request of each client under
valgrind (callgrind): a deterministic figure, whatever the machine's load.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._common import command_line, write_results

ROOT = Path(__file__).resolve().parent.parent


async def app(scope: Any, receive: Any, send: Any) -> None:
    """The server: 200 with a 2-byte body, for every request."""
    if scope["type"] != "http":
        return
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


@contextmanager
def uvicorn_server() -> Iterator[str]:
    """Serve :func:`app` with uvicorn in a subprocess on a free port; yield its URL."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "uvicorn", "benchmarks.http_clients:app"]
    command += ["--port", str(port), "--log-level", "warning", "--no-access-log"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, cwd=ROOT, env=env)
    try:
        for _ in range(400):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("uvicorn did not start")
        yield f"http://127.0.0.1:{port}/"
    finally:
        process.terminate()
        process.wait(timeout=20)


def _rounds(
    batches: dict[str, Callable[[], None]], rounds: int
) -> dict[str, dict[str, list[float]]]:
    """Wall and CPU seconds of each candidate's batch, round by round, interleaved."""
    times: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in batches}
    names = list(batches)
    for name in names:  # warm up: connections made, code paths taken
        batches[name]()
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            wall, cpu = time.perf_counter(), time.thread_time()
            batches[name]()
            times[name]["wall"].append(time.perf_counter() - wall)
            times[name]["cpu"].append(time.thread_time() - cpu)
    return times


def _ratio(times: dict[str, dict[str, list[float]]], plain: str, budgeted: str) -> dict[str, Any]:
    """Throughput of ``budgeted`` over ``plain``: the median of the rounds, and their spread."""
    figure: dict[str, Any] = {}
    for clock in ("wall", "cpu"):
        ratios = [p / b for p, b in zip(times[plain][clock], times[budgeted][clock], strict=True)]
        figure[clock] = {
            "median": round(statistics.median(ratios), 4),
            "min": round(min(ratios), 4),
            "max": round(max(ratios), 4),
        }
    return figure


def requests_batches(url: str, batch: int) -> dict[str, Callable[[], None]]:
    """A batch of sequential GETs through plain requests and through BudgetAdapter."""
    import requests

    from tenacity_budget import BackoffPolicy
    from tenacity_budget.requests import BudgetAdapter

    policy = BackoffPolicy(base=0.1, cap=1, max_elapsed=10)
    plain = requests.Session()
    budgeted = requests.Session()
    budgeted.mount("http://", BudgetAdapter(policy))

    def run(session: requests.Session) -> Callable[[], None]:
        def batch_of() -> None:
            for _ in range(batch):
                session.get(url).content  # noqa: B018 (the body is read, as users do)

        return batch_of

    return {"requests": run(plain), "requests+BudgetAdapter": run(budgeted)}


def aiohttp_batches(
    url: str, batch: int, loop: asyncio.AbstractEventLoop
) -> tuple[dict[str, Callable[[], None]], Callable[[], None]]:
    """A batch of sequential GETs through plain aiohttp and through budget_middleware."""
    import aiohttp

    from tenacity_budget import BackoffPolicy
    from tenacity_budget.aiohttp import budget_middleware

    policy = BackoffPolicy(base=0.1, cap=1, max_elapsed=10)

    async def sessions() -> tuple[aiohttp.ClientSession, aiohttp.ClientSession]:
        return aiohttp.ClientSession(), aiohttp.ClientSession(
            middlewares=(budget_middleware(policy),)
        )

    plain, budgeted = loop.run_until_complete(sessions())

    def run(session: aiohttp.ClientSession) -> Callable[[], None]:
        async def requests_of() -> None:
            for _ in range(batch):
                async with session.get(url) as response:
                    await response.read()

        return lambda: loop.run_until_complete(requests_of())

    async def close() -> None:
        await plain.close()
        await budgeted.close()

    batches = {"aiohttp": run(plain), "aiohttp+budget_middleware": run(budgeted)}
    return batches, lambda: loop.run_until_complete(close())


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


def _one(client: str, budgeted: bool, n: int, url: str) -> None:
    """Send ``n`` sequential GETs with one client (run under valgrind by :func:`instructions`)."""
    from tenacity_budget import BackoffPolicy

    policy = BackoffPolicy(base=0.1, cap=1, max_elapsed=10)
    if client == "requests":
        import requests

        from tenacity_budget.requests import BudgetAdapter

        session = requests.Session()
        if budgeted:
            session.mount("http://", BudgetAdapter(policy))
        for _ in range(n):
            session.get(url).content  # noqa: B018 (the body is read, as users do)
        return
    import aiohttp

    from tenacity_budget.aiohttp import budget_middleware

    async def run() -> None:
        middlewares = (budget_middleware(policy),) if budgeted else ()
        async with aiohttp.ClientSession(middlewares=middlewares) as session:
            for _ in range(n):
                async with session.get(url) as response:
                    await response.read()

    asyncio.run(run())


def instructions(url: str) -> dict[str, Any]:
    """Instructions per request of each client, plain and budgeted: the difference of two
    valgrind runs (600 and 100 requests), so start-up and imports cancel out."""
    found: dict[str, Any] = {}
    for client in ("requests", "aiohttp"):
        per_request = {}
        for budgeted in (False, True):
            counts = []
            for n in (100, 600):
                command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
                command += [sys.executable, "-m", "benchmarks.http_clients", "--one"]
                command += [client, str(int(budgeted)), str(n), url]
                out = subprocess.run(
                    command, cwd=ROOT, capture_output=True, text=True, check=True
                ).stderr
                counts.append(int(out.rsplit("Collected :", 1)[1].split()[0]))
            per_request["budgeted" if budgeted else "plain"] = (counts[1] - counts[0]) / 500
        plain, budgeted_count = per_request["plain"], per_request["budgeted"]
        found[client] = {
            "plain": round(plain),
            "budgeted": round(budgeted_count),
            "ratio": round(plain / budgeted_count, 4),
        }
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, default=300)
    parser.add_argument("--no-dribble", action="store_true")
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        client, budgeted, n, url = args.one
        _one(client, budgeted == "1", int(n), url)
        return
    if args.rounds < 5:
        parser.error("--rounds must be at least 5")
    loop = asyncio.new_event_loop()
    result: dict[str, Any] = {"rounds": args.rounds, "batch": args.batch}
    with uvicorn_server() as url:
        async_batches, close = aiohttp_batches(url, args.batch, loop)
        times = _rounds({**requests_batches(url, args.batch), **async_batches}, args.rounds)
        close()
        if args.instructions:
            result["instructions_per_request"] = instructions(url)
            print("instructions per request:", result["instructions_per_request"])
    result["requests"] = _ratio(times, "requests", "requests+BudgetAdapter")
    result["aiohttp"] = _ratio(times, "aiohttp", "aiohttp+budget_middleware")
    result["per_request_us"] = {
        name: {c: round(statistics.median(t[c]) / args.batch * 1e6, 1) for c in t}
        for name, t in times.items()
    }
    for name in ("requests", "aiohttp"):
        wall, cpu = result[name]["wall"], result[name]["cpu"]
        print(
            f"{name}: budgeted/plain throughput {wall['median']:.3f}x wall "
            f"[{wall['min']:.3f}, {wall['max']:.3f}], {cpu['median']:.3f}x client CPU "
            f"[{cpu['min']:.3f}, {cpu['max']:.3f}] over {args.rounds} rounds"
        )
    if not args.no_dribble:
        with dribbling_server() as url:
            result["dribble"] = dribble(url, loop)
        print("dribbling server:", result["dribble"])
    _close(loop)
    path = write_results("http_clients", command_line("benchmarks.http_clients"), result)
    print(f"wrote {path.relative_to(ROOT)}")


def _close(loop: asyncio.AbstractEventLoop) -> None:
    loop.run_until_complete(loop.shutdown_asyncgens())
    loop.close()


if __name__ == "__main__":
    main()
