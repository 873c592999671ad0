"""Tests for tenacity_budget.gdpr (GDPR Art. 12(3) deadlines, Regulation 1182/71 Art. 3)."""

from __future__ import annotations

import calendar
import doctest
from collections.abc import Iterable
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tenacity_budget import gdpr
from tenacity_budget.gdpr import add_months, gdpr_response_deadline
from tests._helpers import iana_zone

BERLIN = iana_zone("Europe/Berlin")
DUBLIN = iana_zone("Europe/Dublin")
NEW_YORK = iana_zone("America/New_York")
SYDNEY = iana_zone("Australia/Sydney")

END = time.max  # 23:59:59.999999
H = timedelta(hours=1)


def at(tz: tzinfo, year: int, month: int, day: int, hour: int = 12, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=tz)


def deadline_day(received: date, *, extended: bool = False, holidays: Iterable[date] = ()) -> date:
    """Deadline date for a receipt at noon UTC on ``received`` (no time-zone effects)."""
    received_at = datetime.combine(received, time(12), tzinfo=UTC)
    result = gdpr_response_deadline(received_at, extended=extended, holidays=holidays)
    assert result.time() == END
    return result.date()


# --------------------------------------------------------------------------- add_months


@pytest.mark.parametrize(
    ("start", "months", "expected"),
    [
        (date(2026, 3, 15), 1, date(2026, 4, 15)),
        (date(2026, 1, 31), 1, date(2026, 2, 28)),
        (date(2024, 1, 31), 1, date(2024, 2, 29)),
        (date(2100, 1, 31), 1, date(2100, 2, 28)),  # 2100: divisible by 100, not by 400
        (date(2000, 1, 31), 1, date(2000, 2, 29)),  # 2000: divisible by 400
        (date(2026, 3, 31), 1, date(2026, 4, 30)),
        (date(2026, 12, 31), 1, date(2027, 1, 31)),
        (date(2025, 11, 30), 3, date(2026, 2, 28)),
        (date(2026, 12, 15), 3, date(2027, 3, 15)),
        (date(2026, 3, 31), -1, date(2026, 2, 28)),
        (date(2026, 1, 15), -13, date(2024, 12, 15)),
        (date(2026, 5, 17), 0, date(2026, 5, 17)),
        (date(2024, 2, 29), 12, date(2025, 2, 28)),
    ],
)
def test_add_months(start: date, months: int, expected: date) -> None:
    assert add_months(start, months) == expected


def test_add_months_keeps_time_and_tzinfo_of_a_datetime() -> None:
    result = add_months(datetime(2026, 1, 31, 9, 30, tzinfo=BERLIN), 1)
    assert result == datetime(2026, 2, 28, 9, 30, tzinfo=BERLIN)
    assert isinstance(result, datetime)
    assert result.tzinfo is BERLIN


@pytest.mark.parametrize(("start", "months"), [(date.max, 1), (date.min, -1)])
def test_add_months_out_of_range(start: date, months: int) -> None:
    with pytest.raises(OverflowError, match="outside the supported date range"):
        add_months(start, months)


@given(st.dates(min_value=date(2, 1, 1), max_value=date(9997, 12, 31)), st.integers(-12, 12))
def test_add_months_properties(start: date, months: int) -> None:
    result = add_months(start, months)
    assert (result.year * 12 + result.month) - (start.year * 12 + start.month) == months
    assert result.day == min(start.day, calendar.monthrange(result.year, result.month)[1])


# --------------------------------------------------------------------------- month ends


