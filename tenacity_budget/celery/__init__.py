"""Celery integration: a :class:`~tenacity_budget.BackoffPolicy` drives a task's retries.

:class:`CeleryBudget` decorates a bound task: each countdown is retry ``n`` of the task's
seeded schedule, the run's deadline travels in the message headers (so it holds on every
worker and across restarts), an adaptive throttle may keep an attempt from running (it is
then retried like a failed one), and a spent task is dead-lettered. Celery is imported lazily:
this module and its plan functions import without it. The guide is ``docs/celery.md``.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn, Protocol, TypeVar, cast

from .._validate import throttle as check_throttle
from ..context import remaining_until
from ..exhaustion import ExhaustionReport, StopReason, Throttled
from ..policy import BackoffPolicy
from ._dead_letter import DeadLetter, TaskBudgetExhausted
from ._dead_letter import DeadLetterDestination as DeadLetterDestination
from ._dead_letter import DeadLetterQueue as DeadLetterQueue
from ._headers import (
    _BUDGET_ATTR,
    _connect_publish_hook,
    _header,
    _iso,
    _read_count,
    _read_seconds,
    _read_time,
    _redelivered,
    current_deadline,
    deadline_headers,
)
from ._headers import DEADLINE_HEADER as DEADLINE_HEADER
from ._headers import LONGEST_HEADER as LONGEST_HEADER
from ._headers import SCHEDULE_HEADER as SCHEDULE_HEADER
from ._headers import STARTED_HEADER as STARTED_HEADER
from ._headers import THROTTLED_HEADER as THROTTLED_HEADER
from ._headers import _on_publish as _on_publish
from ._headers import _stamp as _stamp
from ._lazy import _import
from ._plan import _LATEST as _LATEST
from ._plan import RetryPlan as RetryPlan
from ._plan import (
    _encode_cursor,
    _explicit_deadline,
    _plan_retry,
    _schedule_position,
    _SchedulePosition,
)
from ._plan import admit_attempt as admit_attempt
from ._plan import plan_retry as plan_retry
from ._plan import run_deadline as run_deadline
from ._plan import seed_for as seed_for

# The package's face; every other name above stays importable from here, as before the
# split: the header constants, the plan functions, RetryPlan, DeadLetterQueue.
__all__ = [
    "CeleryBudget",
    "DeadLetter",
    "TaskBudgetExhausted",
    "current_deadline",
    "deadline_headers",
]

F = TypeVar("F", bound=Callable[..., Any])

logger = logging.getLogger(__name__)


class _SyncRetryBudget(Protocol):
    """What ``CeleryBudget(budget=...)`` takes: a :class:`~tenacity_budget.RetryBudget` or
    a :class:`~tenacity_budget.redis.RedisRetryBudget` on a synchronous Redis client."""

    @property
    def name(self) -> str: ...

    @property
    def is_async(self) -> bool: ...

    def deposit(self) -> None: ...

    def try_withdraw(self) -> bool: ...


class _Throttle(Protocol):
    """What ``CeleryBudget(throttle=...)`` takes: an :class:`~tenacity_budget.AdaptiveThrottle`
    or a :class:`~tenacity_budget.redis.RedisAdaptiveThrottle`."""

    @property
    def name(self) -> str: ...

    @property
    def probability(self) -> float: ...

    def admit(self) -> bool: ...

    def record(self, outcome: object) -> None: ...


@dataclass(frozen=True, slots=True)
class _Message:
    """What a task message says of its run, read once per attempt."""

    now: datetime  # when the attempt began
    started: datetime
    deadline: datetime | None
    longest: float
    retries: int
    end: datetime  # the run deadline
    position: _SchedulePosition  # where the run stands in its schedule
    fingerprint: str  # of the run's schedule: what its cursor header belongs to
    rejected: int  # attempts the throttle rejected in a row just before this one

    @classmethod
    def read(cls, policy: BackoffPolicy, request: Any) -> _Message:
        """The run of ``request``: its headers, or the attempt's own start without them."""
        now = datetime.now(UTC)
        # Stamped at publish time; a message published without the stamp (by a process
        # that never made a CeleryBudget) starts its run at its first attempt.
        started = _read_time(request, STARTED_HEADER) or now
        deadline = _read_time(request, DEADLINE_HEADER)
        retries = int(request.retries or 0)
        position, fingerprint = _schedule_position(
            policy, request.id, retries, _header(request, SCHEDULE_HEADER)
        )
        return cls(
            now=now,
            started=started,
            deadline=deadline,
            longest=_read_seconds(request, LONGEST_HEADER),
            retries=retries,
            end=run_deadline(policy, started, deadline),
            position=position,
            fingerprint=fingerprint,
            rejected=_read_count(request, THROTTLED_HEADER),
        )

    @property
    def first_sent(self) -> bool:
        """Whether no attempt of the run was sent before this one (each was rejected)."""
        return self.rejected == self.retries

    def headers_on(self, request: Any, longest: float, throttled: bool) -> dict[str, Any]:
        """The headers of the run's next message: the run's own, carried on (``throttled``:
        this attempt was rejected by the throttle)."""
        headers = dict(request.headers or {})
        headers[STARTED_HEADER] = _iso(self.started)
        headers[LONGEST_HEADER] = longest
        headers.pop(THROTTLED_HEADER, None)
        if throttled:
            headers[THROTTLED_HEADER] = self.rejected + 1
        if self.deadline is not None:
            headers[DEADLINE_HEADER] = _iso(self.deadline)
        if self.position.after is not None:
            headers[SCHEDULE_HEADER] = _encode_cursor(self.position.after, self.fingerprint)
        return headers


