"""No budgeted Celery run is lost on RabbitMQ, under a worker kill -9 or a broker kill -9.

Real parts only: a throwaway RabbitMQ node (``tests/_rabbitmq.py``) as broker, a
throwaway Redis (``tests/_redis.py``) as result backend and log store, which no scenario
kills, and real ``celery worker`` processes running ``tests/celery_app/app.py``. The
scenarios themselves are ``tests/celery_app/crash.py``, shared with
``benchmarks/celery_loss.py``, which measures what the same scenarios lose on a Redis
broker (kombu's Redis transport takes a message off the queue before it records it as
unacknowledged, so a kill in between loses it: a rate, not something a test can show).

On RabbitMQ the broker holds every unacknowledged message until its consumer acknowledges
it or its connection closes (then it is requeued), and a message published with publisher
confirms (``confirm_publish``) is on disk when the publish returns: so every run succeeds
or is dead-lettered, whatever is killed. Where no ``rabbitmq-server`` exists, these tests
skip with a reason.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery_app import app as tb
from celery_app.crash import Fleet, Outcome, kill_a_worker, run_scenario

from tests._rabbitmq import RabbitMQServer
from tests._redis import RedisServer

pytestmark = pytest.mark.celery


@pytest.fixture
def store() -> Iterator[RedisServer]:
    """The result backend and the tasks' logs: never killed here."""
    with RedisServer(args=("--notify-keyspace-events", "K$l")) as server:
        yield server


@pytest.fixture
def rabbitmq() -> Iterator[RabbitMQServer]:
    with RabbitMQServer() as server:
        yield server


def _check_runs(outcome: Outcome, store_url: str) -> None:
    """Every run accounted for, each a continuous run: one start, no retry skipped.

    Each run fails at most 3 times, which its budget affords: it succeeds, unless the
    workers were so slow to come back (Celery's reconnection) that its time ran out, and
    then it is dead-lettered. Either way it is accounted for; none is lost.
    """
    assert tb.CRASH.max_attempts() > 3
    assert outcome.lost == set(), outcome.notes
    assert outcome.accounted == outcome.tasks
    assert not outcome.succeeded & outcome.dead_lettered
    client = redis.Redis.from_url(store_url)
    try:
        for task_id in outcome.succeeded:
            attempts = [json.loads(x) for x in client.lrange(f"tb:attempts:{task_id}", 0, -1)]
            # At least once: an attempt whose ack the crash lost runs again, none is skipped.
            retries = sorted({a["retries"] for a in attempts})
            fails = 1 + int(task_id.rsplit("-", 1)[1]) % 3
            assert retries == list(range(fails + 1)), (task_id, attempts)
            assert len({a["started"] for a in attempts}) == 1, attempts
            assert None not in {a["started"] for a in attempts}
    finally:
        client.close()


# Where Redis loses a run: a worker killed a few milliseconds after it published a retry,
# as it fetches it (benchmarks/celery_loss.py draws such moments; here they are fixed).
KILLS = ((2, 0.004), (5, 0.011), (8, 0.0), (11, 0.017))


def test_a_worker_killed_during_countdowns_loses_no_run_on_rabbitmq(
    rabbitmq: RabbitMQServer, store: RedisServer, tmp_path: Path
) -> None:
    """kill -9 the worker four times while it holds countdown retries; every run ends."""
    outcome = run_scenario(
        rabbitmq.url, store.url, tmp_path, kill_a_worker, tasks=12, moments=KILLS
    )
    assert outcome.disruptions == len(KILLS)
    _check_runs(outcome, store.url)
    assert outcome.worker_exits == 0  # none exited but the killed ones


def test_a_broker_killed_and_restarted_loses_no_run_on_rabbitmq(
    rabbitmq: RabbitMQServer, store: RedisServer, tmp_path: Path
) -> None:
    """kill -9 the broker while retries are pending, restart it; every run still ends."""

    def crash_broker(fleet: Fleet) -> None:
        rabbitmq.kill()
        rabbitmq.start()  # same node, ports and data: durable queues, persistent messages

    outcome = run_scenario(
        rabbitmq.url,
        store.url,
        tmp_path,
        crash_broker,
        tasks=24,
        workers=2,
        moments=[(7, 0.008)],  # a few milliseconds after a retry went out
    )
    assert outcome.disruptions == 1
    _check_runs(outcome, store.url)


def test_without_rabbitmq_server_the_rabbitmq_tests_skip_with_a_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tests._rabbitmq as rabbitmq_module

    monkeypatch.setattr(rabbitmq_module, "RABBITMQ_SERVER", None)
    with pytest.raises(pytest.skip.Exception, match="rabbitmq-server") as skipped:
        RabbitMQServer()
    assert ".ci/rabbitmq.sh" in str(skipped.value)
