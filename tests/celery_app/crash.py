"""Crash scenarios on a real broker: kill -9 a worker during countdowns, or the broker itself.

Shared by the no-loss tests on RabbitMQ (``tests/test_celery_crash.py``) and the loss
measurement on Redis (``benchmarks/celery_loss.py``), so both run exactly the same thing:

1. real ``celery worker`` processes (``celery_app.app``, solo pool) consume one queue of a
   broker (``broker_url``); results, and the tasks' own logs, go to a Redis ``store_url``
   that no scenario kills (started with ``--notify-keyspace-events K$l``, whose events
   wake the waits here);
2. ``tasks`` runs of ``tb.crash`` are published, each failing its first 1 to 3 attempts, so
   each schedules countdown retries;
3. once ``disrupt_after`` retries have been published (countdowns pending), the scenario's
   disruption runs: :func:`kill_a_worker` (``kill -9``, then a fresh worker), or a broker
   ``kill -9`` and restart given by the caller;
4. every run is then accounted for: it succeeded, or it was dead-lettered (a
   ``TaskBudgetExhausted`` result). A run that is neither once every run's deadline has
   passed, with a margin, and no other run has ended for that margin, is *lost*.

The workers are supervised: one that exits on its own (kombu 5.7's worker exits when it
reconnects to a restarted Redis, ``AttributeError: 'NoneType' object has no attribute
'hostname'``) is replaced, and counted in :attr:`Outcome.worker_exits`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import redis
from celery import Celery

from tenacity_budget.celery import TaskBudgetExhausted

from . import app as tb

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
WAIT = 60.0  # upper bound on one worker's start; never reached when things work
MARGIN = 30.0  # past every run's deadline, how long without a run ending before one is lost


@dataclass
class Outcome:
    """How every run of one scenario ended."""

    tasks: int
    succeeded: set[str] = field(default_factory=set)
    dead_lettered: set[str] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)
    worker_exits: int = 0  # workers that exited on their own (and were replaced)
    disruptions: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def accounted(self) -> int:
        return len(self.succeeded) + len(self.dead_lettered)


class _Output:
    """Drains a worker's output in a thread; lets the caller wait for its ready line."""

    def __init__(self, stream: IO[bytes], marker: str) -> None:
        self.lines: list[str] = []
        self.marker = marker
        self.ready = threading.Event()
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream: IO[bytes]) -> None:
        for raw in stream:
            line = raw.decode("utf-8", "replace")
            self.lines.append(line)
            if self.marker in line:
                self.ready.set()
        self.ready.set()
        stream.close()  # the worker has exited: its pipe is at its end

    def join(self) -> None:
        """Once the worker has exited: wait until its output is drained and its pipe closed
        (a drain thread still running when the interpreter exits leaves the pipe open)."""
        self._thread.join(WAIT)


class Fleet:
    """Supervised ``celery worker --pool=solo`` processes on one queue."""

    def __init__(self, env: dict[str, str], queue: str, cwd: Path) -> None:
        self.env = env
        self.queue = queue
        self.cwd = cwd
        self.procs: list[tuple[subprocess.Popen[bytes], _Output]] = []
        self.exits = 0
        self._count = 0

    def start(self) -> subprocess.Popen[bytes]:
        self._count += 1
        name = f"c{self._count}-{uuid.uuid4().hex[:6]}@localhost"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "celery_app.app",
                "worker",
                "--pool=solo",
                "-Q",
                self.queue,
                "-n",
                name,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=INFO",
            ],
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        assert proc.stdout is not None
        output = _Output(proc.stdout, f"{name} ready.")
        self.procs.append((proc, output))
        if not output.ready.wait(WAIT) or proc.poll() is not None:
            tail = "".join(output.lines[-40:])
            raise RuntimeError(f"worker {name} did not start:\n{tail}")
        return proc

    def live(self) -> list[subprocess.Popen[bytes]]:
        return [proc for proc, _ in self.procs if proc.poll() is None]

    def supervise(self, size: int) -> None:
        """Replace the workers that exited on their own, up to ``size`` live ones."""
        while len(self.live()) < size:
            self.exits += 1
            self.start()

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """``kill -9`` one worker: no warm shutdown, nothing handed back."""
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=WAIT)

    def close(self) -> None:
        for proc, output in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=WAIT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=WAIT)
            output.join()

    def output(self) -> str:
        return "".join(line for _, out in self.procs for line in out.lines[-20:])


def client_app(broker_url: str, store_url: str) -> Any:
    """A publishing client of the test app's tasks (by name), with the workers' settings."""
    client = Celery(f"tb_crash_client_{uuid.uuid4().hex[:6]}", set_as_current=False)
    amqp = broker_url.startswith("amqp")
    client.conf.update(
        broker_url=broker_url,
        result_backend=store_url,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        broker_transport_options={"confirm_publish": True} if amqp else {},
    )
    return client


