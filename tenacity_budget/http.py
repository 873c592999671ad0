"""HTTP on the wire: ``Retry-After`` (:func:`parse_retry_after`, :func:`retry_after`) and the
deadline header (:func:`format_timeout_ms`, :func:`parse_timeout_ms`).

``Retry-After`` (RFC 9110 §10.2.3) is either a number of seconds or an HTTP-date. Both
forms are parsed here, with the standard library (:mod:`email.utils`), so that a server's
dictated wait never crashes a run::

    from tenacity_budget.http import retry_after

    @policy.retry(retry_after=retry_after, retry=retry_if_exception_type(httpx.HTTPStatusError))
    def get_user(user_id: str) -> dict:
        response = httpx.get(f"{base}/users/{user_id}", timeout=remaining(30.0))
        response.raise_for_status()
        return response.json()

The number :func:`retry_after` returns replaces the backoff delay of that retry; the budget
stop still guards it, so a ``Retry-After`` longer than the budget left ends the run
(``BudgetExhausted``) instead of being slept. This module imports neither httpx nor
requests: it reads any exception that carries a ``.response`` with ``.headers``.

The deadline header, ``X-Request-Timeout-Ms`` (:data:`DEADLINE_HEADER`), carries the
caller's time left in whole milliseconds, rounded down: written by
:mod:`tenacity_budget.httpx`'s transports, read by :mod:`tenacity_budget.asgi`'s
middleware. It is relative, so the two hosts' clocks need not agree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from fractions import Fraction

from ._config import check_aware

__all__ = [
    "DEADLINE_HEADER",
    "format_timeout_ms",
    "parse_retry_after",
    "parse_timeout_ms",
    "retry_after",
]

DEADLINE_HEADER = "X-Request-Timeout-Ms"
"""The header that carries a caller's time left, in whole milliseconds."""

# delay-seconds = 1*DIGIT (RFC 9110 §10.2.3). ASCII digits only: str.isdigit() and int()
# also accept other scripts' digits and superscripts, which no HTTP server sends.
_DELAY_SECONDS = re.compile(r"[0-9]+", re.ASCII)

# The obsolete RFC 850 form writes the year with two digits: "Sunday, 06-Nov-94 08:49:37 GMT".
_RFC850_YEAR = re.compile(r"[0-9]{1,2}-[A-Za-z]{3}-([0-9]{2})(?![0-9])", re.ASCII)

_HEADER = "Retry-After"

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


def retry_after(exc: BaseException) -> float | None:
    """The parsed ``Retry-After`` of the response an exception carries, else ``None``.

    Works with any exception that has a ``.response`` whose ``.headers`` is a mapping:
    ``httpx.HTTPStatusError`` (from ``response.raise_for_status()``), ``requests.HTTPError``,
    or your own. Usable as it is: ``policy.retry(retry_after=retry_after)``. An exception
    without a response, or a response without the header, gives ``None`` (back off as
    usual); it never raises. The value is read with :func:`parse_retry_after`.
    """
    try:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
    except Exception:  # a property that raises (httpx's .request does): no response here
        return None
    if not isinstance(headers, Mapping):
        return None
    value = headers.get(_HEADER)
    if value is None:
        # httpx and requests headers ignore case; a plain dict does not.
        value = next((v for k, v in headers.items() if str(k).lower() == "retry-after"), None)
    return parse_retry_after(value)


def format_timeout_ms(seconds: float) -> str:
    """The deadline header value for ``seconds`` left: whole milliseconds, rounded down.

    ``1.2345`` gives ``"1234"``; no time left (zero or negative) gives ``"0"``. Rounding
    down means the receiver never believes it has more time than its caller. Any finite
    time has its exact value, however large (``1e300`` gives 304 digits, which the
    receiver reads as that much time, or as no deadline past a float's range).

    Raises:
        ValueError: for NaN or an infinite time (a deadline header needs a deadline).
    """
    if not math.isfinite(seconds):
        raise ValueError(f"a deadline header needs a finite time left, got {seconds!r}")
    if seconds <= 0:
        return "0"
    if seconds >= _EXACT_FROM:  # the float product would lose whole milliseconds, or overflow
        return str(math.floor(Fraction(seconds) * 1000))
    ms = math.floor(seconds * 1000.0)
    if ms / 1000.0 > seconds:  # the product rounded up past a whole millisecond
        ms -= 1
    return str(max(0, ms))


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


def _check_header_name(name: object, what: str) -> str:
    """``name`` if it is a valid HTTP header name (an RFC 9110 token), else raise saying so."""
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a header name (str), got {type(name).__name__}")
    if not _TOKEN.fullmatch(name):
        raise ValueError(f"{what} must be a valid HTTP header name, got {name!r}")
    return name
