"""A retry budget shared by a whole fleet, on Redis (extra ``tenacity-budget[redis]``).

:class:`RedisRetryBudget` (a ``redis.Redis`` client) and :class:`AsyncRedisRetryBudget` (a
``redis.asyncio`` one, decisions awaited) are sibling classes over one shared state: the
rule and window of :class:`~tenacity_budget.RetryBudget`, kept in Redis by one atomic Lua
script (``script.lua``) on Redis ``TIME``, with deposits batched in memory (``_pending``),
sync calls on a helper thread with a timeout (``_worker``), and a ``fallback=`` budget that
decides while Redis is unreachable or slow; :class:`RedisAdaptiveThrottle` shares an adaptive
throttle's counts the same way (``_throttle``). The set-up, the failure modes and the keys
are in docs/retry-budgets.md and docs/overload.md. Importing this package needs redis-py.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import os
import threading
import warnings
import weakref
from collections.abc import Iterable
from typing import Any, ClassVar, TypeAlias

try:
    import redis
    import redis.asyncio
except ImportError as exc:
    raise ImportError(
        "tenacity_budget.redis needs redis: pip install 'tenacity-budget[redis]'"
    ) from exc

from tenacity import RetryCallState

from ..retry_budget import (
    Budget,
    BudgetHooks,
    BudgetObserver,
    BudgetParameters,
    Number,
    async_stop_retry_budget,
)
from ._state import CLOCK_SUFFIX as CLOCK_SUFFIX
from ._state import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from ._state import LOGGER_NAME as LOGGER_NAME
from ._state import SCRIPT as SCRIPT
from ._state import OnError as OnError
from ._state import _micros, _State
from ._throttle import RedisAdaptiveThrottle
from ._worker import NotRun, Worker

# Importable, documented, but not the package's public face: see the module docstring.
__all__ = ["AsyncRedisRetryBudget", "RedisAdaptiveThrottle", "RedisRetryBudget"]

_EXIT_WAIT = 1.0  # seconds the exit flush may wait for Redis, at least

_SyncClient: TypeAlias = "redis.Redis | redis.RedisCluster"
_AsyncClient: TypeAlias = "redis.asyncio.Redis | redis.asyncio.RedisCluster"


def _is_async_client(client: object) -> bool:
    return isinstance(client, redis.asyncio.Redis | redis.asyncio.RedisCluster)


# Budgets to flush at exit (sync ones) and to reset in a forked child (all).
_SYNC_BUDGETS: weakref.WeakSet[RedisRetryBudget] = weakref.WeakSet()
_ALL_BUDGETS: weakref.WeakSet[_Shared] = weakref.WeakSet()


def _flush_at_exit() -> None:
    for budget in list(_SYNC_BUDGETS):
        with contextlib.suppress(Exception):  # it never raises; at exit, be sure of it
            budget._flush_at_exit()


def _after_fork() -> None:
    for budget in list(_ALL_BUDGETS):
        budget._after_fork()


atexit.register(_flush_at_exit)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class _Shared(BudgetParameters):
    """The attributes both Redis budgets expose, read from their :class:`_State`.

    Not a budget: it decides nothing, and neither sibling substitutes for the other.
    """

    __slots__ = ("__weakref__", "_state", "_terms", "name")
    is_async: ClassVar[bool]
    _state: _State
    name: str
    """The budget's name: its window's key, and the label of its metrics."""

    def _setup(self, client: Any, name: str, kind: str, **options: Any) -> None:
        if _is_async_client(client) != self.is_async or not (
            _is_async_client(client) or isinstance(client, redis.Redis | redis.RedisCluster)
        ):
            raise TypeError(
                f"{type(self).__name__} needs a {kind} (or RedisCluster) client, "
                f"got {type(client).__name__}"
            )
        self._state = _State(client, name, **options)
        self.name = self._state.name
        self._terms = self._state.terms
        _ALL_BUDGETS.add(self)

    def _after_fork(self) -> None:
        # In a forked child: the helper thread (or the loop's timer) did not survive the fork.
        self._state.after_fork()

    def __repr__(self) -> str:
        t = self._terms
        return (
            f"{type(self).__name__}({self.name!r}, ratio={float(t.ratio)!r}, "
            f"min_per_second={float(t.min_per_second)!r}, ttl={float(t.ttl)!r}, "
            f"on_error={self.on_error!r})"
        )

    @property
    def client(self) -> Any:
        """The redis-py client the budget was built on."""
        return self._state.client

    @property
    def on_error(self) -> OnError:
        """The fallback's name: ``"allow"`` (:data:`ALWAYS`), ``"deny"`` (:data:`NEVER`), or
        ``"local"`` (an in-process budget)."""
        return self._state.on_error

    @property
    def fallback(self) -> Budget:
        """The budget deciding while Redis is unreachable or slow."""
        return self._state.fallback

    @property
    def local(self) -> Budget:
        """The fallback (for ``on_error="local"``, the in-process :class:`RetryBudget`)."""
        return self._state.fallback

    @property
    def observers(self) -> tuple[BudgetObserver, ...]:
        """Told of every decision and every fallback."""
        return self._state.observers

    @property
    def timeout(self) -> float | None:
        """The longest a decision waits for Redis, in seconds (``None``: no bound)."""
        return self._state.timeout

    @property
    def retry_interval(self) -> float:
        """Seconds Redis is left alone after a failure."""
        return self._state.retry_interval

    @property
    def key(self) -> str:
        """The hash holding the budget's window."""
        return self._state.key

    @property
    def clock_key(self) -> str:
        """The test hook's key (see ``advance_clock``)."""
        return self._state.keys[1]

    @property
    def degraded(self) -> bool:
        """Whether decisions are being made without Redis now (after a failure)."""
        return self._state.retry_at is not None

    @property
    def pending(self) -> int:
        """Deposits counted here and not yet sent to Redis."""
        return self._state.pending.count

    def deposit(self) -> None:
        """Record one call: counted in memory, sent to Redis with the next batch (no round trip)."""
        if self._state.deposit():
            self._arm_flush()

    def before(self, retry_state: RetryCallState) -> None:
        """A tenacity ``before=`` hook: :meth:`deposit` at the run's first attempt."""
        if retry_state.attempt_number == 1:
            self.deposit()

    def _arm_flush(self) -> None:
        raise NotImplementedError


