"""Retry budgets: cap the retry traffic to a dependency at a share of its calls.

Finagle's rule: every call *deposits* once, every retry *withdraws* once, and a withdrawal
is granted only while ``withdrawals <= ratio * deposits + min_per_second * ttl`` over the
last ``ttl`` seconds (:meth:`BudgetTerms.grants` states it; the Redis script follows it).
:class:`Budget` and :class:`AsyncBudget` are what a budget does; :class:`RetryBudget` is the
in-process one, counted exactly in integers, and :data:`ALWAYS` and :data:`NEVER` are the
budgets that always and never grant. The window, the exact counting and the order of
composition with a policy's stop are explained in docs/retry-budgets.md
(``docs/retry-budgets.md``).
"""

from __future__ import annotations

import math
import numbers
import sys
import threading
import time
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, ClassVar, Final, TypeAlias

from tenacity import RetryCallState
from tenacity.stop import stop_base

# typing_extensions (which pydantic depends on) reads members statically in its runtime
# check: isinstance() never evaluates a budget's `balance` (a Redis round trip, or an
# un-awaited coroutine for an async one), as typing's does on Python 3.11.
from typing_extensions import Protocol, runtime_checkable

from .decision import awithdraw, withdraw
from .instrumentation._protocols import BudgetObserver as BudgetObserver
from .state import stopped_by

# Importable, documented, but not the modules' public face: see the module docstring.
# RetryBudget is the package's (tenacity_budget), so it is counted there.
__all__ = ["Budget"]

Number: TypeAlias = float | Fraction | Decimal
"""What a budget parameter may be: an int, a float (read as the decimal it prints as), a
``Fraction`` or a ``Decimal``."""

SLICES = 10
"""Slices the ``ttl`` window is made of: an event counts for ``0.9 * ttl`` to ``ttl`` seconds."""


@runtime_checkable
class Budget(Protocol):
    """A retry budget decided in the calling thread (Finagle's ``RetryBudget`` trait).

    :class:`RetryBudget`, ``RedisRetryBudget``, :data:`ALWAYS` and :data:`NEVER` are ones;
    so is any object with these three members. ``policy.retry(budget=...)`` calls
    :meth:`deposit` once per run and :meth:`try_withdraw` once per retry the policy allows.
    """

    def deposit(self) -> None:
        """Record one call (once per run, at its first attempt; never per retry)."""

    def try_withdraw(self) -> bool:
        """Take one retry if the budget affords it (``True``); else change nothing."""

    @property
    def balance(self) -> int:
        """Retries :meth:`try_withdraw` would grant now."""


@runtime_checkable
class AsyncBudget(Protocol):
    """A retry budget whose decisions are awaited (``AsyncRedisRetryBudget``).

    :meth:`deposit` stays a plain call (it never waits); :meth:`try_withdraw` and
    :attr:`balance` return awaitables. A protocol of its own rather than a subtype of
    :class:`Budget`: an awaitable is not a ``bool``, so neither can stand for the other.
    Their members share names, so ``isinstance`` cannot tell them apart: a budget's
    ``is_async`` does.
    """

    def deposit(self) -> None:
        """Record one call (once per run, at its first attempt; never per retry)."""

    def try_withdraw(self) -> Awaitable[bool]:
        """Take one retry if the budget affords it (awaited)."""

    @property
    def balance(self) -> Awaitable[int]:
        """Retries :meth:`try_withdraw` would grant now (awaited)."""


def observers_of(
    observers: BudgetObserver | Iterable[BudgetObserver] | None,
) -> tuple[BudgetObserver, ...]:
    """``observers`` as a tuple, each checked to be a :class:`BudgetObserver`."""
    if observers is None:
        return ()
    items = (observers,) if isinstance(observers, BudgetObserver) else tuple(observers)
    for item in items:
        if not isinstance(item, BudgetObserver):
            raise TypeError(
                "observers must be BudgetObservers (on_budget_decision, on_budget_fallback), "
                f"or a sequence of them; got {type(item).__name__}"
            )
    return items


