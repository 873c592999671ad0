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
import numbers
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeVar, cast

import tenacity
from tenacity import RetryCallState, RetryError

from ._config import check_aware, earliest, utc_instant
from .exhaustion import BudgetExhausted, ExhaustionReport, StopReason
from .instrumentation._protocols import RetryObserver
from .solver import add_compensated
from .state import RunState, observe_cut, prepare, run_state, tag

if TYPE_CHECKING:
    from .policy import BackoffPolicy
    from .strategies import DeadlineSource, RetryAfter

__all__ = [
    "BudgetedRetry",
    "Horizon",
    "RetryObserver",
    "ambient_deadline",
    "current_horizon",
    "deadline_scope",
    "remaining",
    "remaining_until",
]

F = TypeVar("F", bound=Callable[..., Any])


class Horizon:
    """When the work in progress must be over: one frame of the ambient deadline.

    A frame is made by :func:`deadline_scope`, by each call of a ``policy.retry()``
    function (its budget end and deadlines) and by integrations that run attempts
    themselves. Its ends are already merged with every enclosing frame's, so the innermost
    frame alone says how long is left. Ends are ``inf`` where there is none.

    Attributes:
        outer: the enclosing frame, or ``None``.
        mono_end: the earliest end on the monotonic clock (budgets, relative scopes).
        wall_end: the earliest end on the wall clock, epoch seconds (absolute deadlines).
        run: the record of the budgeted run this frame belongs to, if any.
        closed: whether the frame has been left (its scope exited, its run over).
        stale: whether it was left out of order or from another task or thread: then no
            context may see it any longer (one left in order stays visible to the tasks
            started inside it, as a context copy would have it).
    """

    __slots__ = ("closed", "last", "mono_end", "outer", "run", "stale", "wall_end")

    mono_end: float
    wall_end: float

    def __init__(
        self,
        outer: Horizon | None,
        *,
        mono_end: float = math.inf,
        wall_end: float = math.inf,
        run: RunState | None = None,
    ) -> None:
        self.outer = outer
        self.mono_end = self.wall_end = math.inf
        self.tighten(mono_end=mono_end, wall_end=wall_end)
        if outer is not None:
            self.tighten(mono_end=outer.mono_end, wall_end=outer.wall_end)
        self.run = run
        self.last = math.inf  # the smallest value remaining() has handed out in this frame
        self.closed = self.stale = False

    def __repr__(self) -> str:
        return f"<Horizon left={self.left()!r} run={self.run!r}>"

    def tighten(self, *, mono_end: float = math.inf, wall_end: float = math.inf) -> None:
        """Bring the frame's ends forward to these, where they are earlier (never back).

        The one rule of nesting: an inner frame, or a deadline learnt later, can only
        shorten the time left.
        """
        if mono_end < self.mono_end:
            self.mono_end = mono_end
        if wall_end < self.wall_end:
            self.wall_end = wall_end

    def left(self) -> float:
        """Seconds until the earliest end (may be negative; ``inf`` without an end)."""
        left = math.inf
        if self.mono_end != math.inf:
            left = self.mono_end - time.monotonic()
        if self.wall_end != math.inf:
            left = min(left, self.wall_end - time.time())
        return left

    def deadline(self) -> datetime | None:
        """The earliest end as an aware UTC instant, or ``None`` without an end.

        Exact when the wall-clock end binds; a monotonic end is placed on the wall clock
        from now. Never raises: an end later than any ``datetime`` can hold (a scope of
        ``3e11`` seconds, a ``datetime.max`` deadline) is past anything a run can reach,
        and is no end (``None``); one before ``datetime.min`` is ``datetime.min`` (UTC).
        """
        mono_left = math.inf if self.mono_end == math.inf else self.mono_end - time.monotonic()
        if self.wall_end != math.inf and self.wall_end - time.time() <= mono_left:
            return utc_instant(self.wall_end)
        if mono_left == math.inf:
            return None
        try:
            return datetime.now(UTC) + timedelta(seconds=mono_left)
        except OverflowError:  # beyond datetime's range, or timedelta's
            return None if mono_left > 0 else utc_instant(-math.inf)


# Seconds beyond which a scope has no end from ``seconds`` (a float cannot add to a clock).
_MAX_SCOPE = 1e300

_HORIZON: ContextVar[Horizon | None] = ContextVar("tenacity_budget_horizon", default=None)


