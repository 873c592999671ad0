"""httpx transports that retry each request within a budget and tell the next hop its deadline.

:class:`BudgetTransport` and :class:`AsyncBudgetTransport` wrap another httpx transport and
send each request as one budgeted run of a :class:`~tenacity_budget.BackoffPolicy`:
retries on transport errors and listed statuses for idempotent methods with a replayable
body, ``Retry-After`` honoured, each attempt bounded by the time left, which it also sends
downstream in ``X-Request-Timeout-Ms``. Spent on a status, the last response is returned
(:func:`exhaustion_report` says why); spent on a transport error, an error that is both
that kind of ``httpx.TransportError`` and a :class:`~tenacity_budget.BudgetExhausted` is
raised. Needs the ``httpx`` extra. The guide: docs/deadline-propagation.md
("The httpx transports, attempt by attempt").
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, cast

import tenacity
from tenacity import RetryCallState

try:
    import httpx
except ImportError as exc:  # a missing extra, named at import: the module is nothing without it
    raise ImportError(
        "tenacity_budget.httpx needs httpx: pip install 'tenacity-budget[httpx]'"
    ) from exc

from ._client_hedge import ClientHedge, check_hedge, hedged_request
from ._clients import (
    DeadlineHeaders,
    Watchdog,
    check_throttle,
    host_throttle,
    rejected_first,
    retry_cures,
    retry_frame,
    run_horizon,
    time_left,
)
from .context import Horizon, ambient_deadline, deadline_scope
from .decision import admit
from .exhaustion import BudgetExhausted, ExhaustionReport, StopReason, Throttled
from .http import DEADLINE_HEADER, _check_methods, _check_statuses, _deadline_senders, wait_hint
from .retrying import _AsyncBudgetStop
from .strategies import reads_results

if TYPE_CHECKING:
    from .policy import BackoffPolicy

__all__ = ["AsyncBudgetTransport", "BudgetTransport", "exhaustion_report"]

DEFAULT_RETRY_STATUSES: frozenset[int] = frozenset({429, 502, 503, 504})
"""Statuses retried by default: too many requests, bad gateway, unavailable, gateway timeout."""

DEFAULT_METHODS: frozenset[str] = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})
"""Methods retried by default: the idempotent ones of RFC 9110 §9.2.2."""

REPORT_EXTENSION = "tenacity_budget.report"
"""The ``response.extensions`` key of the report of a run that gave up on a status."""

_PHASES = ("connect", "read", "write", "pool")

# Seconds before the run's end at which an async attempt stops waiting for a pool slot
# (see _pool_bounded).
_POOL_LEAD = 0.02

# The least time an attempt the run's stop admitted is given: the stop admits an attempt
# with nothing left when its estimate of an attempt is 0 (a schedule that fills its budget
# exactly, on the virtual clock), and a 0 s socket timeout fails before a byte is sent.
_LEAST = 0.001

_NO_FRAME = nullcontext()

# A time left past this (about 31 years) bounds no socket call: Python's socket timeouts
# overflow past about 9.2e9 s (nanoseconds in 64 bits), so the request's own timeouts apply.
_UNBOUNDED = 1e9

# httpcore's asyncio pool, whose slots a cut request can leave reserved (_reclaim_orphans).
try:
    from httpcore import AsyncConnectionPool as _ConnectionPool
except ImportError:  # pragma: no cover (an httpx without httpcore)
    _ConnectionPool = None  # type: ignore[assignment,misc]

# Transport errors that a retry cannot cure: the request itself is wrong (a TLS failure
# is found in the causes of a ConnectError). The rule of every client: retry_cures.
_TRANSPORT = (httpx.TransportError,)
_NOT_RETRIED: tuple[type[httpx.TransportError], ...] = (
    httpx.UnsupportedProtocol,
    httpx.LocalProtocolError,
)


def _retryable(exc: BaseException) -> bool:
    """Whether a failed attempt is worth retrying: a transport error a retry may cure."""
    return retry_cures(exc, _TRANSPORT, _NOT_RETRIED)


def exhaustion_report(response: httpx.Response) -> ExhaustionReport | None:
    """The report of the run that gave up and returned this response, else ``None``.

    A transport returns the last response when the budget is spent on a retryable status
    (a 503 that kept coming, a ``Retry-After`` longer than the time left); this says how
    the budget was spent (``report.reason``, ``report.attempts``...). ``None`` for a
    response that ended its run by itself (success, or a status not retried).
    """
    report = response.extensions.get(REPORT_EXTENSION)
    return report if isinstance(report, ExhaustionReport) else None


@dataclass(frozen=True, slots=True)
class _Config:
    """A transport's validated options (``transport.config``), shared by sync and async.

    Attributes:
        policy: the policy each request runs under.
        retry_statuses: the response statuses retried.
        methods: the request methods retried; any other is sent once.
        deadline_header: the header carrying the time left in our format (whole
            milliseconds), or ``None`` when none is sent in it.
        budget: the retry budget every retry draws from, or ``None``.
        deadline_senders: each ``(header, format)`` the time left is sent with.
    """

    policy: BackoffPolicy
    retry_statuses: frozenset[int]
    methods: frozenset[str]
    deadline_header: str | None
    budget: Any
    deadline_senders: tuple[tuple[str, Callable[[float], str]], ...] = ()

    @classmethod
    def build(
        cls,
        policy: BackoffPolicy,
        retry_statuses: Iterable[int],
        methods: Iterable[str],
        deadline_header: str | None,
        budget: Any,
        deadline_headers: Iterable[str] | None = None,
    ) -> _Config:
        """Validate the options (``TypeError``/``ValueError`` saying which one is wrong)."""
        from .policy import BackoffPolicy

        if not isinstance(policy, BackoffPolicy):
            raise TypeError(f"policy must be a BackoffPolicy, got {type(policy).__name__}")
        if budget is not None and not all(
            callable(getattr(budget, name, None)) for name in ("deposit", "try_withdraw", "stop")
        ):
            raise TypeError(
                "budget must be a retry budget (RetryBudget or RedisRetryBudget: deposit(), "
                f"try_withdraw(), stop()), got {type(budget).__name__}"
            )
        senders = _deadline_senders(deadline_header, deadline_headers)
        if deadline_headers is not None:
            ours = DEADLINE_HEADER.lower()
            deadline_header = next((h for h, _ in senders if h.lower() == ours), None)
        elif senders:
            deadline_header = senders[0][0]
        return cls(
            policy,
            _check_statuses(retry_statuses),
            _check_methods(methods),
            deadline_header,
            budget,
            senders,
        )

    def retries(self, request: httpx.Request) -> bool:
        """Whether ``request`` may be sent more than once: a listed method, a replayable body.

        A body given as bytes, text, JSON, form fields or files can be sent again; one given
        as an iterator or a generator is consumed by its first attempt, and so is a
        multipart upload with a file that cannot seek back to its start (a pipe, a socket,
        an object with no ``seekable()``): such a request is sent once.
        """
        if request.method not in self.methods:
            return False
        stream = request.stream
        return isinstance(stream, httpx.ByteStream) or _replayable(stream)

    def not_replayed(self, response: httpx.Response, started: float) -> None:
        """Report ``not_replayable`` on a one-shot request's retryable status."""
        if response.status_code in self.retry_statuses:
            response.extensions[REPORT_EXTENSION] = ExhaustionReport(
                attempts=1,
                affordable=self.policy.max_attempts(),
                slept=0.0,
                elapsed=time.monotonic() - started,
                budget=self.policy.max_elapsed,
                deadline=ambient_deadline(),
                reason=StopReason.NOT_REPLAYABLE,
                last_exception=None,
            )

    def note_not_replayed(self, request: httpx.Request, exc: BaseException) -> None:
        """Note on a one-shot request's retryable transport error why it was not retried."""
        if request.method in self.methods and _retryable(exc):
            exc.add_note(
                "tenacity_budget: not retried (not_replayable): the request body cannot be "
                "sent again (a generator, a file that cannot seek back)"
            )


