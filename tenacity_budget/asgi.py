"""ASGI middleware that makes a caller's deadline the ambient deadline of its request.

A client sending through :class:`tenacity_budget.httpx.AsyncBudgetTransport` (or anything
else that sets the header) tells the service how long it has left, in whole milliseconds,
in ``X-Request-Timeout-Ms``. :class:`DeadlineMiddleware` reads it and runs the request
inside a :func:`~tenacity_budget.deadline_scope` of that length, so every budgeted run the
handler starts (``policy.retry()``, the transports, :func:`~tenacity_budget.remaining`)
ends by the caller's deadline::

    from tenacity_budget.asgi import DeadlineMiddleware

    app = DeadlineMiddleware(app, max_timeout=30.0)  # Starlette, FastAPI, any ASGI app

The value is relative ("this much time left"), not an instant, so the two hosts' clocks
need not agree: the service starts counting when the request reaches it. Pure ASGI: no
framework is imported.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, TypeAlias

from .http import DEADLINE_HEADER, _check_header_name, parse_timeout_ms
from .runtime import deadline_scope

__all__ = ["DeadlineMiddleware"]

Scope: TypeAlias = MutableMapping[str, Any]
Message: TypeAlias = MutableMapping[str, Any]
Receive: TypeAlias = Callable[[], Awaitable[Message]]
Send: TypeAlias = Callable[[Message], Awaitable[None]]
# Any ASGI 3 application: ``await app(scope, receive, send)``. Loose on purpose, so that
# apps typed with plain dicts or a framework's own types are accepted as they are.
ASGIApp: TypeAlias = Callable[..., Awaitable[None]]


class DeadlineMiddleware:
    """Run each request inside a deadline scope set by its caller's deadline header.

    For ``http`` and ``websocket`` scopes the middleware reads ``header`` (the caller's
    time left in whole milliseconds, as :class:`~tenacity_budget.httpx.BudgetTransport`
    sends it) and runs the app inside :func:`~tenacity_budget.deadline_scope` of that many
    seconds, counted from the moment the request reaches the middleware. Inside,
    :func:`~tenacity_budget.remaining` gives the time left and every budgeted run the
    handler starts ends by then. Sent more than once, the smallest value holds.

    The value is read with :func:`~tenacity_budget.http.parse_timeout_ms`. A missing,
    malformed or negative header is ignored (the request runs as without the
    middleware, or under ``max_timeout``), never a 500. ``lifespan`` (and any other scope
    type) passes through untouched.

    The scope is ambient only: the middleware does not cancel a handler that runs past
    it. Handlers bound their own work with ``remaining()`` or budgeted runs.

    Args:
        app: the ASGI application to wrap.
        header: the header name (case-insensitive).
        max_timeout: the most time, in seconds, a request may be given: a longer header
            value is clamped to it, and a request without a (valid) header gets exactly it.
            ``None``: no cap, and no scope for a request without the header.

    Raises:
        TypeError, ValueError: for an app that is not callable, a header name that is not
            a valid HTTP token, or a ``max_timeout`` that is not a finite number ``> 0``.
    """

    __slots__ = ("_name", "app", "header", "max_timeout")

    def __init__(
        self,
        app: ASGIApp,
        *,
        header: str = DEADLINE_HEADER,
        max_timeout: float | None = None,
    ) -> None:
        if not callable(app):
            raise TypeError(f"app must be an ASGI application (callable), got {type(app).__name__}")
        _check_header_name(header, "header")
        if max_timeout is not None:
            if isinstance(max_timeout, bool) or not isinstance(max_timeout, int | float):
                raise TypeError(
                    f"max_timeout must be a number of seconds, got {type(max_timeout).__name__}"
                )
            if not math.isfinite(max_timeout) or max_timeout <= 0:
                raise ValueError(f"max_timeout must be a finite number > 0, got {max_timeout!r}")
        self.app = app
        self.header = header
        self.max_timeout = None if max_timeout is None else float(max_timeout)
        # ASGI servers hand header names over lowercased (as bytes).
        self._name = header.lower().encode("ascii")

    def __repr__(self) -> str:
        return (
            f"DeadlineMiddleware({self.app!r}, header={self.header!r}, "
            f"max_timeout={self.max_timeout!r})"
        )

    def timeout_for(self, headers: Iterable[tuple[bytes, bytes]]) -> float | None:
        """The seconds a request with these (ASGI, raw) headers is given, or ``None``."""
        name = self._name
        seconds: float | None = None
        for key, value in headers:
            if key.lower() == name:
                parsed = parse_timeout_ms(value)
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
        if scope.get("type") not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        seconds = self.timeout_for(scope.get("headers") or ())
        if seconds is None:
            await self.app(scope, receive, send)
            return
        with deadline_scope(seconds):
            await self.app(scope, receive, send)
