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
    )

    @app.task(bind=True, acks_late=True)
    @budget
    def sync_account(self, account_id):
        return upstream.sync(account_id, timeout=tenacity_budget.remaining())

How it works:

* The first attempt's start (wall clock, UTC) and any explicit deadline travel in the task
  message's headers (:data:`STARTED_HEADER`, :data:`DEADLINE_HEADER`), so whichever worker
  picks up a retry computes the same run deadline: the earlier of the first attempt's start
  plus ``max_elapsed``, the explicit deadline and the policy's ``deadline`` field.
* After a failure matching ``retry_on``, the next countdown is retry ``n`` of the task's own
  seeded schedule, ``policy.schedule(seed_for(task_id))[n]``, so a test can predict every
  countdown. A retry is scheduled only when ``now + countdown + attempt`` ends before the
  run deadline (``attempt`` is the larger of ``attempt_duration`` and the longest attempt
  of the run so far, carried in :data:`LONGEST_HEADER`).
* A retry that arrives too late to finish in time (after a worker crash, say) is not run.
* A direct call (``task(...)``, no message) runs the function once, without a budget.
* When the budget is spent, the task is handed to its dead-letter destination with an
  :class:`~tenacity_budget.ExhaustionReport`, then fails with :class:`TaskBudgetExhausted`.

Celery (and kombu) are imported lazily: importing this module needs neither, only using it
with a task does. The deployment settings that keep a retry alive through a worker crash
(``task_acks_late``, ``task_reject_on_worker_lost``, the Redis ``visibility_timeout``) are
described in the cookbook page ``docs/celery.md``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import itertools
import math
import random
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeAlias, TypeVar, cast

from .exhaustion import ExhaustionReport, StopReason
from .policy import BackoffPolicy
from .runtime import remaining_until
from .strategies import check_aware

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
"""Message header: when the run's first attempt started (ISO 8601, UTC)."""
DEADLINE_HEADER = "tenacity_budget_deadline"
"""Message header: an explicit absolute deadline for the run (ISO 8601, UTC)."""
LONGEST_HEADER = "tenacity_budget_longest"
"""Message header: the longest attempt of the run so far, in seconds."""

F = TypeVar("F", bound=Callable[..., Any])

# Wall-clock instants are datetimes, exact to a microsecond: comparisons allow that much, so
# a plan that fits its budget exactly is not refused for the rounding of its instants.
_RESOLUTION = 1e-6

_CURRENT_DEADLINE: ContextVar[datetime | None] = ContextVar(
    "tenacity_budget_celery_deadline", default=None
)


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
    end = started + timedelta(seconds=policy.max_elapsed)
    for explicit in _explicit_deadlines(policy, deadline):
        end = min(end, explicit)
    return end


def _explicit_deadlines(policy: BackoffPolicy, deadline: datetime | None) -> list[datetime]:
    found = []
    if deadline is not None:
        found.append(check_aware(deadline))
    if policy.deadline is not None:
        found.append(policy.deadline)
    return found


def _attempt_estimate(policy: BackoffPolicy, longest: float) -> float:
    if math.isnan(longest) or longest < 0:
        raise ValueError(f"longest must be a non-negative number of seconds, got {longest!r}")
    return max(policy.attempt_duration, longest)


def _time_reason(
    policy: BackoffPolicy,
    started: datetime,
    deadline: datetime | None,
    now: datetime,
    need: float,
) -> StopReason | None:
    """Why ``need`` more seconds from ``now`` would end past the run deadline, if it would."""
    if (now - started).total_seconds() + need > policy.max_elapsed + _RESOLUTION:
        return StopReason.WALL_CLOCK
    for explicit in _explicit_deadlines(policy, deadline):
        if (explicit - now).total_seconds() + _RESOLUTION < need:
            return StopReason.DEADLINE
    return None


