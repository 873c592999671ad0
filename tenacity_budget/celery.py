"""Celery integration: a :class:`~tenacity_budget.BackoffPolicy` drives a task's retries.

Celery's own ``retry_backoff`` counts retries; it knows nothing of a time budget or a
deadline. Here a policy decides every countdown, and the run's budget holds across a fleet
of workers and their restarts::

    from tenacity_budget import BackoffPolicy
    from tenacity_budget.celery import CeleryBudget

    budget = CeleryBudget(
        BackoffPolicy(base=1, cap=30, max_elapsed=300, attempt_duration=10),
        retry_on=(ConnectionError, TimeoutError),
        dead_letter="sync.dead-letter",  # a queue name, or a callable taking a DeadLetter
        budget=RedisRetryBudget(redis, "upstream"),  # optional: cap retries fleet-wide
    )

    @app.task(bind=True, acks_late=True)
    @budget
    def sync_account(self, account_id):
        return upstream.sync(account_id, timeout=tenacity_budget.remaining())

How it works:

* The run's start (wall clock, UTC) is stamped on the task message when it is published
  (Celery's ``before_task_publish`` signal), together with any deadline that encloses the
  publisher (a :func:`~tenacity_budget.deadline_scope`, or an attempt of another budgeted
  run). They travel in the message's headers (:data:`STARTED_HEADER`,
  :data:`DEADLINE_HEADER`), so whichever worker runs an attempt, even the first attempt
  again after a worker crash, computes the same run deadline: the earliest of the start
  plus ``max_elapsed``, the explicit deadline and the policy's ``deadline`` field.
* After a failure matching ``retry_on``, the next countdown is retry ``n`` of the task's own
  seeded schedule, ``policy.schedule(seed_for(task_id))[n]``, so a test can predict every
  countdown. A retry is scheduled only when ``now + countdown + attempt`` ends before the
  run deadline (``attempt`` is the larger of ``attempt_duration`` and the longest attempt
  of the run so far, carried in :data:`LONGEST_HEADER`), and, with a retry budget
  (``budget=``), only when the budget grants it.
* A retry that arrives too late to finish in time (after a worker crash, say) is not run.
* A retry that cannot be published (the broker refuses it) is not lost: the current
  message is requeued for the broker to deliver again, or dead-lettered.
* A direct call (``task(...)``, no message) runs the function once, without a budget.
* When the time budget is spent, or a retry budget refuses a retry, the task is handed to
  its dead-letter destination with an :class:`~tenacity_budget.ExhaustionReport`, then
  fails with :class:`TaskBudgetExhausted`.

Every decision is :func:`tenacity_budget.decision.decide`, asked with plain numbers; every
report is built by :meth:`tenacity_budget.state.RunState.report`. Celery (and kombu) are
imported lazily: importing this module, and the plan functions, need neither; creating a
:class:`CeleryBudget` without them raises an ``ImportError`` naming the extra to install.
Instants are wall-clock datetimes, and a deadline past ``datetime.max`` behaves as no
deadline (it is held as ``datetime.max``, never overflows). What survives a worker or a
broker crash, on Redis and on RabbitMQ, and the settings it takes, are described in the
cookbook page ``docs/celery.md``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import itertools
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Mapping, MutableMapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, Protocol, TypeAlias, TypeVar, cast

from ._config import check_aware, earliest
from .decision import decide
from .exhaustion import ExhaustionReport, StopReason
from .policy import BackoffPolicy
from .runtime import ambient_deadline, remaining_until
from .solver import add_compensated
from .state import RunState

__all__ = [
    "DEADLINE_HEADER",
    "LONGEST_HEADER",
    "STARTED_HEADER",
    "CeleryBudget",
    "DeadLetter",
    "DeadLetterDestination",
    "DeadLetterQueue",
    "RetryPlan",
    "TaskBudgetExhausted",
    "admit_attempt",
    "current_deadline",
    "deadline_headers",
    "plan_retry",
    "run_deadline",
    "seed_for",
]

STARTED_HEADER = "tenacity_budget_started"
"""Message header: when the run started (ISO 8601, UTC): its publication, or its ``eta``."""
DEADLINE_HEADER = "tenacity_budget_deadline"
"""Message header: an explicit absolute deadline for the run (ISO 8601, UTC)."""
LONGEST_HEADER = "tenacity_budget_longest"
"""Message header: the longest attempt of the run so far, in seconds."""

F = TypeVar("F", bound=Callable[..., Any])

logger = logging.getLogger(__name__)

# Wall-clock instants are datetimes, exact to a microsecond. The decision allows that much
# (it is handed the elapsed time minus it and the time to the deadline plus it), so a plan
# that fits its budget exactly is not refused for the rounding of its instants.
_RESOLUTION = 1e-6

# The latest and earliest instants a datetime holds, in UTC: an instant computed past them
# (a run's start plus a huge ``max_elapsed``, a far deadline in another zone) is held at
# them. Either is beyond anything a run can reach, so it behaves as no deadline.
_LATEST = datetime.max.replace(tzinfo=UTC)
_EARLIEST = datetime.min.replace(tzinfo=UTC)

_EXTRA = "pip install 'tenacity-budget[celery]'"


def _import(module: str, what: str = "CeleryBudget") -> Any:
    """Import ``module`` (of celery or kombu), or say which extra ``what`` needs."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"tenacity_budget.celery's {what} needs celery: {_EXTRA}") from exc


