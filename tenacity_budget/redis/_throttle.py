"""The adaptive throttle shared by a fleet on Redis: :class:`RedisAdaptiveThrottle`.

The rule of :class:`~tenacity_budget.AdaptiveThrottle` over counts every process adds to
one hash (``throttle.lua``, on Redis ``TIME``). A call never waits for Redis: counts are
batched here and flushed by the helper thread at most once per slice, which reads the
fleet's counts back; while Redis is unreachable the local rule decides. See
docs/overload.md.
"""

from __future__ import annotations

import logging
import math
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from importlib.resources import files
from typing import Any

import redis
import redis.asyncio

from .. import _validate
from ..retry_budget import SLICES
from ..throttle import AdaptiveThrottle, _hooks, probability_of
from ._state import CLOCK_SUFFIX, DEFAULT_TIMEOUT, LOGGER_NAME, OnError, _budget_key, _timeout
from ._worker import Worker

SCRIPT = files(__package__ or "").joinpath("throttle.lua").read_text(encoding="utf-8")
"""The flush script: add this process's counts, read the fleet's."""

_log = logging.getLogger(LOGGER_NAME)
_MAX_EXPIRE_MS = 2**46

# A batch: [local slice index, requests, accepts, monotonic time of its first count].
_Batch = list[float]

_THROTTLES: weakref.WeakSet[RedisAdaptiveThrottle] = weakref.WeakSet()


def _after_fork() -> None:
    for throttle in list(_THROTTLES):
        throttle._reset()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def _client(client: object) -> Any:
    if isinstance(client, redis.asyncio.Redis | redis.asyncio.RedisCluster):
        raise TypeError(
            "RedisAdaptiveThrottle needs a sync redis.Redis (or RedisCluster) client: its "
            "flushes run on a helper thread and no call waits for Redis, so one sync "
            "client serves asyncio code too"
        )
    if not isinstance(client, redis.Redis | redis.RedisCluster):
        raise TypeError(
            f"RedisAdaptiveThrottle needs a redis.Redis (or RedisCluster) client, got "
            f"{type(client).__name__}"
        )
    return client