@pytest.mark.parametrize(
    ("received", "expected"),
    [
        (date(2026, 3, 10), date(2026, 4, 10)),  # plain case: same date, a Friday
        (date(2024, 1, 31), date(2024, 2, 29)),  # leap year, Thursday
        (date(2026, 3, 31), date(2026, 4, 30)),  # April has no 31st; Thursday
        (date(2026, 5, 31), date(2026, 6, 30)),  # June has no 31st; Tuesday
        (date(2026, 12, 31), date(2027, 2, 1)),  # 31 Jan 2027 is a Sunday -> Monday 1 Feb
        (date(2025, 12, 31), date(2026, 2, 2)),  # 31 Jan 2026 is a Saturday -> Monday 2 Feb
        (date(2026, 1, 30), date(2026, 3, 2)),  # 28 Feb 2026 (clamped) Saturday -> Monday
        (date(2026, 1, 28), date(2026, 3, 2)),  # 28 Feb 2026 Saturday -> Monday
        (date(2026, 1, 27), date(2026, 2, 27)),  # Friday
    ],
)
def test_month_ends(received: date, expected: date) -> None:
    assert deadline_day(received) == expected


def test_issue_example_31_january_2026() -> None:
    # Period ends on 28 February 2026 (no 29th), a Saturday: moved to Monday 2 March.
    result = gdpr_response_deadline(at(DUBLIN, 2026, 1, 31, 9, 30))
    assert result == datetime.combine(date(2026, 3, 2), END, tzinfo=DUBLIN)


@pytest.mark.parametrize(
    ("received", "expected"),
    [
        (date(2024, 1, 31), date(2024, 2, 29)),  # 2024 leap: Thursday 29 Feb
        (date(2024, 1, 29), date(2024, 2, 29)),
        (date(2023, 1, 31), date(2023, 2, 28)),  # 2023 not leap: Tuesday 28 Feb
        (date(2000, 1, 31), date(2000, 2, 29)),  # 2000 leap (divisible by 400): Tuesday
        (date(2100, 1, 31), date(2100, 3, 1)),  # 2100 not leap: 28 Feb is a Sunday -> Mon 1 Mar
        (date(2100, 1, 28), date(2100, 3, 1)),
        (date(2024, 2, 29), date(2024, 3, 29)),  # received on 29 Feb: Friday 29 March
        (date(2024, 3, 29), date(2024, 4, 29)),  # Monday
    ],
)
def test_leap_years(received: date, expected: date) -> None:
    assert deadline_day(received) == expected


# --------------------------------------------------------------------------- weekends


@pytest.mark.parametrize(
    ("received", "expected"),
    [
        (date(2026, 4, 30), date(2026, 6, 1)),  # 30 May 2026 is a Saturday -> Monday 1 June
        (date(2026, 4, 5), date(2026, 5, 5)),  # received on a Sunday; deadline a Tuesday
        (date(2026, 4, 3), date(2026, 5, 4)),  # 3 May 2026 is a Sunday -> Monday 4 May
        (date(2026, 4, 2), date(2026, 5, 4)),  # 2 May 2026 is a Saturday -> Monday 4 May
        (date(2026, 4, 1), date(2026, 5, 1)),  # Friday, no roll
    ],
)
def test_weekends_roll_to_monday(received: date, expected: date) -> None:
    assert deadline_day(received) == expected


def test_receipt_on_a_weekend_is_counted_from_the_next_day() -> None:
    # Art. 3(3): weekends inside the period count; only the last day is moved.
    assert deadline_day(date(2026, 2, 28)) == date(2026, 3, 30)  # Saturday -> Monday 30 March


# --------------------------------------------------------------------------- holidays


def test_holiday_on_the_last_day_moves_to_next_working_day() -> None:
    # 1 May 2026 (Friday) as a holiday -> Monday 4 May.
    assert deadline_day(date(2026, 4, 1), holidays=[date(2026, 5, 1)]) == date(2026, 5, 4)


def test_holiday_monday_after_a_weekend_pushes_to_tuesday() -> None:
    # 2 May 2026 is a Saturday; Monday 4 May is Ireland's May bank holiday -> Tuesday 5 May.
    assert deadline_day(date(2026, 4, 2), holidays=[date(2026, 5, 4)]) == date(2026, 5, 5)


def test_holiday_chain_easter() -> None:
    # Good Friday 3 April 2026, then the weekend, then Easter Monday 6 April -> Tuesday 7 April.
    easter = [date(2026, 4, 3), date(2026, 4, 6)]
    assert deadline_day(date(2026, 3, 3), holidays=easter) == date(2026, 4, 7)


