"""The attempt loop of ``policy.retry()``: tenacity's controllers, each attempt asked once.

:class:`Loop` and :class:`AsyncLoop` are tenacity's ``Retrying`` and ``AsyncRetrying`` with
their loop written as one straight pass per attempt, as Polly's retry strategy is: the
attempt, then its outcome asked tenacity's questions in tenacity's order (``retry``,
``after``, ``wait``, ``stop``, ``before_sleep``), each once. Hooks and strategies see the
same ``RetryCallState`` and statistics as under tenacity, and a per-call view of the
controller as ``retry_object`` (tenacity's copy per call, made without rebuilding it); what
goes is the per-attempt list of action closures.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Generator
from typing import Any, NoReturn, TypeVar

import tenacity
from tenacity import (
    DoSleep,
    RetryAction,
    RetryCallState,
    TryAgain,
    after_nothing,
    before_nothing,
)
from tenacity._utils import is_coroutine_callable

from .exhaustion import RECORD_ATTR

__all__: list[str] = []  # internal: BudgetedRetry's controllers

C = TypeVar("C", bound="_PerCall")


def _hook(hook: Callable[[RetryCallState], Any] | None) -> Callable[[RetryCallState], Any] | None:
    """``hook``, or ``None`` where calling it would do nothing (tenacity's own no-ops)."""
    return None if hook is None or hook is before_nothing or hook is after_nothing else hook


class _PerCall:
    """What both loops share: a view of the controller per call, and its statistics.

    A run's ``retry_state.retry_object`` is the view: a hook that reads its ``statistics``
    finds the run's own, and one that changes it (``rs.retry_object.stop = ...``) changes
    that run only, as under tenacity's copy of the controller per call.
    """

    _run_statistics: dict[str, Any] | None = None

    @property
    def statistics(self) -> dict[str, Any]:
        """The statistics of this view's run (tenacity's per-thread ones on the controller)."""
        stats = self._run_statistics
        if stats is not None:
            return stats
        shared: dict[str, Any] = super().statistics  # type: ignore[misc]
        return shared

    def _view(self: C, stats: dict[str, Any]) -> C:
        """This controller for one run: the same attributes, the run's statistics."""
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view._run_statistics = stats
        return view


def _start(
    view: tenacity.BaseRetrying,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    stats: dict[str, Any],
    record: object,
) -> RetryCallState:
    """tenacity's ``begin()`` on the call's own statistics, and the run's ``RetryCallState``
    (the run's record set on it before the first attempt)."""
    stats.clear()
    stats["start_time"] = time.monotonic()
    stats["attempt_number"] = 1
    stats["idle_for"] = 0
    stats["delay_since_first_attempt"] = 0
    retry_state = RetryCallState(view, fn, args, kwargs)
    if record is not None:
        setattr(retry_state, RECORD_ATTR, record)
    return retry_state


def _raised(retry_state: RetryCallState) -> bool:
    """Record the exception being handled as the attempt's outcome; whether it is an
    explicit ``TryAgain`` (retried without asking the retry predicate)."""
    exc_info = sys.exc_info()
    retry_state.set_exception(exc_info)  # type: ignore[arg-type]
    return isinstance(exc_info[1], TryAgain)


def _allowed(retry_state: RetryCallState, stats: dict[str, Any]) -> DoSleep:
    """tenacity's bookkeeping of a retry the stop allowed; the sleep to take."""
    delay = retry_state.upcoming_sleep
    retry_state.next_action = RetryAction(delay)
    retry_state.idle_for += delay
    stats["idle_for"] += delay
    stats["attempt_number"] += 1
    return DoSleep(delay)


def _error(view: tenacity.BaseRetrying, retry_state: RetryCallState) -> NoReturn:
    """tenacity's end of a run its stop ended without a ``retry_error_callback``."""
    outcome = retry_state.outcome
    assert outcome is not None
    error = view.retry_error_cls(outcome)
    if view.reraise:
        error.reraise()
    raise error from outcome.exception()


class Loop(_PerCall, tenacity.Retrying):
    """``tenacity.Retrying`` with the attempt loop written straight (same semantics)."""

    def __call__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.run(fn, args, kwargs, self.statistics)

    def run(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        stats: dict[str, Any],
        record: object = None,
    ) -> Any:
        """Run ``fn`` to its end, keeping tenacity's statistics in ``stats``.

        One controller serves concurrent calls: every fact of the run lives in the call's
        ``RetryCallState``, its view of this controller, ``stats`` and ``record`` (the run's
        record, set on the ``RetryCallState`` before the first attempt).
        """
        if not self.enabled:
            return fn(*args, **kwargs)
        view = self._view(stats)
        retry_state = _start(view, fn, args, kwargs, stats, record)
        while True:  # every hook read at its turn, as tenacity reads them
            before = _hook(view.before)
            if before is not None:
                before(retry_state)
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                explicit = _raised(retry_state)
            else:
                retry_state.set_result(result)
                explicit = False
            if not explicit and not view.retry(retry_state):  # asked outside the except
                return retry_state.outcome.result()  # type: ignore[union-attr]  # or raises
            if view._stops(retry_state, stats):
                if view.retry_error_callback:
                    return view.retry_error_callback(retry_state)
                _error(view, retry_state)
            view.sleep(view._sleep(retry_state, stats))

    def _stops(self, retry_state: RetryCallState, stats: dict[str, Any]) -> bool:
        """A failed attempt to retry: ``after``, the wait, then the stop's decision."""
        after = _hook(self.after)
        if after is not None:
            after(retry_state)
        retry_state.upcoming_sleep = self.wait(retry_state)
        stats["delay_since_first_attempt"] = retry_state.seconds_since_start
        return bool(self.stop(retry_state))

    def _sleep(self, retry_state: RetryCallState, stats: dict[str, Any]) -> DoSleep:
        """The retry the stop allowed: its bookkeeping and ``before_sleep``; the sleep."""
        delay = _allowed(retry_state, stats)
        if self.before_sleep is not None:
            self.before_sleep(retry_state)
        retry_state.prepare_for_next_attempt()
        return delay


async def _once(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], is_async: bool
) -> Any:
    """One call of ``fn``, awaited if it is a coroutine function (a disabled controller)."""
    return await fn(*args, **kwargs) if is_async else fn(*args, **kwargs)


