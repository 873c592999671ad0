"""An aiohttp client middleware that retries within a budget and tells the next hop its deadline.

``aiohttp.ClientSession(middlewares=(budget_middleware(policy),))`` (aiohttp >= 3.12)
sends each request as one budgeted run of the policy, with the semantics of
:mod:`tenacity_budget.httpx`'s transports (an adaptive throttle and hedging included);
every attempt is cancelled when the run's time is up, and the errors it raises stay
aiohttp's (``ClientConnectionError``, ``ServerTimeoutError``).
:func:`tenacity_budget.http.retry_after` reads aiohttp's ``ClientResponseError`` too.
Needs the ``aiohttp`` extra; the guides are docs/cookbook.md and docs/hedging.md.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NoReturn, cast

from tenacity import Future, retry_if_exception, retry_if_result

try:  # the real library: an absolute import, never this module
    import aiohttp
    from aiohttp import payload as _payload
    from multidict import istr
except ImportError as exc:  # a missing extra, named at import
    raise ImportError(
        "tenacity_budget.aiohttp needs aiohttp: pip install 'tenacity-budget[aiohttp]'"
    ) from exc

from ._client_hedge import ClientHedge, check_hedge, hedged_request
from ._clients import (
    DeadlineHeaders,
    Watchdog,
    check_throttle,
    exhausted,
    host_throttle,
    outcome_hint,
    rejected_first,
    retry_cures,
    retry_frame,
    run_horizon,
    time_left,
)
from .context import _frame, remaining
from .decision import admit
from .exhaustion import BudgetExhausted, ExhaustionReport, StopReason, Throttled
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
    """One request's run: the request, the next handler, the latest response, its throttle."""

    __slots__ = ("first", "handler", "received", "request", "returned", "throttle")

    def __init__(
        self,
        request: aiohttp.ClientRequest,
        handler: Handler,
        first: BaseException | aiohttp.ClientResponse,
        throttle: Any,
    ) -> None:
        self.request = request
        self.handler = handler
        self.first: BaseException | aiohttp.ClientResponse | None = first
        self.received: aiohttp.ClientResponse | None = None
        self.returned: aiohttp.ClientResponse | None = None
        self.throttle = throttle


# The run in progress in this task (the throttle of policy.retry's run asks it, see _Asked).
_RUN: ContextVar[_Call] = ContextVar("tenacity_budget.aiohttp.run")