def test_holiday_chain_christmas() -> None:
    # Christmas Day (Fri), weekend with St Stephen's Day, substitute holiday Mon 28 -> Tue 29.
    holidays = {date(2026, 12, 25), date(2026, 12, 26), date(2026, 12, 28)}
    assert deadline_day(date(2026, 11, 25), holidays=holidays) == date(2026, 12, 29)


def test_holidays_inside_the_period_do_not_extend_it() -> None:
    # Art. 3(3): periods include public holidays; only a holiday on the last day matters.
    holidays = [date(2026, 4, 3), date(2026, 4, 6), date(2026, 4, 9)]
    assert deadline_day(date(2026, 3, 10), holidays=holidays) == date(2026, 4, 10)


def test_holidays_accept_any_iterable_and_read_it_once() -> None:
    consumed: list[date] = []

    def generate() -> Iterable[date]:
        for day in (date(2026, 5, 1), date(2026, 5, 4)):
            consumed.append(day)
            yield day

    assert deadline_day(date(2026, 4, 1), holidays=generate()) == date(2026, 5, 5)
    assert consumed == [date(2026, 5, 1), date(2026, 5, 4)]
    assert deadline_day(date(2026, 4, 1), holidays=frozenset({date(2026, 5, 1)})) == date(
        2026, 5, 4
    )
    assert deadline_day(date(2026, 4, 1), holidays={date(2026, 5, 1): "May Day"}) == date(
        2026, 5, 4
    )


def test_days_are_local_to_received_at_zone() -> None:
    # Received at 22:00 on 15 March in New York, which is already 16 March in Berlin.
    in_new_york = at(NEW_YORK, 2026, 3, 15, 22, 0)
    in_berlin = in_new_york.astimezone(BERLIN)
    assert in_berlin.date() == date(2026, 3, 16)
    assert gdpr_response_deadline(in_new_york).date() == date(2026, 4, 15)
    assert gdpr_response_deadline(in_berlin).date() == date(2026, 4, 16)
    # Holidays are dates in the same local calendar.
    with_holiday = gdpr_response_deadline(in_new_york, holidays=[date(2026, 4, 15)])
    assert with_holiday == datetime.combine(date(2026, 4, 16), END, tzinfo=NEW_YORK)


def test_at_least_two_working_days_art_3_5() -> None:
    # Every weekday from 2 July to 3 August 2026 declared a holiday: the rolled last day,
    # Tuesday 4 August, would be the period's only working day; Art. 3(5) adds Wednesday 5.
    holidays = [
        date(2026, 7, 2) + timedelta(days=n)
        for n in range(33)
        if (date(2026, 7, 2) + timedelta(days=n)).weekday() < 5
    ]
    assert deadline_day(date(2026, 7, 1), holidays=holidays) == date(2026, 8, 5)


# --------------------------------------------------------------------------- extended


@pytest.mark.parametrize(
    ("received", "expected"),
    [
        (date(2026, 3, 10), date(2026, 6, 10)),  # Wednesday
        (date(2025, 11, 30), date(2026, 3, 2)),  # 28 Feb 2026 clamp, Saturday -> Monday 2 March
        (date(2023, 11, 30), date(2024, 2, 29)),  # leap year clamp, Thursday
        (date(2024, 11, 29), date(2025, 2, 28)),  # 2025 has no 29 Feb; Friday 28 Feb
        (date(2026, 12, 31), date(2027, 3, 31)),  # Wednesday
        (date(2026, 5, 31), date(2026, 8, 31)),  # Monday
        (date(2026, 3, 31), date(2026, 6, 30)),  # June has no 31st; Tuesday
    ],
)
def test_extended_is_three_months_from_receipt(received: date, expected: date) -> None:
    assert deadline_day(received, extended=True) == expected


def test_extended_with_holidays() -> None:
    assert deadline_day(
        date(2026, 3, 31), extended=True, holidays=[date(2026, 6, 30), date(2026, 7, 1)]
    ) == date(2026, 7, 2)


# --------------------------------------------------------------------------- DST and time zones


