"""The ambient deadline: one home for "how long is left" (:class:`Horizon`, :func:`remaining`).

A frame of the ambient deadline (a :func:`deadline_scope`, a ``policy.retry()`` call, an
integration's attempt) is a :class:`Horizon`, kept per thread and asyncio task in a
context variable; :meth:`Horizon.left` is the one computation of the time left, which the
stop, ``policy.retry``, Celery, the transports and the middleware all ask. The merge of
several deadlines (:func:`earliest`) and the aware-datetime check live here too. See
docs/deadline-propagation.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from datetime import UTC, datetime, timedelta
from typing import Any

from ._validate import aware
from ._validate import seconds as _seconds

__all__ = ["ambient_deadline", "remaining_until"]


def check_aware(deadline: datetime, what: str = "deadline") -> datetime:
    """Return ``deadline`` if it is a timezone-aware datetime, else raise saying why.

    The one aware check (``_validate.aware``), under the name the
    package has always used.

    Raises:
        TypeError: when ``deadline`` is not a :class:`~datetime.datetime`.
        ValueError: for a naive datetime, which is ambiguous.
    """
    return aware(deadline, what)


def earliest(*deadlines: datetime | None) -> datetime | None:
    """The earliest of several aware deadlines, ignoring ``None``; ``None`` when all are.

    The one place where deadlines are merged: a call's deadline, the policy's own, an
    enclosing scope's or a task message's. The earliest always holds, so a deadline can
    only ever tighten a run, never loosen it.
    """
    found: datetime | None = None
    for deadline in deadlines:
        if deadline is not None and (found is None or deadline < found):
            found = deadline
    return found


_EARLIEST = datetime.min.replace(tzinfo=UTC)

# Read by Horizon.left() before every retry. The clocks themselves are looked up on the
# time module at each call: the virtual clock patches them there.
_INF = math.inf


def utc_instant(timestamp: float) -> datetime | None:
    """The aware UTC instant of ``timestamp`` (epoch seconds); never raises.

    A timestamp later than any ``datetime`` can hold (past ``datetime.max``, or ``inf``)
    is an end no run can reach: ``None``, no deadline. One earlier than ``datetime.min``
    is long past: ``datetime.min`` (UTC), which every clock reading is after.
    """
    try:
        return datetime.fromtimestamp(timestamp, UTC)
    except (OverflowError, ValueError, OSError):  # out of datetime's (or the C library's) range
        return None if timestamp > 0 else _EARLIEST


class Horizon:
    """When the work in progress must be over: one frame of the ambient deadline.

    A frame is made by :func:`deadline_scope`, by each call of a ``policy.retry()``
    function (its budget end and deadlines) and by integrations that run attempts
    themselves. Its ends are already merged with every enclosing frame's, so the innermost
    frame alone says how long is left. Ends are ``inf`` where there is none.

    Attributes:
        outer: the enclosing frame, or ``None``.
        mono_end: the earliest end on the monotonic clock (budgets, relative scopes).
        wall_end: the earliest end on the wall clock, epoch seconds (absolute deadlines).
        run: the record of the budgeted run this frame belongs to, if any.
        closed: whether the frame has been left (its scope exited, its run over).
        stale: whether it was left out of order or from another task or thread: then no
            context may see it any longer (one left in order stays visible to the tasks
            started inside it, as a context copy would have it).
    """

    __slots__ = ("closed", "last", "mono_end", "outer", "run", "stale", "timer", "wall_end")

    mono_end: float
    wall_end: float

    def __init__(
        self,
        outer: Horizon | None,
        mono_end: float = math.inf,
        wall_end: float = math.inf,
        run: Any = None,
    ) -> None:
        self.outer = outer
        # tighten(), twice (the given ends, then the enclosing frame's), written out: a
        # frame is made for every run. An end that is not below inf (NaN) is no end.
        self.mono_end = mono_end if mono_end < math.inf else math.inf
        self.wall_end = wall_end if wall_end < math.inf else math.inf
        if outer is not None:
            if outer.mono_end < self.mono_end:
                self.mono_end = outer.mono_end
            if outer.wall_end < self.wall_end:
                self.wall_end = outer.wall_end
        self.run = run
        self.last = math.inf  # the smallest value remaining() has handed out in this frame
        self.closed = self.stale = False
        self.timer: Any = None  # a hard_deadline run's timer (an asyncio.Timeout)

    def __repr__(self) -> str:
        return f"<Horizon left={self.left()!r} run={self.run!r}>"

    def tighten(self, *, mono_end: float = math.inf, wall_end: float = math.inf) -> None:
        """Bring the frame's ends forward to these, where they are earlier (never back).

        The one rule of nesting: an inner frame, or a deadline learnt later, can only
        shorten the time left.
        """
        if mono_end < self.mono_end:
            self.mono_end = mono_end
        if wall_end < self.wall_end:
            self.wall_end = wall_end

    def left(self) -> float:
        """Seconds until the earliest end (may be negative; ``inf`` without an end)."""
        left = _INF
        if self.mono_end != _INF:
            left = self.mono_end - time.monotonic()
        if self.wall_end != _INF:
            wall = self.wall_end - time.time()
            if wall < left:
                left = wall
        return left

    def deadline(self) -> datetime | None:
        """The earliest end as an aware UTC instant, or ``None`` without an end.

        Exact when the wall-clock end binds; a monotonic end is placed on the wall clock
        from now. Never raises: an end later than any ``datetime`` can hold (a scope of
        ``3e11`` seconds, a ``datetime.max`` deadline) is past anything a run can reach,
        and is no end (``None``); one before ``datetime.min`` is ``datetime.min`` (UTC).
        """
        mono_left = math.inf if self.mono_end == math.inf else self.mono_end - time.monotonic()
        if self.wall_end != math.inf and self.wall_end - time.time() <= mono_left:
            return utc_instant(self.wall_end)
        if mono_left == math.inf:
            return None
        try:
            return datetime.now(UTC) + timedelta(seconds=mono_left)
        except OverflowError:  # beyond datetime's range, or timedelta's
            return None if mono_left > 0 else utc_instant(-math.inf)


# Seconds beyond which a scope has no end from ``seconds`` (a float cannot add to a clock).
_MAX_SCOPE = 1e300

_HORIZON: ContextVar[Horizon | None] = ContextVar("tenacity_budget_horizon", default=None)


def current_horizon() -> Horizon | None:
    """The innermost ambient frame of this thread or task, or ``None`` outside any.

    A frame left out of order, or exited from another task or thread, is never ambient
    again; a task started inside a scope keeps it after the scope's code left it, as the
    task's copy of the context has it.
    """
    horizon = _HORIZON.get()
    while horizon is not None and horizon.stale:
        horizon = horizon.outer
    return horizon


def remaining(default: float | None = None) -> float | None:
    """Seconds left in the current budgeted run or deadline scope, else ``default``.

    Inside an attempt of a function decorated with ``policy.retry()`` this is the time
    until the earliest of the run's budget end (first attempt's start plus
    ``max_elapsed``), its deadlines and every enclosing one (a :func:`deadline_scope`, the
    run this run is nested in); inside a scope, the time until the scope's end. Never
    negative, it only decreases within a frame (a wall clock stepped back hands out no
    extra time), and it is per thread and per asyncio task. Outside any run or scope it
    returns ``default``, so that ``timeout=remaining(30.0)`` never silently means "no
    timeout" to a client that reads ``None`` that way::

        httpx.get(url, timeout=tenacity_budget.remaining(30.0))

    Raises:
        TypeError: for a ``default`` that is neither ``None`` nor a number (a bool is not).
        ValueError: for a ``default`` that is NaN, infinite or negative.
    """
    if default is not None and not (type(default) is float and 0.0 <= default < math.inf):
        _check_default(default)  # the common float default passes without a call
    horizon = _HORIZON.get()
    if horizon is not None and horizon.stale:
        horizon = current_horizon()
    if horizon is None:
        return default
    left = horizon.left()
    if left == math.inf:
        return default
    left = min(max(0.0, left), horizon.last)
    horizon.last = left
    return left


def _check_default(default: object) -> None:
    """Refuse a ``remaining()`` default that is not ``None`` or a finite number ``>= 0``."""
    try:
        # A number past float range is finite (an int of 400 digits); infinity is not.
        value = _seconds(default, "remaining(default): default", allow_inf=True)
        if value == math.inf and default == math.inf:
            raise ValueError(default)
    except TypeError:
        raise TypeError(
            f"remaining(default): default must be None or a number of seconds, "
            f"got {type(default).__name__}"
        ) from None
    except (ValueError, ArithmeticError):  # a Decimal signalling NaN raises on conversion
        raise ValueError(
            f"remaining(default): default must be a finite number >= 0, got {default!r}"
        ) from None


def ambient_deadline() -> datetime | None:
    """The earliest enclosing deadline as an aware UTC instant, or ``None`` outside any.

    For integrations that hand a deadline on (a task message, a request header): the end
    of the innermost :func:`deadline_scope` or budgeted run, merged with all enclosing ones.
    Never raises: an end past anything a ``datetime`` can hold is no deadline (``None``),
    as :meth:`Horizon.deadline` says.
    """
    horizon = current_horizon()
    return None if horizon is None else horizon.deadline()


def _enter(horizon: Horizon) -> Token[Horizon | None]:
    """Make ``horizon`` (built on the current frame) current; leave it with :func:`_leave`."""
    return _HORIZON.set(horizon)


def _leave(horizon: Horizon, token: Token[Horizon | None]) -> None:
    """Leave ``horizon``, in whatever order its frames are left: no frame left stays behind.

    Left while it is the current frame, the current frame becomes its nearest enclosing
    frame still open (frames left out of order before it are skipped). Left while a frame
    entered inside it is still current (out of order: a scope held by a generator across
    its ``yield``), that frame stays current, with the ends it was given when entered.

    Raises:
        RuntimeError: when called in another task or thread than the one that entered it.
    """
    current = _HORIZON.get()
    try:
        _HORIZON.reset(token)  # validates the context; the frame before it is current again
    except ValueError:
        # An async generator finalized by the event loop, a generator closed by another
        # thread: the entering context cannot be reached, so no context may see the frame
        # (its own context may still leave it, quietly).
        horizon.stale = True
        raise RuntimeError(
            "a deadline scope must be exited in the task (or thread) that entered it; "
            "this one was entered in another (enter and exit it in the same task)"
        ) from None
    horizon.closed = True
    target = current
    if current is horizon:
        target = horizon.outer
        while target is not None and target.stale:
            target = target.outer
    else:
        horizon.stale = True  # left out of order: a frame entered inside it stays current
    if target is not (None if token.old_value is Token.MISSING else token.old_value):
        _HORIZON.set(target)


@contextmanager
def _frame(horizon: Horizon) -> Iterator[Horizon]:
    token = _enter(horizon)
    try:
        yield horizon
    finally:
        _leave(horizon, token)


class deadline_scope:  # lower case: used like a function, `with deadline_scope(2):`
    """Set an ambient deadline for the code inside: ``with deadline_scope(2.0): ...``.

    ``seconds`` from now (monotonic clock), or an aware ``deadline`` (wall clock); the
    earlier of both when both are given. Scopes nest, and the innermost effective deadline
    is the earliest of all enclosing ones: a scope can shorten the time left, never extend
    it. Every budgeted run started inside treats the scope's end as its own ``deadline=``
    (it never ends after it; reason ``deadline`` when that is what stops it), and
    :func:`remaining` inside never exceeds the time left. Works as ``with`` and
    ``async with``; per thread and per asyncio task, like :func:`remaining`.

    A scope's end is fixed when it is entered (the earliest of its own and every enclosing
    one). Scopes may be left in any order (a scope held by a generator across its
    ``yield``): a scope left is never the deadline of code outside it afterwards, and one
    still open keeps the end it had. An end past anything a run can reach is no deadline for
    the runs inside: ``seconds`` up to ``1e300`` keep their (finite) time left for
    :func:`remaining`, beyond that a scope has no end; a ``datetime.max`` deadline is none.

    Raises:
        TypeError: when neither ``seconds`` nor ``deadline`` is given, or for a
            ``deadline`` that is not a datetime.
        ValueError: for NaN or negative ``seconds``, or a naive ``deadline``.
        RuntimeError: on entering a scope twice, exiting one not entered or already
            exited, or exiting it in another task or thread than the one that entered it.
    """

    __slots__ = ("_token", "deadline", "horizon", "seconds")

    def __init__(self, seconds: float | None = None, *, deadline: datetime | None = None) -> None:
        if seconds is None and deadline is None:
            raise TypeError("deadline_scope needs seconds= (from now) or deadline= (aware)")
        if seconds is not None:
            seconds = _seconds(seconds, "seconds", allow_inf=True)
            if seconds > _MAX_SCOPE:
                seconds = math.inf  # beyond any clock: no end from seconds
        if deadline is not None:
            check_aware(deadline)
        self.seconds = seconds
        self.deadline = deadline
        self.horizon: Horizon | None = None
        self._token: Token[Horizon | None] | None = None

    def __repr__(self) -> str:
        return f"deadline_scope(seconds={self.seconds!r}, deadline={self.deadline!r})"

    def __enter__(self) -> Horizon:
        if self._token is not None:
            raise RuntimeError("a deadline_scope is entered once; make a new one")
        mono_end = math.inf if self.seconds is None else time.monotonic() + self.seconds
        wall_end = math.inf if self.deadline is None else self.deadline.timestamp()
        self.horizon = Horizon(current_horizon(), mono_end=mono_end, wall_end=wall_end)
        self._token = _enter(self.horizon)
        return self.horizon

    def __exit__(self, *exc_info: object) -> None:
        horizon = self.horizon
        if horizon is None or self._token is None:
            raise RuntimeError("this deadline_scope was exited without being entered")
        if horizon.closed:
            raise RuntimeError("this deadline_scope was already exited")
        _leave(horizon, self._token)

    async def __aenter__(self) -> Horizon:
        return self.__enter__()

    async def __aexit__(self, *exc_info: object) -> None:
        self.__exit__(*exc_info)


@contextmanager
def remaining_until(end: datetime) -> Iterator[None]:
    """Inside the block, :func:`remaining` counts down to the wall-clock instant ``end``.

    For integrations that run attempts themselves rather than through tenacity (the
    Celery integration runs one attempt per task execution): the block is one attempt
    of a run that must be over by ``end``. An enclosing deadline still holds.
    """
    check_aware(end, "end")
    with _frame(Horizon(current_horizon(), wall_end=end.timestamp())):
        yield
