"""What the HTTP clients share: the rule of which failed attempts are retried
(:func:`retry_cures`), a run's horizon and the wait its outcome dictates, the deadline
headers of its attempts (:class:`DeadlineHeaders`), errors of a client's own kind that are
also a :class:`~tenacity_budget.BudgetExhausted`, the async hard stop's one timer per event
loop (:class:`Watchdog`), and the ``throttle=`` option (:func:`check_throttle`, a rejected
first attempt's report). See docs/cookbook.md.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from collections.abc import Callable, MutableMapping
from dataclasses import replace
from typing import Any, cast

from tenacity import Future

from ._validate import is_throttle
from ._validate import throttle as _throttle
from .context import Horizon, ambient_deadline, current_horizon, earliest
from .exhaustion import BudgetExhausted, ExhaustionReport, StopReason, Throttled
from .http import retry_after
from .strategies import reads_results


def retry_cures(
    exc: BaseException,
    transport: tuple[type[BaseException], ...],
    not_cured: tuple[type[BaseException], ...],
) -> bool:
    """Whether a failed attempt is worth retrying: the one rule of every HTTP client.

    The semantics of the httpx transports, shared by the requests adapter and the aiohttp
    middleware: an error of the client's ``transport`` kinds (connecting, sending,
    reading, a timeout, a connection the server dropped, a proxy) is retried, for a retry
    may cure it; not a TLS failure (a certificate refused, a handshake failed: an
    :class:`ssl.SSLError` raised or anywhere in the error's causes), nor a protocol error
    of the request itself (an unsupported scheme, a request that cannot be written):
    sent again, they fail again. ``not_cured`` names the client's own kinds of these two
    (``httpx.LocalProtocolError``, ``requests.exceptions.SSLError``,
    ``aiohttp.ClientSSLError``...).
    """
    if not isinstance(exc, transport) or isinstance(exc, not_cured):
        return False
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:  # the chain, as far as it goes
        if isinstance(cause, ssl.SSLError):
            return False
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return True


def run_horizon(started: float, max_elapsed: float, deadline_ts: float) -> Horizon | None:
    """The horizon of a run starting at ``started`` (monotonic): its budget end, the policy's
    deadline (``deadline_ts``, epoch seconds; ``inf``: none) and the ambient frame.

    ``None`` when nothing but its budget bounds the run: its first attempt then has the
    whole ``max_elapsed`` (:func:`time_left`), and a retry builds the horizon then.
    """
    outer = current_horizon()
    if outer is None and deadline_ts == math.inf:
        return None
    return Horizon(outer, mono_end=started + max_elapsed, wall_end=deadline_ts)


def time_left(horizon: Horizon | None, max_elapsed: float) -> float:
    """The time left of a run (:func:`run_horizon`) at its first attempt: ``Horizon.left()``."""
    return max_elapsed if horizon is None else horizon.left()


def retry_frame(horizon: Horizon | None, started: float, max_elapsed: float) -> Horizon:
    """The frame a run whose first attempt failed retries in: its horizon, built if not yet.

    ``policy.retry()``'s run, started after the first attempt, is bounded by it: the run
    never ends later than a run started with the first attempt would.
    """
    return horizon if horizon is not None else Horizon(None, mono_end=started + max_elapsed)


class DeadlineHeaders:
    """The deadline headers every attempt of a client carries: each ``(name, format)`` of
    ``senders`` (:func:`~tenacity_budget.http._deadline_senders`) with the attempt's time
    left. Those of an attempt with the run's whole ``budget`` left (a first attempt nothing
    else bounds: most requests) are formatted once, here."""

    __slots__ = ("budget", "senders", "whole")

    def __init__(self, senders: tuple[tuple[str, Callable[[float], str]], ...], budget: float):
        self.senders = senders
        self.budget = budget
        self.whole = tuple((name, format_left(budget)) for name, format_left in senders)

    def write(self, headers: MutableMapping[str, str], left: float) -> None:
        """Set the headers of an attempt with ``left`` seconds (none left below 0)."""
        if left == self.budget:
            for name, value in self.whole:
                headers[name] = value
            return
        if left < 0.0:
            left = 0.0
        for name, format_left in self.senders:
            headers[name] = format_left(left)


@reads_results
def outcome_hint(outcome: object) -> float | None:
    """The wait an attempt's outcome dictates (:func:`~tenacity_budget.http.retry_after`):
    a response retried for its status, or an error carrying one; ``None`` otherwise.
    """
    return retry_after(outcome)


_KINDS: dict[type[BaseException], type[Any]] = {}

# What an OSError holds outside ``args`` and ``__dict__`` (requests' and aiohttp's
# connection errors are OSErrors): copied as they are.
_OS_FIELDS = ("errno", "strerror", "filename", "filename2")


def exhausted(last: BaseException, spent: BudgetExhausted) -> BaseException:
    """An error of ``last``'s own kind that is also a ``BudgetExhausted`` with ``.report``.

    ``except requests.ConnectionError`` (or ``aiohttp.ClientConnectionError``) and ``except
    BudgetExhausted`` both catch it; it reads as ``last`` (the same ``args``, OSError
    fields and attributes: requests' ``.request``, aiohttp's ``.os_error``...) but for its
    ``str``, the report. It pickles (rebuilt by :func:`_rebuild`), whatever ``last``'s
    own ``__init__`` asks for.
    """
    error: Any = _fill(_combined(type(last)), last.args, _os_fields(last), vars(last))
    error.last_attempt = spent.last_attempt
    error.report = spent.report
    return error  # type: ignore[no-any-return]


def _combined(kind: type[BaseException]) -> type[Any]:
    """The class that is both ``kind`` and ``BudgetExhausted`` (built once per kind)."""
    combined = _KINDS.get(kind)
    if combined is None:
        namespace = {
            "__module__": kind.__module__,
            "__qualname__": kind.__qualname__,
            "__str__": BudgetExhausted.__str__,
            "__reduce__": _reduce,
            "__doc__": f"{kind.__qualname__} raised by a spent budget: also a BudgetExhausted.",
            "_budget_kind": kind,
        }
        combined = _KINDS.setdefault(kind, type(kind.__name__, (kind, BudgetExhausted), namespace))
    return combined


def _os_fields(error: BaseException) -> dict[str, Any]:
    """The OSError fields of ``error`` (none for another kind of error)."""
    if not isinstance(error, OSError):
        return {}
    return {name: getattr(error, name) for name in _OS_FIELDS}


def _fill(
    cls: type[BaseException],
    args: tuple[Any, ...],
    fields: dict[str, Any],
    state: dict[str, Any],
) -> BaseException:
    """An error of ``cls`` holding ``args``, OSError ``fields`` and attributes ``state``.

    Built without ``cls.__init__``, whose parameters are not its ``args`` in general
    (aiohttp's ``ClientConnectorError(connection_key, os_error)`` has ``(errno, strerror)``).
    """
    error = cls.__new__(cls, *args)
    BaseException.__init__(error, *args)
    for name, value in fields.items():
        setattr(error, name, value)
    error.__dict__.update(state)
    return error


def _reduce(error: Any) -> tuple[Any, ...]:
    """How a combined error pickles: its kind, args, fields, attributes and report."""
    state = {k: v for k, v in vars(error).items() if k not in ("last_attempt", "report")}
    report: ExhaustionReport = error.report
    last = report.last_exception
    # The run's last error is this error's original (rebuilt from its fields: its own class
    # may not pickle), or another the run ended on (a throttle's rejection: kept as it is).
    kept = last if isinstance(last, Throttled) else None
    had_last = last is not None and kept is None
    detached = replace(report, last_exception=kept)
    return (
        _rebuild,
        (error._budget_kind, error.args, _os_fields(error), state, detached, had_last),
    )


def _rebuild(
    kind: type[BaseException],
    args: tuple[Any, ...],
    fields: dict[str, Any],
    state: dict[str, Any],
    report: ExhaustionReport,
    had_last: bool,
) -> BaseException:
    """A combined error again, from what :func:`_reduce` kept (unpickling calls it)."""
    last = _fill(kind, args, fields, state)  # the original error, as the run saw it
    if had_last:
        report = replace(report, last_exception=last)
    elif report.last_exception is not None:  # the run ended on another: a rejection
        last = report.last_exception
    error: Any = _fill(_combined(kind), args, fields, state)
    error.last_attempt = Future.construct(max(1, report.attempts), last, True)
    error.report = report
    return error  # type: ignore[no-any-return]


class Watchdog:
    """The hard stop of every async attempt of one event loop, with one timer for them all.

    Each attempt is watched until its end (a loop time); the timer is armed for the
    earliest end and, when it fires, cuts the attempts past their end and arms itself for
    the next. Sequential requests that each end before the timer fires cost a dict entry,
    not a timer each (asyncio.timeout's per-request timer was a third of the aiohttp
    middleware). The aiohttp middleware and the async httpx transport each keep one.
    """

    __slots__ = ("cut", "loop", "tasks", "timer", "when")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.tasks: dict[asyncio.Task[Any], float] = {}
        self.cut: set[asyncio.Task[Any]] = set()
        self.timer: asyncio.TimerHandle | None = None
        self.when = math.inf

    def watch(self, task: asyncio.Task[Any], end: float) -> None:
        """Cancel ``task`` at the loop time ``end`` unless it is unwatched before."""
        self.tasks[task] = end
        if end < self.when:
            if self.timer is not None:
                self.timer.cancel()
            self.when = end
            self.timer = self.loop.call_at(end, self._fire)

    def unwatch(self, task: asyncio.Task[Any]) -> None:
        """The attempt of ``task`` ended: leave it alone."""
        self.tasks.pop(task, None)
        if self.cut:
            self.cut.discard(task)

    def cut_off(self, task: asyncio.Task[Any]) -> bool:
        """Whether the cancellation ``task`` received is the watchdog's alone (consumed)."""
        return task in self.cut and task.uncancel() == 0

    def _fire(self) -> None:
        now = self.loop.time()
        earliest = math.inf
        for task, end in list(self.tasks.items()):
            if end <= now:
                del self.tasks[task]
                self.cut.add(task)
                task.cancel()
            elif end < earliest:
                earliest = end
        self.when = earliest
        self.timer = None if earliest == math.inf else self.loop.call_at(earliest, self._fire)


# -- throttle= ----------------------------------------------------------------------------


def check_throttle(throttle: Any) -> tuple[Any, Callable[[str], Any] | None]:
    """``(throttle, None)`` for an adaptive throttle (or ``None``), ``(None, throttle)`` for a
    callable mapping a request's host to its throttle: every client's ``throttle=``, checked
    by the one throttle check (:func:`tenacity_budget._validate.throttle`).

    Raises:
        TypeError: for anything else (saying what a throttle is).
    """
    checked = _throttle(throttle, per_host=True)
    if checked is None or is_throttle(checked):
        return checked, None
    return None, cast(Callable[[str], Any], checked)


def host_throttle(of: Callable[[str], Any], host: str | None) -> Any:
    """The throttle a ``throttle=`` callable maps ``host`` to (checked: an adaptive one)."""
    throttle, nested = check_throttle(of(host or ""))
    if throttle is None or nested is not None:
        raise TypeError("the throttle callable must return an AdaptiveThrottle")
    return throttle


def rejected_first(throttle: Any, policy: Any, started: float) -> tuple[Throttled, BudgetExhausted]:
    """The rejection of a first attempt the throttle refused, and the ``BudgetExhausted``
    (reason ``throttled``, 0 attempts: nothing was sent) a client's error is made from;
    ``policy`` is the client's :class:`~tenacity_budget.BackoffPolicy`."""
    rejection = Throttled(getattr(throttle, "name", "default"), throttle.probability)
    report = ExhaustionReport(
        attempts=0,
        affordable=policy.max_attempts(),
        slept=0.0,
        elapsed=time.monotonic() - started,
        budget=policy.max_elapsed,
        deadline=earliest(ambient_deadline(), policy.deadline),
        reason=StopReason.THROTTLED,
        last_exception=rejection,
    )
    return rejection, BudgetExhausted(Future.construct(1, rejection, True), report)