@pytest.mark.parametrize(
    ("received", "expected_day", "expected_offset"),
    [
        # Europe/Berlin: CEST starts 29 March 2026, ends 25 October 2026.
        (at(BERLIN, 2026, 3, 10, 9), date(2026, 4, 10), 2 * H),
        (at(BERLIN, 2026, 2, 27, 9), date(2026, 3, 27), 1 * H),  # still before the change
        (at(BERLIN, 2026, 10, 2, 9), date(2026, 11, 2), 1 * H),
        (at(BERLIN, 2026, 3, 29, 4), date(2026, 4, 29), 2 * H),  # received on the change day
        # America/New_York: EDT starts 8 March 2026, ends 1 November 2026.
        (at(NEW_YORK, 2026, 2, 20, 9), date(2026, 3, 20), -4 * H),
        (at(NEW_YORK, 2026, 2, 8, 9), date(2026, 3, 9), -4 * H),  # 8 March Sunday -> Monday
        (at(NEW_YORK, 2026, 10, 15, 9), date(2026, 11, 16), -5 * H),  # 15 Nov Sunday -> Monday
        # Australia/Sydney (southern hemisphere): AEDT ends 5 April, starts 4 October 2026.
        (at(SYDNEY, 2026, 3, 20, 9), date(2026, 4, 20), 10 * H),
        (at(SYDNEY, 2026, 9, 15, 9), date(2026, 10, 15), 11 * H),
    ],
)
def test_dst_changes(received: datetime, expected_day: date, expected_offset: timedelta) -> None:
    result = gdpr_response_deadline(received)
    assert result.tzinfo is received.tzinfo
    assert result.date() == expected_day
    assert result.time() == END
    assert result.utcoffset() == expected_offset
    assert result.astimezone(UTC) == datetime.combine(expected_day, END, UTC) - expected_offset


def test_dst_extended_winter_to_summer() -> None:
    result = gdpr_response_deadline(at(BERLIN, 2026, 1, 15), extended=True)
    assert result.isoformat() == "2026-04-15T23:59:59.999999+02:00"
    result = gdpr_response_deadline(at(NEW_YORK, 2026, 9, 15), extended=True)
    assert result.isoformat() == "2026-12-15T23:59:59.999999-05:00"


def test_received_in_the_repeated_hour() -> None:
    # 01:30 on 1 November 2026 happens twice in New York; both are a 1 November receipt.
    for fold in (0, 1):
        received = datetime(2026, 11, 1, 1, 30, fold=fold, tzinfo=NEW_YORK)
        result = gdpr_response_deadline(received)
        assert result == datetime.combine(date(2026, 12, 1), END, tzinfo=NEW_YORK)
        assert result.utcoffset() == -5 * H


def test_day_ending_twice_when_clocks_go_back_at_midnight() -> None:
    # Egypt ends summer time at midnight after the last Thursday of October: on Thursday
    # 26 October 2023 the hour 23:00-24:00 happens twice. The day ends at the second one.
    cairo = ZoneInfo("Africa/Cairo")
    result = gdpr_response_deadline(at(cairo, 2023, 9, 26))
    assert result.date() == date(2023, 10, 26)
    assert result.time() == END
    assert result.fold == 1
    assert result.utcoffset() == 2 * H
    assert result.astimezone(UTC) == datetime(2023, 10, 26, 21, 59, 59, 999999, tzinfo=UTC)
    assert (result.astimezone(UTC) + timedelta(microseconds=1)).astimezone(cairo).date() == date(
        2023, 10, 27
    )