@dataclass(frozen=True, slots=True)
class RetryPlan:
    """What to do after a failed attempt of a budgeted task.

    Attributes:
        attempts: calls made so far, the failed one included (``retries + 1``).
        countdown: seconds to wait before the next attempt, or ``None`` to give up.
        reason: why the run gives up (``None`` when it retries).
        slept: the countdowns of the retries already made.
        elapsed: seconds from the first attempt's start to ``now``.
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

    A pure function of its arguments (the Celery glue passes the clock), checked in the
    order of :class:`~tenacity_budget.strategies.stop_budget`:

    1. ``count``: ``retries`` already equals the retries the budget affords;
    2. ``sleep_budget``: the seeded schedule has no retry ``retries`` (float rounding);
    3. ``wall_clock``: ``now + countdown + attempt`` is after ``started + max_elapsed``;
    4. ``deadline``: ``now + countdown + attempt`` is after the explicit deadline.

    ``countdown`` is ``policy.schedule(seed_for(task_id))[retries]`` and ``attempt`` the
    larger of ``attempt_duration`` and ``longest``. Instants are compared at the
    microsecond resolution of :class:`~datetime.datetime`.

    Args:
        policy: the budget.
        task_id: the Celery task id; seeds the schedule (:func:`seed_for`).
        retries: retries made before the failed attempt (Celery's ``request.retries``).
        started: when the run's first attempt started (timezone-aware).
        now: the current time (timezone-aware).
        deadline: an explicit absolute deadline, if any.
        longest: the longest attempt of the run so far, in seconds.
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries!r}")
    check_aware(now, "now")
    end = run_deadline(policy, started, deadline)
    need_attempt = _attempt_estimate(policy, longest)
    slept, countdown = _walk(policy, task_id, retries)
    elapsed = (now - started).total_seconds()

    def plan(countdown: float | None, reason: StopReason | None) -> RetryPlan:
        return RetryPlan(retries + 1, countdown, reason, slept, elapsed, end)

    if retries >= policy.max_attempts():
        return plan(None, StopReason.COUNT)
    if countdown is None:
        return plan(None, StopReason.SLEEP_BUDGET)
    reason = _time_reason(policy, started, deadline, now, countdown + need_attempt)
    if reason is not None:
        return plan(None, reason)
    return plan(countdown, None)


def _walk(policy: BackoffPolicy, task_id: str, retries: int) -> tuple[float, float | None]:
    """The seconds slept before retry ``retries`` of a task, and that retry's countdown.

    Walks the task's seeded schedule without keeping it: constant memory however long the
    schedule, which a one-month budget makes tens of thousands of retries long. The
    countdown is ``None`` when the schedule has no such retry.
    """
    waits = policy.iter_waits(random.Random(seed_for(task_id)))
    slept = math.fsum(itertools.islice(waits, retries))
    return slept, next(waits, None)


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
    and could not finish before the deadline is dead-lettered instead of run.
    """
    check_aware(now, "now")
    check_aware(started, "started")
    return _time_reason(policy, started, deadline, now, _attempt_estimate(policy, longest))


