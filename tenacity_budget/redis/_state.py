"""The state both Redis budgets compose: parameters and keys, the pending deposits, the
health of Redis, and the fallback budget, with the one function that reads a decision.

The siblings in ``__init__`` differ only in how they call Redis (a helper thread for a
sync client, ``asyncio.timeout`` for an asyncio one); see docs/retry-budgets.md.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterable
from importlib.resources import files
from typing import Any, Literal, TypeAlias

from .. import _validate
from ..context import remaining
from ..retry_budget import (
    ALWAYS,
    NEVER,
    SLICES,
    Budget,
    BudgetObserver,
    BudgetTerms,
    Number,
    RetryBudget,
    _check_name,
    _Constant,
    budget_terms,
    observers_of,
)
from ._pending import Batch, Pending

LOGGER_NAME = "tenacity_budget.redis"
"""The logger fallbacks are reported on."""

DEFAULT_TIMEOUT = 0.05
"""The longest a decision waits for Redis by default, in seconds (see ``timeout``)."""

CLOCK_SUFFIX = ":clock"
"""Suffix of the test-hook key whose integer (microseconds) the script adds to ``TIME``."""

OnError: TypeAlias = Literal["local", "allow", "deny"]
"""How a decision is made while Redis is unreachable: the names of the fallback budgets."""

SCRIPT = files(__package__ or "").joinpath("script.lua").read_text(encoding="utf-8")
"""The decision script (one ``EVALSHA`` per decision, flush or balance read)."""

_log = logging.getLogger(LOGGER_NAME)

# Lua numbers are doubles: every figure the script handles must stay an exact integer.
_LUA_EXACT = 2**53
_MAX_EXPIRE_MS = 2**46  # about 2,000 years: Redis refuses expiry times that overflow


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


def _micros(seconds: object) -> int:
    return round(_validate.seconds(seconds, "seconds") * 1_000_000)


def _check_exact(terms: BudgetTerms) -> None:
    """Refuse parameters whose integer arithmetic would not be exact in Lua's doubles."""
    if terms.cost > 2**30 or terms.deposit_units > 2**30 or terms.reserve_units >= _LUA_EXACT // 4:
        raise ValueError(
            "a Redis budget computes in Lua's doubles, exact up to 2**53: ratio "
            f"({terms.ratio}) and min_per_second * ttl ({terms.min_per_second * terms.ttl}) "
            "need fewer decimal digits (or a smaller floor) to stay exact"
        )


def _slice_width(terms: BudgetTerms, ttl: object) -> int:
    width = int(terms.ttl * 1_000_000 / SLICES)
    if width < 1:
        raise ValueError(
            f"ttl must be at least 10 microseconds for a Redis budget (a slice is ttl / 10 "
            f"in whole microseconds of Redis TIME), got {ttl!r}"
        )
    return width


def _fallback(
    on_error: object, fallback: object, terms: BudgetTerms, name: str
) -> tuple[Budget, OnError]:
    """The budget deciding without Redis, and the ``on_error`` name it goes by."""
    if on_error not in ("local", "allow", "deny"):
        raise ValueError(f"on_error must be 'local', 'allow' or 'deny', got {on_error!r}")
    if fallback is None:
        if on_error == "allow":
            return ALWAYS, "allow"
        if on_error == "deny":
            return NEVER, "deny"
        return RetryBudget(terms.ratio, terms.min_per_second, terms.ttl, name=name), "local"
    if on_error != "local":
        raise ValueError("give on_error= or fallback=, not both: on_error names a fallback")
    if not isinstance(fallback, Budget) or getattr(fallback, "is_async", False):
        raise TypeError(
            "fallback must be a budget decided in this process (a RetryBudget, ALWAYS, "
            f"NEVER or another retry_budget.Budget), got {type(fallback).__name__}"
        )
    return fallback, "allow" if fallback is ALWAYS else "deny" if fallback is NEVER else "local"


def _timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    bound = _validate.seconds(timeout, "timeout", allow_inf=True)
    return None if bound == math.inf else bound


