"""Statutory response deadlines for GDPR data-subject requests: calendar arithmetic.

Article 12(3) GDPR gives a controller one month from receipt to act on a request (three
when extended); :func:`gdpr_response_deadline` counts it as EU law counts periods
(Regulation 1182/71, Art. 3), in the time zone of the receipt, and :func:`add_months` is its
month step. How each rule of Art. 3 applies is in docs/cookbook.md, "How the deadline is
counted".
"""

from __future__ import annotations

import calendar
from collections.abc import Iterable
from datetime import MAXYEAR, MINYEAR, UTC, date, datetime, time, timedelta, tzinfo

from ._validate import aware

__all__ = ["gdpr_response_deadline"]

_ONE_DAY = timedelta(days=1)
_ONE_MICROSECOND = timedelta(microseconds=1)
_SATURDAY = 5  # date.weekday(): Monday is 0, Saturday 5, Sunday 6
_EXAMPLE = "datetime(2026, 1, 31, 9, 30, tzinfo=ZoneInfo('Europe/Dublin'))"


def add_months(d: date, months: int) -> date:
    """Return the date ``months`` calendar months after ``d`` (before it if negative).

    The day of the month is kept when the target month has it, otherwise it is clamped to the
    target month's last day, as Art. 3(2)(c) of Regulation 1182/71 does for the last day of a
    period in months. Given a :class:`~datetime.datetime`, returns a ``datetime`` with the same
    time of day and ``tzinfo`` (wall-clock arithmetic).

    >>> add_months(date(2026, 3, 15), 1)
    datetime.date(2026, 4, 15)
    >>> add_months(date(2026, 1, 31), 1)
    datetime.date(2026, 2, 28)
    >>> add_months(date(2024, 1, 31), 1)
    datetime.date(2024, 2, 29)
    >>> add_months(date(2025, 11, 30), 3)
    datetime.date(2026, 2, 28)
    >>> add_months(date(2026, 3, 31), -1)
    datetime.date(2026, 2, 28)

    Raises:
        OverflowError: if the result would fall outside ``date.min``..``date.max``.
    """
    year, month_index = divmod(d.year * 12 + (d.month - 1) + months, 12)
    if not MINYEAR <= year <= MAXYEAR:
        raise OverflowError(f"{d!r} plus {months} months is outside the supported date range")
    month = month_index + 1
    day = min(d.day, calendar.monthrange(year, month)[1])
    return d.replace(year=year, month=month, day=day)


def gdpr_response_deadline(
    received_at: datetime,
    *,
    extended: bool = False,
    holidays: Iterable[date] = (),
) -> datetime:
    """Return when the GDPR Art. 12(3) period to answer a data-subject request expires.

    The period is one month from receipt, or three months when ``extended`` (the one month plus
    the two-month extension of Art. 12(3)), counted under Art. 3 of Regulation (EEC, Euratom)
    No 1182/71 (see docs/cookbook.md): it ends at the end of the day with the receipt's date
    in the final month, or of that month's last day if it has no such date; if that day is a
    Saturday, a Sunday or one of ``holidays``, it ends at the end of the next working day.

    Args:
        received_at: when the controller received the request, as a timezone-aware datetime.
            Its time zone decides which calendar day the receipt (and the deadline) falls on.
        extended: count three months instead of one.
        holidays: public holidays (``datetime.date`` objects, local to ``received_at``'s time
            zone) that are not working days. Any iterable; it is read once.

    Returns:
        The last representable instant of the period's last day in ``received_at``'s time
        zone: ``23:59:59.999999`` local time, with the very same ``tzinfo`` object as
        ``received_at`` and the UTC offset in force at that moment (which may differ from
        ``received_at``'s across a DST change). Where clocks go back over midnight, so that
        ``23:59:59.999999`` happens twice, the second occurrence is returned (``fold=1``).
        Where clocks jump forward over midnight, so that the day ends early, the instant
        just before the jump is returned (e.g. ``22:59:59.999999`` in Dhaka on 19 June 2009).
        The deadline is met by acting at or before the returned instant.

    Raises:
        TypeError: if ``received_at`` is not a datetime, or uses a pytz time zone (use
            :class:`zoneinfo.ZoneInfo`), or ``holidays`` holds anything but ``date`` objects
            (a ``datetime`` holiday is refused as ambiguous: pass its ``.date()``).
        ValueError: if ``received_at`` is naive.
        OverflowError: if the deadline would fall after ``date.max``.

    >>> from zoneinfo import ZoneInfo
    >>> berlin = ZoneInfo("Europe/Berlin")
    >>> deadline = gdpr_response_deadline(datetime(2024, 1, 31, 16, 0, tzinfo=berlin))
    >>> deadline.isoformat()  # leap year: 29 February, a Thursday
    '2024-02-29T23:59:59.999999+01:00'
    >>> deadline = gdpr_response_deadline(datetime(2026, 2, 27, 8, 0, tzinfo=berlin))
    >>> deadline.isoformat()  # 27 March 2026 is a Friday; CEST starts on 29 March
    '2026-03-27T23:59:59.999999+01:00'
    >>> gdpr_response_deadline(
    ...     datetime(2026, 2, 27, 8, 0, tzinfo=berlin), extended=True
    ... ).isoformat()  # 27 May 2026, summer time
    '2026-05-27T23:59:59.999999+02:00'
    >>> gdpr_response_deadline(
    ...     datetime(2026, 11, 28, 12, 0, tzinfo=berlin),
    ...     holidays=[date(2026, 12, 25), date(2026, 12, 28)],
    ... ).isoformat()  # 28 December 2026 is a Monday, declared a holiday
    '2026-12-29T23:59:59.999999+01:00'
    """
    tz = _zone_of(received_at)
    non_working = _holiday_set(holidays)

    def is_working_day(day: date) -> bool:
        return day.weekday() < _SATURDAY and day not in non_working

    receipt_day = received_at.date()
    last_day = add_months(receipt_day, 3 if extended else 1)  # Art. 3(1) and 3(2)(c)
    while not is_working_day(last_day):  # Art. 3(4)
        last_day += _ONE_DAY
    # Art. 3(5): the period (receipt day excluded) must contain at least two working days.
    working_days = sum(
        is_working_day(receipt_day + timedelta(days=n))
        for n in range(1, (last_day - receipt_day).days + 1)
    )
    while working_days < 2:
        last_day += _ONE_DAY
        working_days += is_working_day(last_day)
    return _end_of_day(last_day, tz)


