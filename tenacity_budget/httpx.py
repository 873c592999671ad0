"""httpx transports that retry within a budget and tell the next hop its deadline.

Needs the ``httpx`` extra (``pip install 'tenacity-budget[httpx]'``); without httpx,
importing this module raises :class:`ImportError` saying so. Importing ``tenacity_budget``
does not import this module or httpx.

:class:`AsyncBudgetTransport` and :class:`BudgetTransport` wrap another httpx transport
(httpx's own by default) and send each request as one budgeted run of the policy::

    import httpx
    from tenacity_budget import BackoffPolicy
    from tenacity_budget.httpx import AsyncBudgetTransport

    policy = BackoffPolicy(base=0.1, cap=2, max_elapsed=10, attempt_duration=1)
    async with httpx.AsyncClient(transport=AsyncBudgetTransport(policy)) as client:
        response = await client.get("https://api.example/users/42")
        response.raise_for_status()

What a request gets:

* **Retries** on ``httpx.TransportError`` (connection refused or reset, timeouts...) and
  on the ``retry_statuses`` (429, 502, 503, 504), for the idempotent ``methods`` only: a
  ``POST`` is sent once unless you list it, and so is a request whose body is an iterator
  or a generator (its first attempt consumes it), or a multipart upload with a file that
  cannot seek back to its start (``seekable()`` false or absent: a pipe, a socket); a
  retried body is the same bytes on every attempt. Each request the client sends is one
  run: a redirect the client follows is a new request with a budget of its own (all of
  them inside an enclosing ``deadline_scope``'s deadline). A ``Retry-After`` on a retryable
  response (seconds or an HTTP-date, read by :func:`tenacity_budget.http.parse_retry_after`)
  replaces the backoff delay; the budget stop still guards it, like any ``retry_after``.
* **The budget's end.** The run stops before a retry that would end after the policy's
  ``max_elapsed``, the policy's deadline or any enclosing
  :func:`~tenacity_budget.deadline_scope` (a :class:`~tenacity_budget.asgi.DeadlineMiddleware`
  sets one per request). Spent on a retryable status, the last response is returned, and
  your ``raise_for_status()`` decides (like urllib3's ``raise_on_status=False``); its
  :func:`exhaustion_report` says how the budget went. Spent on a transport error,
  :class:`~tenacity_budget.BudgetExhausted` is raised from that error. The bodies of the
  responses it discards are closed.
* **Each attempt bounded by the time left.** The async transport cancels the whole attempt
  (connecting, sending, waiting for the response headers) when the run's time is up
  (``policy.retry(hard_deadline=True)``); its wait for a slot of httpx's connection pool
  ends just before, by httpx's own ``pool`` timeout, and a slot that httpcore leaves
  reserved after a cut is given back (see the deadline propagation guide). The sync one
  cannot interrupt a running call, so it sets every httpx timeout phase (connect, read,
  write, pool) to the time left, or the request's own timeout where that is shorter. That
  bounds each phase, not their sum, and not: a server that trickles bytes (the read
  timeout counts between reads, not over the whole response), name resolution
  (``getaddrinfo`` takes no timeout), or reading the body after the transport has returned
  the response (the client streams it later). Use the async transport where an attempt
  must end on time whatever the server does.
* **The deadline downstream.** Every request it sends carries the time left, in whole
  milliseconds rounded down, in ``X-Request-Timeout-Ms`` (``deadline_header``; ``None``
  disables it), so the next service (with :class:`~tenacity_budget.asgi.DeadlineMiddleware`)
  ends its own work by the caller's deadline. The value is relative, so no clock needs to
  agree with another.

The response the transport returns is the one the wrapped transport returned: its body
(streamed by the client after the transport returns) is outside the run.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tenacity import retry_if_exception, retry_never

try:
    import httpx
except ImportError as exc:  # a missing extra, named at import: the module is nothing without it
    raise ImportError(
        "tenacity_budget.httpx needs httpx: pip install 'tenacity-budget[httpx]'"
    ) from exc

from .exhaustion import BudgetExhausted, ExhaustionReport, StopReason
from .http import _check_header_name, format_timeout_ms, retry_after
from .runtime import ambient_deadline, remaining

if TYPE_CHECKING:
    from .policy import BackoffPolicy
    from .runtime import BudgetedRetry

__all__ = [
    "DEFAULT_METHODS",
    "DEFAULT_RETRY_STATUSES",
    "REPORT_EXTENSION",
    "AsyncBudgetTransport",
    "BudgetTransport",
    "exhaustion_report",
]

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

# httpcore's asyncio pool, whose slots a cut request can leave reserved (_reclaim_orphans).
try:
    from httpcore import AsyncConnectionPool as _ConnectionPool
except ImportError:  # pragma: no cover (an httpx without httpcore)
    _ConnectionPool = None  # type: ignore[assignment,misc]

# Request bodies that can be sent again: bytes, and multipart forms whose files can be
# read again from their start (see _replayable). httpx keeps its multipart stream private;
# without it, a multipart request is only sent once.
try:
    from httpx._multipart import MultipartStream as _MultipartStream
except ImportError:  # pragma: no cover (a future httpx)
    _MultipartStream = None  # type: ignore[assignment,misc]

# Transport errors that a retry cannot cure: the request itself is wrong.
_NOT_RETRIED: tuple[type[httpx.TransportError], ...] = (
    httpx.UnsupportedProtocol,
    httpx.LocalProtocolError,
)


def _retryable(exc: BaseException) -> bool:
    """Whether a failed attempt is worth retrying: a transport error or a retryable status."""
    if isinstance(exc, _RetryableStatus):
        return True
    return isinstance(exc, httpx.TransportError) and not isinstance(exc, _NOT_RETRIED)


def exhaustion_report(response: httpx.Response) -> ExhaustionReport | None:
    """The report of the run that gave up and returned this response, else ``None``.

    A transport returns the last response when the budget is spent on a retryable status
    (a 503 that kept coming, a ``Retry-After`` longer than the time left); this says how
    the budget was spent (``report.reason``, ``report.attempts``...). ``None`` for a
    response that ended its run by itself (success, or a status not retried).
    """
    report = response.extensions.get(REPORT_EXTENSION)
    return report if isinstance(report, ExhaustionReport) else None


class _RetryableStatus(Exception):
    """A response with a retryable status: raised inside the run so the policy retries it.

    It carries the response as ``.response``, so :func:`tenacity_budget.http.retry_after`
    reads its ``Retry-After`` like any HTTP error's.
    """

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"retryable status {response.status_code}")
        self.response = response


class _Call:
    """One request's run: the request, its own timeouts, the latest response received."""

    __slots__ = ("received", "request", "timeouts")

    def __init__(self, request: httpx.Request) -> None:
        self.request = request
        timeouts = request.extensions.get("timeout")
        self.timeouts: dict[str, Any] = dict(timeouts) if isinstance(timeouts, dict) else {}
        self.received: httpx.Response | None = None