def _replayable(stream: object) -> bool:
    """Whether a request body sends the same bytes on every attempt.

    Bytes do. A multipart form does when each of its files is bytes or text, or a file
    object that says it can seek (``seekable()``): httpx reads such a file again from its
    start on each attempt. A file that cannot seek back (httpx then goes on from where the
    first attempt stopped, sending it truncated or empty) makes the whole form one-shot,
    as does anything else: an iterator, a generator, a stream of unknown kind.
    """
    if isinstance(stream, httpx.ByteStream):
        return True
    # httpx's multipart stream is a private class: it is known by its shape, a boundary and
    # the list of its parts, each rendered again from its start by every attempt.
    fields = getattr(stream, "fields", None)
    if not isinstance(getattr(stream, "boundary", None), bytes) or not isinstance(fields, list):
        return False
    return all(
        callable(getattr(field, "render", None)) and _rewindable(getattr(field, "file", b""))
        for field in fields
    )


def _rewindable(file: object) -> bool:
    """Whether a multipart file part is read the same way by every attempt."""
    if isinstance(file, str | bytes):
        return True
    seekable = getattr(file, "seekable", None)
    if not callable(seekable):
        return False
    try:
        return seekable() is True
    except (OSError, ValueError):  # a closed file, a broken descriptor
        return False


class _Call:
    """One request's run: the request, whether it may be retried, its own timeouts, its
    start, its horizon (the run's budget end over the ambient frame), the latest response.

    The latest attempt let through (:meth:`_Transport._admit`) sets ``timeout`` (seconds it
    is given), ``end`` (the monotonic instant it must be over by) and ``binding`` (which end
    of the run that is: ``wall_clock`` for the budget, ``deadline`` for a deadline).
    """

    __slots__ = (
        "binding",
        "end",
        "horizon",
        "own",
        "received",
        "request",
        "retried",
        "started",
        "throttle",
        "timeout",
        "timeouts",
    )

    def __init__(
        self, request: httpx.Request, started: float, retried: bool, max_elapsed: float, wall: float
    ) -> None:
        self.request = request
        # Asked before the first attempt: sending a body can replace its stream.
        self.retried = retried
        timeouts = request.extensions.get("timeout")
        self.timeouts: dict[str, Any] = timeouts if isinstance(timeouts, dict) else {}
        self.started = started
        self.received: httpx.Response | None = None
        self.throttle: Any = None  # the throttle its attempts ask (and tell), if any
        # Outside any frame and without a deadline, the run's budget alone bounds it: its
        # horizon is built at its first retry (a first attempt has the whole budget).
        self.horizon = run_horizon(started, max_elapsed, wall)
        budget_end = started + max_elapsed
        outer = None if self.horizon is None else self.horizon.outer
        # Whether the run's own budget is its earliest monotonic end (a tie is a deadline's).
        self.own = outer is None or outer.mono_end > budget_end

    timeout: float
    end: float
    binding: StopReason


