"""The Celery app the tests run in real worker processes (``celery -A celery_app.app``).

Configured from the environment, which the tests set for each worker they start:

* ``TB_CELERY_REDIS_URL``: the throwaway Redis server (result backend, and broker unless
  ``TB_CELERY_BROKER_URL`` names another);
* ``TB_CELERY_BROKER_URL``: the broker, when it is not that Redis (the RabbitMQ tests give
  a throwaway RabbitMQ node's ``amqp://`` URL);
* ``TB_DEAD_LETTER_QUEUE``: the dead-letter queue of the budgeted tasks (one per test);
* ``TB_VISIBILITY_TIMEOUT``: seconds before Redis hands an unacknowledged message to
  another worker;
* ``TB_FAIL_RETRY_PUBLISH``: when ``1``, publishing a retry of task ``id`` fails (as a
  broker refusing it would) while the Redis counter ``tb:fail-publish:<id>`` is positive,
  which each failure decrements: the test sets how many of a task's retries fail.

The upstream the tasks call is simulated in-process and deterministic: task ``id`` fails its
first ``failures_for(id)`` attempts (or the ``fails`` it is given), then succeeds. Every
attempt and every countdown handed to ``task.retry`` is recorded in Redis, so the tests
check what the workers really did.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from datetime import UTC, datetime
from functools import cache
from typing import Any

import redis
from celery import Celery, Task
from kombu.exceptions import OperationalError

import tenacity_budget
from tenacity_budget import AdaptiveThrottle, BackoffPolicy
from tenacity_budget.celery import (
    SCHEDULE_HEADER,
    STARTED_HEADER,
    CeleryBudget,
    DeadLetter,
    current_deadline,
)
from tenacity_budget.retry_budget import RetryBudget

QUICK = BackoffPolicy(
    base=0.25, factor=2, cap=1.0, max_elapsed=6.0, jitter="full", attempt_duration=0.25
)
"""Budget of the basic tests: 5 retries in 6 s (full jitter)."""

LOAD = BackoffPolicy(
    base=0.5, factor=2, cap=2.0, max_elapsed=24.0, jitter="full", attempt_duration=2.5
)
"""Budget of the load test: 5 retries in 24 s. A run starts when it is published, so the
time a task waits behind the burst of hundreds counts against it: the attempt estimate
(2.5 s) leaves 14 s of the budget beyond the countdowns for that wait. Under a backlog a
retry also runs late; the estimate is the margin that still lets it run, or be
dead-lettered, before its deadline."""

FAULT = BackoffPolicy(
    base=2.0, factor=2, cap=2.0, max_elapsed=14.0, jitter="full", attempt_duration=0.5
)
"""Budget of the crash test: countdowns up to 2 s, so a retry is pending long enough to kill
the worker under it; 14 s leave room for Redis to hand the retry to a fresh worker."""

CRASH = BackoffPolicy(
    base=1.0, factor=2, cap=2.0, max_elapsed=90.0, jitter="full", attempt_duration=0.5
)
"""Budget of the RabbitMQ crash tests: countdowns up to 2 s, pending while a worker or the
broker is killed under them; 90 s leave ample room for a broker restart (a few seconds) and
the workers' reconnection, so every run can still succeed."""

HOLD = BackoffPolicy(base=0.5, cap=0.5, max_elapsed=30.0, attempt_duration=1.0)
"""Budget of the test that kills a worker during a first attempt: 30 s leave ample room for
the visibility timeout to hand the message to a fresh worker."""

DEFAULT_VISIBILITY_TIMEOUT = 4.0
"""Longer than any countdown plus attempt of these policies (at most 2.5 s), so a live
worker holding a retry never sees it handed to another worker; short enough that a killed
worker's retry is handed over well before its deadline."""

app = Celery("tb_celery_tests", set_as_current=False)