class _Config:
    """The validated options both transports share, and the rules they apply per attempt."""

    def __init__(
        self,
        policy: BackoffPolicy,
        retry_statuses: Iterable[int],
        methods: Iterable[str],
        deadline_header: str | None,
    ) -> None:
        from .policy import BackoffPolicy

        if not isinstance(policy, BackoffPolicy):
            raise TypeError(f"policy must be a BackoffPolicy, got {type(policy).__name__}")
        self.policy = policy
        self.retry_statuses = _statuses(retry_statuses)
        self.methods = _methods(methods)
        self.deadline_header = _header(deadline_header)

    def retries(self, request: httpx.Request) -> bool:
        """Whether ``request`` may be sent more than once: a listed method, a replayable body.

        A body given as bytes, text, JSON, form fields or files can be sent again; one given
        as an iterator or a generator is consumed by its first attempt, and so is a
        multipart upload with a file that cannot seek back to its start (a pipe, a socket,
        an object with no ``seekable()``): such a request is sent once.
        """
        if request.method not in self.methods:
            return False
        return _replayable(request.stream)

    def retry_kwargs(self, *, retried: bool) -> dict[str, Any]:
        """The ``policy.retry()`` options of a run: retried methods, or sent once."""
        if not retried:
            return {"retry": retry_never}
        return {"retry": retry_if_exception(_retryable), "retry_after": retry_after}

    def time_left(self, call: _Call) -> float:
        """The run's time left, written into the request's deadline header.

        Raises:
            httpx.TimeoutException: when no time is left: the request is not sent.
        """
        left = remaining()
        if left is None or not math.isfinite(left):  # pragma: no cover (always in a run)
            raise RuntimeError("a transport attempt runs inside its budgeted run")
        if left <= 0.0:
            raise httpx.TimeoutException(
                "no time left to send the request: the run's budget or deadline is spent",
                request=call.request,
            )
        if self.deadline_header is not None:
            call.request.headers[self.deadline_header] = format_timeout_ms(left)
        return left

    def check(self, response: httpx.Response, *, retried: bool) -> httpx.Response:
        """``response``, or :class:`_RetryableStatus` raised when the run should retry it."""
        if retried and response.status_code in self.retry_statuses:
            raise _RetryableStatus(response)
        return response

    def not_replayed(self, call: _Call, started: float) -> None:
        """Say so where a one-shot body's single attempt failed in a way a retry would take.

        A listed method whose body cannot be sent again is sent once: on a retryable status
        the response carries a report with reason ``not_replayable`` (:func:`exhaustion_report`),
        and a retryable transport error gets a note saying why it was not retried.
        """
        if call.request.method not in self.methods:
            return
        response = call.received
        if response is not None and response.status_code in self.retry_statuses:
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
    if _MultipartStream is None or not isinstance(stream, _MultipartStream):
        return False
    fields = getattr(stream, "fields", None)
    if not isinstance(fields, list):  # pragma: no cover (a future httpx)
        return False
    return all(_rewindable(getattr(field, "file", b"")) for field in fields)


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


