"""A requests adapter that retries within a budget and tells the next hop its deadline.

``session.mount("https://", BudgetAdapter(policy))`` sends each request as one budgeted
run of the policy, with the semantics of :mod:`tenacity_budget.httpx`'s transports (an
adaptive throttle included); the errors it raises stay ``requests.RequestException``.
Needs the ``requests`` extra (``pip install 'tenacity-budget[requests]'``). The guide,
with what requests cannot bound (a read timeout is per socket read, not per response),
is docs/cookbook.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

from tenacity import retry_if_exception, retry_if_result

try:  # the real library: an absolute import, never this module
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util import Timeout as _Timeout
except ImportError as exc:  # a missing extra, named at import
    raise ImportError(
        "tenacity_budget.requests needs requests: pip install 'tenacity-budget[requests]'"
    ) from exc

from ._clients import (
    DeadlineHeaders,
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
from .exhaustion import BudgetExhausted
from .http import _check_methods, _check_statuses, _deadline_senders
from .retrying import BudgetedRetry

if TYPE_CHECKING:
    from .context import Horizon
    from .policy import BackoffPolicy

__all__ = ["BudgetAdapter"]

# A time left past this (about 31 years) bounds no socket call (Python's socket timeouts
# overflow past about 9.2e9 s); the caller's own timeouts apply.
_UNBOUNDED = 1e9
# The least timeout an admitted attempt is sent with: urllib3 reads 0 as "non-blocking".
_LEAST = 0.001

# The transport errors of requests, and those a retry cannot cure (a TLS failure): the
# rule of every client, retry_cures.
_TRANSPORT = (requests.ConnectionError, requests.Timeout)
_NOT_CURED = (requests.exceptions.SSLError,)


def _retryable(exc: BaseException) -> bool:
    return retry_cures(exc, _TRANSPORT, _NOT_CURED)


def _timeouts(own: Any, left: float) -> Any:
    """The timeouts of an attempt: the time left, or the caller's own where less.

    ``own`` is any ``timeout=`` requests takes: ``None``, seconds, a ``(connect, read)``
    pair (each ``None`` or seconds), or a :class:`urllib3.util.Timeout` (given back as
    one, its ``total``, when set, clamped too).
    """
    if isinstance(own, _Timeout):
        return _urllib3_timeouts(own, left)
    if isinstance(own, tuple):
        connect, read = own
    elif isinstance(own, int | float) and not isinstance(own, bool):
        connect = read = own
    else:  # None
        connect = read = None
    if left > _UNBOUNDED:
        return connect, read
    left = max(left, _LEAST)
    return _least(connect, left), _least(read, left)


def _urllib3_timeouts(own: _Timeout, left: float) -> _Timeout:
    """A urllib3 ``Timeout`` for an attempt: each of ``own``'s phases and total, clamped."""
    if left > _UNBOUNDED:
        return own
    left = max(left, _LEAST)
    # Its phases without its total, read through its public properties: with a total set
    # they depend on a connection started (TimeoutStateError) or fold the total in.
    total = _seconds(own.total)
    phases = own.clone()
    phases.total = None
    return _Timeout(
        connect=_least(_seconds(phases.connect_timeout), left),
        read=_least(_seconds(phases.read_timeout), left),
        total=None if total is None else _least(total, left),
    )