def _after(instant: datetime, seconds: float) -> datetime:
    """``instant + seconds``, held at :data:`_LATEST` when that is past ``datetime.max``."""
    try:
        return instant + timedelta(seconds=seconds)
    except OverflowError:  # timedelta's own range, or datetime's
        return _LATEST


_CURRENT_DEADLINE: ContextVar[datetime | None] = ContextVar(
    "tenacity_budget_celery_deadline", default=None
)


class _SyncRetryBudget(Protocol):
    """What ``CeleryBudget(budget=...)`` takes: a :class:`~tenacity_budget.RetryBudget` or
    a :class:`~tenacity_budget.redis.RedisRetryBudget` on a synchronous Redis client."""

    @property
    def name(self) -> str: ...

    @property
    def is_async(self) -> bool: ...

    def deposit(self) -> None: ...

    def try_withdraw(self) -> bool: ...


# -- seeds and the pure retry plan --------------------------------------------------------


def seed_for(task_id: str) -> int:
    """The seed of a task's jitter schedule: a stable 64-bit hash of its task id.

    Stable across processes and Python versions (SHA-256, not ``hash()``), so every worker
    draws the same schedule for the same task, and a test can predict it::

        policy.schedule(seed_for(result.id))  # every countdown the task will use
    """
    digest = hashlib.sha256(task_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def run_deadline(
    policy: BackoffPolicy, started: datetime, deadline: datetime | None = None
) -> datetime:
    """The run's absolute deadline: the earliest of ``started + max_elapsed``, ``deadline``
    and the policy's own ``deadline``."""
    check_aware(started, "started")
    end = earliest(_after(started, policy.max_elapsed), _explicit(policy, deadline))
    assert end is not None  # the budget's end is always there
    return end


def _explicit(policy: BackoffPolicy, deadline: datetime | None) -> datetime | None:
    """The earliest explicit deadline of a run: the message's and the policy's own."""
    return earliest(None if deadline is None else check_aware(deadline), policy.deadline)


def _attempt_estimate(policy: BackoffPolicy, longest: float) -> float:
    if math.isnan(longest) or longest < 0:
        raise ValueError(f"longest must be a non-negative number of seconds, got {longest!r}")
    return max(policy.attempt_duration, longest)


@dataclass(frozen=True, slots=True)
class _Walk:
    """Where a task stands in its seeded schedule before retry ``n``."""

    slept: float  # the countdowns of the retries already made, summed exactly (fsum)
    total: float  # the same sum as the schedule itself keeps it: a compensated sum...
    error: float  # ...total + error (solver.add_compensated)
    countdown: float | None  # retry n's countdown; None when the schedule has no retry n


def _walk(policy: BackoffPolicy, task_id: str, retries: int) -> _Walk:
    """The countdowns a task has slept before retry ``retries``, and that retry's countdown.

    Walks the task's seeded schedule without keeping it: constant memory however long the
    schedule, which a one-month budget makes tens of thousands of retries long. The sum is
    kept twice: exactly, for reports, and compensated as the schedule's own sleep check
    keeps it, so the decision's sleep check repeats that check bit for bit and never
    refuses a countdown the schedule has.
    """
    waits = policy.iter_waits(random.Random(seed_for(task_id)))
    total = error = 0.0

    def taken() -> Any:
        nonlocal total, error
        for wait in itertools.islice(waits, retries):
            total, error = add_compensated(total, error, wait)
            yield wait

    slept = math.fsum(taken())
    return _Walk(slept, total, error, next(waits, None))


def _decide(
    policy: BackoffPolicy,
    *,
    attempts: int,
    walk: _Walk | None,
    started: datetime,
    now: datetime,
    deadline: datetime | None,
    next_attempt: float,
) -> StopReason | None:
    """Ask :func:`~tenacity_budget.decision.decide`, with the run's instants as seconds.

    ``walk`` is ``None`` for an attempt about to start (no sleep ahead of it). The
    datetimes are exact to a microsecond: the elapsed time is handed over less
    ``_RESOLUTION`` and the time to the deadline plus it, so a plan ending exactly at the
    budget's end or at the deadline is not refused for the rounding of its instants.
    """
    explicit = _explicit(policy, deadline)
    until = math.inf if explicit is None else (explicit - now).total_seconds()
    if walk is None:
        sleep = slept_through = 0.0
    else:
        sleep = math.inf if walk.countdown is None else walk.countdown
        total, error = add_compensated(walk.total, walk.error, sleep)
        slept_through = total + error
    return decide(
        attempts=attempts,
        affordable=policy.max_attempts(),
        sleep=sleep,
        slept_through=slept_through,
        elapsed=(now - started).total_seconds() - _RESOLUTION,
        next_attempt=next_attempt,
        budget=policy.max_elapsed,
        until_deadline=until + _RESOLUTION,
    )


@dataclass(frozen=True, slots=True)
class RetryPlan:
    """What to do after a failed attempt of a budgeted task.

    Attributes:
        attempts: calls made so far, the failed one included (``retries + 1``).
        countdown: seconds to wait before the next attempt, or ``None`` to give up.
        reason: why the run gives up (``None`` when it retries).
        slept: the countdowns of the retries already made.
        elapsed: seconds from the run's start to ``now``.
        deadline: the run's absolute deadline (see :func:`run_deadline`).
    """

    attempts: int
    countdown: float | None
    reason: StopReason | None
    slept: float
    elapsed: float
    deadline: datetime

    @property
    def exhausted(self) -> bool:
        """Whether the budget is spent (no retry is to be scheduled)."""
        return self.countdown is None


def plan_retry(
    policy: BackoffPolicy,
    *,
    task_id: str,
    retries: int,
    started: datetime,
    now: datetime,
    deadline: datetime | None = None,
    longest: float = 0.0,
) -> RetryPlan:
    """Decide whether, and after which countdown, a failed attempt is retried.

    A pure function of its arguments (the Celery glue passes the clock): the decision is
    :func:`tenacity_budget.decision.decide`, the one the tenacity stop asks, with:

    1. ``count``: ``retries`` already equals the retries the budget affords;
    2. ``sleep_budget``: the seeded schedule has no retry ``retries`` (float rounding);
    3. ``wall_clock``: ``now + countdown + attempt`` is after ``started + max_elapsed``;
    4. ``deadline``: ``now + countdown + attempt`` is after the explicit deadline.

    ``countdown`` is ``policy.schedule(seed_for(task_id))[retries]`` and ``attempt`` the
    larger of ``attempt_duration`` and ``longest``. Instants are compared at the
    microsecond resolution of :class:`~datetime.datetime`. A retry budget, when the task
    has one, is asked only after this plan allows the retry.

    Args:
        policy: the budget.
        task_id: the Celery task id; seeds the schedule (:func:`seed_for`).
        retries: retries made before the failed attempt (Celery's ``request.retries``).
        started: when the run started (timezone-aware).
        now: the current time (timezone-aware).
        deadline: an explicit absolute deadline, if any.
        longest: the longest attempt of the run so far, in seconds.
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries!r}")
    check_aware(now, "now")
    end = run_deadline(policy, started, deadline)
    need_attempt = _attempt_estimate(policy, longest)
    walk = _walk(policy, task_id, retries)
    reason = _decide(
        policy,
        attempts=retries + 1,
        walk=walk,
        started=started,
        now=now,
        deadline=deadline,
        next_attempt=need_attempt,
    )
    countdown = walk.countdown if reason is None else None
    elapsed = (now - started).total_seconds()
    return RetryPlan(retries + 1, countdown, reason, walk.slept, elapsed, end)


def admit_attempt(
    policy: BackoffPolicy,
    *,
    started: datetime,
    now: datetime,
    deadline: datetime | None = None,
    longest: float = 0.0,
) -> StopReason | None:
    """Why an attempt starting ``now`` must not run (it would end past the run deadline).

    ``None`` admits it. A retry normally starts in time, as its countdown was planned to;
    one that arrives late (redelivered after a worker crash, or held up behind a backlog)
    and could not finish before the deadline is dead-lettered instead of run. The same
    decision as :func:`plan_retry`, with no sleep ahead (so only ``wall_clock`` and
    ``deadline`` can refuse it).
    """
    check_aware(now, "now")
    check_aware(started, "started")
    return _decide(
        policy,
        attempts=0,
        walk=None,
        started=started,
        now=now,
        deadline=deadline,
        next_attempt=_attempt_estimate(policy, longest),
    )


# -- dead letters -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A task given up (its time budget spent, or a retry refused by its retry budget), as
    handed to its dead-letter destination.

    Attributes:
        task: the task's registered name.
        task_id: the Celery task id.
        args: the task's positional arguments.
        kwargs: the task's keyword arguments.
        report: how the budget was spent; ``report.attempts`` counts the calls made,
            ``report.last_exception`` is ``None`` when the last retry arrived too late to run.
        deadline: the run's absolute deadline.
        dead_lettered_at: when the task was handed over (UTC).
    """

    task: str
    task_id: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    report: ExhaustionReport
    deadline: datetime
    dead_lettered_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """Plain, JSON-friendly values: the body of a dead-letter queue message.

        ``task``, ``args`` and ``kwargs`` are what ``app.send_task`` needs to replay it.
        """
        return {
            "task": self.task,
            "task_id": self.task_id,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "report": self.report.as_dict(),
            "deadline": self.deadline.isoformat(),
            "dead_lettered_at": self.dead_lettered_at.isoformat(),
        }


class DeadLetterQueue:
    """A broker queue that receives one message per dead-lettered task.

    The body is :meth:`DeadLetter.as_dict`, published on the task's own Celery app (same
    broker, producer pool and connection retry) to a direct exchange and queue both named
    ``name``, as ``kombu.simple.SimpleQueue(channel, name)`` consumes them. No worker
    consumes it: it holds the letters for an operator, an alert or a replay job.

    Args:
        name: the queue (and exchange, and routing key) name.
        serializer: the body's serializer; defaults to ``"json"``. Use the app's
            ``task_serializer`` if task arguments are not JSON-friendly.
    """

    def __init__(self, name: str, *, serializer: str = "json") -> None:
        if not name:
            raise ValueError("a dead-letter queue needs a name")
        self.name = name
        self.serializer = serializer

    def __repr__(self) -> str:
        return f"DeadLetterQueue({self.name!r})"

    def queue(self) -> Any:
        """The ``kombu.Queue`` letters are published to (declared on every publish)."""
        kombu: Any = _import("kombu", "DeadLetterQueue")  # lazy; kombu's hints are partial
        exchange = kombu.Exchange(self.name, type="direct")
        return kombu.Queue(self.name, exchange, routing_key=self.name)

    def publish(self, app: Any, letter: DeadLetter) -> None:
        """Publish ``letter`` through ``app``'s producer pool (raises when the broker refuses)."""
        queue = self.queue()
        with app.producer_or_acquire() as producer:
            producer.publish(
                letter.as_dict(),
                exchange=queue.exchange,
                routing_key=self.name,
                declare=[queue],
                serializer=self.serializer,
                headers={"task": letter.task, "id": letter.task_id},
                retry=True,
            )


DeadLetterDestination: TypeAlias = DeadLetterQueue | str | Callable[[DeadLetter], object]
"""A :class:`DeadLetterQueue`, a queue name, or a callable taking the :class:`DeadLetter`."""


class TaskBudgetExhausted(Exception):
    """The task was given up (see :class:`DeadLetter`) and handed to its dead-letter
    destination, if it has one.

    The task's final state is ``FAILURE`` with this exception. Its arguments are plain
    values (a message and :meth:`DeadLetter.as_dict`), so it survives a JSON result backend
    and is rebuilt by ``AsyncResult.result`` in the client.

    Attributes:
        letter: the dead letter, as :meth:`DeadLetter.as_dict`.
    """

    def __init__(self, message: str, letter: Mapping[str, Any] | None = None) -> None:
        super().__init__(message, dict(letter) if letter is not None else {})
        self.letter: dict[str, Any] = dict(letter) if letter is not None else {}

    def __str__(self) -> str:
        return str(self.args[0])


# -- message headers ----------------------------------------------------------------------


def _utc(instant: datetime) -> datetime:
    """``instant`` in UTC, held within ``datetime``'s range (comparing never overflows)."""
    if instant >= _LATEST:
        return _LATEST
    if instant <= _EARLIEST:
        return _EARLIEST
    return instant.astimezone(UTC)


def _iso(instant: datetime) -> str:
    return _utc(instant).isoformat()


def deadline_headers(deadline: datetime) -> dict[str, str]:
    """Message headers that give one task run an explicit absolute deadline.

    Stamped at publish time, so it travels with the message from the first attempt on::

        sync_account.apply_async(
            (account_id,), headers=deadline_headers(gdpr_response_deadline(received_at))
        )

    Publishing inside a :func:`~tenacity_budget.deadline_scope` (or an attempt of another
    budgeted run) does the same without this: the earlier of both deadlines is stamped.
    """
    return {DEADLINE_HEADER: _iso(check_aware(deadline))}


def current_deadline() -> datetime | None:
    """The absolute deadline of the budgeted task run in progress, or ``None`` outside one.

    Inside a task decorated with a :class:`CeleryBudget`, this is the run's deadline (UTC),
    the same on every worker; pass it downstream. :func:`tenacity_budget.remaining` gives
    the seconds left until it, and a budgeted task published from inside the attempt
    inherits it.
    """
    return _CURRENT_DEADLINE.get()


def _parse_time(value: object, key: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"header {key!r} must be an ISO 8601 string, got {value!r}")
    return check_aware(datetime.fromisoformat(value), f"header {key!r}")


def _read_time(request: Any, key: str) -> datetime | None:
    return _parse_time(request.get(key), key)


def _read_seconds(request: Any, key: str) -> float:
    value = request.get(key)
    if value is None:
        return 0.0
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"header {key!r} must be a non-negative number, got {value!r}")
    return seconds