class _Cut(Exception):
    """An async attempt the hard stop cut at the run's end (chained from its TimeoutError)."""

    def __init__(self, reason: StopReason) -> None:
        super().__init__(f"the attempt was cut: the run's time was up ({reason.value})")
        self.reason = reason


@reads_results
def _response_hint(outcome: object) -> float | None:
    """The wait a retryable response's headers dictate (``Retry-After``, ...), or ``None``.

    The policy's wait hands it the attempt's outcome: a response retried for its status, or
    a transport error, which dictates nothing.
    """
    return wait_hint(outcome.headers) if isinstance(outcome, httpx.Response) else None


def _bounded_timeouts(timeouts: dict[str, Any], left: float) -> dict[str, float | None]:
    """Every httpx timeout phase set to ``left``, or to the request's own where shorter."""
    if left > _UNBOUNDED:
        return {phase: _seconds(timeouts.get(phase)) for phase in _PHASES}
    get = timeouts.get
    own: tuple[Any, ...] = (get("connect"), get("read"), get("write"), get("pool"))
    if None not in own and max(own) <= left:
        return timeouts  # every phase of the request's own is shorter: nothing to change
    connect, read, write, pool = own
    return {  # written out: this runs for every request
        "connect": left if connect is None else float(min(connect, left)),
        "read": left if read is None else float(min(read, left)),
        "write": left if write is None else float(min(write, left)),
        "pool": left if pool is None else float(min(pool, left)),
    }


def _binding(own: bool, horizon: Horizon | None, left: float) -> StopReason:
    """Which end binds an attempt with ``left`` seconds: ``deadline`` where an enclosing
    end (``own`` false) or the wall clock's binds or ties, else the run's ``wall_clock``."""
    if not own or (
        horizon is not None
        and horizon.wall_end != math.inf
        and left >= horizon.wall_end - time.time()
    ):
        return StopReason.DEADLINE
    return StopReason.WALL_CLOCK


def _seconds(own: Any) -> float | None:
    return None if own is None else float(own)


def _pool_bounded(timeouts: dict[str, Any], left: float) -> dict[str, Any]:
    """The request's own timeouts, with the wait for a pool slot ending before the run's end.

    An async attempt is cancelled as a whole at the run's end; cancelled while it waits for
    a connection of httpx's pool, at the moment a connection is handed to it, it would leave
    that connection reserved for good (httpcore 1.0.9; plain httpx under ``asyncio.timeout``
    shows it too). So the pool wait ends by httpx's own ``pool`` timeout, :data:`_POOL_LEAD`
    (or half the time left, where less is left) before the run's end: the cancellation
    never lands in the pool wait. The other phases are the request's own; the hard
    deadline bounds them.
    """
    pool = left - min(_POOL_LEAD, left / 2)
    own = timeouts.get("pool")
    if own is not None and own <= pool:
        return timeouts  # the request's own is shorter: nothing to change
    return {**timeouts, "pool": pool}