def current_horizon() -> Horizon | None:
    """The innermost ambient frame of this thread or task, or ``None`` outside any.

    A frame left out of order, or exited from another task or thread, is never ambient
    again; a task started inside a scope keeps it after the scope's code left it, as the
    task's copy of the context has it.
    """
    horizon = _HORIZON.get()
    while horizon is not None and horizon.stale:
        horizon = horizon.outer
    return horizon


def remaining(default: float | None = None) -> float | None:
    """Seconds left in the current budgeted run or deadline scope, else ``default``.

    Inside an attempt of a function decorated with ``policy.retry()`` this is the time
    until the earliest of the run's budget end (first attempt's start plus
    ``max_elapsed``), its deadlines and every enclosing one (a :func:`deadline_scope`, the
    run this run is nested in); inside a scope, the time until the scope's end. Never
    negative, it only decreases within a frame (a wall clock stepped back hands out no
    extra time), and it is per thread and per asyncio task. Outside any run or scope it
    returns ``default``, so that ``timeout=remaining(30.0)`` never silently means "no
    timeout" to a client that reads ``None`` that way::

        httpx.get(url, timeout=tenacity_budget.remaining(30.0))

    Raises:
        TypeError: for a ``default`` that is neither ``None`` nor a number (a bool is not).
        ValueError: for a ``default`` that is NaN, infinite or negative.
    """
    if default is not None and not (type(default) is float and 0.0 <= default < math.inf):
        _check_default(default)  # the common float default passes without a call
    horizon = _HORIZON.get()
    if horizon is not None and horizon.stale:
        horizon = current_horizon()
    if horizon is None:
        return default
    left = horizon.left()
    if left == math.inf:
        return default
    left = min(max(0.0, left), horizon.last)
    horizon.last = left
    return left


def _check_default(default: object) -> None:
    """Refuse a ``remaining()`` default that is not ``None`` or a finite number ``>= 0``."""
    if isinstance(default, bool) or not isinstance(default, numbers.Real | Decimal):
        raise TypeError(
            f"remaining(default): default must be None or a number of seconds, "
            f"got {type(default).__name__}"
        )
    value: Any = default  # a Real or a Decimal: both order against 0
    try:
        finite = bool(value >= 0) and value != math.inf  # NaN fails every comparison
    except ArithmeticError:  # a Decimal NaN signals instead
        finite = False
    if not finite:
        raise ValueError(
            f"remaining(default): default must be a finite number >= 0, got {default!r}"
        )


def ambient_deadline() -> datetime | None:
    """The earliest enclosing deadline as an aware UTC instant, or ``None`` outside any.

    For integrations that hand a deadline on (a task message, a request header): the end
    of the innermost :func:`deadline_scope` or budgeted run, merged with all enclosing ones.
    Never raises: an end past anything a ``datetime`` can hold is no deadline (``None``),
    as :meth:`Horizon.deadline` says.
    """
    horizon = current_horizon()
    return None if horizon is None else horizon.deadline()


def _enter(horizon: Horizon) -> Token[Horizon | None]:
    """Make ``horizon`` (built on the current frame) current; leave it with :func:`_leave`."""
    return _HORIZON.set(horizon)


def _leave(horizon: Horizon, token: Token[Horizon | None]) -> None:
    """Leave ``horizon``, in whatever order its frames are left: no frame left stays behind.

    Left while it is the current frame, the current frame becomes its nearest enclosing
    frame still open (frames left out of order before it are skipped). Left while a frame
    entered inside it is still current (out of order: a scope held by a generator across
    its ``yield``), that frame stays current, with the ends it was given when entered.

    Raises:
        RuntimeError: when called in another task or thread than the one that entered it.
    """
    current = _HORIZON.get()
    try:
        _HORIZON.reset(token)  # validates the context; the frame before it is current again
    except ValueError:
        # An async generator finalized by the event loop, a generator closed by another
        # thread: the entering context cannot be reached, so no context may see the frame
        # (its own context may still leave it, quietly).
        horizon.stale = True
        raise RuntimeError(
            "a deadline scope must be exited in the task (or thread) that entered it; "
            "this one was entered in another (enter and exit it in the same task)"
        ) from None
    horizon.closed = True
    target = current
    if current is horizon:
        target = horizon.outer
        while target is not None and target.stale:
            target = target.outer
    else:
        horizon.stale = True  # left out of order: a frame entered inside it stays current
    if target is not (None if token.old_value is Token.MISSING else token.old_value):
        _HORIZON.set(target)