def _last_response(exc: BudgetExhausted) -> httpx.Response:
    """The response of a run spent on a retryable status; re-raise ``exc`` otherwise."""
    last = exc.last_attempt.exception() if exc.last_attempt.failed else None
    if not isinstance(last, _RetryableStatus):
        raise exc
    response = last.response
    # The run gave up on a result, not an exception: the report says so, as tenacity's own
    # retry_if_result runs do (our _RetryableStatus is only the vehicle of the response).
    response.extensions[REPORT_EXTENSION] = dataclasses.replace(exc.report, last_exception=None)
    return response


def _statuses(statuses: Iterable[int]) -> frozenset[int]:
    if isinstance(statuses, str | bytes) or not isinstance(statuses, Iterable):
        raise TypeError(f"retry_statuses must be a set of status codes, got {statuses!r}")
    found = frozenset(statuses)
    for status in found:
        if isinstance(status, bool) or not isinstance(status, int):
            raise TypeError(f"retry_statuses must hold ints, got {status!r}")
        if not 400 <= status <= 599:
            # A success, a redirect or an informational answer is the server's answer, never
            # a failure to try again: only client (4xx) and server (5xx) errors are retried.
            raise ValueError(
                f"retry_statuses must hold 4xx or 5xx status codes (400-599), got {status}"
            )
    return found


def _methods(methods: Iterable[str]) -> frozenset[str]:
    if isinstance(methods, str | bytes) or not isinstance(methods, Iterable):
        raise TypeError(f"methods must be a set of HTTP method names, got {methods!r}")
    found: set[str] = set()
    for method in methods:
        if not isinstance(method, str) or not method.isascii() or not method.isalpha():
            raise ValueError(f"methods must hold HTTP method names such as 'GET', got {method!r}")
        found.add(method.upper())
    return frozenset(found)


