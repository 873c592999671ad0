"""HTTP on the wire: the waits a server dictates and the deadline headers of every dialect.

:func:`retry_after` (for ``policy.retry(retry_after=...)``) and :func:`wait_hint` read
``Retry-After``, ``retry-after-ms``, ``x-ms-retry-after-ms`` and ``RateLimit-Reset`` from
an exception, a response or its headers; :func:`parse_retry_after` reads one
``Retry-After`` value. :data:`DIALECTS` maps each deadline header a mesh understands
(ours, ``X-Request-Timeout-Ms``, gRPC's, Envoy's, Connect's) to the codec that parses and
writes it. No HTTP library is imported. The guide, with the table of who reads which
header, is docs/deadline-propagation.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from fractions import Fraction
from types import MappingProxyType

from .context import check_aware

# DEADLINE_HEADER, format_timeout_ms and parse_timeout_ms stay importable from here (the
# codec of our own dialect, DIALECTS["x-request-timeout-ms"], is made of the two functions).
__all__ = ["DIALECTS", "parse_retry_after", "retry_after", "wait_hint"]

DEADLINE_HEADER = "X-Request-Timeout-Ms"
"""The header that carries a caller's time left, in whole milliseconds."""

# delay-seconds = 1*DIGIT (RFC 9110 §10.2.3). ASCII digits only: str.isdigit() and int()
# also accept other scripts' digits and superscripts, which no HTTP server sends.
_DELAY_SECONDS = re.compile(r"[0-9]+", re.ASCII)

# The obsolete RFC 850 form writes the year with two digits: "Sunday, 06-Nov-94 08:49:37 GMT".
_RFC850_YEAR = re.compile(r"[0-9]{1,2}-[A-Za-z]{3}-([0-9]{2})(?![0-9])", re.ASCII)

_WHOLE_MS = re.compile(rb"[0-9]+", re.ASCII)
# Milliseconds of more digits than this are far more seconds than a float holds (1.8e308);
# the bound keeps the integer conversion short (Python refuses strings of 4300 digits).
_MAX_MS_DIGITS = 400
# From here on (2**43 s, some 280 000 years) the float product seconds * 1000 can lose
# whole milliseconds; the header is then computed exactly.
_EXACT_FROM = float(2**43)

# A header name is a token (RFC 9110 §5.6.2).
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+", re.ASCII)