# -- the arithmetic --------------------------------------------------------------------------


# The largest numerator or denominator an exact parameter (int, Fraction, Decimal) may have:
# beyond it the budget's integer arithmetic would grow without bound.
_EXACT_LIMIT = 2**64

# A Decimal's digits and exponent, trailing zeros stripped, within which its fraction may
# still have terms of at most _EXACT_LIMIT (so it is built only then): a whole number of
# more than 20 digits exceeds 2**64; a fraction d / 10**k in lowest terms keeps a
# denominator of at least 2**k or 5**k (d is not a multiple of 10), so k <= 64, and then its
# numerator, at least d / 10**k, has at most 84 digits.
_WHOLE_DIGITS = 20
_FRACTION_PLACES = 64
_FRACTION_DIGITS = 84


def _too_large(what: str, shown: str) -> ValueError:
    return ValueError(
        f"{what} is too large or too finely divided to count exactly: as a fraction its "
        f"numerator and denominator must be at most 2**64, got {shown}"
    )


def _shown_int(number: int) -> str:
    bits = abs(number).bit_length()
    return repr(number) if bits <= 256 else f"an int of {bits} bits"


def _decimal_fraction(value: Decimal, what: str) -> Fraction:
    """A finite ``value`` as a fraction, refused before any big arithmetic when too large."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite
    end = len(digits)
    while end and digits[end - 1] == 0:
        end -= 1
    if not end:
        return Fraction(0)
    exponent += len(digits) - end
    if not _decimal_fits(end, exponent):
        raise _too_large(what, _shown(value))
    number = int("".join(map(str, digits[:end])))
    if sign:
        number = -number
    exact = Fraction(number * 10**exponent) if exponent >= 0 else Fraction(number, 10**-exponent)
    if abs(exact.numerator) > _EXACT_LIMIT or exact.denominator > _EXACT_LIMIT:
        raise _too_large(what, _shown(value))
    return exact


def _decimal_fits(digits: int, exponent: int) -> bool:
    """Whether ``digits`` significant digits times ``10**exponent`` may fit ``_EXACT_LIMIT``."""
    if exponent >= 0:
        return digits + exponent <= _WHOLE_DIGITS
    return -exponent <= _FRACTION_PLACES and digits <= _FRACTION_DIGITS


def _exact(value: object, what: str, *, positive: bool = False) -> Fraction:
    """``value`` as an exact fraction: a float is read as the decimal it prints as.

    An exact ``value`` (an int, a ``Fraction``, a ``Decimal``) whose numerator or
    denominator would exceed ``2**64`` is refused before it is computed. With
    ``positive``, zero is refused too.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real | Decimal):
        raise TypeError(f"{what} must be a number, got {type(value).__name__}")
    if isinstance(value, Decimal):
        return _exact_decimal(value, what, positive)
    if isinstance(value, numbers.Rational):
        return _exact_rational(value, what, positive)
    return _exact_float(value, what, positive)


def _exact_decimal(value: Decimal, what: str, positive: bool) -> Fraction:
    if not value.is_finite():
        raise ValueError(f"{what} must be finite, got {value!r}")
    if value < 0 or (positive and not value):
        raise _out_of_range(what, value, positive)
    return _decimal_fraction(value, what)


def _exact_rational(value: numbers.Rational, what: str, positive: bool) -> Fraction:
    numerator, denominator = int(value.numerator), int(value.denominator)
    if numerator < 0 or (positive and not numerator):
        raise _out_of_range(what, value, positive)
    # int and Fraction are in lowest terms already; another Rational is reduced while
    # that is cheap.
    if (numerator > _EXACT_LIMIT or denominator > _EXACT_LIMIT) and max(
        numerator.bit_length(), denominator.bit_length()
    ) <= 4096:
        reduced = Fraction(numerator, denominator)
        numerator, denominator = reduced.numerator, reduced.denominator
    if numerator > _EXACT_LIMIT or denominator > _EXACT_LIMIT:
        shown = _shown_int(numerator)
        if denominator != 1:
            shown = f"{shown} / {_shown_int(denominator)}"
        raise _too_large(what, shown)
    return Fraction(numerator, denominator)


