"""The ``policy.retry()`` decorator: tenacity's ``@retry`` wired with a policy's wait and stop.

:class:`BudgetedRetry` adds what plain tenacity cannot give: :func:`~tenacity_budget.remaining`
inside each attempt (the run's frame of the ambient deadline, :mod:`~tenacity_budget.context`),
:class:`~tenacity_budget.BudgetExhausted` with a report when the budget is spent, observer
hooks (``stats=``), a shared retry budget asked last, and ``hard_deadline`` (one timer per
run cancelling an attempt still running when the run's time is up). See docs/concepts.md.
"""

from __future__ import annotations

import functools
import inspect
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any, NoReturn, TypeVar, cast

import tenacity
from tenacity import RetryCallState, RetryError

from ._loop import AsyncLoop, Loop
from ._terms import HasTerms, terms_of
from ._validate import throttle as check_throttle
from .context import _HORIZON as _HORIZON
from .context import (
    Horizon,
    _enter,
    _leave,
    current_horizon,
    earliest,
)
from .decision import admit, awithdraw, cut, cut_reason
from .exhaustion import BudgetExhausted, ExhaustionReport, StopReason, Throttled
from .instrumentation._protocols import RetryObserver as RetryObserver
from .solver import add_compensated
from .state import RunState, observe_cut, run_state, stopped_by, tag
from .strategies import DeadlineSource, RetryAfter, stop_budget, wait_budget

__all__: list[str] = []  # the observer protocol lives in instrumentation

F = TypeVar("F", bound=Callable[..., Any])

_INF = math.inf


def _check_options(
    on_exhausted: object, budget: object, hard_deadline: object, throttle: object = None
) -> None:
    """Refuse ``policy.retry()`` options of the wrong kind, at decoration."""
    check_throttle(throttle)
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