def _eta(headers: Mapping[str, Any]) -> datetime | None:
    """The message's ``eta`` (Celery's own header), if it has a readable one.

    Celery writes it aware; a naive one (an ``eta=`` datetime given naive) is read as UTC,
    Celery's default timezone.
    """
    value = headers.get("eta")
    if not isinstance(value, str):
        return None
    try:
        eta = datetime.fromisoformat(value)
    except ValueError:
        return None
    return eta if eta.tzinfo is not None else eta.replace(tzinfo=UTC)


def _stamp(headers: MutableMapping[str, Any], now: datetime, enclosing: datetime | None) -> None:
    """Stamp a budgeted task's message as it is published (see :func:`_on_publish`).

    * :data:`STARTED_HEADER`, unless already there (a retry carries its run's start): the
      run starts now, or at the message's ``eta`` if that is later, since no attempt can
      run before it.
    * :data:`DEADLINE_HEADER`: the earliest of the explicit deadline already there and the
      ``enclosing`` one (the publisher's :func:`~tenacity_budget.runtime.ambient_deadline`).
      An explicit header that does not parse is left for the worker to refuse, loudly.
    """
    if headers.get(STARTED_HEADER) is None:
        eta = _eta(headers)
        headers[STARTED_HEADER] = _iso(now if eta is None or eta < now else eta)
    if enclosing is not None:
        try:
            explicit = _parse_time(headers.get(DEADLINE_HEADER), DEADLINE_HEADER)
        except (TypeError, ValueError):
            return
        merged = earliest(explicit, enclosing)
        assert merged is not None
        headers[DEADLINE_HEADER] = _iso(merged)