def _exact_float(value: numbers.Real, what: str, positive: bool) -> Fraction:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{what} must be finite, got {number!r}")
    if number < 0 or (positive and not number):
        raise _out_of_range(what, value, positive)
    # repr() is the shortest decimal that reads back as this float: 0.2 -> "0.2",
    # one fifth, where Fraction(0.2) would be 3602879701896397/18014398509481984.
    return Fraction(repr(number))


def _shown(value: object) -> str:
    """``value`` for a message, in a few words however large it is."""
    if isinstance(value, int) and not isinstance(value, bool):
        return _shown_int(value)
    if isinstance(value, Fraction):
        return f"{_shown_int(value.numerator)} / {_shown_int(value.denominator)}"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def _out_of_range(what: str, value: object, positive: bool) -> ValueError:
    shown = _shown(value)
    if positive:
        return ValueError(
            f"{what} must be > 0 seconds: a window of no time would count nothing, got {shown}"
        )
    return ValueError(f"{what} must be >= 0, got {shown}")


@dataclass(frozen=True, slots=True)
class Slicing:
    """A window of ``SLICES`` slices on the monotonic clock, as exact integers.

    A retry budget's ``ttl`` and an adaptive throttle's ``window`` are sliced the same way:
    an event counts while its slice is one of the last ``SLICES`` (so for 0.9 to 1 times
    the window). :func:`slicing` builds it from a window in seconds.

    Attributes:
        slice_num, slice_den: a monotonic instant of ``t`` microseconds is in slice
            ``t * slice_num // slice_den`` (slices of exactly ``window / SLICES``).
    """

    slice_num: int
    slice_den: int

    def slice_of(self, seconds: float) -> int:
        """The index of the slice of the monotonic instant ``seconds``.

        Read to the microsecond (the resolution the virtual clock keeps exactly), then
        divided exactly by ``window / SLICES``.
        """
        return round(seconds * 1_000_000) * self.slice_num // self.slice_den

    def slice_span(self, index: int) -> tuple[float, float] | None:
        """The floats in slice ``index``: exactly the ``t`` with ``start <= t < end``.

        :meth:`slice_of` never decreases as ``t`` grows, so its floats form one interval;
        its ends are found by stepping from an estimate and checked with :meth:`slice_of`
        itself. ``None`` where they cannot be (instants near the float range's end).
        """
        try:
            start, end = self._first_float(index), self._first_float(index + 1)
        except (OverflowError, ValueError):
            return None
        if start is None or end is None:
            return None
        return start, end

    def _first_float(self, index: int) -> float | None:
        """The least float in slice ``index`` or a later one; ``None`` if the steps miss it."""
        # The least microsecond count in slice `index` or later, and the instant rounding to it.
        micros = -(-index * self.slice_den // self.slice_num)
        t = (micros - 0.5) / 1_000_000
        for _ in range(_STEPS):
            if self.slice_of(t) < index:
                t = math.nextafter(t, math.inf)
                continue
            below = math.nextafter(t, -math.inf)
            if self.slice_of(below) < index:
                return t
            t = below
        return None


@dataclass(frozen=True, slots=True)
class BudgetTerms(Slicing):
    """A budget's parameters as exact integers: the one place its rule is computed.

    Amounts are counted in *units* of ``1 / cost`` retries, so that every figure is an
    integer: a deposit adds ``deposit_units``, a withdrawal costs ``cost``, and the floor
    is ``reserve_units``.

    Attributes:
        ratio, min_per_second, ttl: the parameters, exactly (as read by :func:`budget_terms`).
        deposit_units: ``ratio * cost``.
        cost: units one retry costs (the common denominator of ``ratio`` and the floor).
        reserve_units: ``min_per_second * ttl * cost``, the floor.

    Its window is sliced by :class:`Slicing` (slices of exactly ``ttl / SLICES``).
    """

    ratio: Fraction
    min_per_second: Fraction
    ttl: Fraction
    deposit_units: int
    cost: int
    reserve_units: int

    def grants(self, deposits: int, withdrawals: int) -> bool:
        """The rule: whether a window may hold ``withdrawals`` beside ``deposits``.

        ``withdrawals <= ratio * deposits + min_per_second * ttl``, in units: a withdrawal
        is granted when the window, counting it, still satisfies it.
        """
        return self.cost * withdrawals <= self.reserve_units + self.deposit_units * deposits

    def affordable(self, deposits: int, withdrawals: int) -> int:
        """Withdrawals a window holding these counts would still grant (never negative).

        The largest ``n`` for which :meth:`grants` holds for ``withdrawals + n``, or ``0``.
        """
        free = self.reserve_units + self.deposit_units * deposits - self.cost * withdrawals
        return free // self.cost if free > 0 else 0


# Steps from the estimate of a slice's first float within which its exact end is found; the
# estimate is within a few ulps of it.
_STEPS = 64


def slicing(window: object, what: str) -> Slicing:
    """The slices of a window of ``window`` seconds (exact: a float read as its decimal).

    Raises:
        TypeError: for a ``window`` that is not a number (a bool is not one).
        ValueError: for a ``window`` that is not finite and ``> 0``, or too finely divided.
    """
    exact = _exact(window, what, positive=True)
    return Slicing(SLICES * exact.denominator, exact.numerator * 1_000_000)


_NO_SPAN = (math.inf, -math.inf)  # a span no instant is in: the owner never skips the roll


class CountRing:
    """The ring of slices that expires two running counts from a :class:`Slicing` window.

    Its owner (a :class:`RetryBudget`: deposits and withdrawals; an adaptive throttle:
    requests and accepts) keeps the two totals over the window, the current slice included,
    and adds to them on its hot path. When the clock leaves the current slice it hands them
    to :meth:`roll`. Slot ``s % SLICES`` holds the counts of slice ``s`` for the
    ``SLICES - 1`` slices before the current one (written when that slice ends). Not locked:
    the owner calls it under its own lock.
    """

    __slots__ = ("_a_before", "_a_slots", "_b_before", "_b_slots", "_current", "_shift", "slicing")

    def __init__(self, slicing: Slicing) -> None:
        self.slicing = slicing
        self._a_slots = [0] * SLICES
        self._b_slots = [0] * SLICES
        self._a_before = 0  # the totals when the current slice began
        self._b_before = 0
        self._current: int | None = None  # the latest slice seen
        self._shift = 0  # added to every slice index: a clock read earlier stands still

    def roll(self, seconds: float, a: int, b: int) -> tuple[int, int, float, float]:
        """Bring the window to the instant ``seconds``: ``(a, b, start, end)``.

        ``a`` and ``b`` are the owner's totals; returned without the slices that expired,
        with the instants of the current slice (``start <= t < end``), inside which the
        owner may skip this call. Only from a float (``time.monotonic()`` returns one): an
        instant of another type, from a test clock, gives a span no instant is in.
        """
        now = self.slicing.slice_of(seconds) + self._shift
        current = self._current
        if current is None:
            self._current = current = now
        elif now > current:
            a_slots, b_slots = self._a_slots, self._b_slots
            if now - current >= SLICES:
                a_slots[:] = [0] * SLICES
                b_slots[:] = [0] * SLICES
                a = b = 0
            else:
                slot = current % SLICES  # the current slice ends: its counts go to its slot
                a_slots[slot] = a - self._a_before
                b_slots[slot] = b - self._b_before
                # Slices current+1 .. now take the slots of slices SLICES earlier: expired.
                for index in range(current + 1, now + 1):
                    slot = index % SLICES
                    a -= a_slots[slot]
                    b -= b_slots[slot]
                    a_slots[slot] = b_slots[slot] = 0
            self._a_before, self._b_before = a, b
            self._current = current = now
        elif now < current:
            self._shift += current - now
        span = None
        if type(seconds) is float:
            span = self.slicing.slice_span(current - self._shift)
        start, end = span if span is not None else _NO_SPAN
        return a, b, start, end


def budget_terms(ratio: object, min_per_second: object, ttl: object) -> BudgetTerms:
    """Validate a budget's parameters and turn them into exact integer :class:`BudgetTerms`.

    Raises:
        TypeError: for a parameter that is not a number (a bool is not one).
        ValueError: for a negative or non-finite parameter, a ``ttl`` that is not
            ``> 0``, or an exact parameter whose numerator or denominator exceeds
            ``2**64``.
    """
    exact_ratio = _exact(ratio, "ratio")
    exact_min = _exact(min_per_second, "min_per_second")
    exact_ttl = _exact(ttl, "ttl", positive=True)
    reserve = exact_min * exact_ttl
    cost = math.lcm(exact_ratio.denominator, reserve.denominator)
    return BudgetTerms(
        ratio=exact_ratio,
        min_per_second=exact_min,
        ttl=exact_ttl,
        deposit_units=int(exact_ratio * cost),
        cost=cost,
        reserve_units=int(reserve * cost),
        slice_num=SLICES * exact_ttl.denominator,
        slice_den=exact_ttl.numerator * 1_000_000,
    )


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    if not name:
        raise ValueError("name must not be empty: it labels the budget's metrics and keys")
    return name


# -- the budgets ---------------------------------------------------------------------------------


class BudgetHooks:
    """``stop()`` and ``before`` on top of a sync :class:`Budget`'s ``try_withdraw`` and
    ``deposit``: a base of every sync budget here, so the two hooks exist once."""

    __slots__ = ()
    name: str

    def deposit(self) -> None:
        """Record one call (overridden by every budget)."""
        raise NotImplementedError

    def try_withdraw(self) -> bool:
        """Take one retry if affordable (overridden by every budget)."""
        raise NotImplementedError

    def stop(self) -> stop_retry_budget:
        """A tenacity stop that withdraws one retry each time it is asked.

        Compose it as ``policy.stop() | budget.stop()`` (see docs/retry-budgets.md).
        """
        return stop_retry_budget(self)

    def before(self, retry_state: RetryCallState) -> None:
        """A tenacity ``before=`` hook: :meth:`deposit` at the run's first attempt."""
        if retry_state.attempt_number == 1:
            self.deposit()


class _Constant(BudgetHooks):
    """A budget whose every decision is the same: Finagle's ``Infinite`` and ``Empty``."""

    __slots__ = ("_granted", "name")
    is_async: ClassVar[bool] = False

    def __init__(self, granted: bool, name: str) -> None:
        self._granted = granted
        self.name = name

    def __repr__(self) -> str:
        return self.name.upper()

    def __reduce__(self) -> str:
        return self.name.upper()  # pickled by name: unpickles to the one instance

    def deposit(self) -> None:
        """Nothing to record."""

    def try_withdraw(self) -> bool:
        """Always the same answer."""
        return self._granted

    @property
    def balance(self) -> int:
        """``sys.maxsize`` for :data:`ALWAYS` (no bound), ``0`` for :data:`NEVER`."""
        return sys.maxsize if self._granted else 0


ALWAYS: Final = _Constant(True, "always")
"""The budget that grants every retry (retries as if there were no budget)."""

NEVER: Final = _Constant(False, "never")
"""The budget that refuses every retry (a run makes its first attempt only)."""


# -- the in-process budget ---------------------------------------------------------------------


class BudgetParameters:
    """The parameters every retry budget exposes, read from its exact :class:`BudgetTerms`.

    A base of :class:`RetryBudget` and of the Redis budget, so the accessors exist once.
    """

    __slots__ = ()
    _terms: BudgetTerms

    @property
    def terms(self) -> BudgetTerms:
        """The budget's parameters, exactly."""
        return self._terms

    @property
    def ratio(self) -> float:
        """Retries allowed per call deposited (fleet-wide, for a shared budget)."""
        return float(self._terms.ratio)

    @property
    def min_per_second(self) -> float:
        """Retries allowed per second whatever the traffic (fleet-wide, for a shared one)."""
        return float(self._terms.min_per_second)

    @property
    def ttl(self) -> float:
        """The window, in seconds."""
        return float(self._terms.ttl)


class RetryBudget(BudgetParameters, BudgetHooks):
    """A retry budget for one dependency, in one process (see the module for the rule).

    Args:
        ratio: retries allowed per call deposited (``0.2``: retries add at most 20%).
        min_per_second: retries allowed per second whatever the traffic, so that a
            dependency called rarely can still be retried (``10``: 100 per 10 s window).
        ttl: the window, in seconds: deposits and withdrawals older than this never count.
        name: the label of the budget's metrics.
        observers: a :class:`BudgetObserver` or a sequence of them, told of every decision.

    Raises:
        TypeError: for a parameter that is not a number, or an observer that is not one.
        ValueError: for a negative or non-finite parameter, a ``ttl`` that is not ``> 0``,
            an int, ``Fraction`` or ``Decimal`` parameter whose numerator or denominator
            exceeds ``2**64``, or an empty ``name``.

    Example:
        >>> budget = RetryBudget(ratio=0.2, min_per_second=0, ttl=10)
        >>> for _ in range(100):
        ...     budget.deposit()
        >>> budget.balance
        20
    """

    is_async: ClassVar[bool] = False
    """Whether :meth:`try_withdraw` must be awaited (never, for this budget)."""

    __slots__ = (
        "_deposits",
        "_end",
        "_lock",
        "_ring",
        "_start",
        "_terms",
        "_withdrawals",
        "name",
        "observers",
    )

    def __init__(
        self,
        ratio: Number = 0.2,
        min_per_second: Number = 10.0,
        ttl: Number = 10.0,
        *,
        name: str = "default",
        observers: BudgetObserver | Iterable[BudgetObserver] | None = (),
    ) -> None:
        self._terms = budget_terms(ratio, min_per_second, ttl)
        self.name = _check_name(name)
        self.observers = observers_of(observers)
        self._lock = threading.Lock()
        self._ring = CountRing(self._terms)  # expires the counts older than the window
        self._deposits = 0  # totals over the window, the current slice included
        self._withdrawals = 0
        # The monotonic instants of the current slice: start <= t < end (none yet).
        self._start, self._end = math.inf, -math.inf

    def __repr__(self) -> str:
        t = self._terms
        return (
            f"RetryBudget(ratio={_show(t.ratio)}, min_per_second={_show(t.min_per_second)}, "
            f"ttl={_show(t.ttl)}, name={self.name!r})"
        )

    # -- the window -------------------------------------------------------------------------

    def _roll(self, seconds: float) -> None:
        """Bring the window to the instant ``seconds``, outside the current slice (locked)."""
        self._deposits, self._withdrawals, self._start, self._end = self._ring.roll(
            seconds, self._deposits, self._withdrawals
        )

    # -- the interface ----------------------------------------------------------------------

    def deposit(self) -> None:
        """Record one call (call it once per run, at its first attempt; never per retry)."""
        with self._lock:
            now = time.monotonic()
            if not self._start <= now < self._end:
                self._roll(now)
            self._deposits += 1

    def try_withdraw(self) -> bool:
        """Take one retry if the window affords it (``True``); else change nothing (``False``)."""
        with self._lock:
            now = time.monotonic()
            if not self._start <= now < self._end:
                self._roll(now)
            withdrawals = self._withdrawals + 1
            granted = self._terms.grants(self._deposits, withdrawals)
            if granted:
                self._withdrawals = withdrawals
            observers = self.observers
            if not observers:
                return granted
            balance = self._terms.affordable(self._deposits, self._withdrawals)
        for observer in observers:
            observer.on_budget_decision(self.name, granted, balance)
        return granted

    @property
    def balance(self) -> int:
        """Retries :meth:`try_withdraw` would grant now (``0`` when it would refuse)."""
        with self._lock:
            now = time.monotonic()
            if not self._start <= now < self._end:
                self._roll(now)
            return self._terms.affordable(self._deposits, self._withdrawals)

    def _record_withdrawal(self) -> None:
        # A retry decided elsewhere, affordable here or not; no observer is told. The Redis
        # budget records here every retry Redis granted, so that its local fallback starts
        # from this process's real retry traffic.
        with self._lock:
            now = time.monotonic()
            if not self._start <= now < self._end:
                self._roll(now)
            self._withdrawals += 1

    def _reset_lock(self) -> None:
        # For a child process forked while another thread may have held the lock.
        self._lock = threading.Lock()


def _show(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else repr(float(value))


# -- the tenacity stops -------------------------------------------------------------------------


class _SyncBudget(Protocol):
    name: str

    def try_withdraw(self) -> bool: ...


class _AsyncBudget(Protocol):
    name: str

    def try_withdraw(self) -> Awaitable[bool]: ...


class stop_retry_budget(stop_base):
    """A tenacity stop drawing every retry from a retry budget: stop when it refuses.

    Build it with :meth:`RetryBudget.stop` (or ``RedisRetryBudget.stop()`` on a sync
    client). Each time tenacity asks it, before a retry, it withdraws one retry
    (:meth:`RetryBudget.try_withdraw`); when the budget refuses, it stops the run at once
    and records :attr:`~tenacity_budget.StopReason.RETRY_BUDGET` as the run's reason, so a
    ``policy.retry()`` run raises :class:`~tenacity_budget.BudgetExhausted` with
    ``report.reason == "retry_budget"`` (with plain tenacity, pass
    ``retry_error_cls=BudgetExhausted``). Put it on the right of ``|``:
    ``policy.stop() | budget.stop()``, so that it is only asked when the policy's stop lets
    the retry happen. Stateless per run: one instance serves any number of runs.
    """

    def __init__(self, budget: _SyncBudget) -> None:
        self.budget = budget

    def __repr__(self) -> str:
        return f"<stop_retry_budget {self.budget.name!r}>"

    def __call__(self, retry_state: RetryCallState) -> bool:
        reason = withdraw(self.budget.try_withdraw)  # the decision's last check
        if reason is None:
            return False
        stopped_by(retry_state, reason)
        return True


class async_stop_retry_budget:
    """The stop of an asyncio retry budget: its ``__call__`` is a coroutine function.

    ``AsyncRetrying`` awaits a top-level async stop, so it works as the whole ``stop=`` of
    an ``AsyncRetrying``; tenacity's ``|`` and ``&`` call stops synchronously and would get
    an un-awaited coroutine, so this stop refuses to be composed with them (``TypeError``).
    To combine it with a policy's stop, use ``policy.retry(budget=...)``, which asks the
    policy's stop first and awaits the budget only when the policy lets the retry happen.
    The same reason is recorded as by :class:`stop_retry_budget`.
    """

    def __init__(self, budget: _AsyncBudget) -> None:
        self.budget = budget

    def __repr__(self) -> str:
        return f"<async_stop_retry_budget {self.budget.name!r}>"

    async def __call__(self, retry_state: RetryCallState) -> bool:
        reason = await awithdraw(self.budget.try_withdraw)  # the decision's last check
        if reason is None:
            return False
        stopped_by(retry_state, reason)
        return True

    def __or__(self, other: object) -> Any:
        raise _no_composition()

    def __ror__(self, other: object) -> Any:
        raise _no_composition()

    def __and__(self, other: object) -> Any:
        raise _no_composition()

    def __rand__(self, other: object) -> Any:
        raise _no_composition()


def _no_composition() -> TypeError:
    return TypeError(
        "an asyncio retry budget's stop cannot be composed with | or &: tenacity calls "
        "composed stops synchronously, and this one must be awaited. Use "
        "policy.retry(budget=...), which composes it for you"
    )