def _destination(
    dead_letter: DeadLetterDestination | None,
) -> DeadLetterQueue | Callable[[DeadLetter], object] | None:
    """``CeleryBudget(dead_letter=...)`` checked: a queue name becomes its queue."""
    if isinstance(dead_letter, str):
        return DeadLetterQueue(dead_letter)
    if dead_letter is None or isinstance(dead_letter, DeadLetterQueue) or callable(dead_letter):
        return dead_letter
    raise TypeError(
        "dead_letter must be a DeadLetterQueue, a queue name or a callable taking "
        f"the DeadLetter, got {type(dead_letter).__name__}"
    )


def _exception_types(
    retry_on: type[BaseException] | tuple[type[BaseException], ...],
) -> tuple[type[BaseException], ...]:
    """``CeleryBudget(retry_on=...)`` checked, as a tuple of exception types."""
    types = retry_on if isinstance(retry_on, tuple) else (retry_on,)
    if not types or not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
        raise TypeError("retry_on must be an exception type or a tuple of them")
    return types


def _sync_budget(budget: _SyncRetryBudget) -> _SyncRetryBudget:
    """``CeleryBudget(budget=...)`` checked: a retry budget a synchronous task can ask."""
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
    return budget


def _throttle(throttle: _Throttle) -> _Throttle:
    """``CeleryBudget(throttle=...)`` checked, as ``policy.retry(throttle=...)`` checks it."""
    check_throttle(throttle)
    return throttle


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
            client. Each task's first attempt sent deposits one call; each retry the policy
            allows is then withdrawn from it, and a refused one dead-letters the task with
            reason ``retry_budget``. Without a throttle a retry is withdrawn when it is
            planned (at the failure); with one, when it runs, after the throttle admits it.
        throttle: an adaptive throttle (:class:`~tenacity_budget.AdaptiveThrottle`, or
            fleet-wide :class:`~tenacity_budget.redis.RedisAdaptiveThrottle`). Every
            execution, the first included, asks it once the time budget admits the
            attempt, and before ``budget``; a rejected attempt does not run (it makes no
            deposit or withdrawal in ``budget``) and is retried like a failed one, on the
            task's schedule within its time budget; the task is dead-lettered with reason
            ``throttled`` when that time budget is spent after a rejection. The outcome of
            every attempt that runs (its result, or the exception it raised) is recorded
            in it.

    Raises:
        TypeError: for a policy that is not a BackoffPolicy, a bad destination or
            ``retry_on``, a ``budget`` that is not a retry budget or is asynchronous
            (a Celery task is synchronous and cannot await its decisions), or a
            ``throttle`` that is not an adaptive throttle.

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
        throttle: _Throttle | None = None,
    ) -> None:
        if not isinstance(policy, BackoffPolicy):
            raise TypeError(f"policy must be a BackoffPolicy, got {type(policy).__name__}")
        self.policy = policy
        self.dead_letter: DeadLetterQueue | Callable[[DeadLetter], object] | None = _destination(
            dead_letter
        )
        self.retry_on: tuple[type[BaseException], ...] = _exception_types(retry_on)
        self.budget = None if budget is None else _sync_budget(budget)
        self.throttle = None if throttle is None else _throttle(throttle)
        _connect_publish_hook()

    def __repr__(self) -> str:
        budget = "" if self.budget is None else f", budget={self.budget!r}"
        throttle = "" if self.throttle is None else f", throttle={self.throttle!r}"
        return f"CeleryBudget({self.policy!r}, dead_letter={self.dead_letter!r}{budget}{throttle})"

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
        if task.request.called_directly:
            # A plain call (``task(...)``), not a message: no run to budget, no retry.
            return fn(task, *args, **kwargs)
        began = time.monotonic()
        run = _Message.read(self.policy, task.request)
        rejection = self._admit(task, args, kwargs, run)
        if rejection is not None:
            # Not run: retried like a failed attempt, on the time budget alone.
            self._retry(task, args, kwargs, rejection, run, run.longest, throttled=True)
        try:
            return self._attempt(fn, task, args, kwargs, run.end, TaskPredicate)
        except self.retry_on as exc:
            if isinstance(exc, TaskPredicate):
                raise  # Celery's own Retry/Reject/Ignore: not a failure of the call
            failure = exc
        # The retry is published outside the attempt: its message carries the run's own
        # headers on, not the run's end as a new explicit deadline.
        longest = max(run.longest, time.monotonic() - began)
        self._retry(task, args, kwargs, failure, run, longest)

    def _attempt(
        self,
        fn: Callable[..., Any],
        task: Any,
        args: tuple[Any, ...],
        kwargs: Any,
        end: datetime,
        predicate: type[BaseException],
    ) -> Any:
        """Run the task's body once, its outcome (result, or exception raised) recorded in
        the throttle; Celery's own Retry/Reject/Ignore (``predicate``) are no outcome."""
        throttle = self.throttle
        # The run's end is the ambient deadline of the attempt (its one copy): remaining()
        # and current_deadline() inside the task count down to it, and a budgeted task
        # published from inside inherits it as its deadline.
        with remaining_until(end):
            if throttle is None:
                return fn(task, *args, **kwargs)
            try:
                result = fn(task, *args, **kwargs)
            except Exception as exc:
                if not isinstance(exc, predicate):
                    throttle.record(exc)
                raise
        throttle.record(result)
        return result

    def _admit(
        self, task: Any, args: tuple[Any, ...], kwargs: Any, run: _Message
    ) -> Throttled | None:
        """The attempt's admission (the time budget, the throttle, then, for a retry of a
        throttled task, the retry budget): give the task up if its attempt would end late
        or its retry is refused, return the throttle's rejection, else deposit the run's
        first attempt sent in the retry budget."""
        throttle = self.throttle
        reason = admit_attempt(
            self.policy,
            started=run.started,
            now=run.now,
            deadline=run.deadline,
            longest=run.longest,
            throttle=None if throttle is None else throttle.admit,
            grant=self._withdrawal(run),
        )
        if reason is StopReason.THROTTLED:
            assert throttle is not None
            return Throttled(str(getattr(throttle, "name", "default")), throttle.probability)
        if reason is not None:
            # Too late to finish in time (never run an attempt past the deadline), or the
            # retry budget refused the retry. Right after rejections, a late attempt's run
            # was ended by the throttle.
            if run.rejected and reason is not StopReason.RETRY_BUDGET:
                reason = StopReason.THROTTLED
            report = self._report(
                attempts=run.retries,
                slept=run.position.slept,
                elapsed=(run.now - run.started).total_seconds(),
                deadline=run.deadline,
                reason=reason,
                exc=None,
            )
            self._give_up(task, args, kwargs, report, run.end, None)
        if self.budget is not None and run.first_sent and not _redelivered(task.request):
            # One call, one deposit, when its first attempt is sent: a first attempt the
            # broker delivers again (its worker crashed, or its retry could not be
            # published) was deposited the first time.
            self.budget.deposit()
        return None

    def _withdrawal(self, run: _Message) -> Callable[[], bool] | None:
        """The retry budget's withdrawal to ask when this attempt runs: with a throttle, a
        retry is withdrawn when it is sent (after the throttle admits it), not when it is
        planned; a run's first attempt sent deposits instead (see :meth:`_planned`)."""
        if self.budget is None or self.throttle is None or run.first_sent:
            return None
        return self.budget.try_withdraw

    def _planned(self) -> Callable[[], bool] | None:
        """The retry budget's withdrawal to ask when a retry is planned: without a throttle
        only (Finagle's rule, so a refused retry is dead-lettered at once)."""
        if self.budget is None or self.throttle is not None:
            return None
        return self.budget.try_withdraw

    def _retry(
        self,
        task: Any,
        args: tuple[Any, ...],
        kwargs: Any,
        exc: BaseException,
        run: _Message,
        longest: float,
        *,
        throttled: bool = False,
    ) -> NoReturn:
        """Schedule the retry of a failed (or ``throttled``: not run) attempt, or give the
        task up."""
        Reject = _import("celery.exceptions").Reject

        plan = _plan_retry(
            self.policy,
            task_id=task.request.id,
            retries=run.retries,
            started=run.started,
            now=datetime.now(UTC),
            deadline=run.deadline,
            longest=longest,
            grant=self._planned(),
            position=run.position,
            throttled=throttled,
        )
        if plan.reason is not None:
            report = self._report(
                attempts=plan.attempts,
                slept=plan.slept,
                elapsed=plan.elapsed,
                deadline=run.deadline,
                reason=plan.reason,
                exc=exc,
            )
            self._give_up(task, args, kwargs, report, run.end, exc)
        try:
            retry = task.retry(
                exc=exc,
                countdown=plan.countdown,
                max_retries=self.policy.max_attempts(),
                headers=run.headers_on(task.request, longest, throttled),
                throw=False,
            )
        except Reject as rejected:
            # Celery turns a retry it could not publish into Reject(requeue=False): the
            # message would be dropped, and the run lost with it.
            if rejected.requeue:
                raise
            self._unpublished(task, args, kwargs, exc, rejected.reason, plan, run)
        raise retry from exc

    def _unpublished(
        self,
        task: Any,
        args: tuple[Any, ...],
        kwargs: Any,
        exc: BaseException,
        error: object,
        plan: RetryPlan,
        run: _Message,
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
            deadline=run.deadline,
            reason=StopReason.OTHER,
            exc=exc,
        )
        self._give_up(
            task,
            args,
            kwargs,
            report,
            run.end,
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
        """The run's report, built by the report's own constructor from the run's figures."""
        return ExhaustionReport(
            attempts=attempts,
            affordable=self.policy.max_attempts(),
            slept=slept,
            elapsed=elapsed,
            budget=self.policy.max_elapsed,
            deadline=_explicit_deadline(self.policy, deadline),
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
    if reason is StopReason.THROTTLED:
        return f"time budget exhausted after the throttle rejected its attempt ({reason.value})"
    return f"time budget exhausted ({reason.value})"