class _Transport:
    """What both transports share: the options, the admission of attempts, the run's end."""

    config: _Config
    _asyncio: bool
    _bare: bool  # the wrapped transport is httpx's own (see _frame)
    _headers: DeadlineHeaders
    _statuses: frozenset[int]
    _clamp: Callable[[dict[str, Any], float], dict[str, Any]]

    def _setup(self, config: _Config, throttle: Any) -> None:
        self.config = config
        self.budget = config.budget
        policy = config.policy
        self._max_elapsed = policy.max_elapsed
        self._headers = DeadlineHeaders(config.deadline_senders, self._max_elapsed)
        self._statuses = config.retry_statuses
        self._deadline_ts = policy.terms.deadline_ts  # inf: none
        is_async = config.budget is not None and bool(getattr(config.budget, "is_async", False))
        if is_async and not self._asyncio:
            raise TypeError(
                "the retry budget is asyncio (an asyncio Redis client): use a sync "
                "client, or AsyncBudgetTransport"
            )
        stop = policy.stop()
        # The one decision asks the retry budget last: a retry the policy (or the throttle)
        # refuses never spends the shared budget (an asyncio budget's is awaited after it).
        withdraw = None if config.budget is None else config.budget.try_withdraw
        self._stop_parts = (stop, withdraw, is_async)
        statuses = config.retry_statuses
        self._kwargs: dict[str, Any] = {
            "wait": policy.wait(retry_after=_response_hint),
            "retry": tenacity.retry_if_result(lambda response: response.status_code in statuses)
            | tenacity.retry_if_exception(_retryable),
            "retry_error_callback": _give_up,
        }
        self._throttle, self._throttle_of = check_throttle(throttle)
        self._throttled = throttle is not None
        self._controllers: dict[Any, tenacity.BaseRetrying] = {}
        self._controller = self._build(self._throttle)

    def _build(self, throttle: Any) -> tenacity.BaseRetrying:
        """The tenacity controller of runs asking ``throttle`` (``None``: none) and the budget."""
        stop, withdraw, is_async = self._stop_parts
        admit = None if throttle is None else throttle.admit
        composed: Any = stop if admit is None else stop.compose(throttle=admit)
        if withdraw is not None:
            composed = (
                _AsyncBudgetStop(composed, withdraw)
                if is_async
                else stop.compose(grant=withdraw, throttle=admit)
            )
        kind = tenacity.AsyncRetrying if self._asyncio else tenacity.Retrying
        return kind(stop=composed, **self._kwargs)

    def _admit_first(self, call: _Call) -> None:
        """The first attempt's admission by the request's throttle (decision.admit), then
        the call's deposit in the retry budget: a rejected call deposits nothing.

        Raises:
            httpx.ConnectError: also a BudgetExhausted (reason ``throttled``), when the
                throttle rejects it: nothing was sent.
        """
        if self._throttled:
            throttle = self._throttle_for(call.request)
            call.throttle = throttle
            if admit(throttle.admit) is not None:
                self._reject(call, throttle)
        if self.budget is not None:
            self.budget.deposit()

    def _throttle_for(self, request: httpx.Request) -> Any:
        """The throttle of ``request``: the transport's, or its host's."""
        if self._throttle is not None:
            return self._throttle
        assert self._throttle_of is not None
        return host_throttle(self._throttle_of, request.url.host)

    def _reject(self, call: _Call, throttle: Any) -> NoReturn:
        """End a run whose first attempt the throttle rejected: an ``httpx.ConnectError``
        (the request was never sent, as when no connection is made) that is also a
        :class:`~tenacity_budget.BudgetExhausted` with reason ``throttled``."""
        rejection, spent = rejected_first(throttle, self.config.policy, call.started)
        raise _throttled_error(rejection, spent, call.request) from rejection

    @property
    def policy(self) -> BackoffPolicy:
        """The policy each request runs under."""
        return self.config.policy

    @property
    def retry_statuses(self) -> frozenset[int]:
        """The response statuses retried."""
        return self.config.retry_statuses

    @property
    def methods(self) -> frozenset[str]:
        """The request methods retried; any other is sent once."""
        return self.config.methods

    @property
    def deadline_header(self) -> str | None:
        """The header carrying the time left in whole milliseconds, or ``None``."""
        return self.config.deadline_header

    def _frame(self, timeout: float) -> AbstractContextManager[object]:
        """The ambient frame of an attempt: :func:`remaining` inside the wrapped transport.

        httpx's own transports run no code that reads it (the client's event hooks run
        outside the transport): they get none, which saves its cost on every request.
        """
        return _NO_FRAME if self._bare else deadline_scope(timeout)

    def _admit(self, call: _Call, first: bool) -> float:
        """Let an attempt through: its timeouts, the deadline header; the same for every attempt.

        The time left is the earliest of the run's budget end, the policy's deadline and
        any enclosing one. A retry the run's stop admitted is always sent, with that time
        (at least :data:`_LEAST`); only a first attempt with no time at all is not sent.
        The request's timeouts are bounded by it (:attr:`_clamp`); the async transport
        then arms its hard stop with it (:class:`_HardStop`).

        Raises:
            httpx.TimeoutException: for a first attempt with no time left (not sent).
        """
        horizon = call.horizon
        if horizon is None and not first:
            horizon = call.horizon = retry_frame(None, call.started, self._max_elapsed)
        left = time_left(horizon, self._max_elapsed)
        reason = _binding(call.own, horizon, left)
        if left < _LEAST:
            if first and left <= 0.0:
                raise httpx.TimeoutException(
                    "no time left to send the request: the run's budget or deadline is spent",
                    request=call.request,
                )
            left = _LEAST
        self._headers.write(call.request.headers, left)
        call.request.extensions["timeout"] = self._clamp(call.timeouts, left)
        call.timeout, call.binding = left, reason
        if self._asyncio:  # the instant _late() checks (a sync attempt cannot be late)
            call.end = time.monotonic() + left
        return left

    def _cut(self, call: _Call, state: RetryCallState | None, cut: _Cut) -> NoReturn:
        """End the run of an async attempt the hard stop cut: an ``httpx.TimeoutException``
        that is also :class:`~tenacity_budget.BudgetExhausted` (see :func:`_exhausted`),
        from the cut's ``TimeoutError``.
        """
        timeout = cut.__cause__
        assert timeout is not None
        deadline = ambient_deadline()  # outside the attempt's frame: the enclosing deadline
        own = self.config.policy.deadline
        if own is not None and (deadline is None or own < deadline):
            deadline = own
        report = ExhaustionReport(
            attempts=1 if state is None else state.attempt_number,
            affordable=self.config.policy.max_attempts(),
            slept=0.0 if state is None else state.idle_for,
            elapsed=time.monotonic() - call.started,
            budget=self._max_elapsed,
            deadline=deadline,
            reason=cut.reason,
            last_exception=timeout,
        )
        attempt = tenacity.Future.construct(report.attempts, timeout, True)
        kind = httpx.TimeoutException("the run's time was up", request=call.request)
        raise _exhausted(kind, attempt, report) from timeout

    def _once(self, call: _Call, first: BaseException | httpx.Response) -> httpx.Response:
        """The end of a run sent once (a method not retried, a body not replayable)."""
        config = self.config
        if isinstance(first, BaseException):
            config.note_not_replayed(call.request, first)
            raise first
        if call.request.method in config.methods:
            config.not_replayed(first, call.started)
        return first

    def _begin_retrying(self, call: _Call, first: BaseException | httpx.Response) -> Any:
        """The tenacity state of a run whose first attempt failed (``first``)."""
        controller = self._controller
        if call.throttle is not self._throttle:  # one throttle per host: its own controller
            controller = self._controllers.get(call.throttle) or self._controllers.setdefault(
                call.throttle, self._build(call.throttle)
            )
        retrying = controller.copy()
        retrying.begin()
        state = RetryCallState(retrying, fn=None, args=(), kwargs={})
        state.start_time = call.started
        _set_outcome(state, first)
        return retrying, state


_CANCELLED = asyncio.CancelledError