class _Ready:
    """An awaitable of a value already there: ``await`` gives it back, with no coroutine."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, Any]:
        return self.value
        yield  # a generator: returns at once


class AsyncLoop(_PerCall, tenacity.AsyncRetrying):
    """``tenacity.AsyncRetrying`` with the attempt loop written straight (same semantics):
    a hook or strategy that is a coroutine callable is awaited, as tenacity does."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Whether a hook is a coroutine callable, by id (the hook kept with its answer, so
        # no other object can take its id over); shared with every view of this controller.
        self._coroutines: dict[int, tuple[object, bool]] = {}

    async def __call__(  # type: ignore[override]
        self, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        return await self.run(fn, args, kwargs, self.statistics)

    async def run(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        stats: dict[str, Any],
        record: object = None,
    ) -> Any:
        """:meth:`Loop.run`, awaited (``fn`` may be a coroutine function or not)."""
        is_async = is_coroutine_callable(fn)
        if not self.enabled:
            return await _once(fn, args, kwargs, is_async)
        view = self._view(stats)
        retry_state = _start(view, fn, args, kwargs, stats, record)
        while True:  # every hook read at its turn, as tenacity reads them
            before = _hook(view.before)
            if before is not None:
                await view._ask(before, retry_state)
            try:
                result = await fn(*args, **kwargs) if is_async else fn(*args, **kwargs)
            except BaseException:
                explicit = _raised(retry_state)
            else:
                retry_state.set_result(result)
                explicit = False
            if not explicit and not await view._ask(view.retry, retry_state):
                return retry_state.outcome.result()  # type: ignore[union-attr]  # or raises
            if await view._stops(retry_state, stats):
                return await view._give_up(retry_state)
            await view.sleep(await view._sleep(retry_state, stats))  # type: ignore[misc]

    def _ask(self, hook: Callable[[RetryCallState], Any], retry_state: RetryCallState) -> Any:
        """``hook(retry_state)``, as an awaitable: awaited where tenacity awaits it (a
        coroutine callable), else its value wrapped without a coroutine of its own."""
        entry = self._coroutines.get(id(hook))
        if entry is None or entry[0] is not hook:
            entry = self._coroutines[id(hook)] = (hook, is_coroutine_callable(hook))
        value = hook(retry_state)
        return value if entry[1] else _Ready(value)

    async def _stops(self, retry_state: RetryCallState, stats: dict[str, Any]) -> bool:
        """:meth:`Loop._stops`, each of ``after``, the wait and the stop awaited if need be."""
        after = _hook(self.after)
        if after is not None:
            await self._ask(after, retry_state)
        retry_state.upcoming_sleep = await self._ask(self.wait, retry_state)
        stats["delay_since_first_attempt"] = retry_state.seconds_since_start
        return bool(await self._ask(self.stop, retry_state))

    async def _sleep(self, retry_state: RetryCallState, stats: dict[str, Any]) -> DoSleep:
        """:meth:`Loop._sleep`, ``before_sleep`` awaited if need be."""
        delay = _allowed(retry_state, stats)
        if self.before_sleep is not None:
            await self._ask(self.before_sleep, retry_state)
        retry_state.prepare_for_next_attempt()
        return delay

    async def _give_up(self, retry_state: RetryCallState) -> Any:
        """The end of a run its stop ended: the callback (awaited if need be), else
        ``retry_error_cls``."""
        callback = self.retry_error_callback
        if not callback:
            _error(self, retry_state)
        return await self._ask(callback, retry_state)