# -- finding a task's CeleryBudget at publish time ----------------------------------------

# The attribute of a decorated function that names its CeleryBudget.
_BUDGET_ATTR = "__tenacity_budget__"


def _budget_of_task(task: object) -> CeleryBudget | None:
    """The CeleryBudget the task's function is decorated with, or ``None``."""
    for fn in (getattr(type(task), "run", None), getattr(task, "__wrapped__", None)):
        found = getattr(fn, _BUDGET_ATTR, None)
        if isinstance(found, CeleryBudget):
            return found
    return None


def _registered_budget(name: str) -> CeleryBudget | None:
    """The CeleryBudget of the task registered as ``name`` in a Celery app of this process.

    Celery's ``before_task_publish`` signal names the task but not its app. Celery keeps
    every app of a process in ``celery._state`` (it has no public accessor for them); each
    app's registry is read as ``app._tasks``, which does not finalize the app (Celery's own
    ``send_task`` reads it so for the same reason). Both are private: this is the one
    place that touches them.
    """
    _state = _import("celery._state")
    for app in tuple(_state._get_active_apps()):
        get = getattr(getattr(app, "_tasks", None), "get", None)
        task = get(name) if get is not None else None
        if task is not None:
            found = _budget_of_task(task)
            if found is not None:
                return found
    return None


