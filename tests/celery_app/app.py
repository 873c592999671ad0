"""The Celery app the tests run in real worker processes (``celery -A celery_app.app``).

Configured from the environment, which the tests set for each worker they start:

* ``TB_CELERY_REDIS_URL``: the throwaway Redis server (broker and result backend);
* ``TB_DEAD_LETTER_QUEUE``: the dead-letter queue of the budgeted tasks (one per test);
* ``TB_VISIBILITY_TIMEOUT``: seconds before Redis hands an unacknowledged message to
  another worker.

The upstream the tasks call is simulated in-process and deterministic: task ``id`` fails its
first ``failures_for(id)`` attempts (or the ``fails`` it is given), then succeeds. Every
attempt and every countdown handed to ``task.retry`` is recorded in Redis, so the tests
check what the workers really did.
"""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime
from functools import cache
from typing import Any

import redis
from celery import Celery, Task

import tenacity_budget
from tenacity_budget import BackoffPolicy
from tenacity_budget.celery import (
    STARTED_HEADER,
    CeleryBudget,
    DeadLetter,
    current_deadline,
)

QUICK = BackoffPolicy(
    base=0.25, factor=2, cap=1.0, max_elapsed=6.0, jitter="full", attempt_duration=0.25
)
"""Budget of the basic tests: 5 retries in 6 s (full jitter)."""

LOAD = BackoffPolicy(
    base=0.5, factor=2, cap=2.0, max_elapsed=12.0, jitter="full", attempt_duration=0.5
)
"""Budget of the load test: 5 retries in 12 s. The attempt estimate (0.5 s) is generous:
under a backlog, a retry runs late; the estimate is the margin that still lets it run, or
be dead-lettered, before its deadline."""

FAULT = BackoffPolicy(
    base=2.0, factor=2, cap=2.0, max_elapsed=14.0, jitter="full", attempt_duration=0.5
)
"""Budget of the crash test: countdowns up to 2 s, so a retry is pending long enough to kill
the worker under it; 14 s leave room for Redis to hand the retry to a fresh worker."""

DEFAULT_VISIBILITY_TIMEOUT = 4.0
"""Longer than any countdown plus attempt of these policies (at most 2.5 s), so a live
worker holding a retry never sees it handed to another worker; short enough that a killed
worker's retry is handed over well before its deadline."""

app = Celery("tb_celery_tests", set_as_current=False)


def configure(redis_url: str, *, visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT) -> None:
    """Point the app at ``redis_url`` (broker and result backend) with crash-safe settings."""
    app.conf.update(
        broker_url=redis_url,
        result_backend=redis_url,
        broker_connection_retry_on_startup=True,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_extended=True,
        # A retry survives a worker crash: the message is acknowledged only after the
        # attempt ends (acks_late); a worker process lost mid-attempt puts it back
        # (reject_on_worker_lost); Redis redelivers unacknowledged messages after the
        # visibility timeout, swept every second here (the default sweep is far slower).
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={
            "visibility_timeout": visibility_timeout,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        },
        worker_send_task_events=False,
        task_send_sent_event=False,
    )


if "TB_CELERY_REDIS_URL" in os.environ:
    configure(
        os.environ["TB_CELERY_REDIS_URL"],
        visibility_timeout=float(
            os.environ.get("TB_VISIBILITY_TIMEOUT", DEFAULT_VISIBILITY_TIMEOUT)
        ),
    )

DEAD_LETTER_QUEUE = os.environ.get("TB_DEAD_LETTER_QUEUE", "tb.dead-letter")


@cache
def store() -> redis.Redis:
    """This process's client of the test Redis (where attempts and countdowns are logged)."""
    return redis.Redis.from_url(str(app.conf.broker_url))


class UpstreamError(ConnectionError):
    """The simulated upstream is unavailable (retryable)."""


def failures_for(task_id: str) -> int:
    """How many attempts of task ``task_id`` the flaky upstream fails: 0 to 7."""
    return hashlib.sha256(f"upstream:{task_id}".encode()).digest()[0] % 8