@contextmanager
def _frame(horizon: Horizon) -> Iterator[Horizon]:
    token = _enter(horizon)
    try:
        yield horizon
    finally:
        _leave(horizon, token)


class deadline_scope:  # lower case: used like a function, `with deadline_scope(2):`
    """Set an ambient deadline for the code inside: ``with deadline_scope(2.0): ...``.

    ``seconds`` from now (monotonic clock), or an aware ``deadline`` (wall clock); the
    earlier of both when both are given. Scopes nest, and the innermost effective deadline
    is the earliest of all enclosing ones: a scope can shorten the time left, never extend
    it. Every budgeted run started inside treats the scope's end as its own ``deadline=``
    (it never ends after it; reason ``deadline`` when that is what stops it), and
    :func:`remaining` inside never exceeds the time left. Works as ``with`` and
    ``async with``; per thread and per asyncio task, like :func:`remaining`.

    A scope's end is fixed when it is entered (the earliest of its own and every enclosing
    one). Scopes may be left in any order (a scope held by a generator across its
    ``yield``): a scope left is never the deadline of code outside it afterwards, and one
    still open keeps the end it had. An end past anything a run can reach is no deadline for
    the runs inside: ``seconds`` up to ``1e300`` keep their (finite) time left for
    :func:`remaining`, beyond that a scope has no end; a ``datetime.max`` deadline is none.

    Raises:
        TypeError: when neither ``seconds`` nor ``deadline`` is given, or for a
            ``deadline`` that is not a datetime.
        ValueError: for NaN or negative ``seconds``, or a naive ``deadline``.
        RuntimeError: on entering a scope twice, exiting one not entered or already
            exited, or exiting it in another task or thread than the one that entered it.
    """

    __slots__ = ("_token", "deadline", "horizon", "seconds")

    def __init__(self, seconds: float | None = None, *, deadline: datetime | None = None) -> None:
        if seconds is None and deadline is None:
            raise TypeError("deadline_scope needs seconds= (from now) or deadline= (aware)")
        if seconds is not None:
            if isinstance(seconds, bool) or not isinstance(seconds, int | float):
                raise TypeError(f"seconds must be a number, got {type(seconds).__name__}")
            if seconds != seconds or seconds < 0:  # NaN, or negative (ints of any size)
                raise ValueError(f"seconds must be a number >= 0, got {seconds!r}")
            if seconds > _MAX_SCOPE:
                seconds = math.inf  # beyond any clock: no end from seconds
        if deadline is not None:
            check_aware(deadline)
        self.seconds = seconds
        self.deadline = deadline
        self.horizon: Horizon | None = None
        self._token: Token[Horizon | None] | None = None

    def __repr__(self) -> str:
        return f"deadline_scope(seconds={self.seconds!r}, deadline={self.deadline!r})"

    def __enter__(self) -> Horizon:
        if self._token is not None:
            raise RuntimeError("a deadline_scope is entered once; make a new one")
        mono_end = math.inf if self.seconds is None else time.monotonic() + self.seconds
        wall_end = math.inf if self.deadline is None else self.deadline.timestamp()
        self.horizon = Horizon(current_horizon(), mono_end=mono_end, wall_end=wall_end)
        self._token = _enter(self.horizon)
        return self.horizon

    def __exit__(self, *exc_info: object) -> None:
        horizon = self.horizon
        if horizon is None or self._token is None:
            raise RuntimeError("this deadline_scope was exited without being entered")
        if horizon.closed:
            raise RuntimeError("this deadline_scope was already exited")
        _leave(horizon, self._token)

    async def __aenter__(self) -> Horizon:
        return self.__enter__()

    async def __aexit__(self, *exc_info: object) -> None:
        self.__exit__(*exc_info)


@contextmanager
def remaining_until(end: datetime) -> Iterator[None]:
    """Inside the block, :func:`remaining` counts down to the wall-clock instant ``end``.

    For integrations that run attempts themselves rather than through tenacity (the
    Celery integration runs one attempt per task execution): the block is one attempt
    of a run that must be over by ``end``. An enclosing deadline still holds.
    """
    check_aware(end, "end")
    with _frame(Horizon(current_horizon(), wall_end=end.timestamp())):
        yield


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


