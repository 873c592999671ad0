"""The ``policy.retry()`` decorator and :func:`remaining`, the budget left inside an attempt.

``policy.retry()`` is tenacity's own ``@retry`` wired with the policy's wait and stop, plus
three things plain tenacity cannot give: :func:`remaining` inside each attempt (a
per-run value kept in a context variable, so threads and asyncio tasks each see their own),
:class:`~tenacity_budget.BudgetExhausted` with a report when the budget is spent, and
observer hooks (``stats=``) for metrics.
"""

from __future__ import annotations

import functools
import inspect
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast, runtime_checkable

import tenacity
from tenacity import RetryCallState, RetryError
from tenacity._utils import get_callback_name

from .exhaustion import BudgetExhausted, ExhaustionReport
from .strategies import DeadlineSource, RetryAfter, check_aware

if TYPE_CHECKING:
    from .policy import BackoffPolicy

__all__ = ["BudgetedRetry", "RetryObserver", "remaining", "remaining_until"]

F = TypeVar("F", bound=Callable[..., Any])


@runtime_checkable
class RetryObserver(Protocol):
    """What ``policy.retry(stats=...)`` calls as a run progresses (metrics, counters).

    :class:`~tenacity_budget.RetryStats` and the Prometheus and OpenTelemetry adapters
    implement it; so can any object with these four methods. They are called from the
    thread (or task) running the function and must be cheap and thread-safe.
    """

    def on_call(self, name: str) -> None:
        """A call of the decorated function began (its first attempt is about to run)."""

    def on_retry(self, name: str, attempt: int, sleep: float) -> None:
        """Attempt ``attempt`` failed and the run will sleep ``sleep`` seconds, then retry."""

    def on_success(self, name: str, attempts: int) -> None:
        """The call returned after ``attempts`` attempts (1: first try)."""

    def on_exhausted(self, name: str, report: ExhaustionReport) -> None:
        """The call gave up: its budget (or another stop) ended the run."""


class _Run:
    """The current run as :func:`remaining` sees it."""

    __slots__ = ("budget_end", "deadline_ts", "last")

    def __init__(self) -> None:
        self.budget_end: float | None = None  # monotonic
        self.deadline_ts = math.inf  # epoch seconds
        self.last = math.inf  # the smallest value remaining() has returned


_CURRENT_RUN: ContextVar[_Run | None] = ContextVar("tenacity_budget_run", default=None)


def remaining() -> float | None:
    """Seconds left in the current budgeted run, or ``None`` outside one.

    Inside an attempt of a function decorated with ``policy.retry()``, this is the time
    until the earlier of the run's budget end (first attempt's start plus ``max_elapsed``)
    and its deadline, never negative. It only decreases within a run (monotonic clock) and
    is per run: each thread and each asyncio task sees its own. Typical use::

        httpx.get(url, timeout=tenacity_budget.remaining())
    """
    run = _CURRENT_RUN.get()
    if run is None or run.budget_end is None:
        return None
    left = run.budget_end - time.monotonic()
    if run.deadline_ts != math.inf:
        left = min(left, run.deadline_ts - time.time())
    # Never more than before: a wall clock stepped back must not hand out extra time.
    left = min(max(0.0, left), run.last)
    run.last = left
    return left


@contextmanager
def remaining_until(end: datetime) -> Iterator[None]:
    """Inside the block, :func:`remaining` counts down to the wall-clock instant ``end``.

    For integrations that run attempts themselves rather than through tenacity (the
    Celery integration runs one attempt per task execution): the block is one attempt
    of a run that must be over by ``end``.
    """
    check_aware(end, "end")
    run = _Run()
    run.budget_end = time.monotonic() + (end.timestamp() - time.time())
    run.deadline_ts = end.timestamp()
    token = _CURRENT_RUN.set(run)
    try:
        yield
    finally:
        _CURRENT_RUN.reset(token)


def _observers(stats: Any) -> tuple[RetryObserver, ...]:
    if stats is None:
        return ()
    items = tuple(stats) if isinstance(stats, Sequence) else (stats,)
    for item in items:
        if not isinstance(item, RetryObserver):
            raise TypeError(
                "stats must be a RetryObserver (on_call, on_retry, on_success, on_exhausted), "
                f"or a sequence of them; got {type(item).__name__}"
            )
    return items