# -- dead letters -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A task whose retry budget is spent, as handed to its dead-letter destination.

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
        kombu: Any = importlib.import_module("kombu")  # lazy; kombu's hints are partial
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
    """The task's retry budget is spent; it was handed to its dead-letter destination.

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


# -- the task decorator -------------------------------------------------------------------


def deadline_headers(deadline: datetime) -> dict[str, str]:
    """Message headers that give one task run an explicit absolute deadline.

    Stamped at publish time, so it travels with the message from the first attempt on::

        sync_account.apply_async(
            (account_id,), headers=deadline_headers(gdpr_response_deadline(received_at))
        )
    """
    return {DEADLINE_HEADER: check_aware(deadline).astimezone(UTC).isoformat()}


def current_deadline() -> datetime | None:
    """The absolute deadline of the budgeted task run in progress, or ``None`` outside one.

    Inside a task decorated with a :class:`CeleryBudget`, this is the run's deadline (UTC),
    the same on every worker; pass it downstream. :func:`tenacity_budget.remaining` gives
    the seconds left until it.
    """
    return _CURRENT_DEADLINE.get()


def _read_time(request: Any, key: str) -> datetime | None:
    value = request.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"header {key!r} must be an ISO 8601 string, got {value!r}")
    return check_aware(datetime.fromisoformat(value), f"header {key!r}")


def _read_seconds(request: Any, key: str) -> float:
    value = request.get(key)
    if value is None:
        return 0.0
    seconds = float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"header {key!r} must be a non-negative number, got {value!r}")
    return seconds


class CeleryBudget:
    """Give a bound Celery task a retry budget: a decorator for the task's function.

    Apply it below ``@app.task(bind=True, ...)``. Each failure that matches ``retry_on``
    is retried through ``task.retry(countdown=...)`` for as long as the budget affords (see
    :func:`plan_retry`); then the task is handed to ``dead_letter`` and fails with
    :class:`TaskBudgetExhausted`. Other exceptions, and Celery's own ``Retry``, ``Reject``
    and ``Ignore``, pass through untouched. Inside the task,
    :func:`tenacity_budget.remaining` and :func:`current_deadline` describe the run.

    Args:
        policy: the budget.
        dead_letter: where a spent task goes: a :class:`DeadLetterQueue`, a queue name (the
            same), or a callable taking the :class:`DeadLetter` (called in the worker;
            whatever it raises fails the task instead, so a letter is never dropped
            silently).
        retry_on: the exception type(s) worth retrying (default: any ``Exception``).

    Do not combine with Celery's ``autoretry_for``/``retry_backoff``: the policy replaces
    them. Use ``acks_late=True`` so a retry survives a worker crash (see ``docs/celery.md``).
    """

    def __init__(
        self,
        policy: BackoffPolicy,
        *,
        dead_letter: DeadLetterDestination,
        retry_on: type[BaseException] | tuple[type[BaseException], ...] = Exception,
    ) -> None:
        if not isinstance(policy, BackoffPolicy):
            raise TypeError(f"policy must be a BackoffPolicy, got {type(policy).__name__}")
        if isinstance(dead_letter, str):
            dead_letter = DeadLetterQueue(dead_letter)
        if not isinstance(dead_letter, DeadLetterQueue) and not callable(dead_letter):
            raise TypeError(
                "dead_letter must be a DeadLetterQueue, a queue name or a callable taking "
                f"the DeadLetter, got {type(dead_letter).__name__}"
            )
        types = retry_on if isinstance(retry_on, tuple) else (retry_on,)
        if not types or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in types
        ):
            raise TypeError("retry_on must be an exception type or a tuple of them")
        self.policy = policy
        self.dead_letter: DeadLetterQueue | Callable[[DeadLetter], object] = dead_letter
        self.retry_on: tuple[type[BaseException], ...] = types

    def __repr__(self) -> str:
        return f"CeleryBudget({self.policy!r}, dead_letter={self.dead_letter!r})"

    def schedule(self, task_id: str) -> list[float]:
        """Every countdown the task with this id uses, in order, if it keeps failing."""
        return self.policy.schedule(seed_for(task_id))

    def __call__(self, fn: F) -> F:
        """Decorate a bound task's function (its first argument is the task)."""

        @functools.wraps(fn)
        def run(task: Any, *args: Any, **kwargs: Any) -> Any:
            return self._run(fn, task, args, kwargs)

        return cast(F, run)

    # -- one attempt ----------------------------------------------------------------------

    def _run(self, fn: Callable[..., Any], task: Any, args: tuple[Any, ...], kwargs: Any) -> Any:
        from celery import Task
        from celery.exceptions import TaskPredicate

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
            slept = _walk(self.policy, request.id, retries)[0]
            report = self._report(retries, slept, started, now, deadline, late, None)
            self._give_up(task, args, kwargs, report, end, None)

        # remaining() inside the task counts down to the run's wall-clock end.
        deadline_token = _CURRENT_DEADLINE.set(end)
        try:
            with remaining_until(end):
                return fn(task, *args, **kwargs)
        except self.retry_on as exc:
            if isinstance(exc, TaskPredicate):
                raise  # Celery's own Retry/Reject/Ignore: not a failure of the call
            longest = max(longest, time.monotonic() - began)
            plan = plan_retry(
                self.policy,
                task_id=request.id,
                retries=retries,
                started=started,
                now=datetime.now(UTC),
                deadline=deadline,
                longest=longest,
            )
            if plan.countdown is None:
                assert plan.reason is not None
                report = self._report(
                    plan.attempts, plan.slept, started, None, deadline, plan.reason, exc
                )
                self._give_up(task, args, kwargs, report, end, exc)
            headers = dict(request.headers or {})
            headers[STARTED_HEADER] = started.astimezone(UTC).isoformat()
            headers[LONGEST_HEADER] = longest
            if deadline is not None:
                headers[DEADLINE_HEADER] = deadline.astimezone(UTC).isoformat()
            raise task.retry(
                exc=exc,
                countdown=plan.countdown,
                max_retries=self.policy.max_attempts(),
                headers=headers,
            ) from exc
        finally:
            _CURRENT_DEADLINE.reset(deadline_token)

    def _report(
        self,
        attempts: int,
        slept: float,
        started: datetime,
        now: datetime | None,
        deadline: datetime | None,
        reason: StopReason,
        exc: BaseException | None,
    ) -> ExhaustionReport:
        moment = now if now is not None else datetime.now(UTC)
        explicit = _explicit_deadlines(self.policy, deadline)
        return ExhaustionReport(
            attempts=attempts,
            affordable=self.policy.max_attempts(),
            slept=slept,
            elapsed=(moment - started).total_seconds(),
            budget=self.policy.max_elapsed,
            deadline=min(explicit) if explicit else None,
            reason=reason,
            last_exception=exc,
        )

    def _give_up(
        self,
        task: Any,
        args: tuple[Any, ...],
        kwargs: Any,
        report: ExhaustionReport,
        end: datetime,
        exc: BaseException | None,
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
        if isinstance(self.dead_letter, DeadLetterQueue):
            self.dead_letter.publish(task.app, letter)
        else:
            self.dead_letter(letter)
        message = (
            f"{task.name}[{letter.task_id}]: retry budget exhausted ({report.reason.value}) "
            f"after {report.attempts} attempts; handed to {self.dead_letter!r}"
        )
        raise TaskBudgetExhausted(message, letter.as_dict()) from exc