def _callback_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of ``fn`` (the name observers are told), else its ``repr``."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:
        return repr(fn)
    module = getattr(fn, "__module__", None)
    return f"{module}.{name}" if module else str(name)


class AttemptTimedOut(Exception):
    """An attempt of a ``hard_deadline`` run was cancelled because the run's time was up.

    Internal to ``policy.retry(hard_deadline=True)``: the run ends with
    :class:`~tenacity_budget.BudgetExhausted` (``reason`` wall_clock or deadline), chained
    from the ``TimeoutError`` of the cancelled attempt; never retried.
    """

    def __init__(self, reason: StopReason, *, started: bool = True) -> None:
        what = "was cancelled" if started else "was not started"
        super().__init__(f"the attempt {what}: the run's time was up ({reason.value})")
        self.reason = reason
        self.started = started  # False: the run's end had passed before it could start


class _AsyncBudgetStop:
    """The run's stops, then an awaited retry-budget decision (asyncio retry budgets).

    tenacity's ``|`` calls stops synchronously, so an awaited withdrawal cannot be composed
    with it; ``AsyncRetrying`` awaits a top-level async stop, which this is.
    """

    def __init__(self, first: Any, budget_stop: Any) -> None:
        self.first = first
        self.budget_stop = budget_stop

    async def __call__(self, retry_state: RetryCallState) -> bool:
        if self.first(retry_state):
            return True
        return bool(await self.budget_stop(retry_state))


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
        budget: a retry budget (:class:`~tenacity_budget.RetryBudget`,
            :class:`~tenacity_budget.redis.RedisRetryBudget`) shared by every call to the
            dependency: each call deposits once, each retry withdraws one, asked only after
            the policy (and any ``stop=``) would allow the retry; a refusal ends the run at
            once (reason ``retry_budget``). An asyncio budget needs a coroutine function.
        hard_deadline: on a coroutine function, cancel an attempt still running when the
            run's time (budget, deadline, enclosing scope) is up; the run then ends with
            :class:`BudgetExhausted` (reason ``wall_clock`` or ``deadline``, chained from
            the ``TimeoutError``). A sync function cannot be interrupted safely:
            ``TypeError`` at decoration.
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
        budget: Any = None,
        hard_deadline: bool = False,
        tenacity_kwargs: dict[str, Any] | None = None,
    ) -> None:
        kwargs = dict(tenacity_kwargs or {})
        if on_exhausted is not None and not callable(on_exhausted):
            raise TypeError("on_exhausted must be a callable taking the ExhaustionReport")
        if budget is not None and not all(
            callable(getattr(budget, name, None)) for name in ("deposit", "try_withdraw", "stop")
        ):
            raise TypeError(
                "budget must be a retry budget (RetryBudget or RedisRetryBudget: deposit(), "
                f"try_withdraw(), stop()), got {type(budget).__name__}"
            )
        if not isinstance(hard_deadline, bool):
            raise TypeError(f"hard_deadline must be a bool, got {type(hard_deadline).__name__}")
        self.policy = policy
        self.on_exhausted = on_exhausted
        self.observers = _observers(stats)
        self.budget = budget
        self.hard_deadline = hard_deadline
        self.stop = policy.stop(deadline=deadline)
        self._options: dict[str, Any] = {
            "deadline": deadline,
            "rng": rng,
            "seed": seed,
            "retry_after": retry_after,
            "on_exhausted": on_exhausted,
            "stats": stats,
            "budget": budget,
            "hard_deadline": hard_deadline,
        }
        self._tenacity_kwargs = dict(kwargs)
        wait = kwargs.pop("wait", None) or policy.wait(rng=rng, seed=seed, retry_after=retry_after)
        user_stop = kwargs.pop("stop", None)
        stop: Any = self.stop if user_stop is None else self.stop | user_stop
        self._async_budget = budget is not None and bool(getattr(budget, "is_async", False))
        if budget is not None:
            # Asked last: tenacity's `|` stops at the first true, so a retry the policy
            # refuses never spends the shared budget.
            budget_stop = budget.stop()
            stop = _AsyncBudgetStop(stop, budget_stop) if self._async_budget else stop | budget_stop
        if hard_deadline:
            # A cancelled attempt ends the run; it is never retried.
            retry = kwargs.pop("retry", tenacity.retry_if_exception_type())
            kwargs["retry"] = tenacity.retry_if_not_exception_type(AttemptTimedOut) & retry
        self._user_before = kwargs.pop("before", None)
        self._user_before_sleep = kwargs.pop("before_sleep", None)
        self._user_error_callback = kwargs.pop("retry_error_callback", None)
        self._reraise = bool(kwargs.pop("reraise", False))
        self._error_cls: type[RetryError] = kwargs.pop("retry_error_cls", BudgetExhausted)
        # Hooks cost time on every attempt: install ours only where they have work to do.
        # A fixed deadline is known before the run; a callable one needs the run's state.
        self._deadline_callable = deadline is not None and not isinstance(deadline, datetime)
        fixed = earliest(deadline if isinstance(deadline, datetime) else None, policy.deadline)
        self._fixed_deadline = fixed
        self._fixed_deadline_ts = fixed.timestamp() if fixed is not None else math.inf
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

    # -- one call -------------------------------------------------------------------------

    def _begin_call(self, retrying: tenacity.BaseRetrying) -> Horizon:
        """The record and ambient frame of a call starting now (remaining() reads them)."""
        policy = self.policy
        record = RunState(policy.max_elapsed, policy.max_attempts())
        record.repair_statistics = False  # this call's controller is its own copy
        prepare(retrying, record)
        if self.budget is not None:
            self.budget.deposit()
        return Horizon(
            current_horizon(),
            mono_end=time.monotonic() + policy.max_elapsed,
            wall_end=self._fixed_deadline_ts,
            run=record,
        )

    # -- tenacity hooks -------------------------------------------------------------------

    def _before(self, retry_state: RetryCallState) -> None:
        # Only installed for a deadline callable: resolve it (once) for remaining().
        if retry_state.attempt_number == 1:
            horizon = _HORIZON.get()
            if horizon is not None:
                record = self.stop.run_state(retry_state)
                horizon.tighten(wall_end=record.deadline_ts)
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
        record = run_state(retry_state)
        report = (
            record.report(outcome.exception())
            if record is not None
            else ExhaustionReport.from_attempt(outcome)
        )
        self._exhausted(retry_state.get_fn_name(), report)
        if self._user_error_callback is not None:
            return self._user_error_callback(retry_state)
        if self._reraise and outcome.failed:
            raise cast(BaseException, outcome.exception())
        raise self._error(outcome, report) from outcome.exception()

    def _exhausted(self, name: str, report: ExhaustionReport) -> None:
        for observer in self.observers:
            observer.on_exhausted(name, report)
        if self.on_exhausted is not None:
            self.on_exhausted(report)

    def _error(self, outcome: tenacity.Future, report: ExhaustionReport) -> RetryError:
        if issubclass(self._error_cls, BudgetExhausted):
            return self._error_cls(outcome, report)
        return self._error_cls(outcome)

    def _timed_out(self, name: str, horizon: Horizon, started: float, exc: AttemptTimedOut) -> Any:
        """End a hard-deadline run whose attempt was cancelled (or overran its time)."""
        record = horizon.run
        assert record is not None
        if exc.started:
            observe_cut(record, time.monotonic() - started)
        else:
            _observe_unstarted(record, time.monotonic() - started)
        record.reason = exc.reason
        if not record.resolved:  # cut before the stop was first asked: its deadlines now
            outer = horizon.outer.deadline() if horizon.outer is not None else None
            record.deadline = earliest(self._fixed_deadline, outer)
        timeout = exc.__cause__ if exc.__cause__ is not None else exc
        outcome = tenacity.Future.construct(record.attempts, timeout, True)
        tag(outcome, record)
        report = record.report(timeout)
        self._exhausted(name, report)
        if self._reraise:
            raise timeout
        raise self._error(outcome, report) from timeout

    # -- decoration -----------------------------------------------------------------------

    def __call__(self, fn: F) -> F:
        """Decorate ``fn`` (sync or async)."""
        # One controller, copied per call: tenacity's own @retry shares one statistics dict
        # between concurrent calls of a function and crashes with KeyError when threads
        # race on it (jd/tenacity#701). A copy per call keeps each run's state its own.
        is_async = inspect.iscoroutinefunction(fn)
        if self.hard_deadline and not is_async:
            raise TypeError(
                f"hard_deadline=True needs a coroutine function, and {_callback_name(fn)} is "
                "not one: a running sync call cannot be interrupted safely. Bound each "
                "attempt with its own timeout instead, e.g. timeout=remaining(30.0)"
            )
        if self._async_budget and not is_async:
            raise TypeError(
                f"{_callback_name(fn)} is a sync function but the retry budget is asyncio "
                "(an asyncio Redis client): use a sync client, or decorate a coroutine function"
            )
        controller: tenacity.BaseRetrying = (
            tenacity.AsyncRetrying(**self._retrying_kwargs)
            if is_async
            else tenacity.Retrying(**self._retrying_kwargs)
        )
        observers = self.observers
        name = _callback_name(fn)
        wrapper: Callable[..., Any]

        if is_async:
            target = self._hard_attempt(fn) if self.hard_deadline else fn

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                retrying = controller.copy()
                started = time.monotonic()
                horizon = self._begin_call(retrying)
                token = _enter(horizon)
                try:
                    for observer in observers:
                        observer.on_call(name)
                    attrs.statistics = retrying.statistics
                    try:
                        result = await retrying(target, *args, **kwargs)
                    except AttemptTimedOut as exc:
                        return self._timed_out(name, horizon, started, exc)
                    for observer in observers:
                        observer.on_success(name, retrying.statistics.get("attempt_number", 1))
                    return result
                finally:
                    _leave(horizon, token)

            wrapper = async_wrapper
        else:

            @functools.wraps(fn)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                retrying = controller.copy()
                horizon = self._begin_call(retrying)
                token = _enter(horizon)
                try:
                    for observer in observers:
                        observer.on_call(name)
                    attrs.statistics = retrying.statistics
                    result = retrying(fn, *args, **kwargs)
                    for observer in observers:
                        observer.on_success(name, retrying.statistics.get("attempt_number", 1))
                    return result
                finally:
                    _leave(horizon, token)

            wrapper = sync_wrapper

        attrs: Any = wrapper
        attrs.retry = controller
        attrs.statistics = {}
        attrs.retry_with = functools.partial(self._retry_with, fn)
        return cast(F, wrapper)

    def _hard_attempt(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with each attempt bounded by the run's time left (``hard_deadline``)."""
        import asyncio  # only coroutine functions get here; the package does not need it

        @functools.wraps(fn)
        async def attempt(*args: Any, **kwargs: Any) -> Any:
            horizon = _HORIZON.get()
            assert horizon is not None
            left = horizon.left()
            if left < 0:
                # The run's end passed after the stop admitted this attempt (its sleep ran
                # long, the clock jumped): it is not started, not even its synchronous part.
                # An attempt admitted at exactly the end (left == 0) is started, as decided.
                late = TimeoutError("the run's time was up before the attempt could start")
                raise AttemptTimedOut(_binding_end(horizon), started=False) from late
            timeout = asyncio.timeout(None if left == math.inf else left)
            try:
                async with timeout:
                    result = await fn(*args, **kwargs)
            except TimeoutError as exc:
                if timeout.expired():
                    raise AttemptTimedOut(_binding_end(horizon)) from exc
                raise
            if horizon.left() < 0:
                # It ran past the run's time without being cancelled in time (a clock
                # that jumps, as the virtual clock does): as late as a cancelled one.
                late = TimeoutError("the attempt ended after the run's time was up")
                raise AttemptTimedOut(_binding_end(horizon)) from late
            return result

        return attempt

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


def _observe_unstarted(record: RunState, elapsed: float) -> None:
    """Bring ``record`` up to date for an attempt not started: the run's end had passed.

    The counterpart of :func:`~tenacity_budget.state.observe_cut` for an attempt the hard
    deadline kept from starting: the sleep the latest decision allowed was taken, but no
    call was made, so the attempts stay as observed.
    """
    if record.observed:
        record.slept, record.slept_error = add_compensated(
            record.slept, record.slept_error, record.upcoming_sleep
        )
    record.elapsed = elapsed


def _binding_end(horizon: Horizon) -> StopReason:
    """Which end ran out for a run's frame: its own budget (wall_clock) or a deadline."""
    outer = horizon.outer
    by_deadline = horizon.wall_end != math.inf and horizon.wall_end - time.time() <= 0
    if outer is not None and outer.mono_end <= horizon.mono_end:
        by_deadline = by_deadline or outer.mono_end - time.monotonic() <= 0
    return StopReason.DEADLINE if by_deadline else StopReason.WALL_CLOCK