@pytest.mark.parametrize(
    ("zone", "received", "expected_local"),
    [
        # Bangladesh started summer time at 23:00 on Friday 19 June 2009: the day ended at 23:00.
        ("Asia/Dhaka", date(2009, 5, 19), datetime(2009, 6, 19, 22, 59, 59, 999999)),
        # North Korea moved from UTC+8:30 to +9 at 23:30 on Friday 4 May 2018.
        ("Asia/Pyongyang", date(2018, 4, 4), datetime(2018, 5, 4, 23, 29, 59, 999999)),
        # Samoa skipped Friday 30 December 2011 entirely: the period ends when 31 December begins.
        ("Pacific/Apia", date(2011, 11, 30), datetime(2011, 12, 29, 23, 59, 59, 999999)),
    ],
)
def test_day_cut_short_when_clocks_jump_over_midnight(
    zone: str, received: date, expected_local: datetime
) -> None:
    tz = ZoneInfo(zone)
    result = gdpr_response_deadline(datetime.combine(received, time(12), tzinfo=tz))
    assert result.tzinfo is tz
    assert result.replace(tzinfo=None) == expected_local
    next_instant = (result.astimezone(UTC) + timedelta(microseconds=1)).astimezone(tz)
    assert next_instant.date() > add_months(received, 1)


class _JumpOverMidnight(tzinfo):
    """PEP 495 zone moving from UTC+0 to UTC+1 at 23:30 local on 19 June 2026 (to 00:30)."""

    GAP_START = datetime(2026, 6, 19, 23, 30)  # wall clock; also the transition in UTC
    GAP_END = GAP_START + timedelta(hours=1)

    def utcoffset(self, dt: datetime | None) -> timedelta:
        assert dt is not None
        wall = dt.replace(tzinfo=None)
        if wall < self.GAP_START:
            return timedelta(0)
        if wall >= self.GAP_END:
            return timedelta(hours=1)
        return timedelta(hours=dt.fold)  # skipped time: fold=0 reads it with the old offset

    def dst(self, dt: datetime | None) -> timedelta:
        return self.utcoffset(dt)

    def tzname(self, dt: datetime | None) -> str:
        return "JUMP"

    def fromutc(self, dt: datetime) -> datetime:
        instant = dt.replace(tzinfo=None)
        shift = timedelta(0) if instant < self.GAP_START else timedelta(hours=1)
        return (instant + shift).replace(tzinfo=self)


def test_day_cut_short_by_a_jump_that_ends_after_midnight() -> None:
    tz = _JumpOverMidnight()
    result = gdpr_response_deadline(datetime(2026, 5, 19, 12, tzinfo=tz))  # -> Friday 19 June
    assert result.tzinfo is tz
    assert result.replace(tzinfo=None) == datetime(2026, 6, 19, 23, 29, 59, 999999)
    assert result.utcoffset() == timedelta(0)
    next_instant = (result.astimezone(UTC) + timedelta(microseconds=1)).astimezone(tz)
    assert next_instant.replace(tzinfo=None) == datetime(2026, 6, 20, 0, 30)


@pytest.mark.parametrize(
    "tz",
    [UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-8 * H, "PST"), DUBLIN],
)
def test_result_is_aware_with_the_same_tzinfo(tz: tzinfo) -> None:
    received = datetime(2026, 3, 10, 9, 0, tzinfo=tz)
    result = gdpr_response_deadline(received)
    assert result.tzinfo is tz
    assert result.utcoffset() is not None
    assert result.replace(tzinfo=None) == datetime(2026, 4, 10, 23, 59, 59, 999999)


def test_fixed_offset_keeps_offset() -> None:
    tz = timezone(timedelta(hours=-3))
    result = gdpr_response_deadline(datetime(2026, 1, 15, 20, 0, tzinfo=tz))
    assert result.isoformat() == "2026-02-16T23:59:59.999999-03:00"  # 15 Feb is a Sunday


def test_time_of_day_of_receipt_does_not_matter() -> None:
    first = gdpr_response_deadline(at(BERLIN, 2026, 3, 10, 0, 0))
    last = gdpr_response_deadline(datetime(2026, 3, 10, 23, 59, 59, 999999, tzinfo=BERLIN))
    assert first == last


# --------------------------------------------------------------------------- errors


def test_naive_datetime_refused() -> None:
    with pytest.raises(ValueError, match=r"timezone-aware.*ZoneInfo\('Europe/Dublin'\)"):
        gdpr_response_deadline(datetime(2026, 1, 31, 9, 30))