def _on_publish(sender: object = None, headers: Any = None, **_: Any) -> None:
    """``before_task_publish`` receiver: stamp the messages of budgeted tasks only."""
    if type(sender) is not str or not isinstance(headers, dict):
        return
    if _registered_budget(sender) is None:
        return
    now = datetime.now(UTC)
    _stamp(headers, now, None)  # the run's start first: it is stamped whatever follows
    # Inside an attempt of a budgeted task, its run's end is exact here; the ambient one is
    # the same end (merged with any enclosing scope), as the time left from now.
    _stamp(headers, now, earliest(_CURRENT_DEADLINE.get(), ambient_deadline()))


_hook_lock = threading.Lock()
_hook_connected = False


def _connect_publish_hook() -> None:
    """Connect :func:`_on_publish` to Celery's ``before_task_publish``, once per process."""
    global _hook_connected
    with _hook_lock:
        if _hook_connected:
            return
        signals = _import("celery.signals")
        signals.before_task_publish.connect(
            _on_publish, weak=False, dispatch_uid="tenacity_budget.celery.stamp"
        )
        _hook_connected = True


def _redelivered(request: Any) -> bool:
    """Whether the broker delivered this message before (kombu's ``redelivered`` flag)."""
    info = request.delivery_info or {}
    return bool(info.get("redelivered"))