class _State:
    """What both Redis budgets compose: the parameters and keys, the pending deposits, the
    health of Redis, and the fallback budget with the one function reading a decision."""

    def __init__(
        self,
        client: Any,
        name: str,
        ratio: Number,
        min_per_second: Number,
        ttl: Number,
        *,
        on_error: object,
        fallback: object,
        observers: BudgetObserver | Iterable[BudgetObserver] | None,
        timeout: object,
        retry_interval: object,
        key_prefix: object,
    ) -> None:
        self.name = _check_name(name)
        self.terms = terms = budget_terms(ratio, min_per_second, ttl)
        width = _slice_width(terms, ttl)
        _check_exact(terms)
        self.fallback, self.on_error = _fallback(on_error, fallback, terms, name)
        if not isinstance(key_prefix, str):
            raise TypeError(f"key_prefix must be a str, got {type(key_prefix).__name__}")
        self.client = client
        self.observers = observers_of(observers)
        self.timeout = _timeout(timeout)
        slice_seconds = float(terms.ttl) / SLICES
        self.retry_interval = (
            slice_seconds
            if retry_interval is None
            else _validate.seconds(retry_interval, "retry_interval")
        )
        self.flush_interval = max(slice_seconds, 0.001)
        self.key = _budget_key(key_prefix, name)
        self.keys = [self.key, self.key + CLOCK_SUFFIX]
        self.static_args = [
            width,
            terms.deposit_units,
            terms.cost,
            terms.reserve_units,
            min(math.ceil(terms.ttl * 1000) + 1000, _MAX_EXPIRE_MS),
        ]
        self.script: Any = client.register_script(SCRIPT)
        # An in-process fallback hears of every retry Redis granted (counted, never refused),
        # so that it starts from this process's real retry traffic.
        self.recorder = self.fallback if isinstance(self.fallback, RetryBudget) else None
        self.reset()

    def reset(self) -> None:
        """A state of no pending deposit and a healthy Redis (at start, and after a fork)."""
        self.lock = threading.Lock()
        self.pending = Pending()
        self.retry_at: float | None = None  # monotonic: Redis is not tried before it
        self.error: BaseException | None = None

    def after_fork(self) -> None:
        """In a forked child: the parent sends its own pending deposits, and a lock another
        thread held at the fork would never be released."""
        self.reset()
        if self.recorder is not None:
            self.recorder._reset_lock()

    # -- deposits -------------------------------------------------------------------------

    def deposit(self) -> bool:
        """Count one deposit; ``True`` when it is the first pending one (arm a flush)."""
        self.fallback.deposit()
        now = time.monotonic()
        return self.pending.add(self.terms.slice_of(now), now)

    def take(self) -> list[Batch]:
        return self.pending.take(self.terms.slice_of(time.monotonic()))

    def args(self, batches: list[Batch], withdraw: bool) -> list[int]:
        """The script's arguments, the deposits stamped with their age as they are sent."""
        ages = Pending.ages(batches, time.monotonic())
        return [1 if withdraw else 0, *self.static_args, *ages]

    def send(self, batches: list[Batch], withdraw: bool) -> Any:
        """One script call (sync client); the batches are put back if it fails."""
        try:
            return self.script(keys=self.keys, args=self.args(batches, withdraw))
        except BaseException:
            self.pending.restore(batches)
            raise

    # -- the wait, and Redis health --------------------------------------------------------

    def wait(self) -> float | None:
        """How long this decision may wait for Redis: ``timeout``, within the run's time left.

        ``None``: no bound (a bound past what a thread can wait for is none either).
        """
        left = remaining()
        timeout = self.timeout
        wait = timeout if left is None or (timeout is not None and timeout <= left) else left
        return None if wait is None or wait >= threading.TIMEOUT_MAX else wait

    def preflight(self) -> tuple[float | None, BaseException | None]:
        """The wait this decision may spend on Redis, and why it skips Redis (``None``: it asks)."""
        wait = self.wait()
        if wait is not None and wait <= 0:
            return wait, self._no_wait()
        if self.retry_at is not None and time.monotonic() < self.retry_at:
            return wait, self.error or ConnectionError("Redis is unreachable")
        return wait, None

    def redis_due(self) -> bool:
        retry_at = self.retry_at
        return retry_at is None or time.monotonic() >= retry_at

    def _no_wait(self) -> TimeoutError:
        """Why a decision with nothing to wait (``timeout`` 0, or no time left) skips Redis."""
        if self.timeout == 0:
            return TimeoutError("timeout is 0: Redis is never waited for")
        error = TimeoutError("no time left in the run to wait for Redis")
        _log.warning(
            "retry budget %r: %s; deciding on the %r fallback", self.name, error, self.on_error
        )
        return error

    def failed(self, error: BaseException) -> BaseException:
        with self.lock:
            self.retry_at = time.monotonic() + self.retry_interval
            self.error = error
        _log.warning(
            "retry budget %r: Redis did not answer (%r); deciding on the %r fallback, "
            "trying Redis again in %.3g s",
            self.name,
            error,
            self.on_error,
            self.retry_interval,
        )
        return error

    def succeeded(self) -> None:
        if self.retry_at is not None:
            with self.lock:
                self.retry_at = None
                self.error = None
            _log.info("retry budget %r: Redis answers again; back on the shared window", self.name)

    def cut(self, wait: float | None, error: BaseException) -> BaseException:
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
        return self.failed(error)

    # -- decisions ------------------------------------------------------------------------

    def decided(self, reply: Any) -> bool:
        """Record and report the decision Redis made (``reply``), or else the fallback's.

        ``reply`` is the script's reply, or the error that kept Redis from deciding.
        """
        balance: int | None
        if isinstance(reply, BaseException):
            granted = self.fallback.try_withdraw()
            # A constant budget's balance is no count: observers are told it is not known.
            balance = None if isinstance(self.fallback, _Constant) else self.fallback.balance
            _log.debug(
                "retry budget %r: %s on the %r fallback (%r)",
                self.name,
                "granted" if granted else "refused",
                self.on_error,
                reply,
            )
            for observer in self.observers:
                observer.on_budget_fallback(self.name, reply)
        else:
            granted, balance = bool(int(reply[0])), int(reply[1])
            if granted and self.recorder is not None:
                self.recorder._record_withdrawal()
        for observer in self.observers:
            observer.on_budget_decision(self.name, granted, balance)
        return granted

    def balance_of(self, reply: Any) -> int:
        """The balance in the script's ``reply``, or the fallback's if Redis did not answer."""
        return self.fallback.balance if isinstance(reply, BaseException) else int(reply[1])