class _HardStop:
    """The hard stop of an async attempt: its task is cancelled when its time is up.

    ``asyncio.timeout``'s rule (the cancellation leaves the block as ``TimeoutError``, unless
    the task was cancelled by someone else too), as a plain ``with`` over the transport's
    :class:`~tenacity_budget._clients.Watchdog` (one timer for every attempt of a loop):
    this runs for every request.
    """

    __slots__ = ("_cancelling", "_owner", "_task", "_timeout", "_watchdog", "expired")

    def __init__(self, owner: AsyncBudgetTransport, timeout: float) -> None:
        self._owner = owner
        self._timeout = timeout
        self._watchdog: Watchdog | None = None
        self.expired = False

    def __enter__(self) -> None:
        task = asyncio.current_task()
        if task is None:  # pragma: no cover (httpx's async clients run in a task)
            raise RuntimeError("an async attempt runs inside an asyncio task")
        self._task = task
        self._cancelling = task.cancelling()
        if self._timeout <= _UNBOUNDED:
            loop = asyncio.get_running_loop()
            watchdog = self._owner._watchdog
            if watchdog is None or watchdog.loop is not loop:
                watchdog = self._owner._watchdog = Watchdog(loop)
            watchdog.watch(task, loop.time() + self._timeout)
            self._watchdog = watchdog

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        watchdog = self._watchdog
        if watchdog is None:
            return
        self._watchdog = None
        task = self._task
        if watchdog.cut and task in watchdog.cut:
            self.expired = True
        watchdog.unwatch(task)
        # uncancel() first, whatever left the block: the cancellation asked here is undone.
        if self.expired and task.uncancel() <= self._cancelling and kind is _CANCELLED:
            raise TimeoutError from exc


def _late(call: _Call) -> _Cut | None:
    """A :class:`_Cut` for an async attempt that ended after its time without being cut.

    A clock that jumps (the virtual clock does) lets an attempt run past its time without
    the hard stop firing: it is as late as a cut one.
    """
    if time.monotonic() <= call.end:
        return None
    cut = _Cut(call.binding)
    cut.__cause__ = TimeoutError("the attempt ended after the run's time was up")
    return cut


def _copy(request: httpx.Request) -> httpx.Request:
    """A hedge's own request: the same method, URL and body, headers and extensions copied."""
    return httpx.Request(
        request.method,
        request.url,
        headers=request.headers,
        stream=request.stream,
        extensions=dict(request.extensions),
    )


def _hedge_gave_up(
    request: httpx.Request,
    last: httpx.Response | None,
    exc: BaseException | None,
    report: ExhaustionReport,
) -> httpx.Response:
    """The end of a hedged run that gave up: the last response (its report attached), or an
    error of httpx's family that is also a :class:`~tenacity_budget.BudgetExhausted`."""
    if exc is None:
        assert last is not None
        last.extensions[REPORT_EXTENSION] = report
        return last
    attempt = tenacity.Future.construct(max(1, report.attempts), exc, True)
    if isinstance(exc, Throttled):  # the first attempt was rejected: nothing was sent
        raise _throttled_error(exc, BudgetExhausted(attempt, report), request) from exc
    if isinstance(exc, httpx.TransportError):
        raise _exhausted(exc, attempt, report) from exc
    if isinstance(exc, TimeoutError) and report.reason in _CUT:  # the run's end cut it
        raise _exhausted(
            httpx.TimeoutException(str(exc), request=request), attempt, report
        ) from exc
    raise BudgetExhausted(attempt, report) from exc  # non-fatal by the hedge's own rule


_CUT = (StopReason.WALL_CLOCK, StopReason.DEADLINE)


def _throttled_error(
    rejection: Throttled, spent: BudgetExhausted, request: httpx.Request
) -> BudgetExhausted:
    """A rejected first attempt's error: an ``httpx.ConnectError`` that is also ``spent``."""
    error = httpx.ConnectError(str(rejection), request=request)
    return _exhausted(error, spent.last_attempt, spent.report)


def _set_outcome(state: RetryCallState, outcome: BaseException | httpx.Response) -> None:
    if isinstance(outcome, BaseException):
        state.set_exception((type(outcome), outcome, outcome.__traceback__))
    else:
        state.set_result(outcome)


def _give_up(retry_state: RetryCallState) -> httpx.Response:
    """The end of a run the stop ended: the last response, or its transport error raised."""
    outcome = retry_state.outcome
    assert outcome is not None
    report = ExhaustionReport.from_attempt(outcome)
    if not outcome.failed:
        response: httpx.Response = outcome.result()
        response.extensions[REPORT_EXTENSION] = report
        return response
    exc = outcome.exception()
    assert exc is not None
    raise _exhausted(exc, outcome, report) from exc


def _exhausted(exc: BaseException, attempt: Any, report: ExhaustionReport) -> BudgetExhausted:
    """The error of a run spent on transport error ``exc``: of its kind, and BudgetExhausted.

    An ``httpx.ConnectError`` gives an error that ``except httpx.ConnectError``,
    ``httpx.TransportError``, ``httpx.HTTPError`` and ``BudgetExhausted`` all catch, with the
    run's ``.report``, ``.last_attempt`` and the request of ``exc``. Its kind is the nearest
    httpx class of ``exc`` (a transport's own subclass of one is caught by that one).
    """
    kind = next(
        cls
        for cls in type(exc).__mro__
        if cls.__module__ == "httpx" and issubclass(cls, httpx.TransportError)
    )
    combined = _EXHAUSTED.get(kind)
    if combined is None:
        combined = _EXHAUSTED.setdefault(kind, _exhausted_kind(kind))
    error = combined(attempt, report)
    request = getattr(exc, "_request", None)
    error._request = request if isinstance(request, httpx.Request) else None
    return error


