"""Real local HTTP servers for the httpx tests: uvicorn apps, and a server that never answers.

``serve(app)`` runs an ASGI app with uvicorn on a free loopback port, in a thread of this
process. ``stalled_server()`` is a plain asyncio server, in the running event loop, that
accepts every connection and reads every request but answers only the path ``/ok`` (200,
kept alive); a request for any other path is never answered, until the client hangs up.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn

STARTUP_TIMEOUT = 10.0  # seconds a server may take to start listening


# The real clock and sleep, taken before any test starts a virtual clock, so a server thread
# keeps to real time while a test's virtual clock runs: freezegun patches time for every
# thread (an event loop reading time.monotonic() as it starts gets an epoch-based reading,
# schedules its next tick decades ahead and never sees its shutdown). Kept in a tuple:
# freezegun swaps every module-level name bound to a real time function.
_REAL = (time.monotonic, asyncio.sleep)


class _RealTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on the real monotonic clock, whatever patches ``time``."""

    def time(self) -> float:
        return _REAL[0]()


class _RealTimeServer(uvicorn.Server):
    """uvicorn's server, its tick on the real clock (not a virtual clock's ``asyncio.sleep``)."""

    async def main_loop(self) -> None:
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            await _REAL[1](0.1)
            should_exit = await self.on_tick(counter)


def _run(server: uvicorn.Server, sock: socket.socket) -> None:
    with asyncio.Runner(loop_factory=_RealTimeLoop) as runner:
        runner.run(server.serve(sockets=[sock]))


@contextmanager
def serve(app: Any) -> Iterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port; yield its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        lifespan="off",
        log_config=None,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
    )
    server = _RealTimeServer(config)
    thread = threading.Thread(target=_run, args=(server, sock), daemon=True)
    thread.start()
    try:
        started = time.monotonic()
        while not server.started:  # a bounded wait for a real server to listen
            if not thread.is_alive():
                raise RuntimeError("uvicorn exited before it started")
            if time.monotonic() - started > STARTUP_TIMEOUT:
                raise RuntimeError(f"uvicorn did not start within {STARTUP_TIMEOUT} s")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=STARTUP_TIMEOUT)
        sock.close()
    assert not thread.is_alive(), "uvicorn did not stop"


async def respond(send: Any, status: int, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    """Send an ASGI response with an empty body."""
    await send({"type": "http.response.start", "status": status, "headers": headers or []})
    await send({"type": "http.response.body", "body": b""})


async def receive_body(receive: Any) -> bytes:
    """The whole request body of an ASGI request."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


@dataclass
class Stalled:
    """What a :func:`stalled_server` saw: its URL, the connections, the requests by path."""

    url: str
    connections: int = 0
    paths: Counter[str] = field(default_factory=Counter)


@asynccontextmanager
async def stalled_server() -> AsyncIterator[Stalled]:
    """A loopback server that never answers, except the path ``/ok``; yields what it saw."""
    handlers: set[asyncio.Task[None]] = set()
    writers: list[asyncio.StreamWriter] = []
    seen: Stalled

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        writers.append(writer)
        seen.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                _, path, _ = head.split(b"\r\n", 1)[0].decode("ascii").split(" ", 2)
                seen.paths[path] += 1
                if path != "/ok":
                    await reader.read()  # never answers: waits for the client to hang up
                    return
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            return  # the client hung up
        finally:
            writer.close()
            handlers.discard(task)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    seen = Stalled(url=f"http://127.0.0.1:{port}")
    try:
        yield seen
    finally:
        server.close()
        for writer in writers:
            writer.close()  # a handler waiting for the client sees the end and returns
        if handlers:
            await asyncio.wait(set(handlers), timeout=STARTUP_TIMEOUT)
        for task in list(handlers):  # pragma: no cover (a handler that did not end)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await server.wait_closed()  # after the connections: Python 3.12 waits for them


@asynccontextmanager
async def aiohttp_serving(handler: Any) -> AsyncIterator[str]:
    """Serve ``handler`` for every path with aiohttp's own server on a free loopback port,
    in the running event loop; yield its base URL (no trailing slash)."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