def _seconds(value: object) -> float | None:
    """A timeout in seconds, ``None`` for none (urllib3's "default" marker included)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    return None


def _least(own: float | None, left: float) -> float:
    """``left``, or ``own`` where it is less."""
    return left if own is None or own > left else own


def _replayable(body: object) -> bool:
    """Whether a prepared body is the same bytes on every attempt (a file or generator is not)."""
    return body is None or isinstance(body, bytes | str)


class BudgetAdapter(HTTPAdapter):
    """A :class:`requests.adapters.HTTPAdapter` that sends each request as one budgeted run.

    ``session.mount("https://", BudgetAdapter(policy))``. It retries connection errors and
    timeouts, and the ``retry_statuses``, for the ``methods`` (and a replayable body);
    honours ``Retry-After``, ``retry-after-ms``, ``x-ms-retry-after-ms`` (and
    ``RateLimit-Reset``) within the budget; asks ``throttle`` before every attempt and
    draws every retry from ``budget``; sets each attempt's connect and read timeouts to the
    time left (or the caller's ``timeout=`` where shorter); and sends the time left
    downstream in ``deadline_header`` (our format; ``None``: none) or in each dialect of
    ``deadline_headers``. Spent on a status, the last response is returned; spent on a
    connection error or a timeout, the error raised is of requests' own kind
    (``requests.ConnectionError``, ``requests.Timeout``...) and also a
    :class:`~tenacity_budget.BudgetExhausted` carrying ``.report``. urllib3's own retries
    are off (``max_retries=0``).

    Args:
        policy: the budget of each request.
        retry_statuses: response statuses to retry: 4xx and 5xx codes only.
        methods: request methods to retry; any other is sent once, still bounded.
        deadline_header: the header carrying the time left in whole milliseconds.
        deadline_headers: the dialects (names of :data:`tenacity_budget.http.DIALECTS`)
            to send instead; ``()`` sends none. Given with a ``deadline_header`` other
            than the default, a ``TypeError``; the default itself written out
            (``"X-Request-Timeout-Ms"``) cannot be told apart and is accepted: then
            ``deadline_headers`` alone is sent.
        budget: a :class:`~tenacity_budget.RetryBudget` every retry draws from; each
            request sent deposits once.
        throttle: an adaptive throttle (:class:`~tenacity_budget.AdaptiveThrottle`,
            ``RedisAdaptiveThrottle``), or a callable mapping a request's host to its own
            (one per dependency). Every attempt asks it, the first included (before the
            request's deposit); a retry after the time budget, before the retry budget.
            A rejected first attempt is not sent and deposits nothing: it raises a
            ``requests.ConnectionError`` (nothing was sent, as when no connection is
            made: safe to retry for any method) that is also a ``BudgetExhausted``,
            reason ``throttled``, 0 attempts, its ``last_attempt`` holding the
            :class:`~tenacity_budget.exhaustion.Throttled` rejection. A rejected retry ends
            the run as any spent budget does. Every attempt sent is recorded once.
        **adapter_kwargs: ``pool_connections``, ``pool_maxsize``, ``pool_block``.

    Raises:
        TypeError, ValueError: at construction, for a bad option (``max_retries`` too).
    """

    def __init__(
        self,
        policy: BackoffPolicy,
        *,
        retry_statuses: frozenset[int] = frozenset({429, 502, 503, 504}),
        methods: frozenset[str] = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"}),
        deadline_header: str | None = "X-Request-Timeout-Ms",
        deadline_headers: Iterable[str] | None = None,
        budget: Any = None,
        throttle: Any = None,
        **adapter_kwargs: Any,
    ) -> None:
        from .policy import BackoffPolicy

        if not isinstance(policy, BackoffPolicy):
            raise TypeError(f"policy must be a BackoffPolicy, got {type(policy).__name__}")
        if "max_retries" in adapter_kwargs:
            raise TypeError("max_retries is always 0 in a BudgetAdapter: the policy retries")
        self.policy = policy
        self.retry_statuses = _check_statuses(retry_statuses)
        self.methods = _check_methods(methods)
        self.budget = budget
        self.throttle = throttle
        self._fixed, self._throttle_of = check_throttle(throttle)
        # Whether a first attempt is admitted at all: a throttle asked, a deposit made.
        self._admits = throttle is not None or budget is not None
        self._max_elapsed = policy.max_elapsed
        self._headers = DeadlineHeaders(
            _deadline_senders(deadline_header, deadline_headers), self._max_elapsed
        )
        self._deadline_ts = policy.terms.deadline_ts  # inf: none
        super().__init__(max_retries=0, **adapter_kwargs)
        statuses = self.retry_statuses
        # A retryable status is a result, retried as one; the wait reads the outcome.
        self._run_options: dict[str, Any] = {
            "budget": budget,
            "retry_after": outcome_hint,
            "tenacity_kwargs": {
                "retry": retry_if_result(lambda response: response.status_code in statuses)
                | retry_if_exception(_retryable)
            },
        }
        # The run of each throttle (one per host for a callable), built on first use.
        self._runs: dict[Any, Callable[[_Call], requests.Response]] = {}
        self._retried = self._run_of(self._fixed)

    def __repr__(self) -> str:
        return f"<BudgetAdapter {self.policy!r}>"

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float, float] | tuple[float, None] | None = None,
        verify: bool | str = True,
        cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        """Send ``request`` as one budgeted run (see the class)."""
        options = {"stream": stream, "verify": verify, "cert": cert, "proxies": proxies}
        call = _Call(request, timeout, options)
        retried = request.method in self.methods and _replayable(request.body)
        # The first attempt is admitted (the throttle, then the deposit) and sent at once,
        # as the run's would be (the run's time left); only a retryable outcome enters the
        # run, which replays it first and ends by the first attempt's end: what one run
        # from the start would do.
        started = time.monotonic()
        if self._admits:
            self._admit_first(call, started)
        horizon = run_horizon(started, self._max_elapsed, self._deadline_ts)
        try:
            response = self._admit(call, time_left(horizon, self._max_elapsed))
        except BaseException as exc:
            if not retried or not _retryable(exc):
                _tell(call.throttle, exc)
                raise
            call.first = exc
        else:
            if not retried or response.status_code not in self.retry_statuses:
                if call.throttle is not None:
                    call.throttle.record(response)
                return response
            call.first = response
        # The run records the first outcome when it replays it, and asks the throttle of
        # every retry.
        with _frame(retry_frame(horizon, started, self._max_elapsed)):
            return self._run(call)

    def _admit_first(self, call: _Call, started: float) -> None:
        """The first attempt's admission: by the request's throttle (decision.admit), then
        the request's deposit in the retry budget (a rejected request deposits nothing).

        Raises:
            requests.ConnectionError: also a BudgetExhausted (reason ``throttled``), when
                the throttle rejects it: nothing is sent.
        """
        throttle = self._fixed
        if throttle is None and self._throttle_of is not None:
            throttle = host_throttle(self._throttle_of, urlsplit(call.request.url or "").hostname)
        if throttle is not None:
            if admit(throttle.admit) is not None:
                self._reject(call, throttle, started)
            call.throttle = throttle
        if self.budget is not None:
            self.budget.deposit()

    def _reject(self, call: _Call, throttle: Any, started: float) -> NoReturn:
        """End a request whose first attempt the throttle rejected: nothing was sent."""
        rejection, spent = rejected_first(throttle, self.policy, started)
        error = requests.ConnectionError(str(rejection), request=call.request)
        raise exhausted(error, spent) from rejection

    def _run_of(self, throttle: Any) -> Callable[[_Call], requests.Response]:
        """The budgeted run of the requests ``throttle`` admits (``None``: no throttle)."""
        run = self._runs.get(throttle)
        if run is None:
            retried = _Replayed(self.policy, throttle=throttle, **self._run_options)
            run = self._runs.setdefault(throttle, retried(self._attempt))
        return run

    def _run(self, call: _Call) -> requests.Response:
        """The budgeted run of a request whose first attempt called for a retry."""
        run = self._retried if call.throttle is self._fixed else self._run_of(call.throttle)
        try:
            call.returned = run(call)
        except BudgetExhausted as spent:
            if not spent.last_attempt.failed:  # spent on a status: the last response
                call.returned = spent.last_attempt.result()
            else:
                last = spent.last_attempt.exception()
                if isinstance(last, requests.RequestException):
                    raise exhausted(last, spent) from last
                raise
        finally:
            if call.received is not None and call.received is not call.returned:
                call.received.close()
        assert call.returned is not None
        return call.returned

    def _attempt(self, call: _Call) -> requests.Response:
        """One attempt of the run: the first one's outcome again, then real ones."""
        first, call.first = call.first, None
        if isinstance(first, BaseException):
            raise first
        if first is not None:
            call.received = first
            return first
        previous, call.received = call.received, None
        if previous is not None:  # the run is retrying it: discard it
            previous.close()
        left = remaining()
        assert left is not None  # always inside the run
        response = call.received = self._admit(call, left)
        return response

    def _admit(self, call: _Call, left: float) -> requests.Response:
        """Send one attempt with ``left`` seconds: the deadline headers and the timeouts."""
        self._headers.write(call.request.headers, left)
        return super().send(call.request, timeout=_timeouts(call.timeout, left), **call.options)


def _tell(throttle: Any, exc: BaseException) -> None:
    """Tell ``throttle`` (if any) the error an attempt raised; a cancellation or an
    interruption (not an ``Exception``) is no answer from the backend, and is not told."""
    if throttle is not None and isinstance(exc, Exception):
        throttle.record(exc)


class _Replayed(BudgetedRetry):
    """``policy.retry()``'s run of a request whose first attempt the adapter sent, replayed.

    That attempt was admitted before it was sent (the throttle asked, the deposit made),
    so the run admits nothing of its own; it records the replayed outcome (the adapter
    records only the outcomes that end a request at once), so each attempt is asked and
    recorded once. Every retry is decided by the run's stop as in any ``policy.retry()``.
    """

    def _admit_first(self, name: str, horizon: Horizon) -> None:
        return None


class _Call:
    """One request's run: the request, the caller's options, the latest response."""

    __slots__ = ("first", "options", "received", "request", "returned", "throttle", "timeout")

    def __init__(
        self, request: requests.PreparedRequest, timeout: Any, options: dict[str, Any]
    ) -> None:
        self.request = request
        self.options = options
        self.timeout = timeout
        self.first: BaseException | requests.Response | None = None
        self.received: requests.Response | None = None
        self.returned: requests.Response | None = None
        self.throttle: Any = None  # the throttle its attempts ask (and tell), if any