def test_tzinfo_without_offset_is_naive() -> None:
    class NoOffset(tzinfo):
        def tzname(self, dt: datetime | None) -> str | None:  # pragma: no cover
            return None

        def dst(self, dt: datetime | None) -> timedelta | None:  # pragma: no cover
            return None

        def utcoffset(self, dt: datetime | None) -> timedelta | None:
            return None

    with pytest.raises(ValueError, match="naive"):
        gdpr_response_deadline(datetime(2026, 1, 31, 9, 30, tzinfo=NoOffset()))


@pytest.mark.parametrize("value", [date(2026, 1, 31), "2026-01-31T09:30:00+00:00", 1769851800])
def test_non_datetime_refused(value: object) -> None:
    with pytest.raises(TypeError, match="timezone-aware datetime"):
        gdpr_response_deadline(value)  # type: ignore[arg-type]


def test_pytz_style_tzinfo_refused() -> None:
    class PytzLike(tzinfo):
        def tzname(self, dt: datetime | None) -> str:  # pragma: no cover
            return "CET"

        def dst(self, dt: datetime | None) -> timedelta:  # pragma: no cover
            return timedelta(0)

        def utcoffset(self, dt: datetime | None) -> timedelta:
            return timedelta(hours=1)

        def localize(self, dt: datetime) -> datetime:  # pragma: no cover - never called
            return dt.replace(tzinfo=self)

    with pytest.raises(TypeError, match=r"pytz.*zoneinfo\.ZoneInfo"):
        gdpr_response_deadline(datetime(2026, 1, 31, 9, 30, tzinfo=PytzLike()))


