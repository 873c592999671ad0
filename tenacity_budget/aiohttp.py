"""An aiohttp client middleware that retries within a budget and tells the next hop its deadline.

``aiohttp.ClientSession(middlewares=(budget_middleware(policy),))`` (aiohttp >= 3.12)
sends each request as one budgeted run of the policy, with the semantics of
:mod:`tenacity_budget.httpx`'s transports; every attempt is cancelled when the run's time
is up, and the errors it raises stay aiohttp's (``ClientConnectionError``,
``ServerTimeoutError``). :func:`tenacity_budget.http.retry_after` reads aiohttp's
``ClientResponseError`` too. Needs the ``aiohttp`` extra; the guide is docs/cookbook.md.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from tenacity import retry_if_exception, retry_if_result

try:  # the real library: an absolute import, never this module
    import aiohttp
    from aiohttp import payload as _payload
except ImportError as exc:  # a missing extra, named at import
    raise ImportError(
        "tenacity_budget.aiohttp needs aiohttp: pip install 'tenacity-budget[aiohttp]'"
    ) from exc

from ._clients import (
    Watchdog,
    exhausted,
    outcome_hint,
    retry_cures,
    retry_frame,
    run_horizon,
    time_left,
)
from .context import _frame, remaining
from .exhaustion import BudgetExhausted
from .http import _check_methods, _check_statuses, _deadline_senders
from .http import retry_after as retry_after  # reads ClientResponseError: said here

if TYPE_CHECKING:
    from .context import Horizon
    from .policy import BackoffPolicy

__all__ = ["budget_middleware"]

Handler = Callable[[aiohttp.ClientRequest], Awaitable[aiohttp.ClientResponse]]


# The transport errors of aiohttp, and those a retry cannot cure (a TLS failure: a
# certificate refused, a handshake failed): the rule of every client, retry_cures.
_TRANSPORT = (aiohttp.ClientConnectionError,)
_NOT_CURED = (aiohttp.ClientSSLError,)


def _retryable(exc: BaseException) -> bool:
    return retry_cures(exc, _TRANSPORT, _NOT_CURED)


def _replayable(body: object) -> bool:
    """Whether a request body is the same bytes on every attempt (a stream is not)."""
    return body == b"" or isinstance(body, _payload.BytesPayload)


class _Call:
    """One request's run: the request, the next handler, the latest response."""

    __slots__ = ("first", "handler", "received", "request", "returned")

    def __init__(
        self,
        request: aiohttp.ClientRequest,
        handler: Handler,
        first: BaseException | aiohttp.ClientResponse,
    ) -> None:
        self.request = request
        self.handler = handler
        self.first: BaseException | aiohttp.ClientResponse | None = first
        self.received: aiohttp.ClientResponse | None = None
        self.returned: aiohttp.ClientResponse | None = None