def _exhausted_kind(kind: type[httpx.TransportError]) -> type[_Exhausted]:
    """A class that is both ``kind`` and :class:`BudgetExhausted` (built once per kind)."""
    name = f"BudgetExhausted[{kind.__name__}]"
    doc = f"A budgeted run spent on an ``httpx.{kind.__name__}``: both that and BudgetExhausted."
    # BudgetExhausted first: its __init__ and __str__; tenacity's RetryError hands the
    # attempt on to httpx's __init__ (as the message), which sets no request.
    namespace = {"__doc__": doc, "__module__": __name__, "_kind": kind}
    return type(name, (_Exhausted, kind), namespace)


class _Exhausted(BudgetExhausted):
    """The BudgetExhausted side of a transport's run spent on a transport error."""

    _kind: type[httpx.TransportError]
    _request: httpx.Request | None

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its kind, report and request (its class is built, not importable)."""
        return (_rebuild_exhausted, (self._kind, self.report, self._request))


def _rebuild_exhausted(
    kind: type[httpx.TransportError], report: ExhaustionReport, request: httpx.Request | None
) -> BudgetExhausted:
    """A pickled :func:`_exhausted` error again: its last attempt is its report's error."""
    attempt = tenacity.Future.construct(report.attempts, report.last_exception, True)
    combined = _EXHAUSTED.get(kind)
    if combined is None:
        combined = _EXHAUSTED.setdefault(kind, _exhausted_kind(kind))
    error = combined(attempt, report)
    error._request = request
    return error


# The combined class of each kind of transport error, built on first use.
_EXHAUSTED: dict[type[httpx.TransportError], type[_Exhausted]] = {}


