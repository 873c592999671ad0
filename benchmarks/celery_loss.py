"""How often a budgeted Celery run is lost when a worker or the broker is killed, per broker.

The two crash scenarios of ``tests/celery_app/crash.py`` (shared with the no-loss tests on
RabbitMQ, ``tests/test_celery_crash.py``), each run ``--runs`` times with real workers:

* ``worker``: 12 runs, each failing its first 1 to 3 attempts; four times, once ``k``
  retries have been published (``k`` drawn from 1 to 18, then a drawn delay of up to
  20 ms), the worker is killed (``kill -9``) during the countdowns and a fresh one started
  (the moments of the RabbitMQ test are of the same kind);
* ``broker``: 24 runs, two workers; twice, at the same kind of drawn moment (``k`` up to
  36), the broker is killed (``kill -9``) and restarted on the same data (Redis: AOF,
  ``appendfsync always``; RabbitMQ: durable queues, persistent messages, publisher
  confirms). Workers that exit on their own are restarted (supervised), as kombu 5.7's
  worker is reported to on a Redis reconnect.

A run is lost when it neither succeeded nor was dead-lettered (and, on Redis, the broker
holds no message of it any more: neither queued nor unacknowledged). On Redis that happens
when a kill lands between kombu's ``BRPOP`` (the message leaves the queue) and its record
of the message as unacknowledged: a window of milliseconds, wider when the worker is busy
(a loaded machine), hit by chance, so this is a rate measured over runs, not something a
deterministic test can show. The Redis broker is
``redis-server`` when one is on PATH, else the dev extra's ``valkey-server`` (the same
transport code; tests/_redis.py picks it). ``--rabbitmq`` runs the same on RabbitMQ (its
tests show no loss; here it is counted the same way, for the comparison).

    python -m benchmarks.celery_loss --runs 8 [--rabbitmq | --rabbitmq-only]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

import kombu  # noqa: E402
import redis  # noqa: E402
from celery_app.crash import Fleet, Outcome, kill_a_worker, run_scenario  # noqa: E402

from benchmarks._common import command_line, write_results  # noqa: E402
from tests._redis import REDIS_SERVER, RedisServer  # noqa: E402

QUIET = 30.0  # a run not ended after this long without any run ending is lost (see crash.py)


class _Broker:
    """A broker to crash: its URL, and ``kill -9`` plus restart on the same data."""

    url: str

    def start(self) -> None:
        raise NotImplementedError

    def crash(self) -> None:
        raise NotImplementedError

    def holds(self, task_ids: set[str]) -> set[str]:
        """Which of ``task_ids`` the broker still holds a message of (queued or unacked)."""
        return set()

    def close(self) -> None:
        raise NotImplementedError


class _RedisBroker(_Broker):
    def __init__(self) -> None:
        self.server = RedisServer(args=("--appendonly", "yes", "--appendfsync", "always"))
        self.url = self.server.url

    def start(self) -> None:
        self.server.start()

    def crash(self) -> None:
        proc = self.server._proc  # tests/_redis.py has no kill(): kill -9 its process
        assert proc is not None
        os.kill(proc.pid, signal.SIGKILL)
        self.server.stop()  # reaps the dead process
        self.server.start()  # same port, same directory: the AOF is replayed

    def holds(self, task_ids: set[str]) -> set[str]:
        client = redis.Redis.from_url(self.url)
        try:
            raw = list(client.hvals("unacked"))
            for key in client.scan_iter(count=1000):
                if client.type(key) == b"list":
                    raw.extend(client.lrange(key, 0, -1))
        finally:
            client.close()
        return {task_id for task_id in task_ids if any(task_id.encode() in r for r in raw)}

    def close(self) -> None:
        self.server.close()


class _RabbitBroker(_Broker):
    def __init__(self) -> None:
        from tests._rabbitmq import RabbitMQServer

        self.server = RabbitMQServer()
        self.url = self.server.url

    def start(self) -> None:
        self.server.start()

    def crash(self) -> None:
        self.server.kill()
        self.server.start()

    def holds(self, task_ids: set[str]) -> set[str]:
        """Once the workers are gone, every unacknowledged message is back in its queue:
        read them all (unacknowledged, so the broker keeps them) and name their tasks."""
        if not task_ids:
            return set()
        suffix = next(iter(task_ids)).split("-")[1]  # crash.py: crash-<suffix>-<i>
        found: set[str] = set()
        with (
            kombu.Connection(self.url) as conn,
            conn.SimpleQueue(f"tb.crash.{suffix}") as queue,
        ):
            while True:
                try:
                    message = queue.get(block=False)
                except queue.Empty:
                    break
                found.add(str(message.headers.get("id")))
        return found & task_ids

    def close(self) -> None:
        self.server.close()


def _scenario(
    name: str, make: Callable[[], _Broker], store_url: str, work: Path, rng: random.Random
) -> tuple[Outcome, set[str], float]:
    broker = make()
    began = time.monotonic()
    # Each kill lands after a drawn retry (the k-th published) and a drawn delay of up to
    # 20 ms: around the moment a worker fetches a retry it has just published. A worker
    # run has four kills (as the RabbitMQ test), a broker run two crashes.
    tasks, kills = (12, 4) if name == "worker" else (24, 2)
    after = sorted(rng.sample(range(1, 3 * tasks // 2 + 1), kills))
    moments = [(k, rng.uniform(0.0, 0.02)) for k in after]
    try:
        broker.start()
        if name == "worker":
            outcome = run_scenario(
                broker.url,
                store_url,
                work,
                kill_a_worker,
                tasks=tasks,
                moments=moments,
                quiet=QUIET,
            )
        else:

            def crash(fleet: Fleet) -> None:
                broker.crash()

            outcome = run_scenario(
                broker.url,
                store_url,
                work,
                crash,
                tasks=tasks,
                workers=2,
                moments=moments,
                quiet=QUIET,
            )
        # Is a lost run's message really gone: neither queued nor unacknowledged?
        held = broker.holds(outcome.lost)
    finally:
        broker.close()
    return outcome, held, time.monotonic() - began


def measure(broker: str, runs: int) -> dict[str, Any]:
    """Every scenario ``runs`` times on ``broker`` (``redis`` or ``rabbitmq``)."""
    make: Callable[[], _Broker] = _RedisBroker if broker == "redis" else _RabbitBroker
    figures: dict[str, Any] = {}
    with (
        RedisServer(args=("--notify-keyspace-events", "K$l")) as store,
        tempfile.TemporaryDirectory(prefix="tb-celery-loss-") as work,
    ):
        for name in ("worker", "broker"):
            lossy = lost = tasks = exits = still_held = 0
            rng = random.Random(f"celery-loss/{broker}/{name}")
            for run in range(runs):
                outcome, held, seconds = _scenario(name, make, store.url, Path(work), rng)
                still_held += len(held)
                lossy += bool(outcome.lost)
                lost += len(outcome.lost)
                tasks += outcome.tasks
                exits += outcome.worker_exits
                print(
                    f"{broker} {name} run {run + 1}/{runs}: {outcome.tasks} runs, "
                    f"{len(outcome.succeeded)} succeeded, {len(outcome.dead_lettered)} "
                    f"dead-lettered, {len(outcome.lost)} lost ({len(held)} of them still "
                    f"on the broker); {outcome.worker_exits} "
                    f"worker(s) exited on their own ({seconds:.0f} s)",
                    flush=True,
                )
            figures[name] = {
                "runs": runs,
                "runs_with_loss": lossy,
                "tasks": tasks,
                "tasks_lost": lost,
                "worker_exits": exits,
                "lost_still_on_broker": still_held,
            }
            print(
                f"{broker} {name}: {lossy} of {runs} runs lost a task; "
                f"{lost} of {tasks} tasks lost; {exits} unsupervised worker exits",
                flush=True,
            )
    return figures


def _server_version() -> str:
    """The Redis broker's binary and the version it reports."""
    assert REDIS_SERVER is not None, "no Redis server binary (see tests/_redis.py)"
    out = subprocess.run([REDIS_SERVER, "--version"], capture_output=True, text=True, check=False)
    return f"{REDIS_SERVER}: {out.stdout.strip()}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="runs per scenario (default 8)")
    parser.add_argument("--rabbitmq", action="store_true", help="also run them on RabbitMQ")
    parser.add_argument(
        "--rabbitmq-only",
        action="store_true",
        help="run them on RabbitMQ only (results/celery_loss_rabbitmq.json)",
    )
    parser.add_argument("--quick", action="store_true", help="2 runs each, no result file")
    args = parser.parse_args(argv)
    # Stopped with SIGTERM: unwind, so every worker and server started here is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    runs = 2 if args.quick else args.runs
    results: dict[str, Any] = {
        "celery": metadata.version("celery"),
        "kombu": metadata.version("kombu"),
    }
    if not args.rabbitmq_only:
        results["redis_server"] = _server_version()
        results["redis"] = measure("redis", runs)
    if args.rabbitmq or args.rabbitmq_only:
        results["rabbitmq"] = measure("rabbitmq", runs)
    if not args.quick:
        name = "celery_loss_rabbitmq" if args.rabbitmq_only else "celery_loss"
        path = write_results(name, command_line("benchmarks.celery_loss"), results)
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