def kill_a_worker(fleet: Fleet) -> None:
    """The disruption of the worker scenario: ``kill -9`` a worker, start a fresh one."""
    fleet.kill(fleet.live()[0])
    fleet.start()


def _retried(store: redis.Redis, ids: list[str]) -> int:
    """How many retries the workers have published so far (``RecordingTask.retry``'s log)."""
    pipe = store.pipeline()
    for task_id in ids:
        pipe.llen(f"tb:retried:{task_id}")
    return sum(int(n) for n in pipe.execute())


def run_scenario(
    broker_url: str,
    store_url: str,
    cwd: Path,
    disrupt: Callable[[Fleet], None],
    *,
    tasks: int,
    workers: int = 1,
    moments: Sequence[tuple[int, float]] | None = None,
    quiet: float | None = None,
) -> Outcome:
    """Publish ``tasks`` runs, disrupt at each of ``moments``, account for every run.

    A run not accounted for once every run's deadline has passed (plus :data:`MARGIN`),
    and no run has ended for :data:`MARGIN` seconds, is lost; with ``quiet``, also one not
    accounted for once no run has ended for ``quiet`` seconds (the benchmark's shortcut: a
    lost run would otherwise cost the whole wait).
    A moment ``(k, delay)`` is ``delay`` seconds after the ``k``-th retry was published
    (the default: one, once half as many retries as runs are out, with no delay); drawn
    delays of a few milliseconds land a kill around the fetch of a retry just published.
    """
    suffix = uuid.uuid4().hex[:8]
    queue, dead = f"tb.crash.{suffix}", f"tb.crash-dead.{suffix}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")]),
        "TB_CELERY_REDIS_URL": store_url,
        "TB_CELERY_BROKER_URL": broker_url,
        "TB_DEAD_LETTER_QUEUE": dead,
    }
    store = redis.Redis.from_url(store_url)
    client = client_app(broker_url, store_url)
    # The publish hook finds a task's CeleryBudget in the registry of an app of this
    # process; a task of an app not yet finalized is registered once its proxy is used.
    assert tb.crash_task.name == "tb.crash"
    fleet = Fleet(env, queue, cwd)
    outcome = Outcome(tasks)
    pubsub = store.pubsub()
    try:
        pubsub.psubscribe("__keyspace@0__:tb:retried:*", "__keyspace@0__:celery-task-meta-*")
        for _ in range(workers):
            fleet.start()
        ids = [f"crash-{suffix}-{i}" for i in range(tasks)]
        published = time.monotonic()
        for i, task_id in enumerate(ids):
            client.send_task("tb.crash", args=(1 + i % 3,), queue=queue, task_id=task_id)
        give_up = published + tb.CRASH.max_elapsed
        seen, moved = 0, time.monotonic()
        for threshold, delay in [(tasks // 2, 0.0)] if moments is None else moments:
            while (count := _retried(store, ids)) < threshold:
                if count != seen:
                    seen, moved = count, time.monotonic()
                stalled = quiet is not None and time.monotonic() - moved > quiet
                if stalled or time.monotonic() > give_up:
                    break
                pubsub.get_message(timeout=0.5)
            else:
                if delay > 0:
                    threading.Event().wait(delay)
                disrupt(fleet)
                outcome.disruptions += 1
                continue
            outcome.notes.append(f"the disruption after retry {threshold} never came")
            break
        # Every run ends by its deadline (published + max_elapsed at the latest), or never:
        # a run whose deadline passed while its message sat in the broker ends at its next
        # delivery (dead-lettered at once). After a broker restart, Celery's workers take
        # redeliveries back slowly (one run every ~10 s on RabbitMQ before app.py gave the
        # workers a heartbeat timer; see its configure()), so the wait goes on past the
        # deadlines while runs still end, and gives up MARGIN after the last.
        give_up = published + tb.CRASH.max_elapsed + MARGIN
        pending = set(ids)
        progress = time.monotonic()
        while pending:
            now = time.monotonic()
            if quiet is not None and now - progress > quiet:
                break
            if now > give_up and now - progress > MARGIN:
                break
            fleet.supervise(workers)
            for task_id in sorted(pending):
                result = client.AsyncResult(task_id)
                if result.state == "SUCCESS":
                    outcome.succeeded.add(task_id)
                elif result.state == "FAILURE" and isinstance(result.result, TaskBudgetExhausted):
                    outcome.dead_lettered.add(task_id)
                    outcome.notes.append(f"{task_id}: {result.result}")
            left = pending - outcome.succeeded - outcome.dead_lettered
            if left != pending:
                progress = time.monotonic()
            pending = left
            if pending:
                pubsub.get_message(timeout=0.5)
        outcome.lost = pending
        outcome.worker_exits = fleet.exits
        if pending:
            outcome.notes.append(fleet.output())
    finally:
        pubsub.close()
        fleet.close()
        client.close()
        store.close()
    return outcome