class BudgetTransport(_Transport, httpx.BaseTransport):
    """A sync httpx transport that retries each request under a :class:`BackoffPolicy`.

    ``httpx.Client(transport=BudgetTransport(policy))``: retries on transport errors and on
    ``retry_statuses`` for ``methods``, honours ``Retry-After``, sets every timeout phase
    of each attempt to the time left, sends that time left downstream in
    ``deadline_header``, returns the last response when the budget is spent on a status
    and raises :class:`~tenacity_budget.BudgetExhausted` when spent on a transport error.

    Args:
        policy: the budget of each request (its ``max_elapsed``, deadline and backoff).
        transport: the transport to send through; default ``httpx.HTTPTransport()``.
        retry_statuses: response statuses to retry: 4xx and 5xx codes only.
        methods: request methods to retry (upper case); any other is sent once, still
            bounded by the time left and carrying the deadline header.
        deadline_header: the header carrying the time left in whole milliseconds;
            ``None`` sends none.
        deadline_headers: instead, the deadline dialects to send the time left in, by
            header name (:data:`~tenacity_budget.http.DIALECTS`; ``()`` sends none), e.g.
            ``("X-Request-Timeout-Ms", "x-envoy-upstream-rq-timeout-ms")``. With a
            ``deadline_header`` other than the default, a ``TypeError``; the default
            itself written out cannot be told apart and is accepted (then
            ``deadline_headers`` alone is sent).
        budget: a retry budget (:class:`~tenacity_budget.RetryBudget`) every retry draws
            from, shared by the requests to one dependency.

    Raises:
        TypeError, ValueError: at construction, for a bad option (an asyncio retry budget
            included: it needs :class:`AsyncBudgetTransport`).
    """

    _asyncio = False
    # Every timeout phase bounded by the time an attempt gets: a sync call cannot be cut.
    _clamp = staticmethod(_bounded_timeouts)

    def __init__(
        self,
        policy: BackoffPolicy,
        *,
        transport: httpx.BaseTransport | None = None,
        retry_statuses: frozenset[int] = frozenset({429, 502, 503, 504}),
        methods: frozenset[str] = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}),
        deadline_header: str | None = "X-Request-Timeout-Ms",
        budget: Any = None,
        deadline_headers: Iterable[str] | None = None,
        throttle: Any = None,
        hedge: Any = None,
    ) -> None:
        if hedge is not None:
            raise TypeError(
                "hedge= needs AsyncBudgetTransport: a hedge is sent beside the attempt still "
                "running and the loser is cancelled, which a sync transport cannot do (one "
                "thread waits on one response, and a sync request cannot be interrupted)"
            )
        if transport is not None and not isinstance(transport, httpx.BaseTransport):
            raise TypeError(
                f"transport must be an httpx.BaseTransport, got {type(transport).__name__}"
            )
        config = _Config.build(
            policy, retry_statuses, methods, deadline_header, budget, deadline_headers
        )
        self._setup(config, throttle)
        self.transport: httpx.BaseTransport = (
            transport if transport is not None else httpx.HTTPTransport()
        )
        self._bare = type(self.transport) is httpx.HTTPTransport

    def __repr__(self) -> str:
        return f"<BudgetTransport {self.policy!r} transport={self.transport!r}>"

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` as one budgeted run (see the class)."""
        started = time.monotonic()
        call = _Call(
            request,
            started,
            self.config.retries(request),
            self._max_elapsed,
            self._deadline_ts,
        )
        self._admit_first(call)
        try:  # the first attempt, outside tenacity's loop: most runs end with it
            timeout = self._admit(call, True)
            if self._bare:  # see _frame
                response = call.received = self.transport.handle_request(request)
            else:
                with deadline_scope(timeout):
                    response = call.received = self.transport.handle_request(request)
        except BaseException as exc:
            if call.throttle is not None and isinstance(exc, Exception):
                call.throttle.record(exc)
            return self._settle(call, exc)
        if call.throttle is not None:
            call.throttle.record(response)
        if response.status_code in self._statuses:
            return self._settle(call, response)
        return response

    def _settle(self, call: _Call, first: BaseException | httpx.Response) -> httpx.Response:
        """The end of a run whose first attempt did not succeed: retried, or as it is."""
        returned: httpx.Response | None = None
        try:
            if not call.retried:
                returned = self._once(call, first)
            elif isinstance(first, BaseException) and not _retryable(first):
                raise first
            else:
                returned = self._retry(call, first)
            return returned
        finally:
            # A response received but not handed over: the run ended otherwise (an
            # exception, an interruption between attempts).
            if call.received is not None and call.received is not returned:
                call.received.close()

    def _retry(self, call: _Call, first: BaseException | httpx.Response) -> httpx.Response:
        """Go on with a run whose first attempt failed: tenacity's loop from the second on."""
        retrying, state = self._begin_retrying(call, first)
        while True:
            do = retrying.iter(state)
            if not isinstance(do, tenacity.DoSleep):
                response: httpx.Response = do
                return response
            state.prepare_for_next_attempt()
            retrying.sleep(do)
            previous, call.received = call.received, None
            if previous is not None:  # the run is retrying it: discard it
                previous.close()
            try:
                with self._frame(self._admit(call, False)):
                    call.received = self.transport.handle_request(call.request)
            except BaseException as exc:
                if call.throttle is not None and isinstance(exc, Exception):
                    call.throttle.record(exc)
                _set_outcome(state, exc)
            else:
                if call.throttle is not None:
                    call.throttle.record(call.received)
                state.set_result(call.received)

    def close(self) -> None:
        """Close the wrapped transport."""
        self.transport.close()


class AsyncBudgetTransport(_Transport, httpx.AsyncBaseTransport):
    """An asyncio httpx transport that retries each request under a :class:`BackoffPolicy`.

    ``httpx.AsyncClient(transport=AsyncBudgetTransport(policy))``. As
    :class:`BudgetTransport` (same arguments; ``transport`` defaults to
    ``httpx.AsyncHTTPTransport()``), except that each attempt is cancelled as a whole when
    the run's time is up, whatever phase it is in; the run then ends with
    :class:`~tenacity_budget.BudgetExhausted` (reason ``wall_clock`` or ``deadline``). An
    asyncio retry budget is welcome here. Runs under asyncio (the cancellation is
    ``asyncio.timeout``), not trio.
    """

    _asyncio = True
    # The hard stop bounds the attempt; only the wait for a pool slot ends before it.
    _clamp = staticmethod(_pool_bounded)

    def __init__(
        self,
        policy: BackoffPolicy,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_statuses: frozenset[int] = frozenset({429, 502, 503, 504}),
        methods: frozenset[str] = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}),
        deadline_header: str | None = "X-Request-Timeout-Ms",
        budget: Any = None,
        deadline_headers: Iterable[str] | None = None,
        throttle: Any = None,
        hedge: Any = None,
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            raise TypeError(
                f"transport must be an httpx.AsyncBaseTransport, got {type(transport).__name__}"
            )
        config = _Config.build(
            policy, retry_statuses, methods, deadline_header, budget, deadline_headers
        )
        self._setup(config, throttle)
        self.transport: httpx.AsyncBaseTransport = (
            transport if transport is not None else httpx.AsyncHTTPTransport()
        )
        self._bare = type(self.transport) is httpx.AsyncHTTPTransport
        self._watchdog: Watchdog | None = None  # the hard stop's timer, per event loop
        statuses = config.retry_statuses
        self.hedge = hedge  # as given; the engine runs _hedge
        self._hedge: ClientHedge | None = check_hedge(
            hedge,
            lambda outcome: (
                _retryable(outcome)
                if isinstance(outcome, BaseException)
                else isinstance(outcome, httpx.Response) and outcome.status_code in statuses
            ),
        )

    def __repr__(self) -> str:
        return f"<AsyncBudgetTransport {self.policy!r} transport={self.transport!r}>"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` as one budgeted run (see the class)."""
        started = time.monotonic()
        retried = self.config.retries(request)
        if self._hedge is not None and retried and isinstance(request.stream, httpx.ByteStream):
            return await self._hedged(request, self._hedge)
        call = _Call(request, started, retried, self._max_elapsed, self._deadline_ts)
        self._admit_first(call)
        hard: _HardStop | None = None
        try:  # the first attempt, outside tenacity's loop: most runs end with it
            hard = _HardStop(self, self._admit(call, True))
            with hard:
                if self._bare:  # see _frame
                    response = await self.transport.handle_async_request(request)
                else:
                    with deadline_scope(call.timeout):
                        response = await self.transport.handle_async_request(request)
        except BaseException as exc:
            return await self._settle(call, await self._failed(call, hard, exc))
        call.received = response
        if call.throttle is not None:
            call.throttle.record(response)
        if time.monotonic() > call.end or response.status_code in self._statuses:
            return await self._settle(call, _late(call) or response)
        return response

    async def _hedged(self, request: httpx.Request, hedge: ClientHedge) -> httpx.Response:
        """Send ``request`` as one hedged run (the engine's): the first good response wins.

        Every attempt is a copy of ``request`` with its own deadline header and timeouts
        (the first is ``request`` itself); a loser is cancelled and its response closed.
        """
        timeouts = request.extensions.get("timeout")
        own: dict[str, Any] = timeouts if isinstance(timeouts, dict) else {}
        sent: list[httpx.Request] = []

        async def attempt(horizon: Horizon) -> httpx.Response:
            one = _copy(request) if sent else request
            sent.append(one)
            left = horizon.left()
            if left < _LEAST:
                left = _LEAST
            self._headers.write(one.headers, left)
            one.extensions["timeout"] = _pool_bounded(own, left)
            try:
                with self._frame(left):
                    return await self.transport.handle_async_request(one)
            except BaseException:
                await _reclaim_orphans(self.transport)  # a loser cut in the pool's wait
                raise

        outcome, report = await hedged_request(
            hedge,
            attempt,
            self.config.policy,
            self._deadline_ts,
            budget=self.budget,
            throttle=self._throttle_for(request) if self._throttled else None,
            release=_close_whole,
        )
        if report is None:  # a good response, or a fatal error raised as it is
            return cast(httpx.Response, outcome.result())
        return _hedge_gave_up(request, outcome.value, outcome.exception, report)

    async def _settle(self, call: _Call, first: BaseException | httpx.Response) -> httpx.Response:
        """The end of a run whose first attempt did not succeed: retried, or as it is."""
        returned: httpx.Response | None = None
        try:
            if isinstance(first, _Cut):
                self._cut(call, None, first)
            if not call.retried:
                returned = self._once(call, first)
            elif isinstance(first, BaseException) and not _retryable(first):
                raise first
            else:
                returned = await self._retry(call, first)
            return returned
        finally:
            # A response received but not handed over: the run ended otherwise (an attempt
            # that ended after the run's time was up, a cancellation in a backoff sleep).
            if call.received is not None and call.received is not returned:
                await _close_whole(call.received)

    async def _retry(self, call: _Call, first: BaseException | httpx.Response) -> httpx.Response:
        """Go on with a run whose first attempt failed: tenacity's loop from the second on."""
        retrying, state = self._begin_retrying(call, first)
        while True:
            do = await retrying.iter(state)
            if not isinstance(do, tenacity.DoSleep):
                response: httpx.Response = do
                return response
            state.prepare_for_next_attempt()
            await retrying.sleep(do)
            outcome = await self._attempt(call)
            if isinstance(outcome, _Cut):
                self._cut(call, state, outcome)
            _set_outcome(state, outcome)

    async def _attempt(self, call: _Call) -> BaseException | httpx.Response:
        """A retry: its response, or what it raised (a :class:`_Cut` where it was cut)."""
        hard: _HardStop | None = None
        previous, call.received = call.received, None
        try:
            hard = _HardStop(self, self._admit(call, False))
            with hard:
                if previous is not None:  # the run is retrying it: discard it
                    await _close_whole(previous)
                with self._frame(call.timeout):
                    response = await self.transport.handle_async_request(call.request)
        except BaseException as exc:
            return await self._failed(call, hard, exc)
        call.received = response
        if call.throttle is not None:
            call.throttle.record(response)
        return _late(call) or response

    async def _failed(
        self, call: _Call, hard: _HardStop | None, exc: BaseException
    ) -> BaseException:
        """What a failed attempt raised, a :class:`_Cut` where the hard stop cut it.

        Cut, timed out or failed, the attempt may have left a slot of httpcore's pool
        reserved: it is given back.
        """
        await _reclaim_orphans(self.transport)
        if isinstance(exc, TimeoutError) and hard is not None and hard.expired:
            cut = _Cut(call.binding)
            cut.__cause__ = exc
            return cut
        if call.throttle is not None and isinstance(exc, Exception):
            call.throttle.record(exc)  # the backend's answer (a cut attempt gave none)
        return exc

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.transport.aclose()


async def _close_whole(response: httpx.Response) -> None:
    """Close ``response`` to the end, even if the task is cancelled while it closes.

    httpcore hands a connection back to its pool at the end of the close; a cancellation
    landing halfway (an attempt cut by the hard deadline while it discards the response
    before) would leave the connection reserved for good. The close runs as a task of its
    own, shielded; a cancellation still reaches the caller.
    """
    await asyncio.shield(response.aclose())


async def _reclaim_orphans(transport: httpx.AsyncBaseTransport) -> None:
    """Give back the slots of httpx's pool that a cut request left reserved, if any.

    httpcore 1.0.9 leaves a connection reserved for good when the request it was handed to
    is cancelled (or times out waiting for the pool) before it starts to use it: a new
    connection stays ``CONNECTING``, or an HTTP/1.1 one stays ``NEW`` with its socket open,
    and no request owns it. Neither idle nor closed, the pool never reaps it (upstream
    encode/httpcore#1093). Such a connection is removed and closed here and its slot handed
    to the requests waiting for one. Only httpx's own transport over httpcore's pool is
    repaired; any other transport (and a pool without these internals) is left as it is.
    """
    pool = getattr(transport, "_pool", None)
    if _ConnectionPool is None or type(pool) is not _ConnectionPool:
        return
    try:
        lock = pool._optional_thread_lock
        connections: list[Any] = pool._connections
        requests: list[Any] = pool._requests
        assign = pool._assign_requests_to_connections
        close = pool._close_connections
    except AttributeError:  # pragma: no cover (another httpcore)
        return
    with lock:
        owned = {id(request.connection) for request in requests}
        orphans = [
            connection
            for connection in connections
            if id(connection) not in owned
            and not connection.is_idle()
            and not connection.is_closed()
        ]
        if not orphans:
            return
        for connection in orphans:
            connections.remove(connection)
        closing = assign()
    await asyncio.shield(close([*orphans, *closing]))
