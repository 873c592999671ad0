"""Retries behind a circuit breaker, with :mod:`pybreaker` (extra ``tenacity-budget[breaker]``).

The budget decides how long one call may keep trying, the breaker whether a dependency is
worth calling at all. :func:`guarded` makes every attempt a breaker call, and
:class:`stop_when_open` ends the run, before any sleep, once the breaker is open::

    @policy.retry(stop=stop_when_open(breaker))  # composed with the budget stop
    @guarded(breaker)  # every attempt is a breaker call
    def fetch(): ...

The run then gives up with ``StopReason.OTHER``; docs/observability.md, "Circuit breaker",
tells the whole story (what is raised, ``reraise=True``, the half-open trial).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast

from tenacity import RetryCallState
from tenacity.stop import stop_base

from .instrumentation._extras import missing

try:
    import pybreaker
except ImportError as exc:
    raise missing(__name__, "pybreaker", "breaker") from exc

__all__ = ["guarded", "stop_when_open"]

F = TypeVar("F", bound=Callable[..., Any])


class stop_when_open(stop_base):
    """A tenacity stop strategy: stop the run as soon as ``breaker`` is open.

    Asked before each sleep, it stops when the breaker's state is ``open`` or when the
    attempt just made failed with ``pybreaker.CircuitBreakerError`` (the breaker refused it
    or tripped on it), so no run sleeps towards an attempt the breaker would refuse, and a
    ``CircuitBreakerError`` is never retried. Compose it with the budget:
    ``policy.retry(stop=stop_when_open(breaker))`` or
    ``policy.stop() | stop_when_open(breaker)``; the run's report then says
    ``StopReason.OTHER``.

    The state is read from the breaker's storage each time, so a breaker shared through
    ``pybreaker.CircuitRedisStorage`` stops runs in every process. Stateless per run:
    one instance serves any number of concurrent runs.

    Args:
        breaker: the ``pybreaker.CircuitBreaker`` guarding the retried calls.
    """

    def __init__(self, breaker: pybreaker.CircuitBreaker) -> None:
        if not isinstance(breaker, pybreaker.CircuitBreaker):
            raise TypeError(
                f"stop_when_open needs a pybreaker.CircuitBreaker, got {type(breaker).__name__}"
            )
        self.breaker = breaker

    def __repr__(self) -> str:
        return f"<stop_when_open {self.breaker.name or self.breaker!r}>"

    def __call__(self, retry_state: RetryCallState) -> bool:
        outcome = retry_state.outcome
        refused = (
            outcome is not None
            and outcome.failed
            and isinstance(outcome.exception(), pybreaker.CircuitBreakerError)
        )
        if refused:
            return True
        return bool(self.breaker.current_state == pybreaker.STATE_OPEN)


def guarded(breaker: pybreaker.CircuitBreaker) -> Callable[[F], F]:
    """Decorate a sync or async function so that every call goes through ``breaker``.

    Apply it under ``policy.retry()`` so that each attempt, not the whole run, is a breaker
    call (see the module's recipe). A sync call is ``breaker.call(fn, ...)``; an async call
    awaits ``fn`` inside ``breaker.calling()`` (pybreaker's own ``call_async`` needs
    Tornado), with the same rules: refused with ``CircuitBreakerError`` while the breaker is
    open, counted as a failure or a success otherwise. As in pybreaker, any exception the
    breaker does not ``exclude`` counts as a failure, ``asyncio.CancelledError`` included.

    Args:
        breaker: the ``pybreaker.CircuitBreaker`` to call through.
    """
    if not isinstance(breaker, pybreaker.CircuitBreaker):
        raise TypeError(f"guarded needs a pybreaker.CircuitBreaker, got {type(breaker).__name__}")

    def decorate(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_guarded(*args: Any, **kwargs: Any) -> Any:
                with breaker.calling():
                    return await fn(*args, **kwargs)

            return cast(F, async_guarded)

        @functools.wraps(fn)
        def sync_guarded(*args: Any, **kwargs: Any) -> Any:
            return breaker.call(fn, *args, **kwargs)

        return cast(F, sync_guarded)

    return decorate