def call_upstream(task_id: str, attempt: int, fails: int) -> str:
    """The flaky upstream: attempt ``attempt`` (0-based) fails while ``attempt < fails``."""
    if attempt < fails:
        raise UpstreamError(f"upstream unavailable for {task_id} (attempt {attempt})")
    return "ok"


class RecordingTask(Task):  # type: ignore[misc]
    """Logs each countdown handed to ``retry`` and, once published, the retry itself."""

    def retry(self, *args: Any, **kwargs: Any) -> Any:
        task_id = self.request.id
        store().rpush(f"tb:countdowns:{task_id}", json.dumps(kwargs.get("countdown")))
        try:
            return super().retry(*args, **kwargs)
        finally:
            store().rpush(f"tb:retried:{task_id}", self.request.retries + 1)


def _attempt(task: Any, fails: int | None) -> dict[str, Any]:
    """One attempt: log it, call the upstream, and describe the run on success."""
    request = task.request
    deadline = current_deadline()
    left = tenacity_budget.remaining()
    assert deadline is not None
    assert left is not None
    record = {
        "retries": request.retries,
        "hostname": request.hostname,
        "started": request.get(STARTED_HEADER),
        "deadline": deadline.isoformat(),
        "remaining": left,
        "at": datetime.now(UTC).isoformat(),
    }
    store().rpush(f"tb:attempts:{request.id}", json.dumps(record))
    call_upstream(request.id, request.retries, failures_for(request.id) if fails is None else fails)
    return {**record, "finished_at": datetime.now(UTC).isoformat()}


def letter_to_redis(letter: DeadLetter) -> None:
    """A callback dead-letter destination: keeps the letter, and what only a callback sees."""
    body = letter.as_dict()
    body["report_type"] = type(letter.report).__name__
    body["exception_type"] = type(letter.report.last_exception).__name__
    store().rpush(f"tb:letters:{letter.task_id}", json.dumps(body))


quick = CeleryBudget(QUICK, retry_on=UpstreamError, dead_letter=DEAD_LETTER_QUEUE)
quick_to_callback = CeleryBudget(QUICK, retry_on=UpstreamError, dead_letter=letter_to_redis)
load = CeleryBudget(LOAD, retry_on=UpstreamError, dead_letter=DEAD_LETTER_QUEUE)
fault = CeleryBudget(FAULT, retry_on=UpstreamError, dead_letter=DEAD_LETTER_QUEUE)


def _flaky(self: Any, fails: int | None = None) -> dict[str, Any]:
    """Fails ``fails`` attempts (default: ``failures_for(task id)``), then succeeds."""
    return _attempt(self, fails)


def _flaky_callback(self: Any, fails: int) -> dict[str, Any]:
    """As ``tb.flaky``, dead-lettering to a callback instead of a queue."""
    return _attempt(self, fails)


def _broken(self: Any) -> None:
    """Raises an error the budget does not retry."""
    raise ValueError("not retryable")


def _load(self: Any) -> dict[str, Any]:
    """Fails ``failures_for(task id)`` attempts, then succeeds, under the load budget."""
    return _attempt(self, None)


def _fault(self: Any, fails: int) -> dict[str, Any]:
    """As ``tb.flaky``, under the crash test's budget."""
    return _attempt(self, fails)


# app.task is untyped: apply it as a call (the same as the decorator form in docs/celery.md).
flaky: Any = app.task(bind=True, base=RecordingTask, name="tb.flaky")(quick(_flaky))
flaky_callback: Any = app.task(bind=True, base=RecordingTask, name="tb.flaky_callback")(
    quick_to_callback(_flaky_callback)
)
broken: Any = app.task(bind=True, base=RecordingTask, name="tb.broken")(quick(_broken))
load_task: Any = app.task(bind=True, base=RecordingTask, name="tb.load")(load(_load))
fault_task: Any = app.task(bind=True, base=RecordingTask, name="tb.fault")(fault(_fault))
