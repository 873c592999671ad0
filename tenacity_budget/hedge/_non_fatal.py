"""Which outcome of a hedged attempt is a non-fatal failure (the next hedge is sent at once).

:func:`non_fatal` is ``Hedge``'s default: a transport error (an ``OSError``, ``ConnectionError``
and ``TimeoutError`` among them, an ``httpx.TransportError``, an aiohttp connection error or
server timeout; recognised by class name and module, without importing those libraries)
that a new attempt may cure (:func:`~tenacity_budget._clients.retry_cures`: not a TLS
failure), or a result whose status (``status_code`` or ``status``) is 429, 502, 503 or 504.
"""

from __future__ import annotations

from .._clients import retry_cures

__all__: list[str] = []

RETRY_STATUSES = frozenset({429, 502, 503, 504})
"""The statuses a hedge treats as non-fatal, as the HTTP clients retry them."""

# (module, class name) of the clients' transport errors, and of their kinds no new attempt
# cures (a request that cannot be written, a TLS failure), found in an error's class MRO.
_TRANSPORT = frozenset(
    {
        ("httpx", "TransportError"),
        ("aiohttp", "ClientConnectionError"),
        ("aiohttp", "ServerTimeoutError"),
    }
)
_NOT_CURED = frozenset(
    {
        ("httpx", "LocalProtocolError"),
        ("httpx", "UnsupportedProtocol"),
        ("aiohttp", "ClientSSLError"),
    }
)
_ANY = (BaseException,)


def _kinds(exc: BaseException) -> set[tuple[str, str]]:
    return {(cls.__module__.partition(".")[0], cls.__name__) for cls in type(exc).__mro__}


def transport_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a transport error a new attempt may cure."""
    kinds = _kinds(exc)
    if not (isinstance(exc, OSError) or kinds & _TRANSPORT) or kinds & _NOT_CURED:
        return False
    return retry_cures(exc, _ANY, ())  # the one rule: no TLS failure in the chain


def status_of(result: object) -> int | None:
    """The HTTP status of a response-like result (``status_code``, else ``status``), if any."""
    status = getattr(result, "status_code", None)
    if status is None:
        status = getattr(result, "status", None)
    return status if isinstance(status, int) and not isinstance(status, bool) else None


def non_fatal(outcome: object) -> bool:
    """The default ``Hedge(non_fatal=...)``: a curable transport error or a 429/502/503/504."""
    if isinstance(outcome, BaseException):
        return transport_error(outcome)
    return status_of(outcome) in RETRY_STATUSES