def _zone_of(received_at: object) -> tzinfo:
    """The time zone of ``received_at``, checked to be aware and not a pytz zone."""
    try:
        tz = aware(received_at, "received_at").tzinfo
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{exc}; its zone decides the day of receipt, e.g. {_EXAMPLE}") from None
    if hasattr(tz, "localize"):
        # pytz zones carry one fixed offset per instance and need localize()/normalize();
        # combining a date with one silently yields the wrong offset across DST changes.
        raise TypeError(
            f"pytz time zones are not supported (got {tz!r}); use zoneinfo.ZoneInfo instead"
        )
    assert tz is not None  # aware() refused a naive datetime
    return tz


def _holiday_set(holidays: Iterable[date]) -> frozenset[date]:
    if isinstance(holidays, date):
        raise TypeError(
            f"holidays must be an iterable of dates, not a single date: {holidays!r}; "
            f"pass [{holidays!r}]"
        )
    result = frozenset(holidays)
    for item in result:
        if isinstance(item, datetime):
            raise TypeError(
                f"holidays must be datetime.date objects; got the datetime {item!r}, which is "
                f"ambiguous as a day: pass {item.date()!r} instead"
            )
        if not isinstance(item, date):
            raise TypeError(
                f"holidays must be datetime.date objects; got {type(item).__name__} {item!r}"
            )
    return result


def _end_of_day(day: date, tz: tzinfo) -> datetime:
    """Return the last instant whose wall-clock date in ``tz`` is ``day``, with tzinfo ``tz``."""
    wall = datetime.combine(day, time.max)
    first = wall.replace(tzinfo=tz)
    second = wall.replace(tzinfo=tz, fold=1)
    if first.utcoffset() == second.utcoffset():
        return first  # 23:59:59.999999 happens exactly once: the usual case
    if _exists(second):
        return second  # clocks went back over midnight: the day ends at the second occurrence
    # Clocks jumped forward over midnight, so 23:59:59.999999 never happens that day. Per PEP 495
    # the fold=1 reading of a skipped time uses the offset after the jump, and so is an instant
    # before it; the fold=0 reading is after it. The day ends just before the jump.
    before, after = sorted((first.astimezone(UTC), second.astimezone(UTC)))
    while after - before > _ONE_MICROSECOND:
        middle = before + (after - before) // 2
        if middle.astimezone(tz).date() <= day:
            before = middle
        else:
            after = middle
    return before.astimezone(tz)


def _exists(local: datetime) -> bool:
    """Whether the wall-clock time of aware ``local`` really occurs in its time zone."""
    round_trip = local.astimezone(UTC).astimezone(local.tzinfo)
    return round_trip.replace(tzinfo=None) == local.replace(tzinfo=None)