class _Asked:
    """The throttle ``policy.retry``'s run of a request asks: the request's own, once per
    attempt sent. The run replays the first attempt, which the middleware asked the
    throttle for and recorded already: its admission is not asked again (nor counted),
    and every outcome is recorded by the middleware, which sees which attempts were sent."""

    __slots__ = ()

    def admit(self) -> bool:
        call = _RUN.get()
        return call.first is not None or bool(call.throttle.admit())

    def record(self, outcome: object) -> None:
        """Recorded by the middleware (:meth:`BudgetMiddleware._attempt`), not here."""

    @property
    def name(self) -> str:
        return str(getattr(_RUN.get().throttle, "name", "default"))

    @property
    def probability(self) -> float:
        return float(_RUN.get().throttle.probability)


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
        throttle: Any = None,
        hedge: Any = None,
    ) -> None:
        from .policy import BackoffPolicy

        if not isinstance(policy, BackoffPolicy):
            raise TypeError(f"policy must be a BackoffPolicy, got {type(policy).__name__}")
        self.policy = policy
        self.retry_statuses = _check_statuses(retry_statuses)
        self.methods = _check_methods(methods)
        self.budget = budget
        self.throttle = throttle
        self._throttle, self._throttle_of = check_throttle(throttle)
        self.hedge = hedge
        self._gated = throttle is not None or hedge is not None
        statuses = self.retry_statuses
        self._hedge: ClientHedge | None = check_hedge(
            hedge,
            lambda outcome: (
                _retryable(outcome)
                if isinstance(outcome, BaseException)
                else isinstance(outcome, aiohttp.ClientResponse) and outcome.status in statuses
            ),
        )
        # Case-insensitive names made once (aiohttp's headers are a CIMultiDict, which
        # folds a plain str on every write).
        self._max_elapsed = policy.max_elapsed
        self._headers = DeadlineHeaders(
            tuple(
                (istr(name), format_left)
                for name, format_left in _deadline_senders(deadline_header, deadline_headers)
            ),
            self._max_elapsed,
        )
        self._deadline_ts = policy.terms.deadline_ts  # inf: none
        # A retryable status is a result, retried as one; the wait reads the outcome.
        self._retried = policy.retry(
            budget=budget,
            throttle=None if throttle is None else _Asked(),
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
        throttle = None
        if self._gated:  # a throttle or a hedge: one check on the hot path
            throttle = self._throttle_for(request)
            if self._hedge is not None and self._retries(request):
                return await self._hedged(request, handler, self._hedge, throttle)
            self._admit_first(throttle, started)
        horizon = run_horizon(started, self._max_elapsed, self._deadline_ts)
        left = time_left(horizon, self._max_elapsed)
        # The first attempt, inline (a coroutine less on every request): its response, or
        # the error it raised (a timeout where the hard stop cut it: no answer to record).
        watchdog, task = self._admit(request, left)
        first: aiohttp.ClientResponse | Exception
        answered = True
        try:
            first = await handler(request)
        except asyncio.CancelledError:
            if not watchdog.cut_off(task):
                raise
            first, answered = _time_up(left), False
        except Exception as exc:
            first = exc
        finally:
            watchdog.unwatch(task)
        if throttle is not None and answered:
            throttle.record(first)
        if self._final(first, request):  # nothing to retry: the request is one attempt
            if self.budget is not None:
                await self._deposit()
            if isinstance(first, Exception):
                raise first
            return first
        frame = retry_frame(horizon, started, self._max_elapsed)
        return await self._enter(_Call(request, handler, first, throttle), frame)

    def _admit_first(self, throttle: Any, started: float) -> None:
        """A first attempt's admission by the throttle (if any), before the retry budget's
        deposit: a rejected one is not sent (:meth:`_reject`)."""
        if throttle is not None and admit(throttle.admit) is not None:
            self._reject(throttle, started)

    def _final(
        self, first: aiohttp.ClientResponse | Exception, request: aiohttp.ClientRequest
    ) -> bool:
        """Whether the first attempt's outcome ends the request: not a retryable error or
        status, or a method not retried."""
        if isinstance(first, Exception):
            retryable = _retryable(first)
        else:
            retryable = first.status in self.retry_statuses
        return not retryable or not self._retries(request)

    def _throttle_for(self, request: aiohttp.ClientRequest) -> Any:
        """The throttle of ``request``: the middleware's, or its host's (``None``: none)."""
        if self.throttle is None or self._throttle is not None:
            return self._throttle
        assert self._throttle_of is not None
        return host_throttle(self._throttle_of, request.url.host)

    def _reject(self, throttle: Any, started: float) -> NoReturn:
        """End a request whose first attempt the throttle rejected (nothing was sent): an
        ``aiohttp.ClientConnectionError`` that is also a ``BudgetExhausted`` (``throttled``).

        aiohttp's base connection error, as for a connection that could not be used: the
        request reached no server, so it is safe to send again for any method, and
        ``except aiohttp.ClientConnectionError`` (or ``ClientError``) code handles it as it
        handles an unreachable host. Not ``ClientConnectorError`` (it names an OS error of
        a connect call that was never made), nor ``ServerConnectionError`` (no server
        took part).
        """
        rejection, spent = rejected_first(throttle, self.policy, started)
        raise _rejected(rejection, spent) from rejection

    async def _hedged(
        self,
        request: aiohttp.ClientRequest,
        handler: Handler,
        hedge: ClientHedge,
        throttle: Any,
    ) -> aiohttp.ClientResponse:
        """Send ``request`` as one hedged run (the engine's): the first good response wins.

        Every hedge sends its own copy of ``request`` (its own headers: the deadline header
        with its own time left); a loser is cancelled and its response released.
        """
        headers, sent = self._headers, [False]

        async def attempt(horizon: Horizon) -> aiohttp.ClientResponse:
            one = _copy(request) if sent[0] else request
            sent[0] = True
            headers.write(one.headers, horizon.left())
            return await handler(one)

        outcome, report = await hedged_request(
            hedge,
            attempt,
            self.policy,
            self._deadline_ts,
            budget=self.budget,
            throttle=throttle,
            release=aiohttp.ClientResponse.release,
        )
        if report is None:  # a good response, or a fatal error raised as it is
            return cast(aiohttp.ClientResponse, outcome.result())
        exc = outcome.exception
        if exc is None:  # gave up on a status: the last response
            return cast(aiohttp.ClientResponse, outcome.value)
        spent = BudgetExhausted(_last_attempt(report, exc), report)
        if isinstance(exc, Throttled):
            raise _rejected(exc, spent) from exc
        if isinstance(exc, TimeoutError) and report.reason in _CUT:  # the run's end
            raise exhausted(aiohttp.ServerTimeoutError(str(exc)), spent) from exc
        if isinstance(exc, aiohttp.ClientError):
            raise exhausted(exc, spent) from exc
        raise spent from exc

    def _retries(self, request: aiohttp.ClientRequest) -> bool:
        """Whether ``request`` may be sent again: a listed method, a body of bytes."""
        return request.method in self.methods and _replayable(request.body)

    def _admit(
        self, request: aiohttp.ClientRequest, left: float
    ) -> tuple[Watchdog, asyncio.Task[Any]]:
        """Admit one attempt with ``left`` seconds: the deadline headers, the hard stop."""
        self._headers.write(request.headers, left)
        if left < 0.0:
            left = 0.0
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
        run = _RUN.set(call)
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
            _RUN.reset(run)
            if call.received is not None and call.received is not call.returned:
                call.received.release()
        assert call.returned is not None
        return call.returned

    async def _attempt(self, call: _Call) -> aiohttp.ClientResponse:
        """One attempt of the run: the first one's outcome again, then real ones (each
        outcome told to the throttle, if any; a cut attempt has none)."""
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
        except Exception as exc:
            if call.throttle is not None:
                call.throttle.record(exc)
            raise
        finally:
            watchdog.unwatch(task)
        if call.throttle is not None:
            call.throttle.record(response)
        return response


_CUT = (StopReason.WALL_CLOCK, StopReason.DEADLINE)


def _copy(request: aiohttp.ClientRequest) -> aiohttp.ClientRequest:
    """A hedge's own request: ``request`` with its own headers (the body is bytes, sent as
    often as asked; the response and the writer are set by the hedge's own send)."""
    one = copy.copy(request)
    one.headers = request.headers.copy()
    return one


def _last_attempt(report: ExhaustionReport, exc: BaseException) -> Future:
    """The ``last_attempt`` of a hedged run that gave up on ``exc``."""
    return Future.construct(max(1, report.attempts), exc, True)


def _rejected(rejection: Throttled, spent: BudgetExhausted) -> BaseException:
    """A rejected first attempt's error: an ``aiohttp.ClientConnectionError`` that is also
    ``spent`` (see :meth:`BudgetMiddleware._reject`)."""
    return exhausted(aiohttp.ClientConnectionError(str(rejection)), spent)


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
    throttle: Any = None,
    hedge: Any = None,
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

    ``throttle``: an adaptive throttle (``AdaptiveThrottle``, a Redis one) or a callable
    mapping a request's host to one. Every attempt asks it (the first before the retry
    budget's deposit; a retry after the time budget, before the retry budget) and every
    attempt sent has its outcome recorded once. A rejected first attempt sends nothing and
    raises an ``aiohttp.ClientConnectionError`` that is also a ``BudgetExhausted`` (reason
    ``throttled``, 0 attempts); a rejected retry ends the run as a spent budget does.

    ``hedge``: a :class:`~tenacity_budget.Hedge`: a request of the ``methods`` with a body
    of bytes is hedged instead of retried (docs/hedging.md, "HTTP clients"): after the
    hedge's delay without an answer the same request is sent again, the first good
    response wins and the others are cancelled and released; non-fatal are the
    ``retry_statuses`` and the connection errors retried (unless the hedge has its own
    ``non_fatal``); the throttle and ``budget`` are asked for every hedge. Other requests
    are sent as without it.

    Raises:
        TypeError, ValueError: for a bad option, at once.
    """
    return BudgetMiddleware(
        policy, retry_statuses, methods, deadline_header, deadline_headers, budget, throttle, hedge
    )