def _check_hedged(hedge: object, options: dict[str, Any], tenacity_kwargs: dict[str, Any]) -> None:
    """Refuse, at decoration, what a hedged run cannot honour: hedging replaces retrying."""
    from .hedge import Hedge  # the engine is only imported where hedge= is given

    if not isinstance(hedge, Hedge):
        raise TypeError(f"hedge must be a tenacity_budget.Hedge, got {type(hedge).__name__}")
    unused = sorted(
        {k for k in ("rng", "seed", "retry_after") if options[k] is not None} | set(tenacity_kwargs)
    )
    if unused:
        raise TypeError(
            f"hedge= replaces the retry loop, so {', '.join(unused)} would never be used: a "
            "hedged run sends its attempts on the hedge's delay and the Hedge's non_fatal= "
            "decides which failures send the next one"
        )
    deadline = options["deadline"]
    if deadline is not None and not isinstance(deadline, datetime):
        raise TypeError(
            "hedge= needs deadline= as an aware datetime: a deadline callable reads tenacity's "
            "RetryCallState, which a hedged run does not have (use a deadline_scope instead)"
        )


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
    """The run's stop, then an awaited retry-budget withdrawal (asyncio retry budgets).

    tenacity calls composed stops synchronously, so an awaited withdrawal cannot be one
    of them; ``AsyncRetrying`` awaits a top-level async stop, which this is. The policy's
    decision (:func:`~tenacity_budget.decision.decide`) comes first; the budget's last
    check is :func:`~tenacity_budget.decision.awithdraw`, its awaited counterpart.
    """

    def __init__(self, first: stop_budget, withdraw: Callable[[], Awaitable[bool]]) -> None:
        self.first = first
        self.withdraw = withdraw

    def run_state(self, retry_state: RetryCallState) -> RunState:
        """This run's record (see :meth:`stop_budget.run_state`)."""
        return self.first.run_state(retry_state)

    async def __call__(self, retry_state: RetryCallState) -> bool:
        if self.first(retry_state):
            return True
        reason = await awithdraw(self.withdraw)
        if reason is None:
            return False
        stopped_by(retry_state, reason)
        return True


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
        throttle: an adaptive throttle (:class:`~tenacity_budget.AdaptiveThrottle`) asked
            before every attempt, the first included: after the time budget and before the
            retry budget. A first attempt it rejects is not sent (and makes no deposit in
            ``budget``): the call raises :class:`BudgetExhausted` at once, reason
            ``throttled``, its ``last_attempt`` holding the rejection
            (:class:`~tenacity_budget.exhaustion.Throttled`); a retry it rejects ends the
            run with the same reason. Every attempt
            sent is recorded in it (its result or exception).
        hedge: a :class:`~tenacity_budget.Hedge`, on a coroutine function: hedging replaces
            retrying for the call (gRPC's hedging). After the hedge's delay without an
            answer the same call is made again beside the first; the first good outcome
            wins and the others are cancelled. Every hedge is allowed by the one decision
            (time left, the throttle, then ``budget``), and the run's end cuts every
            attempt. A sync function is refused (``TypeError``), and so are options only
            the retry loop uses (``rng``, ``seed``, ``retry_after``, tenacity's). See
            docs/hedging.md.
        hard_deadline: on a coroutine function, cancel an attempt still running when the
            run's time (budget, deadline, enclosing scope) is up; the run then ends with
            :class:`BudgetExhausted` (reason ``wall_clock`` or ``deadline``, chained from
            the ``TimeoutError``). A sync function cannot be interrupted safely:
            ``TypeError`` at decoration.
        tenacity_kwargs: any other ``tenacity.retry`` argument (``retry=``, ``before_sleep=``,
            ``reraise=``, ``sleep=``, ...). A ``stop=`` is asked after the budget's own
            checks and before the retry budget (either ends the run, reason ``other``); a
            ``wait=`` replaces the policy's wait, the budget stop still guarding every
            sleep. ``retry_error_cls`` defaults to :class:`BudgetExhausted`.
        wait, stop: the policy's wait and stop, built by ``policy.retry()`` (built here
            from ``policy`` when not given).
    """

    def __init__(
        self,
        policy: HasTerms,
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
        wait: Any = None,
        stop: stop_budget | None = None,
        throttle: Any = None,
        hedge: Any = None,
    ) -> None:
        _check_options(on_exhausted, budget, hard_deadline, throttle)
        self.policy = policy
        self.terms = terms = terms_of(policy)
        self.on_exhausted = on_exhausted
        self.observers = _observers(stats)
        self.budget = budget
        self.throttle = throttle
        self.hard_deadline = hard_deadline
        self._options: dict[str, Any] = {
            "deadline": deadline,
            "rng": rng,
            "seed": seed,
            "retry_after": retry_after,
            "on_exhausted": on_exhausted,
            "stats": stats,
            "budget": budget,
            "hard_deadline": hard_deadline,
            "throttle": throttle,
            "hedge": hedge,
        }
        self._tenacity_kwargs = dict(tenacity_kwargs or {})
        self.hedge = hedge
        if hedge is not None:
            _check_hedged(hedge, self._options, self._tenacity_kwargs)
        kwargs = dict(self._tenacity_kwargs)
        user_wait = kwargs.pop("wait", None)
        if user_wait is None and wait is None:
            wait = wait_budget(policy, rng=rng, seed=seed, retry_after=retry_after)
        self._async_budget = budget is not None and bool(getattr(budget, "is_async", False))
        self.stop = self._compose_stop(
            stop if stop is not None else stop_budget(policy, deadline=deadline),
            kwargs.pop("stop", None),
        )
        if hard_deadline:
            import asyncio  # hard_deadline is for coroutine functions only

            # A cancelled attempt ends the run; it is never retried.
            retry = kwargs.pop("retry", tenacity.retry_if_exception_type())
            never = (AttemptTimedOut, asyncio.CancelledError)
            kwargs["retry"] = tenacity.retry_if_not_exception_type(never) & retry
        # A fixed deadline is known before the run; a callable one needs the run's state.
        self._deadline_callable = deadline is not None and not isinstance(deadline, datetime)
        fixed = earliest(deadline if isinstance(deadline, datetime) else None, terms.deadline)
        self._fixed_deadline = fixed
        self._fixed_deadline_ts = fixed.timestamp() if fixed is not None else math.inf
        self._plain_frame = Horizon(None, wall_end=self._fixed_deadline_ts)
        self._retrying_kwargs = self._hooks(kwargs, user_wait or wait)

    def _compose_stop(self, stop: stop_budget, user_stop: Any) -> Any:
        """The run's one stop, in the library's order: the policy's checks, the user's
        ``stop=``, then the retry budget (awaited for an asyncio budget)."""
        budget = self.budget
        grant = None if budget is None or self._async_budget else budget.try_withdraw
        throttle = None if self.throttle is None else self.throttle.admit
        composed = stop.compose(other=user_stop, grant=grant, throttle=throttle)
        if self._async_budget:
            return _AsyncBudgetStop(composed, budget.try_withdraw)
        return composed

    def _hooks(self, kwargs: dict[str, Any], wait: Any) -> dict[str, Any]:
        """tenacity's arguments with this decorator's hooks, each only where it has work:
        hooks cost time on every attempt."""
        self._user_before = kwargs.pop("before", None)
        self._user_before_sleep = kwargs.pop("before_sleep", None)
        self._user_error_callback = kwargs.pop("retry_error_callback", None)
        self._reraise = bool(kwargs.pop("reraise", False))
        self._error_cls: type[RetryError] = kwargs.pop("retry_error_cls", BudgetExhausted)
        retrying_kwargs: dict[str, Any] = {
            **kwargs,
            "wait": wait,
            "stop": self.stop,
            "retry_error_callback": self._give_up,
        }
        if self._deadline_callable:
            retrying_kwargs["before"] = self._before
        elif self._user_before is not None:
            retrying_kwargs["before"] = self._user_before
        if self.observers:
            retrying_kwargs["before_sleep"] = self._before_sleep
        elif self._user_before_sleep is not None:
            retrying_kwargs["before_sleep"] = self._user_before_sleep
        return retrying_kwargs

    # -- one call -------------------------------------------------------------------------

    def _begin_call(self) -> Horizon:
        """The ambient frame of a call starting now, its run's record as ``run`` (remaining()
        reads them; the loop hands the record to the run before its first attempt)."""
        terms = self.terms
        record = RunState(terms.budget, terms.affordable)
        outer = current_horizon()
        # The run's frame of its deadlines: without an enclosing frame or a deadline read
        # per call, the decorator's one frame of its fixed deadlines serves every call.
        wall_end = self._fixed_deadline_ts
        record.horizon = (
            self._plain_frame
            if outer is None and not self._deadline_callable
            else Horizon(outer, _INF, wall_end)
        )
        # Positional: a frame is made for every call, and keywords cost more.
        return Horizon(outer, time.monotonic() + terms.budget, wall_end, record)

    def _admit_first(self, name: str, horizon: Horizon) -> None:
        """The first attempt's admission (:func:`~tenacity_budget.decision.admit`): the
        throttle, then the call's deposit in the retry budget (a rejected call deposits
        nothing: nothing was sent)."""
        throttle = self.throttle
        if throttle is not None and admit(throttle.admit) is not None:
            record = horizon.run
            assert record is not None
            record.reason = StopReason.THROTTLED
            rejection = Throttled(getattr(throttle, "name", "default"), throttle.probability)
            self._end_outside(name, horizon, rejection, 1)
        if self.budget is not None:
            self.budget.deposit()

    # -- tenacity hooks -------------------------------------------------------------------

    def _before(self, retry_state: RetryCallState) -> None:
        # Only installed for a deadline callable: resolve it (once) for remaining().
        if retry_state.attempt_number == 1:
            horizon = _HORIZON.get()
            if horizon is not None:
                record = self.stop.run_state(retry_state)
                assert record.horizon is not None
                horizon.tighten(wall_end=record.horizon.wall_end)
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
        timeout = exc.__cause__ if exc.__cause__ is not None else exc
        self._end_outside(name, horizon, timeout, record.attempts)

    def _end_outside(
        self, name: str, horizon: Horizon, error: BaseException, attempt_number: int
    ) -> NoReturn:
        """End a run outside tenacity's loop (its reason already recorded): the report, the
        observers and ``on_exhausted``, then :class:`BudgetExhausted` (or ``error`` itself
        with ``reraise``), its ``last_attempt`` holding ``error``."""
        record = horizon.run
        assert record is not None
        if not record.resolved:  # ended before the stop was first asked: its deadlines now
            outer = horizon.outer.deadline() if horizon.outer is not None else None
            record.deadline = earliest(self._fixed_deadline, outer)
        outcome = tenacity.Future.construct(attempt_number, error, True)
        tag(outcome, record)
        report = record.report(error)
        self._exhausted(name, report)
        if self._reraise:
            raise error
        raise self._error(outcome, report) from error

    # -- decoration -----------------------------------------------------------------------

    def __call__(self, fn: F) -> F:
        """Decorate ``fn`` (sync or async)."""
        # One controller for every call, its loop keeping each run's state in the call
        # (its RetryCallState, view of the controller, record and statistics dict):
        # tenacity's own @retry shares one statistics dict between concurrent calls and can
        # crash with KeyError when threads race on it (jd/tenacity#701).
        is_async = inspect.iscoroutinefunction(fn)
        if self.hedge is not None:
            return self._hedged(fn)
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
        controller: Any = (
            AsyncLoop(**self._retrying_kwargs) if is_async else Loop(**self._retrying_kwargs)
        )
        observers = self.observers
        name = _callback_name(fn)
        admits = self.throttle is not None or self.budget is not None
        target = fn if self.throttle is None else _recorded(fn, self.throttle, is_async)
        wrapper: Callable[..., Any]

        if is_async and self.hard_deadline:
            wrapper = self._hard_wrapper(target, controller, name, admits)
        elif is_async:

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                horizon = self._begin_call()
                token = _enter(horizon)
                try:
                    for observer in observers:
                        observer.on_call(name)
                    if admits:
                        self._admit_first(name, horizon)
                    stats = attrs.statistics = {}
                    result = await controller.run(target, args, kwargs, stats, horizon.run)
                    for observer in observers:
                        observer.on_success(name, stats.get("attempt_number", 1))
                    return result
                finally:
                    _leave(horizon, token)

            wrapper = async_wrapper
        else:

            @functools.wraps(fn)
            def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
                horizon = self._begin_call()
                token = _enter(horizon)
                try:
                    for observer in observers:
                        observer.on_call(name)
                    if admits:
                        self._admit_first(name, horizon)
                    stats = attrs.statistics = {}
                    result = controller.run(target, args, kwargs, stats, horizon.run)
                    for observer in observers:
                        observer.on_success(name, stats.get("attempt_number", 1))
                    return result
                finally:
                    _leave(horizon, token)

            wrapper = sync_wrapper

        attrs: Any = wrapper
        attrs.retry = controller
        attrs.statistics = {}
        attrs.retry_with = functools.partial(self._retry_with, fn)
        return cast(F, wrapper)

    def _hedged(self, fn: F) -> F:
        """``fn`` (a coroutine function) hedged by ``hedge=``: the engine runs each call."""
        from .hedge import check_target, hedged_call

        name = _callback_name(fn)
        check_target(fn, name)
        hedge, terms, budget, throttle = self.hedge, self.terms, self.budget, self.throttle
        observers, on_exhausted, deadline_ts = (
            self.observers,
            self.on_exhausted,
            self._fixed_deadline_ts,
        )

        @functools.wraps(fn)
        async def hedged(*args: Any, **kwargs: Any) -> Any:
            return await hedged_call(
                hedge,
                fn,
                args,
                kwargs,
                terms=terms,
                deadline_ts=deadline_ts,
                budget=budget,
                throttle=throttle,
                observers=observers,
                name=name,
                on_exhausted=on_exhausted,
            )

        attrs: Any = hedged
        attrs.retry_with = functools.partial(self._retry_with, fn)
        return cast(F, hedged)

    def _hard_wrapper(
        self, fn: Callable[..., Any], controller: AsyncLoop, name: str, admits: bool
    ) -> Callable[..., Any]:
        """``fn`` run under one timer per run (``hard_deadline``): armed at the run's end
        while an attempt runs, disarmed while it sleeps (the stop admitted the sleep to
        end in time, and an attempt admitted at exactly the end is started, as decided)."""
        import asyncio  # only coroutine functions get here; the package does not need it

        observers = self.observers
        target = _hard_attempt(fn)

        @functools.wraps(fn)
        async def hard_wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            horizon = self._begin_call()
            token = _enter(horizon)
            try:
                for observer in observers:
                    observer.on_call(name)
                if admits:
                    self._admit_first(name, horizon)
                stats = attrs.statistics = {}
                left = horizon.left()  # armed for the first attempt, which rarely moves it
                timer = horizon.timer = asyncio.timeout(None if left == math.inf else left)
                try:
                    async with timer:
                        result = await controller.run(target, args, kwargs, stats, horizon.run)
                except TimeoutError as exc:
                    if not timer.expired():
                        raise
                    cut = AttemptTimedOut(_binding_end(horizon))
                    cut.__cause__ = exc
                    return self._timed_out(name, horizon, started, cut)
                except AttemptTimedOut as exc:
                    return self._timed_out(name, horizon, started, exc)
                for observer in observers:
                    observer.on_success(name, stats.get("attempt_number", 1))
                return result
            finally:
                _leave(horizon, token)

        attrs: Any = hard_wrapper
        return hard_wrapper

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


def _recorded(fn: Callable[..., Any], throttle: Any, is_async: bool) -> Callable[..., Any]:
    """``fn`` with every attempt's outcome (its result, or what it raised) told to the
    throttle. A cancellation is no answer from the backend, and is not told."""
    record = throttle.record
    if is_async:
        import asyncio

        @functools.wraps(fn)
        async def recorded_async(*args: Any, **kwargs: Any) -> Any:
            try:
                result = await fn(*args, **kwargs)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                record(exc)
                raise
            record(result)
            return result

        return recorded_async

    @functools.wraps(fn)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            record(exc)
            raise
        record(result)
        return result

    return recorded


def _hard_attempt(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with each attempt bounded by the run's time left, on the run's one timer."""
    import asyncio

    loop_time = asyncio.get_running_loop

    @functools.wraps(fn)
    async def attempt(*args: Any, **kwargs: Any) -> Any:
        horizon = _HORIZON.get()
        assert horizon is not None
        left = horizon.left()
        if left < 0:
            reason = cut(*_time_left(horizon))
            if reason is not None:
                # The run's end passed after the stop admitted this attempt (its sleep ran
                # long, the clock jumped): it is not started, not even its synchronous
                # part. One admitted at exactly the end (0 left) is started, as decided.
                late = TimeoutError("the run's time was up before the attempt could start")
                raise AttemptTimedOut(reason, started=False) from late
        timer = horizon.timer
        if left != math.inf:
            when = loop_time().time() + left
            armed = timer.when()
            # Rearmed unless already set to this end (two clock readings apart at most).
            if armed is None or not -_REARM <= when - armed <= _REARM:
                timer.reschedule(when)
        try:
            result = await fn(*args, **kwargs)
        except asyncio.CancelledError:
            raise  # the timer's (or the caller's) cancellation: the timer stays as it is
        except BaseException:
            timer.reschedule(None)  # a sleep may follow: the stop admitted it to end in time
            raise
        if horizon.left() < 0:
            # It ran past the run's time without being cancelled in time (a clock that
            # jumps, as the virtual clock does): as late as a cancelled one.
            late = TimeoutError("the attempt ended after the run's time was up")
            raise AttemptTimedOut(_binding_end(horizon)) from late
        timer.reschedule(None)
        return result

    return attempt


# An end that moved by less than this (seconds) is the same end, read from two clocks.
_REARM = 1e-6


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
    """Which end ran out for a run's frame whose attempt was cut (:func:`decision.cut_reason`)."""
    return cut_reason(*_time_left(horizon))


def _time_left(horizon: Horizon) -> tuple[float, float, float]:
    """The time left in a run's frame: its budget, its wall-clock and monotonic deadlines."""
    deadlines: Horizon = horizon.run.horizon
    mono = time.monotonic()
    wall_left = math.inf if deadlines.wall_end == math.inf else deadlines.wall_end - time.time()
    mono_left = math.inf if deadlines.mono_end == math.inf else deadlines.mono_end - mono
    return horizon.mono_end - mono, wall_left, mono_left