def configure(
    redis_url: str,
    *,
    visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT,
    broker_url: str | None = None,
) -> None:
    """Point the app at ``redis_url`` (result backend, and broker unless ``broker_url``
    names another) with crash-safe settings."""
    broker = redis_url if broker_url is None else broker_url
    if broker.startswith("amqp"):
        # RabbitMQ: a publish returns once the broker has the message on disk (publisher
        # confirms), so a retry published before a broker kill -9 survives it; an
        # unacknowledged message goes back to its queue as soon as its worker's connection
        # closes (no visibility timeout).
        transport_options: dict[str, Any] = {"confirm_publish": True}
        # A worker's event loop acknowledges a message at its next turn, which waits in
        # poll() for the next timer, up to 10 s (kombu's Hub.fire_timers max_delay): with
        # the prefetch window full of messages waiting for their acknowledgement, nothing
        # else wakes it (seen after a broker restart: one run every ~10 s). The heartbeat
        # check is a timer every broker_heartbeat / broker_heartbeat_checkrate seconds (0.5 s),
        # so the loop turns at least twice a second.
        heartbeat: dict[str, Any] = {"broker_heartbeat": 10, "broker_heartbeat_checkrate": 20}
    else:
        transport_options = {
            "visibility_timeout": visibility_timeout,
            "unacked_restore_interval": 1,
            "unacked_restore_throttle": 1,
        }
        heartbeat = {}
    app.conf.update(
        broker_url=broker,
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
        broker_transport_options=transport_options,
        worker_send_task_events=False,
        task_send_sent_event=False,
        **heartbeat,
    )


if "TB_CELERY_REDIS_URL" in os.environ:
    configure(
        os.environ["TB_CELERY_REDIS_URL"],
        visibility_timeout=float(
            os.environ.get("TB_VISIBILITY_TIMEOUT", DEFAULT_VISIBILITY_TIMEOUT)
        ),
        broker_url=os.environ.get("TB_CELERY_BROKER_URL"),
    )

DEAD_LETTER_QUEUE = os.environ.get("TB_DEAD_LETTER_QUEUE", "tb.dead-letter")