class BudgetedRetry:
    """The decorator ``policy.retry(...)`` returns; apply it to a sync or async function.

    Args:
        policy: the budget.
        deadline: as in :meth:`BackoffPolicy.stop`: an aware ``datetime`` or a callable of
            the ``RetryCallState`` (read each call's deadline from its arguments).
        rng, seed, retry_after: as in :meth:`BackoffPolicy.wait`.
        on_exhausted: called with the :class:`ExhaustionReport` before the run's error is
            raised: the hand-off point to a dead-letter queue. Whatever it raises propagates
            (chained to the run's last exception), never swallowed.
        stats: a :class:`RetryObserver` (e.g. :class:`~tenacity_budget.RetryStats`) or a
            sequence of them.
        tenacity_kwargs: any other ``tenacity.retry`` argument (``retry=``, ``before_sleep=``,
            ``reraise=``, ``sleep=``, ...). A ``stop=`` is combined with the budget stop
            (either ends the run); a ``wait=`` replaces the policy's wait, the budget stop
            still guarding every sleep. ``retry_error_cls`` defaults to
            :class:`BudgetExhausted`.
    """

    def __init__(
        self,
        policy: BackoffPolicy,
        *,
        deadline: DeadlineSource | None = None,
        rng: random.Random | None = None,
        seed: int | None = None,
        retry_after: RetryAfter | None = None,
        on_exhausted: Callable[[ExhaustionReport], Any] | None = None,
        stats: Any = None,
        tenacity_kwargs: dict[str, Any] | None = None,
    ) -> None:
        kwargs = dict(tenacity_kwargs or {})
        if on_exhausted is not None and not callable(on_exhausted):
            raise TypeError("on_exhausted must be a callable taking the ExhaustionReport")
        self.policy = policy
        self.on_exhausted = on_exhausted
        self.observers = _observers(stats)
        self.stop = policy.stop(deadline=deadline)
        self._options: dict[str, Any] = {
            "deadline": deadline,
            "rng": rng,
            "seed": seed,
            "retry_after": retry_after,
            "on_exhausted": on_exhausted,
            "stats": stats,
        }
        self._tenacity_kwargs = dict(kwargs)
        wait = kwargs.pop("wait", None) or policy.wait(rng=rng, seed=seed, retry_after=retry_after)
        user_stop = kwargs.pop("stop", None)
        stop = self.stop if user_stop is None else self.stop | user_stop
        self._user_before = kwargs.pop("before", None)
        self._user_before_sleep = kwargs.pop("before_sleep", None)
        self._user_error_callback = kwargs.pop("retry_error_callback", None)
        self._reraise = bool(kwargs.pop("reraise", False))
        self._error_cls: type[RetryError] = kwargs.pop("retry_error_cls", BudgetExhausted)
        # Hooks cost time on every attempt: install ours only where they have work to do.
        # A fixed deadline is known before the run; a callable one needs the run's state.
        self._deadline_callable = deadline is not None and not isinstance(deadline, datetime)
        fixed = [d for d in (deadline, policy.deadline) if isinstance(d, datetime)]
        self._fixed_deadline_ts = min(d.timestamp() for d in fixed) if fixed else math.inf
        self._retrying_kwargs: dict[str, Any] = {
            **kwargs,
            "wait": wait,
            "stop": stop,
            "retry_error_callback": self._give_up,
        }
        if self._deadline_callable:
            self._retrying_kwargs["before"] = self._before
        elif self._user_before is not None:
            self._retrying_kwargs["before"] = self._user_before
        if self.observers:
            self._retrying_kwargs["before_sleep"] = self._before_sleep
        elif self._user_before_sleep is not None:
            self._retrying_kwargs["before_sleep"] = self._user_before_sleep

    def _new_run(self) -> _Run:
        """The record remaining() reads, for a run starting now."""
        run = _Run()
        run.budget_end = time.monotonic() + self.policy.max_elapsed
        run.deadline_ts = self._fixed_deadline_ts
        return run

    # -- tenacity hooks -------------------------------------------------------------------

    def _before(self, retry_state: RetryCallState) -> None:
        # Only installed for a deadline callable: resolve it (once) for remaining().
        if retry_state.attempt_number == 1:
            run = _CURRENT_RUN.get()
            if run is not None:
                run.deadline_ts = self.stop.run_state(retry_state).deadline_ts
        if self._user_before is not None:
            self._user_before(retry_state)

    def _before_sleep(self, retry_state: RetryCallState) -> None:
        if self.observers:
            name = retry_state.get_fn_name()
            for observer in self.observers:
                observer.on_retry(name, retry_state.attempt_number, retry_state.upcoming_sleep)
        if self._user_before_sleep is not None:
            self._user_before_sleep(retry_state)

    def _give_up(self, retry_state: RetryCallState) -> Any:
        outcome = retry_state.outcome
        assert outcome is not None
        report = ExhaustionReport.from_attempt(outcome)
        if self.observers:
            name = retry_state.get_fn_name()
            for observer in self.observers:
                observer.on_exhausted(name, report)
        if self.on_exhausted is not None:
            self.on_exhausted(report)
        if self._user_error_callback is not None:
            return self._user_error_callback(retry_state)
        if self._reraise and outcome.failed:
            raise cast(BaseException, outcome.exception())
        if issubclass(self._error_cls, BudgetExhausted):
            error: RetryError = self._error_cls(outcome, report)
        else:
            error = self._error_cls(outcome)
        raise error from outcome.exception()

    # -- decoration -----------------------------------------------------------------------

    def __call__(self, fn: F) -> F:
        """Decorate ``fn`` (sync or async)."""
        # One controller, copied per call: tenacity's own @retry shares one statistics dict
        # between concurrent calls of a function and crashes with KeyError when threads
        # race on it (jd/tenacity#701). A copy per call keeps each run's state its own.
        is_async = inspect.iscoroutinefunction(fn)
        controller: tenacity.BaseRetrying = (
            tenacity.AsyncRetrying(**self._retrying_kwargs)
            if is_async
            else tenacity.Retrying(**self._retrying_kwargs)
        )
        observers = self.observers
        name = get_callback_name(fn)
        wrapper: Callable[..., Any]

        if is_async:

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                token = _CURRENT_RUN.set(self._new_run())
                try:
                    for observer in observers:
                        observer.on_call(name)
                    retrying = controller.copy()
                    attrs.statistics = retrying.statistics
                    result = await retrying(fn, *args, **kwargs)
                    for observer in observers:
                        observer.on_success(name, retrying.statistics.get("attempt_number", 1))
                    return result
                finally:
                    _CURRENT_RUN.reset(token)

            wrapper = async_wrapper
        else:

            @functools.wraps(fn)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                token = _CURRENT_RUN.set(self._new_run())
                try:
                    for observer in observers:
                        observer.on_call(name)
                    retrying = controller.copy()
                    attrs.statistics = retrying.statistics
                    result = retrying(fn, *args, **kwargs)
                    for observer in observers:
                        observer.on_success(name, retrying.statistics.get("attempt_number", 1))
                    return result
                finally:
                    _CURRENT_RUN.reset(token)

            wrapper = sync_wrapper

        attrs: Any = wrapper
        attrs.retry = controller
        attrs.statistics = {}
        attrs.retry_with = functools.partial(self._retry_with, fn)
        return cast(F, wrapper)

    def _retry_with(self, fn: F, **changes: Any) -> F:
        """``fn`` decorated again with some options changed (like tenacity's ``retry_with``).

        ``policy=`` swaps the policy; the budget options and any tenacity argument may be
        changed too.
        """
        policy = changes.pop("policy", self.policy)
        options = {**self._options, **{k: v for k, v in changes.items() if k in self._options}}
        tenacity_kwargs = {
            **self._tenacity_kwargs,
            **{k: v for k, v in changes.items() if k not in self._options},
        }
        return BudgetedRetry(policy, tenacity_kwargs=tenacity_kwargs, **options)(fn)