class RedisRetryBudget(_Shared, BudgetHooks):
    """A retry budget whose window is shared through Redis, on a sync client.

    Args:
        client: a ``redis.Redis`` or ``redis.RedisCluster``. (A ``redis.asyncio`` client
            still builds an :class:`AsyncRedisRetryBudget`, with a ``DeprecationWarning``:
            build that class instead.)
        name: the budget's name: every process using the same Redis and name shares one
            window. Also the label of its metrics.
        ratio, min_per_second, ttl: as in :class:`~tenacity_budget.RetryBudget`.
        on_error: how to decide while Redis is unreachable: ``"local"`` (an in-process
            budget with the same parameters, the default), ``"allow"`` (:data:`ALWAYS`) or
            ``"deny"`` (:data:`NEVER`).
        fallback: the budget deciding while Redis is unreachable, instead of ``on_error``:
            any sync :class:`~tenacity_budget.retry_budget.Budget` (``ALWAYS``, ``NEVER``,
            a ``RetryBudget``). It sees every deposit; a ``RetryBudget`` also counts every
            retry Redis granted.
        observers: a :class:`~tenacity_budget.retry_budget.BudgetObserver` or a sequence
            of them, told of every decision and every fallback.
        timeout: the longest a decision waits for Redis, in seconds (default 0.05); a
            decision never waits longer than the run's time left either. ``None`` (or
            ``math.inf``): bounded by the run's time left only.
        retry_interval: seconds Redis is left alone after a failure (default ``ttl / 10``;
            ``0``: every decision tries it).
        key_prefix: the prefix of the budget's keys.

    Raises:
        TypeError: for a client that is not a redis-py client, or a parameter of the wrong
            type.
        ValueError: for parameters :class:`~tenacity_budget.RetryBudget` refuses, a ``ttl``
            under 10 microseconds (a slice must be one microsecond at least), parameters
            whose exact arithmetic does not fit Lua's doubles, an unknown ``on_error``, or
            both ``on_error`` and ``fallback``.
    """

    is_async: ClassVar[bool] = False
    """Whether :meth:`try_withdraw`, :attr:`balance`, :meth:`flush` and :meth:`close` are
    awaited (``True`` for an :class:`AsyncRedisRetryBudget`)."""

    def __new__(cls, client: Any = None, *args: Any, **kwargs: Any) -> Any:
        # The one spelling kept from when a single class served both kinds of client.
        if cls is RedisRetryBudget and _is_async_client(client):
            warnings.warn(
                "RedisRetryBudget(<redis.asyncio client>, ...) is deprecated: build "
                "AsyncRedisRetryBudget(client, ...), whose decisions are awaited",
                DeprecationWarning,
                stacklevel=2,
            )
            return AsyncRedisRetryBudget(client, *args, **kwargs)
        return super().__new__(cls)

    def __init__(
        self,
        client: _SyncClient,
        name: str,
        ratio: Number = 0.2,
        min_per_second: Number = 10.0,
        ttl: Number = 10.0,
        *,
        on_error: OnError = "local",
        fallback: Budget | None = None,
        observers: BudgetObserver | Iterable[BudgetObserver] | None = (),
        timeout: float | None = DEFAULT_TIMEOUT,
        retry_interval: float | None = None,
        key_prefix: str = "tenacity_budget",
    ) -> None:
        self._setup(
            client,
            name,
            "redis.Redis",
            ratio=ratio,
            min_per_second=min_per_second,
            ttl=ttl,
            on_error=on_error,
            fallback=fallback,
            observers=observers,
            timeout=timeout,
            retry_interval=retry_interval,
            key_prefix=key_prefix,
        )
        self._worker: Worker | None = None
        _SYNC_BUDGETS.add(self)

    def _after_fork(self) -> None:
        super()._after_fork()
        self._worker = None

    # -- the helper thread -----------------------------------------------------------------

    def _has_pending(self) -> bool:
        """Whether deposits wait to be sent (the helper thread's flush timer)."""
        return bool(self._state.pending)

    def _flush_here(self) -> None:
        """Send the pending deposits from the calling thread (the helper's timer)."""
        state = self._state
        if not state.redis_due():
            return
        batches = state.take()
        if not batches:
            return
        try:
            state.send(batches, withdraw=False)
        except Exception as error:
            state.failed(error)
        else:
            state.succeeded()

    def _get_worker(self) -> Worker:
        worker = self._worker
        if worker is None or not worker.alive:
            with self._state.lock:
                worker = self._worker
                if worker is None or not worker.alive:
                    worker = self._worker = Worker(self, self.name, self._state.flush_interval)
        return worker

    def _arm_flush(self) -> None:
        self._get_worker().wake()

    def _run(self, withdraw: bool) -> Any:
        """One script call through the helper thread: its reply, or the error that kept it."""
        state = self._state
        wait, skip = state.preflight()
        if skip is not None:
            return skip
        batches = state.take()
        try:
            reply = self._get_worker().call(lambda: state.send(batches, withdraw), wait)
        except NotRun as error:  # an earlier call is still out: Redis is not answering
            state.pending.restore(batches)
            return state.failed(error)
        except TimeoutError as error:  # still running: it restores its deposits if it fails
            return state.cut(wait, error)
        except Exception as error:  # the call restored its deposits
            return state.failed(error)
        state.succeeded()
        return reply

    def _flush_at_exit(self) -> None:
        """The exit flush: through the helper thread, so that a stalled Redis cannot hold the
        interpreter's exit longer than ``max(timeout, 1 s)``."""
        worker, state = self._worker, self._state
        if worker is None or not worker.alive:
            self._flush_here()
            return
        batches = state.take() if state.redis_due() else []
        if not batches:
            return
        wait = None if state.timeout is None else max(state.timeout, _EXIT_WAIT)
        try:
            worker.call(lambda: state.send(batches, False), _bounded(wait))
        except NotRun as error:
            state.pending.restore(batches)
            state.failed(error)
        except Exception as error:
            state.failed(error)

    # -- the interface ---------------------------------------------------------------------

    def try_withdraw(self) -> bool:
        """Take one retry from the shared window if it affords it; never raises.

        Sends the pending deposits with the decision. While Redis is unreachable the
        fallback decides (see docs/retry-budgets.md).
        """
        return self._state.decided(self._run(withdraw=True))

    @property
    def balance(self) -> int:
        """Retries the shared window would grant now (sends the pending deposits too).

        While Redis is unreachable: the fallback's balance (the local budget's for
        ``"local"``, ``0`` for ``"deny"``, ``sys.maxsize`` for ``"allow"``).
        """
        return self._state.balance_of(self._run(withdraw=False))

    def flush(self) -> None:
        """Send the pending deposits to Redis now (kept for later if Redis is unreachable)."""
        if self._state.pending:
            self._run(withdraw=False)

    def close(self) -> None:
        """Flush the pending deposits and stop the budget's helper thread."""
        self.flush()
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()
        _SYNC_BUDGETS.discard(self)

    def advance_clock(self, seconds: float) -> None:
        """Test hook: move the script's clock ``seconds`` forward, for every process.

        Adds to the integer at :attr:`clock_key`, which the script adds (in microseconds)
        to Redis ``TIME``; nothing sets it in production. Lets a test expire a window
        without sleeping.
        """
        self._state.client.incrby(self.clock_key, _micros(seconds))