@cache
def store() -> redis.Redis:
    """This process's client of the test Redis (where attempts and countdowns are logged)."""
    return redis.Redis.from_url(str(app.conf.result_backend))


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
    """Logs each countdown handed to ``retry`` and, once published, the retry itself.

    With ``TB_FAIL_RETRY_PUBLISH=1`` (see the module docstring) the publication of a retry
    can be made to fail. The failure is raised where a broker error would surface: from
    ``apply_async``, which ``Task.retry`` calls to publish the retry, with the exception
    kombu raises when the broker refuses a message after its own connection retries
    (``OperationalError``). What happens next is Celery's and ours, unchanged.
    """

    def retry(self, *args: Any, **kwargs: Any) -> Any:
        task_id = self.request.id
        store().rpush(f"tb:countdowns:{task_id}", json.dumps(kwargs.get("countdown")))
        try:
            return super().retry(*args, **kwargs)
        finally:
            store().rpush(f"tb:retried:{task_id}", self.request.retries + 1)

    def apply_async(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        task_id = options.get("task_id")
        if (
            os.environ.get("TB_FAIL_RETRY_PUBLISH") == "1"
            and options.get("retries")
            and store().decr(f"tb:fail-publish:{task_id}") >= 0
        ):
            raise OperationalError(f"simulated broker error: retry of {task_id} not published")
        return super().apply_async(args, kwargs, **options)


class RecordingBudget:
    """A real :class:`~tenacity_budget.RetryBudget`, each call of which is also logged.

    Every deposit and every decision is pushed to ``<log>:<task id>`` (the task being
    run; ``tb:budget`` by default), so the tests count them; the decisions themselves are
    the wrapped budget's.
    """

    def __init__(self, inner: RetryBudget, log: str = "tb:budget") -> None:
        self.inner = inner
        self.log = log

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def is_async(self) -> bool:
        return bool(self.inner.is_async)

    def _log(self, what: str) -> None:
        store().rpush(f"{self.log}:{app.current_worker_task.request.id}", what)

    def deposit(self) -> None:
        self._log("deposit")
        self.inner.deposit()

    def try_withdraw(self) -> bool:
        granted = bool(self.inner.try_withdraw())
        self._log("granted" if granted else "refused")
        return granted


class Overloaded(UpstreamError):
    """The upstream shed the call (an HTTP 503): an overload signal to a throttle."""

    status_code = 503


class RecordingThrottle:
    """A real :class:`~tenacity_budget.AdaptiveThrottle`, each call of which is also logged.

    Every admission (``admitted``/``rejected``) and every outcome recorded (``recorded:`` and
    the outcome's type) is pushed to ``<log>:<task id>`` (the task being run;
    ``tb:throttle`` by default); the decisions themselves are the wrapped throttle's.
    """

    def __init__(self, inner: AdaptiveThrottle, log: str = "tb:throttle") -> None:
        self.inner = inner
        self.log = log

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def probability(self) -> float:
        return self.inner.probability

    def _log(self, what: str) -> None:
        store().rpush(f"{self.log}:{app.current_worker_task.request.id}", what)

    def admit(self) -> bool:
        admitted = self.inner.admit()
        self._log("admitted" if admitted else "rejected")
        return admitted

    def record(self, outcome: object) -> None:
        self._log(f"recorded:{type(outcome).__name__}")
        self.inner.record(outcome)


OVERLOAD_FEED = 2000
"""Overload signals fed to the rejecting throttle when a worker imports this module."""
THROTTLE_SEED = 18
"""Seeds the rejecting throttle's draws (the tests check every one of them rejects)."""


def overloaded_throttle() -> AdaptiveThrottle:
    """A throttle whose backend shed its last ``OVERLOAD_FEED`` attempts: it rejects about
    all but one attempt in ``OVERLOAD_FEED``, deterministically (seeded)."""
    throttle = AdaptiveThrottle(k=2.0, window=3600.0, name="shed", rng=random.Random(THROTTLE_SEED))
    for _ in range(OVERLOAD_FEED):
        if throttle.admit():
            throttle.record(Overloaded("the upstream shed the call"))
    return throttle


def _attempt(task: Any, fails: int | None, *, hold: bool = False) -> dict[str, Any]:
    """One attempt: log it, call the upstream, and describe the run on success.

    With ``hold``, the attempt then waits (on Redis, not a clock) until the test pushes to
    ``tb:release:<id>``: a first attempt a test can kill its worker in the middle of.
    """
    request = task.request
    deadline = current_deadline()
    left = tenacity_budget.remaining()
    assert deadline is not None
    assert left is not None
    record = {
        "retries": request.retries,
        "hostname": request.hostname,
        "started": request.get(STARTED_HEADER),
        "cursor": request.get(SCHEDULE_HEADER) is not None,
        "deadline": deadline.isoformat(),
        "remaining": left,
        "redelivered": bool((request.delivery_info or {}).get("redelivered")),
        "at": datetime.now(UTC).isoformat(),
    }
    store().rpush(f"tb:attempts:{request.id}", json.dumps(record))
    if hold:
        store().rpush(f"tb:holding:{request.id}", 1)
        store().blpop([f"tb:release:{request.id}"], timeout=60)
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
# One call deposited per run, each deposit worth one retry, over a window far longer than
# any test: the budget grants exactly as many retries as runs were started.
capped = CeleryBudget(
    QUICK,
    retry_on=UpstreamError,
    dead_letter=DEAD_LETTER_QUEUE,
    budget=RecordingBudget(RetryBudget(ratio=1.0, min_per_second=0.0, ttl=3600.0)),
)
# Rejects (almost) every attempt: the run is retried on its schedule, then dead-lettered
# 'throttled'; the retry budget beside it is never touched (nothing is sent).
shed = CeleryBudget(
    QUICK,
    retry_on=UpstreamError,
    dead_letter=DEAD_LETTER_QUEUE,
    budget=RecordingBudget(RetryBudget(ratio=1.0, min_per_second=0.0, ttl=3600.0)),
    throttle=RecordingThrottle(overloaded_throttle()),
)
# A throttle with nothing against the upstream: it admits every attempt and records each.
admitting = CeleryBudget(
    QUICK,
    retry_on=UpstreamError,
    dead_letter=DEAD_LETTER_QUEUE,
    throttle=RecordingThrottle(AdaptiveThrottle(k=2.0, name="clear")),
)
# A throttle that admits every attempt beside a retry budget worth one retry per run, both
# logging to one list (tb:order:<id>): the order of their calls, attempt by attempt.
ordered = CeleryBudget(
    QUICK,
    retry_on=UpstreamError,
    dead_letter=DEAD_LETTER_QUEUE,
    budget=RecordingBudget(RetryBudget(ratio=1.0, min_per_second=0.0, ttl=3600.0), "tb:order"),
    throttle=RecordingThrottle(AdaptiveThrottle(k=2.0, name="ordered"), "tb:order"),
)
crash = CeleryBudget(CRASH, retry_on=UpstreamError, dead_letter=DEAD_LETTER_QUEUE)
hold = CeleryBudget(
    HOLD,
    retry_on=UpstreamError,
    dead_letter=DEAD_LETTER_QUEUE,
    budget=RecordingBudget(RetryBudget(ratio=1.0, min_per_second=0.0, ttl=3600.0)),
)


def _flaky(self: Any, fails: int | None = None) -> dict[str, Any]:
    """Fails ``fails`` attempts (default: ``failures_for(task id)``), then succeeds."""
    return _attempt(self, fails)


def _flaky_callback(self: Any, fails: int) -> dict[str, Any]:
    """As ``tb.flaky``, dead-lettering to a callback instead of a queue."""
    return _attempt(self, fails)


def _capped(self: Any, fails: int) -> dict[str, Any]:
    """As ``tb.flaky``, under a retry budget."""
    return _attempt(self, fails)


def _shed(self: Any, fails: int) -> dict[str, Any]:
    """As ``tb.flaky``, behind a throttle that rejects about every attempt."""
    return _attempt(self, fails)


def _admitted(self: Any, fails: int) -> dict[str, Any]:
    """As ``tb.flaky``, behind a throttle that admits every attempt."""
    return _attempt(self, fails)


def _ordered(self: Any, fails: int) -> dict[str, Any]:
    """As ``tb.flaky``, behind a throttle that admits and a retry budget of one retry."""
    return _attempt(self, fails)


def _held(self: Any, fails: int) -> dict[str, Any]:
    """As ``tb.flaky``, but each attempt holds until the test releases it."""
    return _attempt(self, fails, hold=True)


def _parent(self: Any, child_queue: str) -> dict[str, Any]:
    """Publishes a budgeted child task (``tb.flaky``) to ``child_queue`` from its attempt."""
    record = _attempt(self, 0)
    child = flaky.apply_async(kwargs={"fails": 0}, queue=child_queue)
    return {**record, "child": child.id}


def _plain(self: Any) -> None:
    """A task without a CeleryBudget: its messages are not stamped."""


def _broken(self: Any) -> None:
    """Raises an error the budget does not retry."""
    raise ValueError("not retryable")


def _load(self: Any) -> dict[str, Any]:
    """Fails ``failures_for(task id)`` attempts, then succeeds, under the load budget."""
    return _attempt(self, None)


def _fault(self: Any, fails: int) -> dict[str, Any]:
    """As ``tb.flaky``, under the crash test's budget."""
    return _attempt(self, fails)


def _crash(self: Any, fails: int) -> dict[str, Any]:
    """As ``tb.flaky``, under the RabbitMQ crash tests' budget."""
    return _attempt(self, fails)


# app.task is untyped: apply it as a call (the same as the decorator form in docs/celery.md).
flaky: Any = app.task(bind=True, base=RecordingTask, name="tb.flaky")(quick(_flaky))
flaky_callback: Any = app.task(bind=True, base=RecordingTask, name="tb.flaky_callback")(
    quick_to_callback(_flaky_callback)
)
broken: Any = app.task(bind=True, base=RecordingTask, name="tb.broken")(quick(_broken))
load_task: Any = app.task(bind=True, base=RecordingTask, name="tb.load")(load(_load))
fault_task: Any = app.task(bind=True, base=RecordingTask, name="tb.fault")(fault(_fault))
crash_task: Any = app.task(bind=True, base=RecordingTask, name="tb.crash")(crash(_crash))
early: Any = app.task(bind=True, base=RecordingTask, name="tb.early", acks_late=False)(
    quick(_flaky)
)
capped_task: Any = app.task(bind=True, base=RecordingTask, name="tb.capped")(capped(_capped))
shed_task: Any = app.task(bind=True, base=RecordingTask, name="tb.shed")(shed(_shed))
admitted_task: Any = app.task(bind=True, base=RecordingTask, name="tb.admitted")(
    admitting(_admitted)
)
ordered_task: Any = app.task(bind=True, base=RecordingTask, name="tb.ordered")(ordered(_ordered))
held: Any = app.task(bind=True, base=RecordingTask, name="tb.held")(hold(_held))
parent: Any = app.task(bind=True, base=RecordingTask, name="tb.parent")(quick(_parent))
plain: Any = app.task(bind=True, name="tb.plain")(_plain)