class RedisAdaptiveThrottle:
    """An :class:`~tenacity_budget.AdaptiveThrottle` whose counts a fleet shares on Redis.

    :meth:`admit` decides on the fleet's counts read at the last flush plus this process's
    counts not yet flushed; no call makes a Redis round trip of its own. Every process with
    the same Redis and ``name`` shares one window.

    Args:
        client: a sync ``redis.Redis`` or ``redis.RedisCluster`` (an asyncio client is
            refused: the throttle never awaits, so a sync client serves asyncio code).
        name: the throttle's name: its key, and the label of its metrics.
        k, window, rejected, observers, rng: as in :class:`~tenacity_budget.AdaptiveThrottle`.
        timeout: the longest a flush may stay unanswered before decisions fall back, in
            seconds (default 0.05; ``None``: no bound).
        on_error: how to decide while Redis is unreachable, slow, or not read yet:
            ``"local"`` (the local rule on this process's own counts, the default),
            ``"allow"`` (admit every attempt) or ``"deny"`` (reject every attempt).
        retry_interval: seconds Redis is left alone after a failure (default a slice).
        key_prefix: the prefix of its key (``<prefix>:{name}``).

    Raises:
        TypeError, ValueError: for the arguments :class:`~tenacity_budget.AdaptiveThrottle`
            refuses, a client that is not a sync redis-py client, an unknown ``on_error``,
            or a window under 10 microseconds.
    """

    __slots__ = (
        "__weakref__",
        "_batches",
        "_error",
        "_flushing",
        "_hooks",
        "_in_flight",
        "_interval",
        "_keys",
        "_lock",
        "_pending",
        "_retry_at",
        "_script",
        "_shared",
        "_shared_at",
        "_static",
        "_worker",
        "client",
        "key",
        "local",
        "name",
        "observers",
        "on_error",
        "retry_interval",
        "timeout",
    )

    def __init__(
        self,
        client: redis.Redis | redis.RedisCluster,
        name: str,
        *,
        k: float = 2.0,
        window: float = 120.0,
        rejected: Callable[[object], bool] | None = None,
        observers: Sequence[object] = (),
        rng: random.Random | None = None,
        timeout: float | None = DEFAULT_TIMEOUT,
        on_error: OnError = "local",
        retry_interval: float | None = None,
        key_prefix: str = "tenacity_budget:throttle",
    ) -> None:
        self.client = _client(client)
        self.local = AdaptiveThrottle(k, window, name=name, rejected=rejected, rng=rng)
        self.name = self.local.name
        self._hooks = _hooks(observers)
        self.observers = tuple(observers)
        if on_error not in ("local", "allow", "deny"):
            raise ValueError(f"on_error must be 'local', 'allow' or 'deny', got {on_error!r}")
        self.on_error: OnError = on_error
        self.timeout = _timeout(timeout)
        if not isinstance(key_prefix, str):
            raise TypeError(f"key_prefix must be a str, got {type(key_prefix).__name__}")
        slicing = self.local._slicing
        width = slicing.slice_den // slicing.slice_num  # whole microseconds per slice
        if width < 1:
            raise ValueError(
                f"window must be at least 10 microseconds for a Redis throttle, got {window!r}"
            )
        slice_seconds = self.local.window / SLICES
        self.retry_interval = (
            slice_seconds
            if retry_interval is None
            else _validate.seconds(retry_interval, "retry_interval")
        )
        self._interval = max(slice_seconds, 0.001)
        self.key = _budget_key(key_prefix, self.name)
        self._keys = [self.key, self.key + CLOCK_SUFFIX]
        self._static = [width, min(math.ceil(self.local.window * 1000) + 1000, _MAX_EXPIRE_MS)]
        self._script: Any = client.register_script(SCRIPT)
        self._worker: Worker | None = None
        self._reset()
        _THROTTLES.add(self)

    def _reset(self) -> None:
        """No pending counts and a healthy Redis (at start, and in a forked child)."""
        self._lock = threading.Lock()
        self.local._reset_lock()
        self._batches: list[_Batch] = []
        self._pending = [0, 0]  # requests, accepts in the batches
        self._in_flight = (0, 0)  # counts sent by the flush under way
        self._flushing: float | None = None  # monotonic start of the flush under way
        self._shared: tuple[int, int] | None = None  # the fleet's counts at the last flush
        self._shared_at = -math.inf
        self._retry_at: float | None = None
        self._error: BaseException | None = None
        self._worker = None

    def __repr__(self) -> str:
        return (
            f"RedisAdaptiveThrottle({self.name!r}, k={self.k!r}, window={self.window!r}, "
            f"on_error={self.on_error!r})"
        )

    @property
    def k(self) -> float:
        """How many times the accepts count against the requests."""
        return self.local.k

    @property
    def window(self) -> float:
        """Seconds of history counted."""
        return self.local.window

    @property
    def degraded(self) -> bool:
        """Whether decisions are being made without the fleet's counts now."""
        with self._lock:
            return self._fleet(time.monotonic()) is None

    # -- the decision ---------------------------------------------------------------------

    def _fleet(self, now: float) -> tuple[int, int] | None:
        """The fleet's counts plus this process's unflushed ones, if fresh (locked)."""
        shared = self._shared
        if shared is None or now - self._shared_at > self.local.window:
            return None  # never read, or older than the window
        if self._retry_at is not None and now < self._retry_at:
            return None
        flushing = self._flushing
        if flushing is not None and self.timeout is not None and now - flushing > self.timeout:
            return None
        requests, accepts = self._pending
        return (
            shared[0] + self._in_flight[0] + requests,
            shared[1] + self._in_flight[1] + accepts,
        )

    def _count(self, now: float, requests: int, accepts: int) -> bool:
        """Add counts to the pending batch; ``True`` when they start a wait (locked)."""
        index = self.local._slicing.slice_of(now)
        batches = self._batches
        self._pending[0] += requests
        self._pending[1] += accepts
        if batches and batches[-1][0] == index:
            batches[-1][1] += requests
            batches[-1][2] += accepts
            return False
        batches.append([index, requests, accepts, now])
        return len(batches) == 1

    @property
    def probability(self) -> float:
        """The probability the next attempt is rejected locally, in ``[0, 1)``."""
        with self._lock:
            fleet = self._fleet(time.monotonic())
        if fleet is None:
            return 0.0 if self.on_error == "allow" else self.local.probability
        return probability_of(fleet[0], fleet[1], self.local.k)

    def admit(self) -> bool:
        """Count one request and decide it on the fleet's counts (``False``: do not send it)."""
        now = time.monotonic()
        with self._lock:
            fleet = self._fleet(now)
            arm = self._count(now, 1, 0)
        admitted, p = self.local._admit(fleet)
        if fleet is None and self.on_error != "local":
            admitted = self.on_error == "allow"
        if arm:
            self._arm()
        for hook in self._hooks:
            hook(self.name, admitted, p)
        return admitted

    def record(self, outcome: object) -> None:
        """The outcome of an admitted attempt: an accept unless :meth:`rejected` says so."""
        if self.local.rejected(outcome):
            return
        self.local._accept()
        now = time.monotonic()
        with self._lock:
            arm = self._count(now, 0, 1)
        if arm:
            self._arm()

    def rejected(self, outcome: object) -> bool:
        """The overload predicate in use."""
        return self.local.rejected(outcome)

    # -- the flush ------------------------------------------------------------------------

    def _arm(self) -> None:
        worker = self._worker
        if worker is None or not worker.alive:
            worker = self._worker = Worker(self, f"throttle:{self.name}", self._interval)
        worker.wake()

    def _has_pending(self) -> bool:
        return bool(self._batches)

    def _take(self, now: float) -> list[int] | None:
        """The script's arguments for the batches still in the window, now in flight."""
        with self._lock:
            if self._flushing is not None:
                return None
            oldest = self.local._slicing.slice_of(now) - SLICES
            batches, self._batches = self._batches, []
            self._pending = [0, 0]
            args: list[int] = []
            requests = accepts = 0
            for index, r, a, made in batches:
                if index > oldest:
                    args += (max(0, round((now - made) * 1_000_000)), int(r), int(a))
                    requests, accepts = requests + int(r), accepts + int(a)
            self._in_flight = (requests, accepts)
            self._flushing = now
        return args

    def _flush_here(self) -> None:
        """Send the pending counts and read the fleet's (the helper thread); never raises."""
        now = time.monotonic()
        if self._retry_at is not None and now < self._retry_at:
            return
        args = self._take(now)
        if args is None:
            return
        try:
            reply = self._script(keys=self._keys, args=[*self._static, *args])
            shared = (int(reply[0]), int(reply[1]))
        except Exception as error:
            self._failed(error, args)
            return
        with self._lock:
            recovered = self._retry_at is not None
            self._shared, self._shared_at = shared, time.monotonic()
            self._in_flight, self._flushing = (0, 0), None
            self._retry_at = self._error = None
        if recovered:
            _log.info("throttle %r: Redis answers again; back on the fleet's counts", self.name)

    def _failed(self, error: BaseException, args: list[int]) -> None:
        now = time.monotonic()
        with self._lock:
            # Put the counts back, as one batch aged like the oldest sent.
            requests, accepts = self._in_flight
            if requests or accepts:
                age = max(args[0::3]) / 1_000_000 if args else 0.0
                made = now - age
                self._batches.insert(
                    0, [self.local._slicing.slice_of(made), requests, accepts, made]
                )
                self._pending[0] += requests
                self._pending[1] += accepts
            self._in_flight, self._flushing = (0, 0), None
            self._retry_at = now + self.retry_interval
            self._error = error
        _log.warning(
            "throttle %r: Redis did not answer (%r); deciding on the %r fallback, "
            "trying Redis again in %.3g s",
            self.name,
            error,
            self.on_error,
            self.retry_interval,
        )

    def flush(self) -> None:
        """Send the pending counts and read the fleet's now, from the calling thread."""
        self._retry_at = None
        self._flush_here()

    def close(self) -> None:
        """Flush the pending counts and stop the helper thread."""
        self.flush()
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()

    def advance_clock(self, seconds: float) -> None:
        """Test hook: move the script's clock ``seconds`` forward, for every process."""
        self.client.incrby(self._keys[1], round(_validate.seconds(seconds, "seconds") * 1e6))
