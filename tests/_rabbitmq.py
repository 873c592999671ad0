"""A real, throwaway RabbitMQ node for the tests: its own name, ports and directories.

:class:`RabbitMQServer` starts Debian's ``rabbitmq-server`` (``.ci/rabbitmq.sh`` installs
it) as a node of its own: a unique node name, free ports for AMQP
(``RABBITMQ_NODE_PORT``), Erlang distribution (``RABBITMQ_DIST_PORT``) and the port mapper
(``ERL_EPMD_PORT``), and its data (mnesia), log, configuration and cookie (``HOME``) in a
temporary directory, so it touches no system service and no other node. It waits for the
node's "Server startup complete" log line (reading its output, never polling with
sleeps), and can be killed (``kill -9``) and started again with the same name, ports and
data: durable queues and persistent messages survive, as they do for a real broker.

Tests that need one skip with a reason where no ``rabbitmq-server`` binary exists.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path
from typing import IO

import pytest

from tests._redis import free_port

__all__ = ["NO_RABBITMQ", "RABBITMQ_SERVER", "RabbitMQServer"]


def _find(name: str) -> str | None:
    """The RabbitMQ script ``name``: the package's own (it runs as the caller), else PATH's."""
    own = Path("/usr/lib/rabbitmq/bin") / name
    if own.is_file() and os.access(own, os.X_OK):
        return str(own)
    return shutil.which(name)


RABBITMQ_SERVER = _find("rabbitmq-server")
NO_RABBITMQ = (
    "no rabbitmq-server binary: the RabbitMQ tests need Debian's rabbitmq-server "
    "(run .ci/rabbitmq.sh, i.e. apt-get install rabbitmq-server)"
)
READY = "Server startup complete"
WAIT = 120.0  # upper bound on waiting for the node; never reached when things work


class _Output:
    """Drains the node's output in a thread; lets the caller wait for the ready line."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.ended = threading.Event()
        self.stream = stream
        self.thread = threading.Thread(target=self._drain, daemon=True)
        self.thread.start()

    def _drain(self) -> None:
        for raw in self.stream:
            line = raw.decode("utf-8", "replace")
            self.lines.append(line)
            if READY in line:
                self.ready.set()
        self.ended.set()
        self.ready.set()  # wake the waiter: the node is gone

    def close(self) -> None:
        self.thread.join(WAIT)
        self.stream.close()


def _waited(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait for ``proc`` to exit, at most ``timeout`` seconds (on a lock, not a sleep)."""
    waiter = threading.Thread(target=proc.wait, daemon=True)
    waiter.start()
    waiter.join(timeout)
    return not waiter.is_alive()


class RabbitMQServer:
    """One RabbitMQ node on ``127.0.0.1``; :meth:`kill` or :meth:`stop`, :meth:`start` again.

    Attributes:
        port: the AMQP port, the same across restarts.
        url: ``amqp://guest:guest@127.0.0.1:<port>//`` (guest may log in over loopback).
        node: the node's name (``tb-<hex>@localhost``).
    """

    def __init__(self) -> None:
        if RABBITMQ_SERVER is None:
            pytest.skip(NO_RABBITMQ)
        self.binary = RABBITMQ_SERVER
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.node = f"tb-{uuid.uuid4().hex[:10]}@localhost"
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}//"
        self._dir = tempfile.TemporaryDirectory(prefix="tb-rabbitmq-")
        base = Path(self._dir.name)
        for sub in ("home", "mnesia", "log"):
            (base / sub).mkdir()
        (base / "enabled_plugins").write_text("[].\n", encoding="utf-8")
        # A configuration of its own (never /etc/rabbitmq's): loopback only.
        (base / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\nloopback_users.guest = true\n",
            encoding="utf-8",
        )
        self.env = {
            **os.environ,
            "HOME": str(base / "home"),  # the Erlang cookie of this node and its tools
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_LOGS": "-",  # to the output, where the ready line is read
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(base / "node.pid"),
            # Run the Erlang VM in place of the script (no proxy shell in between), so the
            # process started is the broker itself: kill -9 kills the broker.
            "RUNNING_UNDER_SYSTEMD": "1",
        }
        self.env.pop("NOTIFY_SOCKET", None)
        self._proc: subprocess.Popen[bytes] | None = None
        self._output: _Output | None = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> RabbitMQServer:
        """Start the node (same name, ports and data as before) and wait until it serves."""
        if self.running:
            return self
        proc = subprocess.Popen(
            [self.binary],
            env=self.env,
            cwd=self._dir.name,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert proc.stdout is not None
        output = _Output(proc.stdout)
        try:
            output.ready.wait(WAIT)
        except BaseException:  # interrupted while waiting: leave no node, and no pipe, behind
            proc.kill()
            _waited(proc, WAIT)
            output.close()
            raise
        if output.ended.is_set() or not output.ready.is_set():
            proc.kill()
            _waited(proc, WAIT)
            output.close()
            tail = "".join(output.lines[-40:])
            pytest.fail(f"rabbitmq-server {self.node} did not start:\n{tail}")
        self._proc, self._output = proc, output
        return self

    def kill(self) -> None:
        """``kill -9`` the broker: no shutdown, nothing flushed that was not already."""
        proc, self._proc = self._proc, None
        output, self._output = self._output, None
        if proc is None:
            return
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            _waited(proc, WAIT)
        if output is not None:
            output.close()

    def stop(self) -> None:
        """Stop the node cleanly (SIGTERM: the VM shuts RabbitMQ down), then its epmd."""
        proc, self._proc = self._proc, None
        output, self._output = self._output, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            if not _waited(proc, WAIT):
                proc.kill()
                _waited(proc, WAIT)
        if output is not None:
            output.close()

    def _stop_epmd(self) -> None:
        """Stop the port mapper the node started on its own port (``epmd -kill``)."""
        epmd = shutil.which("epmd") or _find_epmd()
        if epmd is None:
            return
        subprocess.run(
            [epmd, "-port", str(self.epmd_port), "-kill"],
            env=self.env,
            capture_output=True,
            timeout=WAIT,
            check=False,
        )

    def close(self) -> None:
        self.stop()
        self._stop_epmd()
        self._dir.cleanup()

    def __enter__(self) -> RabbitMQServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _find_epmd() -> str | None:
    """The Erlang port mapper of the Erlang installation (Debian: under /usr/lib/erlang)."""
    for found in sorted(Path("/usr/lib/erlang").glob("erts-*/bin/epmd")):
        return str(found)
    return None
