"""Retries behind a circuit breaker, with :mod:`pybreaker` (extra ``tenacity-budget[breaker]``).

Retries and a breaker answer different questions: the budget decides how long one call may
keep trying, the breaker decides whether a dependency is worth calling at all. The recipe
pairs them so that each attempt goes through the breaker, and a breaker that opens ends the
run at once instead of sleeping towards an attempt the breaker would refuse::

    import pybreaker
    from tenacity_budget.breaker import guarded, stop_when_open

    breaker = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=60)

    @policy.retry(stop=stop_when_open(breaker))   # composed with the budget stop
    @guarded(breaker)                             # every attempt is a breaker call
    def fetch(): ...

(with plain tenacity: ``stop=policy.stop() | stop_when_open(breaker)``). What happens:

* each attempt is counted by the breaker (:func:`guarded`, sync or async);
* while the breaker is closed, failures are retried within the budget as usual;
* the attempt that trips the breaker raises ``pybreaker.CircuitBreakerError`` (or, with
  ``throw_new_error_on_trip=False``, its own exception), and an attempt made while the
  breaker is open fails with ``CircuitBreakerError`` without calling the function; either
  way :class:`stop_when_open` ends the run before any sleep: a ``CircuitBreakerError`` is
  never retried;
* the run then gives up like any budgeted run: ``policy.retry()`` raises
  :class:`~tenacity_budget.BudgetExhausted` whose ``report.reason`` is
  ``StopReason.OTHER`` (the budget was not the cause) and whose ``report.last_exception``
  (and ``__cause__``) is the ``CircuitBreakerError``; ``on_exhausted`` and the observers
  see it too. Pass ``reraise=True`` to get the ``CircuitBreakerError`` itself instead.

The half-open trial after ``reset_timeout`` is left to the next call: a run never sleeps
waiting for the breaker, so the first attempt of a later call is the trial.

Importing this module needs ``pybreaker``; ``import tenacity_budget`` does not.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar, cast

from tenacity import RetryCallState
from tenacity.stop import stop_base

try:
    import pybreaker
except ImportError as exc:
    raise ImportError(
        "tenacity_budget.breaker needs pybreaker: pip install 'tenacity-budget[breaker]'"
    ) from exc

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
