"""A retry budget shared by a whole fleet, on Redis (extra ``tenacity-budget[redis]``).

:class:`RedisRetryBudget` has the interface and the rule of
:class:`~tenacity_budget.RetryBudget`, but its window lives in Redis, so every process and
host using the same Redis and the same name shares it: fleet-wide, retries stay within
``ratio`` x the fleet's calls + ``min_per_second`` x ``ttl``::

    from redis import Redis
    from tenacity_budget.redis import RedisRetryBudget

    budget = RedisRetryBudget(Redis(host="redis"), "payments-api")

    @policy.retry(budget=budget)
    def charge(): ...

Give it ``redis.Redis`` (or ``redis.RedisCluster``) for sync code, ``redis.asyncio.Redis``
(or its ``RedisCluster``) for asyncio code; with an asyncio client :meth:`try_withdraw`,
:attr:`balance`, :meth:`flush` and :meth:`close` are awaited (:attr:`is_async` is
``True``), while :meth:`deposit` and :meth:`before` stay plain calls.

**In Redis.** Each decision is one Lua script (atomic): it reads the time with Redis
``TIME`` inside the script (never a client's clock, so hosts with skewed clocks still
share one window), adds this process's pending deposits, decides, and returns the
balance. The window is the one of :class:`~tenacity_budget.RetryBudget`, made of
:data:`~tenacity_budget.retry_budget.SLICES` slices of ``ttl / 10`` (in whole
microseconds), kept in one hash ``<key_prefix>:{<name>}`` of at most 31 fields: memory per
budget is constant however many calls there are, and the key expires on its own ``ttl`` +
1 s after the last write. All keys of a budget share the hash tag ``{<name>}``, so they
live in one slot of a Redis Cluster; a name holding ``{`` or ``}`` is percent-encoded in
the tag (``%7B``, ``%7D``, and ``%25`` for ``%``) and its key is ``<key_prefix>:%{<tag>}``,
while every other name is its own tag. The script is run with ``EVALSHA`` and reloaded on
``NOSCRIPT`` (redis-py's ``register_script``). The figures are integers in Lua's doubles,
exact while ``ratio`` x deposits per window stays below 2**53 units (a unit is
``1 / cost`` retry, see :class:`~tenacity_budget.retry_budget.BudgetTerms`); parameters
whose exact arithmetic would not fit are refused at construction.

**Batched deposits.** :meth:`deposit` only counts in memory: a call that succeeds at
its first attempt costs no round trip. Pending deposits go to Redis with the next decision
(or :attr:`balance` read), and at the latest ``ttl / 10`` seconds after the first of them
(a helper thread for a sync client, a timer on the running event loop for an asyncio one);
:meth:`close`, and for sync clients the interpreter's exit (waiting at most ``timeout`` or
1 s, whichever is longer), flush what is left. Each batch is sent with its age, and the
script counts it in the slice it was made in: a deposit sent late (Redis was down) counts
no longer than ``ttl`` after it was made, and one that waited longer than ``ttl`` is
dropped.

**When Redis is unreachable or slow**, no decision raises into the caller, and none waits
longer than ``timeout`` (:data:`DEFAULT_TIMEOUT`, 0.05 s, by default) nor longer than the
run's time left (:func:`~tenacity_budget.remaining`; with none left, it does not ask
Redis at all): a sync client's calls run on the budget's helper thread and the caller
stops waiting at the bound, an asyncio call is cancelled at it. The decision is then made
by ``on_error``:

* ``"local"`` (default): by an in-process :class:`~tenacity_budget.RetryBudget` with the same
  parameters, which sees every deposit and every retry Redis granted, so it starts from this
  process's own recent traffic. Each process then has its own floor (``min_per_second``),
  so a fleet of N processes may retry up to N floors' worth while Redis is away;
* ``"allow"``: every retry is granted (retries as if there were no budget);
* ``"deny"``: every retry is refused (no retries until Redis answers).

After a failure Redis is left alone for ``retry_interval`` seconds (default ``ttl / 10``,
monotonic clock), and the decisions in between go straight to the fallback; the first one
after it tries Redis again, and once Redis answers, decisions are back on the shared
window (deposits made meanwhile included). Every failure is logged at ``WARNING`` on the
``tenacity_budget.redis`` logger, every decision made on the fallback at ``DEBUG`` and
counted through :meth:`~tenacity_budget.retry_budget.BudgetObserver.on_budget_fallback`,
and the return to Redis at ``INFO``. :attr:`degraded` tells whether decisions are on the
fallback now.

**Testing: the script's clock.** The script adds the integer stored at
``<key_prefix>:{<name>}:clock`` (microseconds, absent in production) to Redis ``TIME``, so a
test moves the shared window forward with :meth:`advance_clock` instead of sleeping:
every process using the budget sees the move.

Importing this module needs redis-py; ``import tenacity_budget`` does not.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import logging
import math
import numbers
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeAlias, overload

try:
    import redis
    import redis.asyncio
except ImportError as exc:
    raise ImportError(
        "tenacity_budget.redis needs redis: pip install 'tenacity-budget[redis]'"
    ) from exc

from tenacity import RetryCallState

from .retry_budget import (
    SLICES,
    BudgetObserver,
    BudgetParameters,
    BudgetTerms,
    Number,
    RetryBudget,
    _check_name,
    async_stop_retry_budget,
    budget_terms,
    observers_of,
    stop_retry_budget,
)
from .runtime import remaining

__all__ = [
    "CLOCK_SUFFIX",
    "DEFAULT_TIMEOUT",
    "LOGGER_NAME",
    "SCRIPT",
    "AsyncRedisRetryBudget",
    "OnError",
    "RedisRetryBudget",
]

LOGGER_NAME = "tenacity_budget.redis"
"""The logger fallbacks are reported on."""

DEFAULT_TIMEOUT = 0.05
"""The longest a decision waits for Redis by default, in seconds (see ``timeout``)."""

CLOCK_SUFFIX = ":clock"
"""Suffix of the test-hook key whose integer (microseconds) the script adds to ``TIME``."""

OnError: TypeAlias = Literal["local", "allow", "deny"]
"""How a decision is made while Redis is unreachable (see the module)."""

_log = logging.getLogger(LOGGER_NAME)

# Lua numbers are doubles: every figure the script handles must stay an exact integer.
_LUA_EXACT = 2**53
_MAX_EXPIRE_MS = 2**46  # about 2,000 years: Redis refuses expiry times that overflow
_EXIT_WAIT = 1.0  # seconds the exit flush may wait for Redis, at least

SCRIPT = """
-- One decision of a tenacity-budget retry budget, atomic.
-- KEYS[1]: the budget's hash; KEYS[2]: test hook, microseconds added to the server's TIME.
-- ARGV: '1' to withdraw one retry, slice width (microseconds), units per deposit, units
-- per retry, floor (units), key lifetime (ms), then pairs of (age, deposits): deposits
-- made <age> microseconds before the script was sent, counted in the slice they were made
-- in (dropped if it has left the window). Returns {granted, balance}.
if redis.replicate_commands then redis.replicate_commands() end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local offset = redis.call('GET', KEYS[2])
if offset then now = now + tonumber(offset) end
local n = 10
local width = tonumber(ARGV[2])
local slice = math.floor(now / width)
local fields = {'last'}
for i = 0, n - 1 do
  fields[#fields + 1] = 's' .. i
  fields[#fields + 1] = 'd' .. i
  fields[#fields + 1] = 'w' .. i
end
local v = redis.call('HMGET', KEYS[1], unpack(fields))
local last = tonumber(v[1])
local shift = 0
if last and last > slice then
  shift = last - slice
  slice = last
end
local S, D, W, changed = {}, {}, {}, {}
for i = 0, n - 1 do
  S[i] = tonumber(v[2 + 3 * i])
  D[i] = tonumber(v[3 + 3 * i]) or 0
  W[i] = tonumber(v[4 + 3 * i]) or 0
end
local function slot(s)
  local p = s % n
  if not S[p] or S[p] < s then
    S[p], D[p], W[p] = s, 0, 0
  end
  if S[p] ~= s then return nil end
  changed[p] = true
  return p
end
for j = 7, #ARGV - 1, 2 do
  local s = math.floor((now - tonumber(ARGV[j])) / width) + shift
  if s > slice then s = slice end
  if s > slice - n then
    local p = slot(s)
    if p then D[p] = D[p] + tonumber(ARGV[j + 1]) end
  end
end
local deposits, withdrawals = 0, 0
for i = 0, n - 1 do
  if S[i] and S[i] > slice - n then
    deposits = deposits + D[i]
    withdrawals = withdrawals + W[i]
  end
end
local per_deposit, cost, reserve = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local granted = 0
if ARGV[1] == '1' and reserve + per_deposit * deposits >= cost * (withdrawals + 1) then
  granted = 1
  withdrawals = withdrawals + 1
  local p = slot(slice)
  W[p] = W[p] + 1
end
if next(changed) then
  local function int(x) return string.format('%.0f', x) end
  local args = {'last', int(slice)}
  for i = 0, n - 1 do
    if changed[i] then
      args[#args + 1] = 's' .. i
      args[#args + 1] = int(S[i])
      args[#args + 1] = 'd' .. i
      args[#args + 1] = int(D[i])
      args[#args + 1] = 'w' .. i
      args[#args + 1] = int(W[i])
    end
  end
  redis.call('HSET', KEYS[1], unpack(args))
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
end
local free = reserve + per_deposit * deposits - cost * withdrawals
local balance = 0
if free > 0 then balance = math.floor(free / cost) end
return {granted, balance}
"""
"""The decision script (one ``EVALSHA`` per decision, flush or balance read)."""

_SyncClient: TypeAlias = "redis.Redis | redis.RedisCluster"
_AsyncClient: TypeAlias = "redis.asyncio.Redis | redis.asyncio.RedisCluster"


def _is_async_client(client: object) -> bool:
    return isinstance(client, redis.asyncio.Redis | redis.asyncio.RedisCluster)


def _seconds(value: object, what: str, *, allow_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a number of seconds, got {type(value).__name__}")
    seconds = float(value)
    if math.isnan(seconds) or seconds < 0 or (seconds == math.inf and not allow_inf):
        raise ValueError(f"{what} must be a finite number of seconds >= 0, got {value!r}")
    return seconds


def _budget_key(key_prefix: str, name: str) -> str:
    """The key of budget ``name``'s hash, whose hash tag holds the name.

    Redis Cluster hashes the text between a key's first ``{`` and the first ``}`` after it
    (the whole key when that is empty), so a brace in the name would split the budget's
    keys over slots. A name with a brace is percent-encoded in the tag (``%`` ``{`` ``}`` as
    ``%25`` ``%7B`` ``%7D``) and its key marked with a ``%`` before the tag, so that it meets
    no other name's key (``"}"`` is ``prefix:%{%7D}``, ``"%7D"`` is ``prefix:{%7D}``); every
    other name keeps the key ``prefix:{name}``, where a running fleet has it.
    """
    if "{" not in name and "}" not in name:
        return f"{key_prefix}:{{{name}}}"
    tag = name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
    return f"{key_prefix}:%{{{tag}}}"


class _NotRun(Exception):
    """A call to Redis that was never made (its deposits are still to be sent)."""


class _Job:
    """One call handed to a :class:`_Worker`, and whether its caller stopped waiting."""

    __slots__ = ("abandoned", "finished", "fn", "future")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.abandoned = False  # the caller gave up on it while it ran
        self.finished = False  # it has returned (or raised) on the thread


class _Worker:
    """One daemon thread making a sync budget's Redis calls, so that a caller can stop waiting.

    A call the caller gave up on keeps running here; until it returns, later calls fail at
    once (:class:`_NotRun`) instead of queueing behind it. Whether such a call is out is
    decided under one lock by both sides (the caller giving up, the thread finishing), so
    a call that returns as its caller gives up never leaves the worker marked as stuck.
    While deposits are pending and nothing else happens, the thread flushes them every
    ``interval`` seconds (real time).
    """

    def __init__(self, budget: RedisRetryBudget, interval: float) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._abandoned = 0  # calls given up on by their caller and still running
        self._interval = interval
        ref = weakref.ref(budget)
        self._thread = threading.Thread(
            target=self._loop, args=(ref,), name=f"tenacity-budget-redis:{budget.name}", daemon=True
        )
        self._thread.start()
        # Stop the thread once the budget is gone (not at exit: the exit flush needs it).
        weakref.finalize(budget, self._jobs.put, None).atexit = False

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def stuck(self) -> bool:
        """Whether a call its caller gave up on is still running."""
        return self._abandoned > 0

    def _loop(self, ref: weakref.ref[RedisRetryBudget]) -> None:
        while True:
            budget = ref()
            pending = budget is not None and budget._has_pending()
            del budget
            try:
                job = self._jobs.get(timeout=self._interval if pending else None)
            except queue.Empty:
                budget = ref()
                if budget is not None:
                    budget._flush_here()
                del budget
                continue
            if job is None:
                return
            if job == "wake":
                continue
            if job.future.set_running_or_notify_cancel():
                try:
                    job.future.set_result(job.fn())
                except BaseException as error:
                    job.future.set_exception(error)
                finally:
                    with self._lock:
                        job.finished = True
                        if job.abandoned:
                            self._abandoned -= 1
            del job  # hold nothing of the budget's while waiting for the next job

    def wake(self) -> None:
        """Have the thread notice new pending deposits (and start their flush timer)."""
        self._jobs.put("wake")

    def call(self, fn: Callable[[], Any], timeout: float | None) -> Any:
        """``fn()`` on the thread; raise ``TimeoutError`` if it takes more than ``timeout``.

        Raises :class:`_NotRun` when ``fn`` was never run: an earlier call given up on is
        still out, or ``fn`` was still queued at the timeout.
        """
        if self._abandoned:
            raise _NotRun("an earlier call to Redis has not returned yet")
        job = _Job(fn)
        self._jobs.put(job)
        try:
            return job.future.result(timeout)
        except TimeoutError:
            pass
        if job.future.cancel():
            raise _NotRun(f"Redis did not answer within {timeout:.3g} s")
        with self._lock:
            finished = job.finished
            if not finished:
                job.abandoned = True
                self._abandoned += 1
        if finished:  # it returned as the wait ended: its outcome stands
            return job.future.result()
        raise TimeoutError(f"Redis did not answer within {timeout:.3g} s")

    def stop(self) -> None:
        self._jobs.put(None)


# Budgets to flush at exit (sync ones) and to reset in a forked child (all).
_SYNC_BUDGETS: weakref.WeakSet[Any] = weakref.WeakSet()
_ALL_BUDGETS: weakref.WeakSet[Any] = weakref.WeakSet()


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


class _RedisBudgetCore(BudgetParameters):
    """The construction of a :class:`RedisRetryBudget` (a base of its own, so that type
    checkers read the constructor's result from ``RedisRetryBudget.__new__``)."""

    is_async: bool = False

    def __init__(
        self,
        client: _SyncClient | _AsyncClient,
        name: str,
        ratio: Number = 0.2,
        min_per_second: Number = 10.0,
        ttl: Number = 10.0,
        *,
        on_error: OnError = "local",
        observers: BudgetObserver | Iterable[BudgetObserver] | None = (),
        timeout: float | None = DEFAULT_TIMEOUT,
        retry_interval: float | None = None,
        key_prefix: str = "tenacity_budget",
    ) -> None:
        if _is_async_client(client) != self.is_async or not (
            _is_async_client(client) or isinstance(client, redis.Redis | redis.RedisCluster)
        ):
            kind = "redis.asyncio.Redis" if self.is_async else "redis.Redis"
            raise TypeError(
                f"{type(self).__name__} needs a {kind} (or RedisCluster) client, "
                f"got {type(client).__name__}"
            )
        self.name = _check_name(name)
        terms = budget_terms(ratio, min_per_second, ttl)
        self._width_us = int(terms.ttl * 1_000_000 / SLICES)
        if self._width_us < 1:
            raise ValueError(
                f"ttl must be at least 10 microseconds for a Redis budget (a slice is ttl / 10 "
                f"in whole microseconds of Redis TIME), got {ttl!r}"
            )
        _check_exact(terms)
        if on_error not in ("local", "allow", "deny"):
            raise ValueError(f"on_error must be 'local', 'allow' or 'deny', got {on_error!r}")
        if not isinstance(key_prefix, str):
            raise TypeError(f"key_prefix must be a str, got {type(key_prefix).__name__}")
        self.client = client
        self.on_error: OnError = on_error
        self.observers = observers_of(observers)
        self._terms = terms
        self._local = RetryBudget(ratio, min_per_second, ttl, name=name)
        if timeout is None:
            self.timeout: float | None = None
        else:
            bound = _seconds(timeout, "timeout", allow_inf=True)
            self.timeout = None if bound == math.inf else bound
        self.retry_interval = (
            float(terms.ttl) / SLICES
            if retry_interval is None
            else _seconds(retry_interval, "retry_interval")
        )
        self._flush_interval = max(float(terms.ttl) / SLICES, 0.001)
        self.key = _budget_key(key_prefix, name)
        """The hash holding the budget's window."""
        self.clock_key = self.key + CLOCK_SUFFIX
        """The test hook's key (see :meth:`advance_clock`)."""
        self._keys = [self.key, self.clock_key]
        self._static_args: list[int] = [
            self._width_us,
            terms.deposit_units,
            terms.cost,
            terms.reserve_units,
            min(math.ceil(terms.ttl * 1000) + 1000, _MAX_EXPIRE_MS),
        ]
        self._script: Any = client.register_script(SCRIPT)
        self._setup_state()
        _ALL_BUDGETS.add(self)
        if not self.is_async:
            _SYNC_BUDGETS.add(self)

    def _setup_state(self) -> None:
        self._lock = threading.Lock()
        # [local slice, deposits, monotonic time of the first of them], oldest first.
        self._pending: list[list[Any]] = []
        self._retry_at: float | None = None  # monotonic: Redis is not tried before it
        self._error: BaseException | None = None
        self._worker: _Worker | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()


class RedisRetryBudget(_RedisBudgetCore):
    """A retry budget whose window is shared through Redis (see the module).

    Args:
        client: a ``redis.Redis`` or ``redis.RedisCluster`` (sync), or a
            ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster`` (the budget is then an
            :class:`AsyncRedisRetryBudget`, whose decisions are awaited).
        name: the budget's name: every process using the same Redis and name shares one
            window. Also the label of its metrics.
        ratio, min_per_second, ttl: as in :class:`~tenacity_budget.RetryBudget`.
        on_error: how to decide while Redis is unreachable: ``"local"`` (an in-process
            budget, the default), ``"allow"`` or ``"deny"``.
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
            whose exact arithmetic does not fit Lua's doubles, or an unknown ``on_error``.
    """

    is_async: bool = False
    """Whether :meth:`try_withdraw`, :attr:`balance`, :meth:`flush` and :meth:`close` are
    awaited (``True`` for an :class:`AsyncRedisRetryBudget`)."""

    @overload
    def __new__(
        cls,
        client: _AsyncClient,
        name: str,
        ratio: Number = 0.2,
        min_per_second: Number = 10.0,
        ttl: Number = 10.0,
        *,
        on_error: OnError = "local",
        observers: BudgetObserver | Iterable[BudgetObserver] | None = (),
        timeout: float | None = DEFAULT_TIMEOUT,
        retry_interval: float | None = None,
        key_prefix: str = "tenacity_budget",
    ) -> AsyncRedisRetryBudget: ...

    @overload
    def __new__(
        cls,
        client: _SyncClient,
        name: str,
        ratio: Number = 0.2,
        min_per_second: Number = 10.0,
        ttl: Number = 10.0,
        *,
        on_error: OnError = "local",
        observers: BudgetObserver | Iterable[BudgetObserver] | None = (),
        timeout: float | None = DEFAULT_TIMEOUT,
        retry_interval: float | None = None,
        key_prefix: str = "tenacity_budget",
    ) -> RedisRetryBudget: ...

    def __new__(cls, client: Any, *args: Any, **kwargs: Any) -> Any:
        if cls is RedisRetryBudget and _is_async_client(client):
            cls = AsyncRedisRetryBudget
        return super().__new__(cls)

    def _after_fork(self) -> None:
        # In a forked child: the parent sends its own pending deposits, and the helper
        # thread did not survive the fork.
        self._setup_state()
        self._local._reset_lock()

    def __repr__(self) -> str:
        t = self._terms
        return (
            f"{type(self).__name__}({self.name!r}, ratio={float(t.ratio)!r}, "
            f"min_per_second={float(t.min_per_second)!r}, ttl={float(t.ttl)!r}, "
            f"on_error={self.on_error!r})"
        )

    # -- parameters and state ---------------------------------------------------------------

    @property
    def local(self) -> RetryBudget:
        """The in-process budget decisions fall back on (``on_error="local"``)."""
        return self._local

    @property
    def degraded(self) -> bool:
        """Whether decisions are being made without Redis now (after a failure)."""
        return self._retry_at is not None

    @property
    def pending(self) -> int:
        """Deposits counted here and not yet sent to Redis."""
        with self._lock:
            return sum(item[1] for item in self._pending)

    # -- deposits -------------------------------------------------------------------------

    def deposit(self) -> None:
        """Record one call: counted in memory, sent to Redis with the next batch (no round trip)."""
        self._local.deposit()
        now = time.monotonic()
        index = self._terms.slice_of(now)
        with self._lock:
            pending = self._pending
            if pending and pending[-1][0] == index:
                pending[-1][1] += 1
                return
            while pending and pending[0][0] <= index - SLICES:  # too old to count: dropped
                del pending[0]
            pending.append([index, 1, now])
            first = len(pending) == 1
        if first:
            self._arm_flush()

    def before(self, retry_state: RetryCallState) -> None:
        """A tenacity ``before=`` hook: :meth:`deposit` at the run's first attempt."""
        if retry_state.attempt_number == 1:
            self.deposit()

    def _has_pending(self) -> bool:
        return bool(self._pending)

    def _take_pending(self) -> list[list[Any]]:
        """Remove the pending deposits that still count (younger than ``ttl``)."""
        oldest = self._terms.slice_of(time.monotonic()) - SLICES
        with self._lock:
            taken, self._pending = self._pending, []
        return [item for item in taken if item[0] > oldest]

    def _restore(self, items: list[list[Any]]) -> None:
        if items:
            with self._lock:
                self._pending[:0] = items

    def _args(self, items: list[list[Any]], withdraw: bool) -> list[int]:
        """The script's arguments, the deposits stamped with their age as they are sent.

        Each batch of deposits goes with the age of its first one, so that Redis counts it
        in the slice it was made in: a deposit flushed late (Redis was down) never counts
        longer than ``ttl`` after it was made. Older batches were dropped already.
        """
        now = time.monotonic()
        args = [1 if withdraw else 0, *self._static_args]
        for _, count, made in items:
            args += (max(0, round((now - made) * 1_000_000)), count)
        return args

    def _wait(self) -> float | None:
        """How long this decision may wait for Redis: ``timeout``, within the run's time left.

        ``None``: no bound (a bound past what a thread can wait for is none either).
        """
        left = remaining()
        wait = (
            self.timeout
            if left is None or (self.timeout is not None and self.timeout <= left)
            else left
        )
        return None if wait is None or wait >= threading.TIMEOUT_MAX else wait

    def _preflight(self) -> tuple[float | None, BaseException | None]:
        """The wait this decision may spend on Redis, and why it skips Redis (``None``: it asks)."""
        wait = self._wait()
        if wait is not None and wait <= 0:
            return wait, self._no_wait()
        return wait, self._unused()

    def _no_wait(self) -> TimeoutError:
        """Why a decision with nothing to wait (``timeout`` 0, or no time left) skips Redis."""
        if self.timeout == 0:
            return TimeoutError("timeout is 0: Redis is never waited for")
        error = TimeoutError("no time left in the run to wait for Redis")
        _log.warning(
            "retry budget %r: %s; deciding on the %r fallback", self.name, error, self.on_error
        )
        return error

    # -- Redis health ---------------------------------------------------------------------

    def _redis_due(self) -> bool:
        retry_at = self._retry_at
        return retry_at is None or time.monotonic() >= retry_at

    def _failed(self, error: BaseException) -> None:
        with self._lock:
            self._retry_at = time.monotonic() + self.retry_interval
            self._error = error
        _log.warning(
            "retry budget %r: Redis did not answer (%r); deciding on the %r fallback, "
            "trying Redis again in %.3g s",
            self.name,
            error,
            self.on_error,
            self.retry_interval,
        )

    def _succeeded(self) -> None:
        if self._retry_at is not None:
            with self._lock:
                self._retry_at = None
                self._error = None
            _log.info("retry budget %r: Redis answers again; back on the shared window", self.name)

    def _decided(self, reply: Any) -> bool:
        """Record and report a decision Redis made (``reply``), or else the fallback's.

        ``reply`` is the script's reply, or the error that kept Redis from deciding.
        """
        balance: int | None
        if isinstance(reply, BaseException):
            error = reply
            if self.on_error == "local":
                granted = self._local.try_withdraw()
                balance = self._local.balance
            else:
                granted = self.on_error == "allow"
                balance = None
            _log.debug(
                "retry budget %r: %s on the %r fallback (%r)",
                self.name,
                "granted" if granted else "refused",
                self.on_error,
                error,
            )
            for observer in self.observers:
                observer.on_budget_fallback(self.name, error)
        else:
            granted = bool(int(reply[0]))
            balance = int(reply[1])
            if granted:
                self._local._record_withdrawal()
        for observer in self.observers:
            observer.on_budget_decision(self.name, granted, balance)
        return granted

    def _fallback_balance(self) -> int:
        if self.on_error == "local":
            return self._local.balance
        return sys.maxsize if self.on_error == "allow" else 0

    # -- Redis calls (sync) ---------------------------------------------------------------

    def _get_worker(self) -> _Worker:
        worker = self._worker
        if worker is None or not worker.alive:
            with self._lock:
                worker = self._worker
                if worker is None or not worker.alive:
                    worker = self._worker = _Worker(self, self._flush_interval)
        return worker

    def _arm_flush(self) -> None:
        self._get_worker().wake()

    def _unused(self) -> BaseException | None:
        """Why this decision does not ask Redis (``None``: it does)."""
        if not self._redis_due():
            return self._error or ConnectionError("Redis is unreachable")
        return None

    def _cut(self, wait: float | None, error: BaseException) -> BaseException:
        """A wait for Redis ended unanswered: mark Redis failed, unless the run's time cut it.

        A wait shorter than ``timeout`` because the run had less time left says nothing
        about Redis: this decision falls back, the next ones still ask Redis.
        """
        if wait is not None and (self.timeout is None or wait < self.timeout):
            error = TimeoutError(f"the run's time left ({wait:.3g} s) ran out waiting for Redis")
            _log.warning(
                "retry budget %r: %s; deciding on the %r fallback", self.name, error, self.on_error
            )
            return error
        self._failed(error)
        return error

    def _run(self, withdraw: bool) -> Any:
        """One script call through the helper thread: its reply, or the error that kept it."""
        wait, skip = self._preflight()
        if skip is not None:
            return skip
        items = self._take_pending()

        def call() -> Any:
            try:
                return self._script(keys=self._keys, args=self._args(items, withdraw))
            except BaseException:
                self._restore(items)
                raise

        try:
            reply = self._get_worker().call(call, wait)
        except _NotRun as error:  # an earlier call is still out: Redis is not answering
            self._restore(items)
            self._failed(error)
            return error
        except TimeoutError as error:  # still running: it restores its deposits if it fails
            return self._cut(wait, error)
        except Exception as error:  # the call restored its deposits
            self._failed(error)
            return error
        self._succeeded()
        return reply

    def _flush_at_exit(self) -> None:
        """The exit flush: through the helper thread, so that a stalled Redis cannot hold the
        interpreter's exit longer than ``max(timeout, 1 s)``."""
        worker = self._worker
        if worker is None or not worker.alive:
            self._flush_here()
            return
        if not self._redis_due():
            return
        items = self._take_pending()
        if not items:
            return

        def call() -> None:
            try:
                self._script(keys=self._keys, args=self._args(items, False))
            except BaseException:
                self._restore(items)
                raise

        wait = None if self.timeout is None else max(self.timeout, _EXIT_WAIT)
        if wait is not None and wait >= threading.TIMEOUT_MAX:
            wait = None
        try:
            worker.call(call, wait)
        except _NotRun as error:
            self._restore(items)
            self._failed(error)
        except Exception as error:
            self._failed(error)

    def _flush_here(self) -> None:
        """Send the pending deposits from the calling thread (the helper's timer)."""
        if not self._redis_due():
            return
        items = self._take_pending()
        if not items:
            return
        try:
            self._script(keys=self._keys, args=self._args(items, False))
        except Exception as error:
            self._restore(items)
            self._failed(error)
        else:
            self._succeeded()

    # -- the interface (sync) ---------------------------------------------------------------

    def try_withdraw(self) -> bool:
        """Take one retry from the shared window if it affords it; never raises.

        Sends the pending deposits with the decision. While Redis is unreachable the
        ``on_error`` fallback decides (see the module).
        """
        return self._decided(self._run(withdraw=True))

    @property
    def balance(self) -> int:
        """Retries the shared window would grant now (sends the pending deposits too).

        While Redis is unreachable: the local fallback's balance (``"local"``), ``0``
        (``"deny"``) or ``sys.maxsize`` (``"allow"``).
        """
        reply = self._run(withdraw=False)
        return self._fallback_balance() if isinstance(reply, BaseException) else int(reply[1])

    def flush(self) -> None:
        """Send the pending deposits to Redis now (kept for later if Redis is unreachable)."""
        if self.pending:
            self._run(withdraw=False)

    def close(self) -> None:
        """Flush the pending deposits and stop the budget's helper thread."""
        self.flush()
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()
        _SYNC_BUDGETS.discard(self)

    def stop(self) -> stop_retry_budget:
        """A tenacity stop withdrawing one retry each time it is asked.

        See :class:`~tenacity_budget.retry_budget.stop_retry_budget`; compose it as
        ``policy.stop() | budget.stop()``.
        """
        return stop_retry_budget(self)

    def advance_clock(self, seconds: float) -> None:
        """Test hook: move the script's clock ``seconds`` forward, for every process.

        Adds to the integer at :attr:`clock_key`, which the script adds (in microseconds)
        to Redis ``TIME``; nothing sets it in production. Lets a test expire a window
        without sleeping.
        """
        self.client.incrby(self.clock_key, _micros(seconds))


class AsyncRedisRetryBudget(RedisRetryBudget):
    """A :class:`RedisRetryBudget` on a ``redis.asyncio`` client: decisions are awaited.

    ``RedisRetryBudget(redis.asyncio.Redis(...), name)`` builds one. :meth:`try_withdraw`,
    :attr:`balance`, :meth:`flush`, :meth:`close` and :meth:`advance_clock` return
    awaitables; :meth:`deposit` and :meth:`before` stay plain calls. Its :meth:`stop` is
    awaited by ``AsyncRetrying`` as the top-level ``stop=``, and cannot be composed with
    ``|`` (tenacity calls composed stops synchronously): use ``policy.retry(budget=...)``,
    which asks the policy's stop first and awaits this budget only if the policy allows
    the retry. Pending deposits are flushed by a timer on the running event loop.
    """

    is_async = True

    def _arm_flush(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: the next decision sends them
            return
        if self._timer is None:
            # In a context of its own: not the one of the run that deposited first, whose
            # time left (remaining()) would bound the flush, and be none once it is over.
            self._timer = loop.call_later(
                self._flush_interval, self._spawn_flush, context=contextvars.Context()
            )

    def _spawn_flush(self) -> None:
        self._timer = None
        task = asyncio.ensure_future(self.flush())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _arun(self, withdraw: bool) -> Any:
        wait, skip = self._preflight()
        if skip is not None:
            return skip
        items = self._take_pending()
        try:
            async with asyncio.timeout(wait):
                reply = await self._script(keys=self._keys, args=self._args(items, withdraw))
        except TimeoutError:
            self._restore(items)
            return self._cut(wait, TimeoutError(f"Redis did not answer within {wait:.3g} s"))
        except Exception as error:
            self._restore(items)
            self._failed(error)
            return error
        except BaseException:  # cancelled from outside: keep the deposits, let it through
            self._restore(items)
            raise
        self._succeeded()
        return reply

    async def try_withdraw(self) -> bool:  # type: ignore[override]  # the asyncio twin
        """Take one retry from the shared window if it affords it (awaited; never raises)."""
        return self._decided(await self._arun(withdraw=True))

    @property
    async def balance(self) -> int:  # type: ignore[override]
        """Retries the shared window would grant now (awaited: ``await budget.balance``)."""
        reply = await self._arun(withdraw=False)
        return self._fallback_balance() if isinstance(reply, BaseException) else int(reply[1])

    async def flush(self) -> None:  # type: ignore[override]
        """Send the pending deposits to Redis now (kept for later if Redis is unreachable)."""
        if self.pending:
            await self._arun(withdraw=False)

    async def close(self) -> None:  # type: ignore[override]
        """Cancel the flush timer, let a flush under way finish, and flush what is left."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks)
        await self.flush()

    def stop(self) -> async_stop_retry_budget:  # type: ignore[override]
        """An async tenacity stop (``AsyncRetrying`` awaits it); not composable with ``|``."""
        return async_stop_retry_budget(self)

    async def advance_clock(self, seconds: float) -> None:  # type: ignore[override]
        """Test hook: move the script's clock forward (see ``RedisRetryBudget.advance_clock``)."""
        client: Any = self.client
        await client.incrby(self.clock_key, _micros(seconds))


def _micros(seconds: object) -> int:
    return round(_seconds(seconds, "seconds") * 1_000_000)


def _check_exact(terms: BudgetTerms) -> None:
    """Refuse parameters whose integer arithmetic would not be exact in Lua's doubles."""
    if terms.cost > 2**30 or terms.deposit_units > 2**30 or terms.reserve_units >= _LUA_EXACT // 4:
        raise ValueError(
            "a Redis budget computes in Lua's doubles, exact up to 2**53: ratio "
            f"({terms.ratio}) and min_per_second * ttl ({terms.min_per_second * terms.ttl}) "
            "need fewer decimal digits (or a smaller floor) to stay exact"
        )
