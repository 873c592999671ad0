"""The attempt loop of ``policy.retry()``: tenacity's controllers, each attempt asked once.

:class:`Loop` and :class:`AsyncLoop` are tenacity's ``Retrying`` and ``AsyncRetrying`` with
their loop written as one straight pass per attempt, as Polly's retry strategy is: the
attempt, then its outcome asked tenacity's questions in tenacity's order (``retry``,
``after``, ``wait``, ``stop``, ``before_sleep``), each once. Hooks and strategies see the
same ``RetryCallState`` and statistics as under tenacity; what goes is the per-attempt list
of action closures and, through :meth:`Loop.run`, the copy of the controller per call.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, NoReturn

import tenacity
from tenacity import RetryAction, RetryCallState, TryAgain, after_nothing, before_nothing
from tenacity._utils import is_coroutine_callable

from .exhaustion import RECORD_ATTR

__all__: list[str] = []  # internal: BudgetedRetry's controllers

_NOOPS = (before_nothing, after_nothing)


def _hook(hook: Callable[[RetryCallState], Any] | None) -> Callable[[RetryCallState], Any] | None:
    """``hook``, or ``None`` where calling it would do nothing (tenacity's own no-ops)."""
    return None if hook is None or hook in _NOOPS else hook


def _start(
    controller: tenacity.BaseRetrying,
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
    # What a hook reading ``retry_state.retry_object.statistics`` finds, as under tenacity's
    # per-call copy (here per thread: the latest run of this controller in the thread).
    controller._local.statistics = stats
    retry_state = RetryCallState(controller, fn, args, kwargs)
    if record is not None:
        setattr(retry_state, RECORD_ATTR, record)
    return retry_state


def _failed(retry_state: RetryCallState) -> bool:
    """Record the exception being handled as the attempt's outcome; whether the retry
    predicate is to be asked (not for an explicit ``TryAgain``)."""
    exc_info = sys.exc_info()
    retry_state.set_exception(exc_info)  # type: ignore[arg-type]
    return not isinstance(exc_info[1], TryAgain)


def _allowed(retry_state: RetryCallState, stats: dict[str, Any]) -> float:
    """tenacity's bookkeeping of a retry the stop allowed; the sleep to take."""
    delay = retry_state.upcoming_sleep
    retry_state.next_action = RetryAction(delay)
    retry_state.idle_for += delay
    stats["idle_for"] += delay
    stats["attempt_number"] += 1
    return delay


def _error(controller: tenacity.BaseRetrying, retry_state: RetryCallState) -> NoReturn:
    """tenacity's end of a run its stop ended without a ``retry_error_callback``."""
    outcome = retry_state.outcome
    assert outcome is not None
    error = controller.retry_error_cls(outcome)
    if controller.reraise:
        error.reraise()
    raise error from outcome.exception()


class Loop(tenacity.Retrying):
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
        ``RetryCallState`` (its ``retry_object`` is this controller), ``stats`` and
        ``record`` (the run's record, set on the ``RetryCallState`` before the first attempt).
        """
        if not self.enabled:
            return fn(*args, **kwargs)
        retry_state = _start(self, fn, args, kwargs, stats, record)
        before, retry = _hook(self.before), self.retry
        while True:
            if before is not None:
                before(retry_state)
            try:
                result = fn(*args, **kwargs)
            except BaseException:
                if _failed(retry_state) and not retry(retry_state):
                    return retry_state.outcome.result()  # type: ignore[union-attr]  # raises
            else:
                retry_state.set_result(result)
                if not retry(retry_state):
                    return result
            if self._stops(retry_state, stats):
                if self.retry_error_callback:
                    return self.retry_error_callback(retry_state)
                _error(self, retry_state)
            self.sleep(self._sleep(retry_state, stats))

    def _stops(self, retry_state: RetryCallState, stats: dict[str, Any]) -> bool:
        """A failed attempt to retry: ``after``, the wait, then the stop's decision."""
        after = _hook(self.after)
        if after is not None:
            after(retry_state)
        retry_state.upcoming_sleep = self.wait(retry_state)
        stats["delay_since_first_attempt"] = retry_state.seconds_since_start
        return bool(self.stop(retry_state))

    def _sleep(self, retry_state: RetryCallState, stats: dict[str, Any]) -> float:
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


class AsyncLoop(tenacity.AsyncRetrying):
    """``tenacity.AsyncRetrying`` with the attempt loop written straight (same semantics):
    a hook or strategy that is a coroutine callable is awaited, as tenacity does."""

    _awaits: tuple[object, tuple[bool, ...], object] | None = None

    async def __call__(  # type: ignore[override]
        self, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> Any:
        return await self.run(fn, args, kwargs, self.statistics)

    def _awaited(self) -> tuple[bool, ...]:
        """Which of before, after, before_sleep, retry, wait and stop are awaited (as
        tenacity decides it: a coroutine callable), worked out once per set of them."""
        hooks = (self.before, self.after, self.before_sleep, self.retry, self.wait, self.stop)
        key = tuple(map(id, hooks))
        cached = self._awaits
        if cached is None or cached[0] != key:
            awaited = tuple(h is not None and is_coroutine_callable(h) for h in hooks)
            # The hooks are kept with their ids, so no other object can take an id over.
            cached = self._awaits = (key, awaited, hooks)
        return cached[1]

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
        retry_state = _start(self, fn, args, kwargs, stats, record)
        awaited = self._awaited()
        before: Any = _hook(self.before)
        retry: Any = self.retry
        while True:
            if before is not None:
                done = before(retry_state)
                if awaited[0]:
                    await done
            try:
                result = await fn(*args, **kwargs) if is_async else fn(*args, **kwargs)
            except BaseException:
                asked = _failed(retry_state)
            else:
                retry_state.set_result(result)
                asked = True
            if asked:
                again = retry(retry_state)
                if not (await again if awaited[3] else again):
                    # The result, or the exception raised again (as tenacity does).
                    return retry_state.outcome.result()  # type: ignore[union-attr]
            if await self._stops(retry_state, stats, awaited):
                return await self._give_up(retry_state)
            await self.sleep(await self._sleep(retry_state, stats, awaited))  # type: ignore[misc]

    async def _stops(
        self, retry_state: RetryCallState, stats: dict[str, Any], awaited: tuple[bool, ...]
    ) -> bool:
        """:meth:`Loop._stops`, each of ``after``, the wait and the stop awaited if need be."""
        after: Any = _hook(self.after)
        if after is not None:
            done = after(retry_state)
            if awaited[1]:
                await done
        wait: Any = self.wait(retry_state)
        retry_state.upcoming_sleep = await wait if awaited[4] else wait
        stats["delay_since_first_attempt"] = retry_state.seconds_since_start
        stop: Any = self.stop(retry_state)
        return bool(await stop if awaited[5] else stop)

    async def _sleep(
        self, retry_state: RetryCallState, stats: dict[str, Any], awaited: tuple[bool, ...]
    ) -> float:
        """:meth:`Loop._sleep`, ``before_sleep`` awaited if need be."""
        delay = _allowed(retry_state, stats)
        before_sleep: Any = self.before_sleep
        if before_sleep is not None:
            done = before_sleep(retry_state)
            if awaited[2]:
                await done
        retry_state.prepare_for_next_attempt()
        return delay

    async def _give_up(self, retry_state: RetryCallState) -> Any:
        """The end of a run its stop ended: the callback (awaited if need be), else
        ``retry_error_cls``."""
        callback = self.retry_error_callback
        if not callback:
            _error(self, retry_state)
        value = callback(retry_state)
        return await value if is_coroutine_callable(callback) else value