def _header(name: str | None) -> str | None:
    return None if name is None else _check_header_name(name, "deadline_header")


class _Options:
    """The read-only options of a transport (shared by the sync and async ones)."""

    _config: _Config

    @property
    def policy(self) -> BackoffPolicy:
        """The policy each request runs under."""
        return self._config.policy

    @property
    def retry_statuses(self) -> frozenset[int]:
        """The response statuses retried."""
        return self._config.retry_statuses

    @property
    def methods(self) -> frozenset[str]:
        """The request methods retried; any other is sent once."""
        return self._config.methods

    @property
    def deadline_header(self) -> str | None:
        """The header carrying the time left in whole milliseconds, or ``None``."""
        return self._config.deadline_header


class BudgetTransport(_Options, httpx.BaseTransport):
    """A sync httpx transport that retries each request under a :class:`BackoffPolicy`.

    ``httpx.Client(transport=BudgetTransport(policy))``. What it does is described in
    :mod:`tenacity_budget.httpx`; in short: retries on transport errors and on
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
        budget: a retry budget (:class:`~tenacity_budget.RetryBudget`) every retry draws
            from, shared by the requests to one dependency.

    Raises:
        TypeError, ValueError: at construction, for a bad option (an asyncio retry budget
            included: it needs :class:`AsyncBudgetTransport`).
    """

    def __init__(
        self,
        policy: BackoffPolicy,
        *,
        transport: httpx.BaseTransport | None = None,
        retry_statuses: frozenset[int] = frozenset({429, 502, 503, 504}),
        methods: frozenset[str] = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}),
        deadline_header: str | None = "X-Request-Timeout-Ms",
        budget: Any = None,
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.BaseTransport):
            raise TypeError(
                f"transport must be an httpx.BaseTransport, got {type(transport).__name__}"
            )
        self._config = _Config(policy, retry_statuses, methods, deadline_header)
        self.transport: httpx.BaseTransport = (
            transport if transport is not None else httpx.HTTPTransport()
        )
        self.budget = budget
        self._retried = _decorate(policy, budget, self._config, self._attempt, retried=True)
        self._once = _decorate(policy, budget, self._config, self._attempt, retried=False)

    def __repr__(self) -> str:
        return f"<BudgetTransport {self.policy!r} transport={self.transport!r}>"

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` as one budgeted run (see the class)."""
        call = _Call(request)
        response: httpx.Response | None = None
        try:
            if not self._config.retries(request):
                started = time.monotonic()
                try:
                    response = self._once(call, False)
                except BaseException as exc:
                    self._config.note_not_replayed(request, exc)
                    raise
                self._config.not_replayed(call, started)
            else:
                try:
                    response = self._retried(call, True)
                except BudgetExhausted as exc:
                    response = _last_response(exc)
            assert response is not None
            return response
        finally:
            # A response received but not handed over: the run ended otherwise (an
            # exception, an interruption between attempts).
            if call.received is not None and call.received is not response:
                call.received.close()

    def _attempt(self, call: _Call, retried: bool) -> httpx.Response:
        previous, call.received = call.received, None
        if previous is not None:  # the run is retrying it: discard it
            previous.close()
        left = self._config.time_left(call)
        call.request.extensions["timeout"] = _bounded_timeouts(call.timeouts, left)
        response = call.received = self.transport.handle_request(call.request)
        return self._config.check(response, retried=retried)

    def close(self) -> None:
        """Close the wrapped transport."""
        self.transport.close()


class AsyncBudgetTransport(_Options, httpx.AsyncBaseTransport):
    """An asyncio httpx transport that retries each request under a :class:`BackoffPolicy`.

    ``httpx.AsyncClient(transport=AsyncBudgetTransport(policy))``. As
    :class:`BudgetTransport` (same arguments; ``transport`` defaults to
    ``httpx.AsyncHTTPTransport()``), except that each attempt is cancelled as a whole when
    the run's time is up (``policy.retry(hard_deadline=True)``), whatever phase it is in;
    the run then ends with :class:`~tenacity_budget.BudgetExhausted` (reason
    ``wall_clock`` or ``deadline``). An asyncio retry budget is welcome here. Runs under
    asyncio (the cancellation is ``asyncio.timeout``), not trio.
    """

    def __init__(
        self,
        policy: BackoffPolicy,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_statuses: frozenset[int] = frozenset({429, 502, 503, 504}),
        methods: frozenset[str] = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}),
        deadline_header: str | None = "X-Request-Timeout-Ms",
        budget: Any = None,
    ) -> None:
        if transport is not None and not isinstance(transport, httpx.AsyncBaseTransport):
            raise TypeError(
                f"transport must be an httpx.AsyncBaseTransport, got {type(transport).__name__}"
            )
        self._config = _Config(policy, retry_statuses, methods, deadline_header)
        self.transport: httpx.AsyncBaseTransport = (
            transport if transport is not None else httpx.AsyncHTTPTransport()
        )
        self.budget = budget
        self._retried = _decorate(policy, budget, self._config, self._attempt, retried=True)
        self._once = _decorate(policy, budget, self._config, self._attempt, retried=False)

    def __repr__(self) -> str:
        return f"<AsyncBudgetTransport {self.policy!r} transport={self.transport!r}>"

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` as one budgeted run (see the class)."""
        call = _Call(request)
        response: httpx.Response | None = None
        try:
            if not self._config.retries(request):
                started = time.monotonic()
                try:
                    response = await self._once(call, False)
                except BaseException as exc:
                    self._config.note_not_replayed(request, exc)
                    raise
                self._config.not_replayed(call, started)
            else:
                try:
                    response = await self._retried(call, True)
                except BudgetExhausted as exc:
                    response = _last_response(exc)
            assert response is not None
            return response
        finally:
            # A response received but not handed over: the run ended otherwise (an attempt
            # that ended after the run's time was up, a cancellation in a backoff sleep).
            if call.received is not None and call.received is not response:
                await _close_whole(call.received)

    async def _attempt(self, call: _Call, retried: bool) -> httpx.Response:
        previous, call.received = call.received, None
        if previous is not None:  # the run is retrying it: discard it
            await _close_whole(previous)
        left = self._config.time_left(call)
        call.request.extensions["timeout"] = _pool_bounded(call.timeouts, left)
        try:
            response = await self.transport.handle_async_request(call.request)
        except BaseException:
            # Cut, timed out or failed: give back what httpcore may have left reserved.
            await _reclaim_orphans(self.transport)
            raise
        call.received = response
        return self._config.check(response, retried=retried)

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.transport.aclose()


# A time left past this (about 31 years) bounds no socket call: Python's socket timeouts
# overflow past about 9.2e9 s (nanoseconds in 64 bits), so the request's own timeouts apply.
_UNBOUNDED = 1e9


def _bounded_timeouts(timeouts: dict[str, Any], left: float) -> dict[str, float | None]:
    """Every httpx timeout phase set to ``left``, or to the request's own where shorter."""
    bounded: dict[str, float | None] = {}
    for phase in _PHASES:
        own = timeouts.get(phase)
        if left > _UNBOUNDED:
            bounded[phase] = None if own is None else float(own)
        else:
            bounded[phase] = left if own is None or own > left else float(own)
    return bounded


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
    bounded = dict(timeouts)
    pool = left - min(_POOL_LEAD, left / 2)
    own = timeouts.get("pool")
    bounded["pool"] = pool if own is None or own > pool else float(own)
    return bounded


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


def _decorate(
    policy: BackoffPolicy, budget: Any, config: _Config, attempt: Any, *, retried: bool
) -> Any:
    """``attempt`` as a budgeted run of ``policy`` (hard deadline for a coroutine)."""
    options: dict[str, Any] = config.retry_kwargs(retried=retried)
    decorator: BudgetedRetry = policy.retry(
        budget=budget, hard_deadline=inspect.iscoroutinefunction(attempt), **options
    )
    return decorator(attempt)