def parse_retry_after(value: str | bytes | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait according to a ``Retry-After`` header value, or ``None``.

    Accepts what RFC 9110 requires a recipient to accept:

    * delay-seconds: ``"120"`` gives ``120.0`` (ASCII digits only: ``"-1"``, ``"+1"`` and
      ``"1.5"`` are not delay-seconds and give ``None``);
    * an HTTP-date in any of the three forms of RFC 9110 §5.6.7: IMF-fixdate
      (``"Wed, 21 Oct 2015 07:28:00 GMT"``), the obsolete RFC 850 form
      (``"Wednesday, 21-Oct-15 07:28:00 GMT"``, its two-digit year read as the RFC says: a
      year more than 50 years ahead is the previous century's) and ANSI C's asctime
      (``"Wed Oct 21 07:28:00 2015"``, read as UTC). The date is parsed by
      :func:`email.utils.parsedate_to_datetime`. The result is the seconds from ``now`` to
      that date, ``0.0`` for a date already past.

    Surrounding whitespace is ignored. A missing (``None``), empty, negative or malformed
    value, or an impossible date (``31 Feb``, hour 25), gives ``None``: back off as usual.
    It never raises for any header value. A delay too large for a float is ``math.inf``
    (the budget stop then ends the run rather than sleep it).

    Args:
        value: the header's value (``str``, or ``bytes`` as sent, read as Latin-1), or
            ``None`` when the header is absent.
        now: the current time, a timezone-aware datetime, for tests; defaults to
            ``datetime.now(UTC)`` (which the virtual clock controls).

    Raises:
        TypeError, ValueError: only for a ``now`` that is not a timezone-aware datetime.
    """
    if now is not None:
        check_aware(now, "now")
    if isinstance(value, bytes):
        value = value.decode("latin-1")
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    if _DELAY_SECONDS.fullmatch(text):
        return float(text)  # digits only: float() cannot fail; past 1e308 it is inf
    return _seconds_until_date(text, now)


def _seconds_until_date(text: str, now: datetime | None) -> float | None:
    """Seconds from ``now`` until the HTTP-date ``text`` (``0.0`` if past), ``None`` if invalid."""
    try:
        when = parsedate_to_datetime(text)
    except (ValueError, TypeError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        # asctime has no zone and HTTP-dates are UTC; email.utils leaves such a date naive.
        when = when.replace(tzinfo=UTC)
    if now is None:
        now = datetime.now(UTC)
    two_digit = _RFC850_YEAR.search(text)
    if two_digit is not None:
        corrected = _rfc850_century(when, int(two_digit.group(1)), now)
        if corrected is None:
            return None
        when = corrected
    return max(0.0, when.timestamp() - now.timestamp())


def _rfc850_century(when: datetime, yy: int, now: datetime) -> datetime | None:
    """The RFC 9110 reading of a two-digit year: within 50 years of ``now``, past preferred.

    RFC 9110 §5.6.7: a two-digit year that appears more than 50 years in the future is the
    most recent past year with the same last two digits. (email.utils pivots at 1969.)
    """
    year = now.year - now.year % 100 + yy
    if year > now.year + 50:
        year -= 100
    elif year <= now.year - 50:
        year += 100
    if year == when.year:
        return when
    try:
        return when.replace(year=year)
    except ValueError:  # 29 Feb of a year that has none: an impossible date
        return None


def retry_after(exc: object) -> float | None:
    """The wait the server asked for in the response an exception (or a response) carries.

    Reads the headers of ``exc.headers`` (aiohttp's ``ClientResponseError``, a response
    itself) or of ``exc.response.headers`` (``httpx.HTTPStatusError``,
    ``requests.HTTPError``, your own) with :func:`wait_hint`. Usable as it is:
    ``policy.retry(retry_after=retry_after)``. An object without headers, or headers
    without a valid hint, gives ``None`` (back off as usual); it never raises.
    """
    try:
        headers = getattr(exc, "headers", None)
        if headers is None:
            headers = getattr(getattr(exc, "response", None), "headers", None)
    except Exception:  # a property that raises (httpx's .request does): no response here
        return None
    return wait_hint(headers)


def wait_hint(headers: object, *, now: datetime | None = None) -> float | None:
    """Seconds a response's headers ask the client to wait before trying again, or ``None``.

    The smallest valid hint among ``Retry-After`` (:func:`parse_retry_after`: seconds or an
    HTTP-date), ``retry-after-ms`` and ``x-ms-retry-after-ms`` (milliseconds, as Azure and
    OpenAI-style APIs send them; a decimal fraction is accepted) wins. Only when none of
    the three is valid, ``RateLimit-Reset`` in delta-seconds
    (draft-ietf-httpapi-ratelimit-headers) is the hint. Names are matched in any case;
    ``headers`` is any mapping (httpx, requests, aiohttp and plain dicts) or a sequence of
    ``(name, value)`` pairs (ASGI's raw bytes). Malformed values are ignored; anything that
    is not headers gives ``None``. Never raises, except for a ``now`` that is not a
    timezone-aware datetime.
    """
    if now is not None:
        check_aware(now, "now")
    hints: dict[bool, float] = {}  # the least hint, by "is it RateLimit-Reset"
    for name, value in _pairs(headers):
        reader = _HINTS.get(name)
        seconds = None if reader is None else reader(value, now)
        if seconds is not None:
            reset = name == "ratelimit-reset"
            hints[reset] = min(seconds, hints.get(reset, seconds))
    return hints.get(False, hints.get(True))


def _pairs(headers: object) -> list[tuple[str, object]]:
    """``(lower-case name, value)`` of each header, ``[]`` for anything that is not headers."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    if not isinstance(items, Iterable) or isinstance(items, str | bytes):
        return []
    pairs: list[tuple[str, object]] = []
    for item in items:
        if not isinstance(item, tuple) or len(item) != 2:  # a mapping's items, ASGI's pairs
            return []
        key, value = item
        name = key.decode("latin-1") if isinstance(key, bytes) else str(key)
        pairs.append((name.lower(), value))
    return pairs


# Milliseconds in a wait hint: digits, optionally a decimal fraction ("1500", "20.5").
_HINT_MS = re.compile(r"([0-9]{1,400})(?:\.([0-9]{1,400}))?", re.ASCII)


def _hint_ms(value: object, _now: datetime | None) -> float | None:
    """Seconds from a ``retry-after-ms`` value, ``None`` when malformed."""
    text = _header_text(value)
    match = None if text is None else _HINT_MS.fullmatch(text)
    if match is None:
        return None
    whole: str = match.group(1)
    fraction: str = match.group(2) or ""
    scale: int = 1000 * 10 ** len(fraction)
    try:
        # one correctly rounded division of exact integers: never above the exact value
        return int(whole + fraction) / scale
    except OverflowError:  # more seconds than a float holds
        return math.inf


def _hint_delta_seconds(value: object, _now: datetime | None) -> float | None:
    """Seconds from a ``RateLimit-Reset`` value (delta-seconds), ``None`` when malformed."""
    text = _header_text(value)
    if text is None or not _DELAY_SECONDS.fullmatch(text):
        return None
    return float(text)


def _hint_retry_after(value: object, now: datetime | None) -> float | None:
    """Seconds from a ``Retry-After`` value, ``None`` when malformed."""
    return parse_retry_after(value if isinstance(value, str | bytes) else None, now=now)


def _header_text(value: object) -> str | None:
    """A header value as stripped text, ``None`` when it is not text or bytes."""
    if isinstance(value, bytes):
        return value.decode("latin-1").strip()
    return value.strip() if isinstance(value, str) else None


_HINTS = {
    "retry-after": _hint_retry_after,
    "retry-after-ms": _hint_ms,
    "x-ms-retry-after-ms": _hint_ms,
    "ratelimit-reset": _hint_delta_seconds,
}


def format_timeout_ms(seconds: float) -> str:
    """The deadline header value for ``seconds`` left: whole milliseconds, rounded down.

    ``1.2345`` gives ``"1234"``; no time left (zero or negative) gives ``"0"``. Rounding
    down means the receiver never believes it has more time than its caller. Any finite
    time has its exact value, however large (``1e300`` gives 304 digits, which the
    receiver reads as that much time, or as no deadline past a float's range).

    Raises:
        ValueError: for NaN or an infinite time (a deadline header needs a deadline).
    """
    if 0.0 < seconds < _EXACT_FROM:  # the common case first: one product, one check
        ms = int(seconds * 1000.0)  # positive: truncation is the floor
        if ms / 1000.0 > seconds:  # the product rounded up past a whole millisecond
            ms -= 1
        return str(ms)
    if not math.isfinite(seconds):
        raise ValueError(f"a deadline header needs a finite time left, got {seconds!r}")
    if seconds <= 0:
        return "0"
    # From 2**43 s on, the float product would lose whole milliseconds, or overflow.
    return str(math.floor(Fraction(seconds) * 1000))


def parse_timeout_ms(value: str | bytes | None) -> float | None:
    """Seconds left according to a deadline header value (whole milliseconds), or ``None``.

    ``"1500"`` gives ``1.5``; surrounding whitespace is ignored. Anything else (missing,
    empty, negative, fractional, not a number) gives ``None``: such a header is to be
    ignored. A value too large for a float gives ``math.inf`` (no deadline at all); any
    other is the nearest float to its exact number of seconds, never more than the
    sender's time left. Never raises.
    """
    if isinstance(value, str):
        try:
            value = value.encode("ascii")
        except UnicodeEncodeError:
            return None
    if not isinstance(value, bytes):
        return None
    text = value.strip(b" \t")
    if not _WHOLE_MS.fullmatch(text):
        return None
    digits = text.lstrip(b"0") or b"0"
    if len(digits) > _MAX_MS_DIGITS:
        return math.inf  # more seconds than a float holds: no deadline
    try:
        # One correctly rounded division of the exact integer: rounding is monotonic, so
        # the result never exceeds the sender's time left (format_timeout_ms rounds down).
        return int(digits) / 1000
    except OverflowError:  # more seconds than a float holds: no deadline
        return math.inf


class DeadlineDialect:
    """The codec of one deadline header: ``parse`` reads it, ``format`` writes it.

    ``parse(value)`` gives the seconds left, ``None`` for a malformed, negative or
    non-finite value; it never raises. ``format(seconds)`` never rounds up (the receiver
    never believes it has more time than its caller); a time too large for the dialect is
    clamped to its largest value (``inf`` included), and no time left (``-inf`` included)
    is the dialect's smallest value; NaN is refused (``ValueError``), and so is an
    infinite time by our own dialect, which has no largest value.
    ``parse(format(t)) <= t`` for every ``t`` at or above :attr:`smallest`.
    """

    __slots__ = ("format", "header", "parse", "smallest")

    def __init__(
        self,
        header: str,
        parse: Callable[[str | bytes], float | None],
        format: Callable[[float], str],
        smallest: float = 0.0,
    ) -> None:
        self.header = header
        """The header name as the dialect's documentation spells it."""
        self.parse = parse
        self.format = format
        self.smallest = smallest
        """The least time ``format`` writes (Envoy reads ``0`` as "no timeout")."""

    def __repr__(self) -> str:
        return f"<DeadlineDialect {self.header}>"


def _milliseconds(smallest: int, largest: int) -> Callable[[float], str]:
    """A ``format`` writing whole milliseconds, rounded down, within ``[smallest, largest]``.

    Any time but NaN is written: no time left (``-inf`` included) is ``smallest``, a time
    too large (``inf`` included) is ``largest``.
    """
    least, most = str(smallest), str(largest)

    def format_ms(seconds: float) -> str:
        if math.isnan(seconds):
            raise ValueError(f"a deadline header needs a time left, got {seconds!r}")
        if seconds <= 0.0:
            return least
        if seconds * 1000.0 > largest:  # inf and every time past the largest
            return most
        text = format_timeout_ms(seconds)  # exact whole milliseconds, rounded down
        if len(text) >= len(most) and int(text) > largest:  # the product rounded up
            return most
        return least if text == "0" else text

    return format_ms


# gRPC's units, finest first, with how many of each a second holds.
_GRPC_UNITS: tuple[tuple[str, Fraction], ...] = (
    ("n", Fraction(10**9)),
    ("u", Fraction(10**6)),
    ("m", Fraction(10**3)),
    ("S", Fraction(1)),
    ("M", Fraction(1, 60)),
    ("H", Fraction(1, 3600)),
)
_GRPC_MAX = 99_999_999  # "TimeoutValue: positive integer as ASCII string of at most 8 digits"
_GRPC_TIMEOUT = re.compile(rb"([0-9]{1,8})([HMSmun])", re.ASCII)
_GRPC_SECONDS: dict[bytes, Callable[[int], float]] = {
    b"H": lambda n: float(n * 3600),
    b"M": lambda n: float(n * 60),
    b"S": float,
    b"m": lambda n: n / 1000,  # correctly rounded: never above the exact value
    b"u": lambda n: n / 10**6,
    b"n": lambda n: n / 10**9,
}


def _format_grpc_timeout(seconds: float) -> str:
    """A ``grpc-timeout`` value: the finest unit whose count fits in 8 digits, rounded down."""
    if math.isnan(seconds):
        raise ValueError(f"a deadline header needs a time left, got {seconds!r}")
    if seconds <= 0:
        return "0n"
    if math.isfinite(seconds):
        exact = Fraction(seconds)
        for unit, per_second in _GRPC_UNITS:
            count = math.floor(exact * per_second)
            if count <= _GRPC_MAX:
                return f"{count}{unit}"
    return f"{_GRPC_MAX}H"


def _parse_grpc_timeout(value: str | bytes) -> float | None:
    """Seconds from a ``grpc-timeout`` value, ``None`` when malformed. Never raises."""
    if isinstance(value, str):
        if not value.isascii():
            return None
        value = value.encode("ascii")
    if not isinstance(value, bytes):
        return None
    match = _GRPC_TIMEOUT.fullmatch(value.strip(b" \t"))
    if match is None:
        return None
    return _GRPC_SECONDS[match.group(2)](int(match.group(1)))


def _parse_ms(value: str | bytes) -> float | None:
    """Seconds from whole milliseconds, ``None`` when malformed or past a float's range."""
    seconds = parse_timeout_ms(value)
    return None if seconds == math.inf else seconds


def _parse_envoy_ms(value: str | bytes) -> float | None:
    """Seconds from an Envoy header: ``"0"`` is no timeout to Envoy, so no deadline."""
    seconds = _parse_ms(value)
    return None if seconds == 0.0 else seconds


# Envoy reads whole milliseconds into a protobuf Duration: at most 10 000 years.
_ENVOY_MAX_MS = 315_576_000_000_000
# Connect: "Timeout-Milliseconds: positive integer as ASCII string of at most 10 digits".
_CONNECT_MAX_MS = 9_999_999_999

DIALECTS: Mapping[str, DeadlineDialect] = MappingProxyType(
    {
        dialect.header.lower(): dialect
        for dialect in (
            DeadlineDialect(DEADLINE_HEADER, _parse_ms, format_timeout_ms),
            DeadlineDialect("grpc-timeout", _parse_grpc_timeout, _format_grpc_timeout),
            DeadlineDialect(
                "x-envoy-expected-rq-timeout-ms",
                _parse_envoy_ms,
                _milliseconds(1, _ENVOY_MAX_MS),
                0.001,
            ),
            DeadlineDialect(
                "x-envoy-upstream-rq-timeout-ms",
                _parse_envoy_ms,
                _milliseconds(1, _ENVOY_MAX_MS),
                0.001,
            ),
            DeadlineDialect("Connect-Timeout-Ms", _parse_ms, _milliseconds(0, _CONNECT_MAX_MS)),
        )
    }
)
"""The deadline headers known, by lower-case header name: each one's codec.

``x-request-timeout-ms`` (ours: whole milliseconds, any size), ``grpc-timeout`` (gRPC: at
most 8 digits and a unit of ``H M S m u n``, the finest that fits), the two Envoy headers
``x-envoy-expected-rq-timeout-ms`` (Envoy stamps it on the requests it forwards) and
``x-envoy-upstream-rq-timeout-ms`` (Envoy enforces it as the route timeout), whole
milliseconds, never below 1 (Envoy's ``0``, "no timeout", reads as no deadline), and
``connect-timeout-ms`` (Connect RPC, at most 10 digits). A value past a float's range
parses as ``None`` in every dialect (:func:`parse_timeout_ms` keeps reading it as
``math.inf``).
"""


def _deadline_senders(
    deadline_header: str | None, deadline_headers: Iterable[str] | None
) -> tuple[tuple[str, Callable[[float], str]], ...]:
    """The ``(header, format)`` pairs a client writes the time left with; validated.

    ``deadline_header`` is any header name, sent in our format (``None``: none);
    ``deadline_headers``, when given, is the full sequence of dialects sent instead.

    Raises:
        TypeError: for both given, or names that are not strings.
        ValueError: for an invalid header name, or a dialect :data:`DIALECTS` does not know.
    """
    if deadline_headers is None:
        if deadline_header is None:
            return ()
        return ((_check_header_name(deadline_header, "deadline_header"), format_timeout_ms),)
    if deadline_header != DEADLINE_HEADER:
        raise TypeError("pass deadline_header= or deadline_headers=, not both")
    if isinstance(deadline_headers, str | bytes) or not isinstance(deadline_headers, Iterable):
        raise TypeError(
            f"deadline_headers must be a sequence of header names, got {deadline_headers!r}"
        )
    senders: dict[str, Callable[[float], str]] = {}
    for name in deadline_headers:
        dialect = _dialect(name, "deadline_headers")
        senders.setdefault(dialect.header, dialect.format)
    return tuple(senders.items())


def _dialect(name: object, what: str) -> DeadlineDialect:
    """The dialect named ``name`` (any case), else raise saying which ones exist."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must hold header names (str), got {name!r}")
    dialect = DIALECTS.get(name.lower())
    if dialect is None:
        known = ", ".join(d.header for d in DIALECTS.values())
        raise ValueError(f"{what}: unknown deadline header {name!r}; known: {known}")
    return dialect


def _check_header_name(name: object, what: str) -> str:
    """``name`` if it is a valid HTTP header name (an RFC 9110 token), else raise saying so."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a header name (str), got {type(name).__name__}")
    if not _TOKEN.fullmatch(name):
        raise ValueError(f"{what} must be a valid HTTP header name, got {name!r}")
    return name


def _check_statuses(statuses: Iterable[int]) -> frozenset[int]:
    """The ``retry_statuses`` of a client: 4xx and 5xx codes; raise saying why not."""
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


def _check_methods(methods: Iterable[str]) -> frozenset[str]:
    """The ``methods`` of a client, upper case; raise saying why not."""
    if isinstance(methods, str | bytes) or not isinstance(methods, Iterable):
        raise TypeError(f"methods must be a set of HTTP method names, got {methods!r}")
    found: set[str] = set()
    for method in methods:
        if not isinstance(method, str) or not method.isascii() or not method.isalpha():
            raise ValueError(f"methods must hold HTTP method names such as 'GET', got {method!r}")
        found.add(method.upper())
    return frozenset(found)