class BudgetMiddleware:
    """The middleware :func:`budget_middleware` returns; its options are attributes."""

    def __init__(
        self,
        policy: BackoffPolicy,
        retry_statuses: Iterable[int],
        methods: Iterable[str],
        deadline_header: str | None,
        deadline_headers: Iterable[str] | None,
        budget: Any,
    ) -> None:
        from .policy import BackoffPolicy

        if not isinstance(policy, BackoffPolicy):
            raise TypeError(f"policy must be a BackoffPolicy, got {type(policy).__name__}")
        self.policy = policy
        self.retry_statuses = _check_statuses(retry_statuses)
        self.methods = _check_methods(methods)
        self.budget = budget
        self._senders = _deadline_senders(deadline_header, deadline_headers)
        self._deadline_ts = math.inf if policy.deadline is None else policy.deadline.timestamp()
        statuses = self.retry_statuses
        # A retryable status is a result, retried as one; the wait reads the outcome.
        self._retried = policy.retry(
            budget=budget,
            retry=retry_if_result(lambda response: response.status in statuses)
            | retry_if_exception(_retryable),
            retry_after=outcome_hint,
        )(self._attempt)
        self._watchdog: Watchdog | None = None

    def __repr__(self) -> str:
        return f"<budget_middleware {self.policy!r}>"

    async def __call__(
        self, request: aiohttp.ClientRequest, handler: Handler
    ) -> aiohttp.ClientResponse:
        """Send ``request`` as one budgeted run (see :func:`budget_middleware`)."""
        # The first attempt is sent at once, as the run's would be (same admission, the
        # run's time left); only a retryable outcome enters the run, which replays it first
        # and ends by the first attempt's end: what one run from the start would do.
        started = time.monotonic()
        horizon = run_horizon(started, self.policy.max_elapsed, self._deadline_ts)
        left = time_left(horizon, self.policy.max_elapsed)
        watchdog, task = self._admit(request, left)
        failure: Exception | None = None
        try:
            response = await handler(request)
        except asyncio.CancelledError:
            if not watchdog.cut_off(task):
                raise
            failure = _time_up(left)
        except Exception as exc:
            failure = exc
        finally:
            watchdog.unwatch(task)
        if failure is not None:
            if not _retryable(failure) or not self._retries(request):
                if self.budget is not None:
                    await self._deposit()
                raise failure
            frame = retry_frame(horizon, started, self.policy.max_elapsed)
            return await self._enter(_Call(request, handler, failure), frame)
        if response.status in self.retry_statuses and self._retries(request):
            frame = retry_frame(horizon, started, self.policy.max_elapsed)
            return await self._enter(_Call(request, handler, response), frame)
        if self.budget is not None:
            await self._deposit()
        return response

    def _retries(self, request: aiohttp.ClientRequest) -> bool:
        """Whether ``request`` may be sent again: a listed method, a body of bytes."""
        return request.method in self.methods and _replayable(request.body)

    def _admit(
        self, request: aiohttp.ClientRequest, left: float
    ) -> tuple[Watchdog, asyncio.Task[Any]]:
        """Admit one attempt with ``left`` seconds: the deadline headers, the hard stop."""
        if left < 0.0:
            left = 0.0
        for name, format_left in self._senders:
            request.headers[name] = format_left(left)
        loop = asyncio.get_running_loop()
        watchdog = self._watchdog
        if watchdog is None or watchdog.loop is not loop:
            watchdog = self._watchdog = Watchdog(loop)
        task = asyncio.current_task(loop)
        if task is None:  # pragma: no cover (aiohttp always runs in a task)
            raise RuntimeError("budget_middleware runs inside an asyncio task")
        watchdog.watch(task, loop.time() + left)
        return watchdog, task

    async def _deposit(self) -> None:
        """The deposit of a request the run was not entered for (the run deposits its own)."""
        deposited = self.budget.deposit()
        if inspect.isawaitable(deposited):
            await deposited

    async def _enter(self, call: _Call, frame: Horizon) -> aiohttp.ClientResponse:
        """The budgeted run, in ``frame``, of a request whose first attempt called for a retry."""
        try:
            with _frame(frame):
                call.returned = await self._retried(call)
        except BudgetExhausted as spent:
            if not spent.last_attempt.failed:  # spent on a status: the last response
                call.returned = spent.last_attempt.result()
            else:
                last = spent.last_attempt.exception()
                if isinstance(last, aiohttp.ClientError):
                    raise exhausted(last, spent) from last
                raise
        finally:
            if call.received is not None and call.received is not call.returned:
                call.received.release()
        assert call.returned is not None
        return call.returned

    async def _attempt(self, call: _Call) -> aiohttp.ClientResponse:
        """One attempt of the run: the first one's outcome again, then real ones."""
        first, call.first = call.first, None
        if isinstance(first, BaseException):
            raise first
        if first is not None:
            call.received = first
            return first
        previous, call.received = call.received, None
        if previous is not None:  # the run is retrying it: discard it
            previous.release()
        left = remaining()
        assert left is not None  # always inside the run
        watchdog, task = self._admit(call.request, left)
        try:
            response = call.received = await call.handler(call.request)
        except asyncio.CancelledError:
            if watchdog.cut_off(task):
                raise _time_up(left) from None
            raise
        finally:
            watchdog.unwatch(task)
        return response


def _time_up(left: float) -> aiohttp.ServerTimeoutError:
    """The error of an attempt the hard stop cut: aiohttp's own kind of timeout."""
    return aiohttp.ServerTimeoutError(
        f"the run's time is up: the attempt was cut after {max(left, 0.0):.3f} s"
    )


def budget_middleware(
    policy: BackoffPolicy,
    *,
    retry_statuses: frozenset[int] = frozenset({429, 502, 503, 504}),
    methods: frozenset[str] = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}),
    deadline_header: str | None = "X-Request-Timeout-Ms",
    deadline_headers: Iterable[str] | None = None,
    budget: Any = None,
) -> BudgetMiddleware:
    """An aiohttp client middleware sending each request as one budgeted run of ``policy``.

    ``aiohttp.ClientSession(middlewares=(budget_middleware(policy),))``. It retries
    connection errors and timeouts (``aiohttp.ClientConnectionError``) and the
    ``retry_statuses``, for the ``methods`` (and a body of bytes); honours
    ``Retry-After``, ``retry-after-ms``, ``x-ms-retry-after-ms`` (and ``RateLimit-Reset``)
    within the budget; draws every retry from ``budget``; cancels every attempt when the
    run's time is up (connecting, sending, waiting for the response headers; the body is
    read after, by you); and sends the time left downstream in ``deadline_header`` (our
    format; ``None``: none) or each dialect of ``deadline_headers``. Spent on a status,
    the last response is returned (the ones before are released); spent on a connection
    error or cut, the error raised is of aiohttp's own kind (``ClientConnectorError``,
    ``ServerTimeoutError``...) and also a :class:`~tenacity_budget.BudgetExhausted`
    carrying ``.report``. ``deadline_headers`` with a ``deadline_header`` other than the
    default is a ``TypeError``; the default itself written out (``"X-Request-Timeout-Ms"``)
    cannot be told apart and is accepted: then ``deadline_headers`` alone is sent.

    Raises:
        TypeError, ValueError: for a bad option, at once.
    """
    return BudgetMiddleware(
        policy, retry_statuses, methods, deadline_header, deadline_headers, budget
    )