def _bounded(wait: float | None) -> float | None:
    return None if wait is None or wait >= threading.TIMEOUT_MAX else wait


class AsyncRedisRetryBudget(_Shared):
    """A retry budget whose window is shared through Redis, on a ``redis.asyncio`` client.

    The sibling of :class:`RedisRetryBudget`, with the same arguments but a
    ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster`` client. :meth:`try_withdraw`,
    :attr:`balance`, :meth:`flush`, :meth:`close` and :meth:`advance_clock` are awaited;
    :meth:`deposit` and :meth:`before` stay plain calls. Its :meth:`stop` is awaited by
    ``AsyncRetrying`` as the top-level ``stop=`` and cannot be composed with ``|``: use
    ``policy.retry(budget=...)``. Pending deposits are flushed by a timer on the running
    event loop.
    """

    is_async: ClassVar[bool] = True
    """Whether :meth:`try_withdraw` and the rest are awaited (always, for this budget)."""

    def __init__(
        self,
        client: _AsyncClient,
        name: str,
        ratio: Number = 0.2,
        min_per_second: Number = 10.0,
        ttl: Number = 10.0,
        *,
        on_error: OnError = "local",
        fallback: Budget | None = None,
        observers: BudgetObserver | Iterable[BudgetObserver] | None = (),
        timeout: float | None = DEFAULT_TIMEOUT,
        retry_interval: float | None = None,
        key_prefix: str = "tenacity_budget",
    ) -> None:
        self._setup(
            client,
            name,
            "redis.asyncio.Redis",
            ratio=ratio,
            min_per_second=min_per_second,
            ttl=ttl,
            on_error=on_error,
            fallback=fallback,
            observers=observers,
            timeout=timeout,
            retry_interval=retry_interval,
            key_prefix=key_prefix,
        )
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def _after_fork(self) -> None:
        super()._after_fork()
        self._timer = None
        self._tasks = set()

    def _arm_flush(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: the next decision sends them
            return
        if self._timer is None:
            # In a context of its own: not the one of the run that deposited first, whose
            # time left (remaining()) would bound the flush, and be none once it is over.
            self._timer = loop.call_later(
                self._state.flush_interval, self._spawn_flush, context=contextvars.Context()
            )

    def _spawn_flush(self) -> None:
        self._timer = None
        task = asyncio.ensure_future(self.flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, withdraw: bool) -> Any:
        """One script call, cut at the wait: its reply, or the error that kept it."""
        state = self._state
        wait, skip = state.preflight()
        if skip is not None:
            return skip
        batches = state.take()
        try:
            async with asyncio.timeout(wait):
                reply = await state.script(keys=state.keys, args=state.args(batches, withdraw))
        except TimeoutError:
            state.pending.restore(batches)
            return state.cut(wait, TimeoutError(f"Redis did not answer within {wait:.3g} s"))
        except Exception as error:
            state.pending.restore(batches)
            return state.failed(error)
        except BaseException:  # cancelled from outside: keep the deposits, let it through
            state.pending.restore(batches)
            raise
        state.succeeded()
        return reply

    async def try_withdraw(self) -> bool:
        """Take one retry from the shared window if it affords it (awaited; never raises)."""
        return self._state.decided(await self._run(withdraw=True))

    @property
    async def balance(self) -> int:
        """Retries the shared window would grant now (awaited: ``await budget.balance``)."""
        return self._state.balance_of(await self._run(withdraw=False))

    async def flush(self) -> None:
        """Send the pending deposits to Redis now (kept for later if Redis is unreachable)."""
        if self._state.pending:
            await self._run(withdraw=False)

    async def close(self) -> None:
        """Cancel the flush timer, let a flush under way finish, and flush what is left."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks)
        await self.flush()

    def stop(self) -> async_stop_retry_budget:
        """An async tenacity stop (``AsyncRetrying`` awaits it); not composable with ``|``."""
        return async_stop_retry_budget(self)

    async def advance_clock(self, seconds: float) -> None:
        """Test hook: move the script's clock forward (see ``RedisRetryBudget.advance_clock``)."""
        await self._state.client.incrby(self.clock_key, _micros(seconds))