# -- the task decorator -------------------------------------------------------------------


class CeleryBudget:
    """Give a bound Celery task a retry budget: a decorator for the task's function.

    Apply it below ``@app.task(bind=True, ...)``. Each failure that matches ``retry_on``
    is retried through ``task.retry(countdown=...)`` for as long as the budget affords (see
    :func:`plan_retry`); then the task is handed to ``dead_letter`` and fails with
    :class:`TaskBudgetExhausted`. Other exceptions, and Celery's own ``Retry``, ``Reject``
    and ``Ignore``, pass through untouched. Inside the task,
    :func:`tenacity_budget.remaining` and :func:`current_deadline` describe the run.

    Creating one connects a receiver to Celery's ``before_task_publish`` signal (once per
    process): every message of a task decorated with a CeleryBudget is stamped with its
    run's start (:data:`STARTED_HEADER`) when it is published, and with the deadline that
    encloses the publisher (:data:`DEADLINE_HEADER`). Other tasks' messages are left alone.

    Args:
        policy: the budget.
        dead_letter: where a spent task goes: a :class:`DeadLetterQueue`, a queue name (the
            same), or a callable taking the :class:`DeadLetter` (called in the worker;
            whatever it raises fails the task instead, so a letter is never dropped
            silently). ``None`` (the default) hands it nowhere: the task fails with
            :class:`TaskBudgetExhausted`, whose ``letter`` the result backend keeps, and a
            warning is logged.
        retry_on: the exception type(s) worth retrying (default: any ``Exception``).
        budget: a retry budget shared by the calls of one dependency: a
            :class:`~tenacity_budget.RetryBudget` (one per worker process) or, fleet-wide,
            a :class:`~tenacity_budget.redis.RedisRetryBudget` on a synchronous Redis
            client. Each task's first execution deposits one call; each retry the policy
            allows is then withdrawn from it, and a refused one dead-letters the task with
            reason ``retry_budget``.

    Raises:
        TypeError: for a policy that is not a BackoffPolicy, a bad destination or
            ``retry_on``, or a ``budget`` that is not a retry budget or is asynchronous
            (a Celery task is synchronous and cannot await its decisions).

    Do not combine with Celery's ``autoretry_for``/``retry_backoff``: the policy replaces
    them. Use ``acks_late=True`` so a retry survives a worker crash (see ``docs/celery.md``).
    """

    def __init__(
        self,
        policy: BackoffPolicy,
        *,
        dead_letter: DeadLetterDestination | None = None,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
        budget: _SyncRetryBudget | None = None,
    ) -> None:
        if not isinstance(policy, BackoffPolicy):
            raise TypeError(f"policy must be a BackoffPolicy, got {type(policy).__name__}")
        if isinstance(dead_letter, str):
            dead_letter = DeadLetterQueue(dead_letter)
        if (
            dead_letter is not None
            and not isinstance(dead_letter, DeadLetterQueue)
            and not callable(dead_letter)
        ):
            raise TypeError(
                "dead_letter must be a DeadLetterQueue, a queue name or a callable taking "
                f"the DeadLetter, got {type(dead_letter).__name__}"
            )
        types = retry_on if isinstance(retry_on, tuple) else (retry_on,)
        if not types or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in types
        ):
            raise TypeError("retry_on must be an exception type or a tuple of them")
        if budget is not None:
            if not callable(getattr(budget, "deposit", None)) or not callable(
                getattr(budget, "try_withdraw", None)
            ):
                raise TypeError(
                    "budget must be a retry budget (tenacity_budget.RetryBudget or "
                    f"tenacity_budget.redis.RedisRetryBudget), got {type(budget).__name__}"
                )
            if getattr(budget, "is_async", False):
                raise TypeError(
                    f"budget {getattr(budget, 'name', budget)!r} is asynchronous (a "
                    "RedisRetryBudget on redis.asyncio): a Celery task is synchronous and "
                    "cannot await its decisions; give it a RedisRetryBudget on a "
                    "synchronous redis.Redis client with the same name"
                )
        self.policy = policy
        self.dead_letter: DeadLetterQueue | Callable[[DeadLetter], object] | None = dead_letter
        self.retry_on: tuple[type[BaseException], ...] = types
        self.budget = budget
        _connect_publish_hook()

    def __repr__(self) -> str:
        budget = "" if self.budget is None else f", budget={self.budget!r}"
        return f"CeleryBudget({self.policy!r}, dead_letter={self.dead_letter!r}{budget})"

    def schedule(self, task_id: str) -> list[float]:
        """Every countdown the task with this id uses, in order, if it keeps failing."""
        return self.policy.schedule(seed_for(task_id))

    def __call__(self, fn: F) -> F:
        """Decorate a bound task's function (its first argument is the task)."""

        @functools.wraps(fn)
        def run(task: Any, *args: Any, **kwargs: Any) -> Any:
            return self._run(fn, task, args, kwargs)

        setattr(run, _BUDGET_ATTR, self)
        _connect_publish_hook()
        return cast(F, run)

    # -- one attempt ----------------------------------------------------------------------

    def _run(self, fn: Callable[..., Any], task: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
        Task = _import("celery").Task
        TaskPredicate = _import("celery.exceptions").TaskPredicate

        if not isinstance(task, Task):
            raise TypeError(
                "a CeleryBudget task must be bound: use @app.task(bind=True) above @budget"
            )
        request = task.request
        if request.called_directly:
            # A plain call (``task(...)``), not a message: no run to budget, no retry.
            return fn(task, *args, **kwargs)
        began = time.monotonic()
        now = datetime.now(UTC)
        # Stamped at publish time; a message published without the stamp (by a process
        # that never made a CeleryBudget) starts its run at its first attempt.
        started = _read_time(request, STARTED_HEADER) or now
        deadline = _read_time(request, DEADLINE_HEADER)
        longest = _read_seconds(request, LONGEST_HEADER)
        retries = int(request.retries or 0)
        end = run_deadline(self.policy, started, deadline)

        late = admit_attempt(
            self.policy, started=started, now=now, deadline=deadline, longest=longest
        )
        if late is not None:
            # Too late to finish in time: never run an attempt past the deadline.
            report = self._report(
                attempts=retries,
                slept=_walk(self.policy, request.id, retries).slept,
                elapsed=(now - started).total_seconds(),
                deadline=deadline,
                reason=late,
                exc=None,
            )
            self._give_up(task, args, kwargs, report, end, None)
        if self.budget is not None and retries == 0 and not _redelivered(request):
            # One call, one deposit: a first attempt the broker delivers again (its worker
            # crashed, or its retry could not be published) was deposited the first time.
            self.budget.deposit()

        # remaining() inside the task counts down to the run's wall-clock end, and a
        # budgeted task published from inside inherits that end as its deadline.
        deadline_token = _CURRENT_DEADLINE.set(end)
        try:
            with remaining_until(end):
                return fn(task, *args, **kwargs)
        except self.retry_on as exc:
            if isinstance(exc, TaskPredicate):
                raise  # Celery's own Retry/Reject/Ignore: not a failure of the call
            failure = exc
        finally:
            _CURRENT_DEADLINE.reset(deadline_token)
        # The retry is published outside the attempt: its message carries the run's own
        # headers on, not the run's end as a new explicit deadline.
        longest = max(longest, time.monotonic() - began)
        self._retry(task, args, kwargs, failure, started, deadline, longest, retries, end)

    def _retry(
        self,
        task: Any,
        args: tuple[Any, ...],
        kwargs: Any,
        exc: BaseException,
        started: datetime,
        deadline: datetime | None,
        longest: float,
        retries: int,
        end: datetime,
    ) -> NoReturn:
        """Schedule the retry of a failed attempt, or give the task up."""
        Reject = _import("celery.exceptions").Reject

        request = task.request
        plan = plan_retry(
            self.policy,
            task_id=request.id,
            retries=retries,
            started=started,
            now=datetime.now(UTC),
            deadline=deadline,
            longest=longest,
        )
        reason = plan.reason
        # The retry budget is asked only once the policy allows the retry: a run the
        # policy ends never spends it.
        if reason is None and self.budget is not None and not self.budget.try_withdraw():
            reason = StopReason.RETRY_BUDGET
        if reason is not None:
            report = self._report(
                attempts=plan.attempts,
                slept=plan.slept,
                elapsed=plan.elapsed,
                deadline=deadline,
                reason=reason,
                exc=exc,
            )
            self._give_up(task, args, kwargs, report, end, exc)
        headers = dict(request.headers or {})
        headers[STARTED_HEADER] = _iso(started)
        headers[LONGEST_HEADER] = longest
        if deadline is not None:
            headers[DEADLINE_HEADER] = _iso(deadline)
        try:
            retry = task.retry(
                exc=exc,
                countdown=plan.countdown,
                max_retries=self.policy.max_attempts(),
                headers=headers,
                throw=False,
            )
        except Reject as rejected:
            # Celery turns a retry it could not publish into Reject(requeue=False): the
            # message would be dropped, and the run lost with it.
            if rejected.requeue:
                raise
            self._unpublished(task, args, kwargs, exc, rejected.reason, plan, deadline, end)
        raise retry from exc

    def _unpublished(
        self,
        task: Any,
        args: tuple[Any, ...],
        kwargs: Any,
        exc: BaseException,
        error: object,
        plan: RetryPlan,
        deadline: datetime | None,
        end: datetime,
    ) -> NoReturn:
        """The retry could not be published: requeue the message, or dead-letter the task.

        With late acknowledgement the message is still the broker's: rejecting it with
        requeue hands it back, to be delivered again (at once when the broker takes the
        rejection; when the broker cannot even take that, the message stays
        unacknowledged and the broker redelivers it on its own: Redis after the
        visibility timeout, AMQP when the channel closes). The attempt then runs again,
        if it can still end in time, and its retry is published then. A message is
        requeued so once: if the retry of a redelivered message cannot be published
        either, or the message was acknowledged before the attempt (early
        acknowledgement), the task is dead-lettered with reason ``other``.
        """
        Reject = _import("celery.exceptions").Reject

        name, task_id = task.name, task.request.id
        if task.acks_late and not _redelivered(task.request):
            logger.warning(
                "%s[%s]: its retry could not be published (%r); the message is requeued "
                "for the broker to deliver again",
                name,
                task_id,
                error,
            )
            raise Reject(error, requeue=True) from exc
        report = self._report(
            attempts=plan.attempts,
            slept=plan.slept,
            elapsed=plan.elapsed,
            deadline=deadline,
            reason=StopReason.OTHER,
            exc=exc,
        )
        self._give_up(
            task,
            args,
            kwargs,
            report,
            end,
            exc,
            why=f"its retry could not be published ({error!r})",
        )

    def _report(
        self,
        *,
        attempts: int,
        slept: float,
        elapsed: float,
        deadline: datetime | None,
        reason: StopReason,
        exc: BaseException | None,
    ) -> ExhaustionReport:
        """The run's report, built by the one builder (:meth:`RunState.report`)."""
        state = RunState(
            budget=self.policy.max_elapsed,
            affordable=self.policy.max_attempts(),
            deadline=_explicit(self.policy, deadline),
        )
        state.attempts = attempts
        state.slept = slept
        state.elapsed = elapsed
        state.reason = reason
        return state.report(exc)

    def _give_up(
        self,
        task: Any,
        args: tuple[Any, ...],
        kwargs: Any,
        report: ExhaustionReport,
        end: datetime,
        exc: BaseException | None,
        *,
        why: str | None = None,
    ) -> NoReturn:
        letter = DeadLetter(
            task=task.name,
            task_id=task.request.id,
            args=tuple(args),
            kwargs=dict(kwargs),
            report=report,
            deadline=end,
            dead_lettered_at=datetime.now(UTC),
        )
        if why is None:
            why = _why(report.reason)
        if isinstance(self.dead_letter, DeadLetterQueue):
            self.dead_letter.publish(task.app, letter)
        elif self.dead_letter is not None:
            self.dead_letter(letter)
        else:
            logger.warning("%s[%s]: %s, no dead-letter destination", task.name, letter.task_id, why)
        where = (
            "no dead-letter destination (the letter is on this exception)"
            if self.dead_letter is None
            else f"handed to {self.dead_letter!r}"
        )
        message = f"{task.name}[{letter.task_id}]: {why} after {report.attempts} attempts; {where}"
        raise TaskBudgetExhausted(message, letter.as_dict()) from exc


def _why(reason: StopReason) -> str:
    """Why a run was given up, in words: the words "retry budget" only for its refusals."""
    if reason is StopReason.RETRY_BUDGET:
        return f"retry budget refused the retry ({reason.value})"
    return f"time budget exhausted ({reason.value})"
