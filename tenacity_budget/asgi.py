"""ASGI middleware that makes a caller's deadline the ambient deadline of its request.

:class:`DeadlineMiddleware` reads the caller's time left from any deadline header of
:data:`tenacity_budget.http.DIALECTS` (ours, ``grpc-timeout``, Envoy's, Connect's) and runs
the request inside a :func:`~tenacity_budget.deadline_scope` of that length, so every
budgeted run the handler starts ends by the caller's deadline; with ``shed_expired=True``
a request whose time is already spent is answered 504 without running the app. Pure
ASGI: no framework is imported. The guide is docs/deadline-propagation.md.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from typing import Any, TypeAlias

from ._validate import seconds
from .context import deadline_scope
from .http import DEADLINE_HEADER, DIALECTS, _check_header_name, _dialect, parse_timeout_ms

__all__ = ["DeadlineMiddleware"]

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
# Any ASGI 3 application: ``await app(scope, receive, send)``. Loose on purpose, so that
# apps typed with plain dicts or a framework's own types are accepted as they are.
ASGIApp: TypeAlias = Callable[..., Awaitable[None]]

# Finagle's DeadlineFilter: at most this fraction of the requests of the last REJECT_PERIOD
# seconds is shed, so a caller whose clock or header is wrong cannot take a service down.
REJECT_PERIOD = 10.0
MAX_REJECT_FRACTION = 0.2

_SHED_BODY = b"deadline expired: the caller has no time left for this request"
_SHED_HEADERS = [
    (b"content-type", b"text/plain; charset=utf-8"),
    (b"content-length", str(len(_SHED_BODY)).encode("ascii")),
]


def _seconds_option(value: object, what: str) -> float | None:
    """``value`` as a finite number of seconds ``> 0``, or ``None``; raise saying why not."""
    return None if value is None else seconds(value, what, positive=True)


def _readers(
    header: str | None, headers: Sequence[str] | None
) -> dict[bytes, Callable[[bytes], float | None]]:
    """The parser of each header read, by lower-case ASCII name (ASGI's spelling)."""
    if header is not None and headers is not None:
        raise TypeError("pass header= or headers=, not both")
    if header is not None:
        _check_header_name(header, "header")
        return {header.lower().encode("ascii"): parse_timeout_ms}
    if headers is None:
        chosen = list(DIALECTS.values())
    elif isinstance(headers, str | bytes) or not isinstance(headers, Iterable):
        raise TypeError(f"headers must be a sequence of header names, got {headers!r}")
    else:
        chosen = [_dialect(name, "headers") for name in headers]
    return {d.header.lower().encode("ascii"): d.parse for d in chosen}


# The window counts requests and sheds in slices of this many seconds (a run of arrivals
# closer than this shares one entry), so it holds at most REJECT_PERIOD / _SLICE entries
# of each, however many requests it sees.
_SLICE = 0.001


class _ShedWindow:
    """The requests and the sheds of the last :data:`REJECT_PERIOD` seconds, in slices.

    Each entry is ``[time, count]`` (a slice of sheds also keeps its first shed's time,
    where the slice starts). A slice of requests leaves the window at its first
    request's time plus the period, a slice of sheds at its last shed's: requests are
    never counted longer, sheds never shorter, than exactly, so the sheds in any window of
    the period stay within :data:`MAX_REJECT_FRACTION` of its requests.
    """

    __slots__ = ("requests", "seen_count", "shed_count", "sheds")

    def __init__(self) -> None:
        self.requests: deque[list[float]] = deque()  # [first request's time, count]
        self.sheds: deque[list[float]] = deque()  # [last shed's time, count, first's]
        self.seen_count = 0
        self.shed_count = 0

    def seen(self, now: float) -> None:
        """Count one request, at ``now``; forget what left the window."""
        self._expire(now - REJECT_PERIOD)
        requests = self.requests
        if requests and now - requests[-1][0] < _SLICE:
            requests[-1][1] += 1
        else:
            requests.append([now, 1])
        self.seen_count += 1

    def may_shed(self, now: float) -> bool:
        """Whether one more shed keeps the sheds within the fraction; counted if so."""
        self._expire(now - REJECT_PERIOD)
        if self.shed_count + 1 > MAX_REJECT_FRACTION * self.seen_count:
            return False
        sheds = self.sheds
        if sheds and now - sheds[-1][2] < _SLICE:
            sheds[-1][0] = now
            sheds[-1][1] += 1
        else:
            sheds.append([now, 1, now])
        self.shed_count += 1
        return True

    def _expire(self, start: float) -> None:
        """Drop the slices at or before ``start``."""
        requests, sheds = self.requests, self.sheds
        while requests and requests[0][0] <= start:
            self.seen_count -= int(requests.popleft()[1])
        while sheds and sheds[0][0] <= start:
            self.shed_count -= int(sheds.popleft()[1])


class DeadlineMiddleware:
    """Run each request inside a deadline scope set by its caller's deadline headers.

    For ``http`` and ``websocket`` scopes it reads every deadline header of
    :data:`~tenacity_budget.http.DIALECTS` (or only ``headers=``, or only ``header=``, one
    header in our whole-milliseconds format), takes the earliest deadline among the valid
    values, and runs the app inside :func:`~tenacity_budget.deadline_scope` of that many
    seconds, counted from the moment the request reaches it. Missing, malformed or
    negative values are ignored, never a 500; ``lifespan`` passes through untouched. The
    scope is ambient only: a handler running past it is not cancelled.

    Args:
        app: the ASGI application to wrap.
        header: one header to read, in our format (any name, case-insensitive).
        headers: the dialects to read (names of ``DIALECTS``, any case); default all.
        max_timeout: the most time, in seconds, a request may be given: a longer value is
            clamped to it, and a request without a (valid) header gets exactly it.
        shed_expired: answer an HTTP request 504 at once, without calling the app, when
            its caller's time left is 0 (or below ``min_timeout``); at most 20% of the
            requests seen in the last 10 s are shed (Finagle's DeadlineFilter).
        min_timeout: with ``shed_expired``, the least time left worth starting a request.
        observers: objects told of each shed request through an optional
            ``on_shed(name, left)`` hook (``name``: the app's name; ``left``: seconds).

    Raises:
        TypeError, ValueError: for an app that is not callable, both ``header`` and
            ``headers``, an invalid or unknown header name, or a time that is not a finite
            number ``> 0``.
    """

    __slots__ = (
        "_name",
        "_readers",
        "_window",
        "app",
        "header",
        "headers",
        "max_timeout",
        "min_timeout",
        "observers",
        "shed_expired",
    )

    def __init__(
        self,
        app: ASGIApp,
        *,
        header: str | None = None,
        headers: Sequence[str] | None = None,
        max_timeout: float | None = None,
        shed_expired: bool = False,
        min_timeout: float | None = None,
        observers: Iterable[Any] = (),
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be an ASGI application (callable), got {type(app).__name__}")
        self._readers = _readers(header, headers)
        self.app = app
        ours = DEADLINE_HEADER.lower().encode("ascii") in self._readers
        self.header: str | None = (
            header if header is not None else (DEADLINE_HEADER if ours else None)
        )
        """The header read in our format (by default ours, among all the dialects), or ``None``."""
        self.headers = tuple(name.decode("ascii") for name in self._readers)
        """The lower-case names of every header read."""
        self.max_timeout = _seconds_option(max_timeout, "max_timeout")
        self.min_timeout = _seconds_option(min_timeout, "min_timeout")
        if not isinstance(shed_expired, bool):
            raise TypeError(f"shed_expired must be a bool, got {type(shed_expired).__name__}")
        self.shed_expired = shed_expired
        self.observers = tuple(observers)
        self._window = _ShedWindow()
        self._name: str = getattr(app, "__qualname__", type(app).__qualname__)

    def __repr__(self) -> str:
        return (
            f"DeadlineMiddleware({self.app!r}, headers={self.headers!r}, "
            f"max_timeout={self.max_timeout!r}, shed_expired={self.shed_expired!r})"
        )

    def timeout_for(self, headers: Iterable[tuple[bytes, bytes]]) -> float | None:
        """The seconds a request with these (ASGI, raw) headers is given, or ``None``."""
        readers = self._readers
        seconds: float | None = None
        for key, value in headers:
            parse = readers.get(key.lower())
            if parse is not None:
                parsed = parse(value)
                if parsed is not None and (seconds is None or parsed < seconds):
                    seconds = parsed
        cap = self.max_timeout
        if cap is not None and (seconds is None or seconds > cap):
            seconds = cap
        if seconds is None or seconds == math.inf:
            return None
        return seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection."""
        kind = scope.get("type")
        if kind not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        seconds = self.timeout_for(scope.get("headers") or ())
        if self.shed_expired and kind == "http" and self._shed(seconds):
            await send({"type": "http.response.start", "status": 504, "headers": _SHED_HEADERS})
            await send({"type": "http.response.body", "body": _SHED_BODY})
            return
        if seconds is None:
            await self.app(scope, receive, send)
            return
        with deadline_scope(seconds):
            await self.app(scope, receive, send)

    def _shed(self, seconds: float | None) -> bool:
        """Whether to answer this HTTP request 504 at once; tells the observers if so."""
        now = time.monotonic()
        self._window.seen(now)
        floor = self.min_timeout
        expired = seconds is not None and (
            seconds <= 0.0 or (floor is not None and seconds < floor)
        )
        if not expired or not self._window.may_shed(now):
            return False
        assert seconds is not None
        for observer in self.observers:
            hook = getattr(observer, "on_shed", None)
            if callable(hook):
                hook(self._name, seconds)
        return True