@pytest.mark.parametrize(
    ("holidays", "message"),
    [
        (["2026-05-04"], r"got str '2026-05-04'"),
        ([date(2026, 5, 4), None], r"got NoneType None"),
        (
            [datetime(2026, 5, 4, 0, 0)],
            r"datetime\.datetime\(2026, 5, 4, 0, 0\).*date\(2026, 5, 4\)",
        ),
        (date(2026, 5, 4), r"not a single date.*pass \[datetime\.date\(2026, 5, 4\)\]"),
    ],
)
def test_bad_holidays_refused(holidays: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        gdpr_response_deadline(at(BERLIN, 2026, 4, 2), holidays=holidays)  # type: ignore[arg-type]


def test_out_of_range() -> None:
    with pytest.raises(OverflowError):
        gdpr_response_deadline(datetime(9999, 12, 15, tzinfo=UTC))


def test_docstring_examples() -> None:
    failures, tried = doctest.testmod(gdpr, raise_on_error=False)
    assert tried > 0
    assert failures == 0


def test_the_old_path_still_works_and_says_where_the_names_went() -> None:
    import tenacity_budget.deadlines as old

    for name in ("gdpr_response_deadline", "add_months"):
        with pytest.warns(DeprecationWarning, match=f"import {name} from tenacity_budget.gdpr"):
            assert getattr(old, name) is getattr(gdpr, name)
    with pytest.warns(DeprecationWarning, match="tenacity_budget.gdpr") as caught:
        from tenacity_budget.deadlines import gdpr_response_deadline as moved
    assert moved is gdpr_response_deadline
    assert caught[0].filename == __file__  # the warning points at the importing line
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        old.nothing  # noqa: B018


def test_docs_and_tests_use_the_new_path() -> None:
    root = Path(__file__).resolve().parents[1]
    pages = [root / "README.md", *(root / "docs").glob("*.md")]
    for page in pages:
        if page.name != "changelog.md":
            assert "tenacity_budget.deadlines import" not in page.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- properties

ZONES: list[tzinfo] = [
    ZoneInfo(name)
    for name in (
        "Europe/Berlin",
        "America/New_York",
        "Australia/Sydney",
        "Europe/Dublin",
        "Asia/Kolkata",
        "America/Sao_Paulo",  # historically changed clocks at midnight
        "Africa/Cairo",  # changes clocks at midnight
    )
]
ZONES += [UTC, timezone(timedelta(hours=-11)), timezone(timedelta(hours=13, minutes=45))]

received_ats = st.datetimes(
    min_value=datetime(1971, 1, 1),
    max_value=datetime(2099, 12, 31),
    timezones=st.sampled_from(ZONES),
    allow_imaginary=False,
)
holiday_sets = st.frozensets(st.dates(date(1971, 1, 1), date(2100, 12, 31)), max_size=5)


def reference_last_day(received: date, months: int, holidays: frozenset[date]) -> date:
    """Independent, slow statement of Art. 3(2)(c) and 3(4) (ignores the rarely-relevant 3(5))."""
    month_index = received.year * 12 + received.month - 1 + months
    day = received + timedelta(days=1)
    candidate = day
    # Walk forward to the latest day of the final month whose date is <= the receipt's date.
    while day.year * 12 + day.month - 1 <= month_index:
        if day.year * 12 + day.month - 1 == month_index and day.day <= received.day:
            candidate = day
        day += timedelta(days=1)
    while candidate.weekday() >= 5 or candidate in holidays:
        candidate += timedelta(days=1)
    return candidate


def utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


@given(received_ats, st.booleans(), holiday_sets)
def test_matches_reference(received: datetime, extended: bool, holidays: frozenset[date]) -> None:
    result = gdpr_response_deadline(received, extended=extended, holidays=holidays)
    expected = reference_last_day(received.date(), 3 if extended else 1, holidays)
    assert result.tzinfo is received.tzinfo
    assert result.date() == expected
    assert result.time() == END


@given(received_ats, st.booleans(), holiday_sets)
def test_deadline_is_after_receipt_on_a_working_day(
    received: datetime, extended: bool, holidays: frozenset[date]
) -> None:
    result = gdpr_response_deadline(received, extended=extended, holidays=holidays)
    assert utc(result) > utc(received)
    assert result.weekday() < 5
    assert result.date() not in holidays
    assert utc(result) >= utc(gdpr_response_deadline(received, extended=extended))


@given(received_ats, st.booleans())
def test_weekend_roll_is_bounded(received: datetime, extended: bool) -> None:
    plain = add_months(received.date(), 3 if extended else 1)
    result = gdpr_response_deadline(received, extended=extended)
    assert 0 <= (result.date() - plain).days <= 2  # Saturday -> Monday at most
    assert (result.date() == plain) == (plain.weekday() < 5)


@given(received_ats, holiday_sets)
def test_extended_is_never_earlier(received: datetime, holidays: frozenset[date]) -> None:
    one = gdpr_response_deadline(received, holidays=holidays)
    three = gdpr_response_deadline(received, extended=True, holidays=holidays)
    assert utc(three) > utc(one)


@given(
    st.sampled_from(ZONES),
    st.datetimes(datetime(1971, 1, 1), datetime(2099, 12, 31), allow_imaginary=False),
    st.timedeltas(timedelta(0), timedelta(days=70)),
    st.booleans(),
    holiday_sets,
)
def test_monotone_in_receipt(
    tz: tzinfo, wall: datetime, gap: timedelta, extended: bool, holidays: frozenset[date]
) -> None:
    earlier = wall.replace(tzinfo=tz)
    later = (utc(earlier) + gap).astimezone(tz)
    first = gdpr_response_deadline(earlier, extended=extended, holidays=holidays)
    second = gdpr_response_deadline(later, extended=extended, holidays=holidays)
    assert utc(first) <= utc(second)


@given(
    st.dates(date(1971, 1, 1), date(2037, 12, 31)),
    st.times(),
    st.timezones(),
    st.booleans(),
)
def test_result_is_the_last_instant_of_a_day_in_every_zone(
    day: date, clock: time, tz: tzinfo, extended: bool
) -> None:
    received = datetime.combine(day, clock, tzinfo=tz)
    result = gdpr_response_deadline(received, extended=extended)
    last_day = reference_last_day(day, 3 if extended else 1, frozenset())
    assert result.tzinfo is tz
    # The result is on (or, if the day was skipped entirely, just before) the last day and the
    # very next microsecond is already a later day.
    assert utc(result).astimezone(tz).date() <= last_day
    assert (utc(result) + timedelta(microseconds=1)).astimezone(tz).date() > last_day
