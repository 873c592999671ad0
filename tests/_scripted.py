"""A scripted ASGI app, served by uvicorn in a process of its own, for the HTTP client tests.

The process of its own keeps the server out of reach of the virtual clock, which patches
the test process's clocks and sleeps. A request for ``/<key>/<s1>,<s2>,...`` gets the
statuses in turn (200 once they are spent), the non-200 ones with the headers of the
query's ``h=name:value`` pairs; ``/_seen/<key>`` answers the JSON list of the headers each
request for ``<key>`` carried, ``/whoami`` nothing but 200 ``ok``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

STARTUP_TIMEOUT = 20.0

_count: defaultdict[str, int] = defaultdict(int)
_seen: defaultdict[str, list[dict[str, str]]] = defaultdict(list)


async def _send(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope: Any, receive: Any, send: Any) -> None:
    """The scripted app (see the module)."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    parts = scope["path"].strip("/").split("/")
    if parts[0] == "_seen":
        await _send(send, 200, json.dumps(_seen[parts[1]]).encode(), [])
        return
    if parts[0] == "whoami":
        await _send(send, 200, b"ok", [])
        return
    key, script = parts[0], parts[1] if len(parts) > 1 else ""
    _seen[key].append({k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]})
    statuses = [int(s) for s in script.split(",") if s]
    n = _count[key]
    _count[key] += 1
    status = statuses[n] if n < len(statuses) else 200
    query = parse_qs(scope["query_string"].decode())
    headers = [tuple(h.encode().split(b":", 1)) for h in query.get("h", [])]
    await _send(send, status, b"ok" if status == 200 else b"no", headers if status != 200 else [])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def scripted_server(target: str = "tests._scripted:app") -> Iterator[str]:
    """Serve ``target`` with uvicorn in a subprocess on a free port; yield its base URL."""
    port = free_port()
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [sys.executable, "-m", "uvicorn", target, "--port", str(port)]
    command += ["--log-level", "warning", "--no-access-log", "--lifespan", "off"]
    process = subprocess.Popen(command, cwd=root, env=env)
    try:
        started = time.monotonic()
        while True:  # a bounded wait for a real server to listen
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None:
                    raise RuntimeError("uvicorn exited before it started") from None
                if time.monotonic() - started > STARTUP_TIMEOUT:
                    raise RuntimeError(
                        f"uvicorn did not start within {STARTUP_TIMEOUT} s"
                    ) from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=STARTUP_TIMEOUT)
