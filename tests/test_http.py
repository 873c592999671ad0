"""tenacity_budget.http: Retry-After in both forms, from headers and from exceptions."""

from __future__ import annotations

import math
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

import aiohttp
import httpx
import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget import BackoffPolicy, BudgetExhausted, StopReason
from tenacity_budget.http import (
    DEADLINE_HEADER,
    format_timeout_ms,
    parse_retry_after,
    parse_timeout_ms,
    retry_after,
    wait_hint,
)
from tenacity_budget.testing import VirtualClock

NOW = datetime(2015, 10, 21, 7, 28, 0, tzinfo=UTC)


# -- delay-seconds -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0.0),
        ("1", 1.0),
        ("120", 120.0),
        ("  120\t", 120.0),
        ("\r\n 7 \r\n", 7.0),
        ("007", 7.0),
        (b"120", 120.0),
        (b" 3 ", 3.0),
    ],
)
def test_delay_seconds(value: str | bytes, expected: float) -> None:
    result = parse_retry_after(value)
    assert result == expected
    assert type(result) is float


def test_delay_too_large_for_a_float_is_infinite_not_an_error() -> None:
    assert parse_retry_after("9" * 400) == math.inf


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "-1",
        "-0",
        "+5",
        "1.5",
        "1e3",
        "5s",
        "1 2",
        "120, 120",
        "0x10",
        "inf",
        "nan",
        "١٢",  # Arabic-Indic digits: int() would take them, HTTP does not
        "²",
        "soon",
        "Wed, 21 Oct",
    ],
)
def test_missing_negative_or_malformed_gives_none(value: str | None) -> None:
    assert parse_retry_after(value, now=NOW) is None


@pytest.mark.parametrize("value", [12, 1.5, object(), ["120"]])
def test_a_value_of_another_type_gives_none(value: Any) -> None:
    assert parse_retry_after(value) is None


# -- HTTP-dates ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "Wed, 21 Oct 2015 07:28:30 GMT",  # IMF-fixdate
        "Wednesday, 21-Oct-15 07:28:30 GMT",  # obsolete RFC 850
        "Wed Oct 21 07:28:30 2015",  # asctime, no zone: UTC
        "  Wed, 21 Oct 2015 07:28:30 GMT  ",
        b"Wed, 21 Oct 2015 07:28:30 GMT",
        "Wed, 21 Oct 2015 09:28:30 +0200",  # not an HTTP-date, but unambiguous
    ],
)
def test_the_three_date_forms(value: str | bytes) -> None:
    assert parse_retry_after(value, now=NOW) == 30.0


def test_asctime_with_a_one_digit_day() -> None:
    now = datetime(1994, 11, 6, 8, 49, 0, tzinfo=UTC)
    assert parse_retry_after("Sun Nov  6 08:49:37 1994", now=now) == 37.0


def test_a_date_in_the_past_gives_zero() -> None:
    assert parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now=NOW) == 0.0
    assert parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now=NOW) == 0.0


def test_a_date_in_another_zone_of_now_is_compared_as_an_instant() -> None:
    now = NOW.astimezone(timezone(timedelta(hours=-5)))
    assert parse_retry_after("Wed, 21 Oct 2015 07:29:00 GMT", now=now) == 60.0


@pytest.mark.parametrize(
    "value",
    [
        "Wed, 31 Feb 2015 07:28:00 GMT",
        "Wed, 21 Oct 2015 25:28:00 GMT",
        "Wed, 21 Oct 2015 07:61:00 GMT",
        "Wed, 00 Oct 2015 07:28:00 GMT",
        "Wed, 21 Foo 2015 07:28:00 GMT",
        "Wed, 21 Oct 99999 07:28:00 GMT",
        "Thursday, 29-Feb-01 00:00:00 GMT",
    ],
)
def test_impossible_dates_give_none(value: str) -> None:
    assert parse_retry_after(value, now=NOW) is None


def test_rfc850_two_digit_years_follow_the_fifty_year_rule() -> None:
    # RFC 9110 §5.6.7: more than 50 years ahead means the previous century.
    now = datetime(2090, 1, 1, tzinfo=UTC)
    # "50": 2050 (40 years past, not 2150, more than 50 years ahead): zero.
    assert parse_retry_after("Saturday, 01-Jan-50 00:00:00 GMT", now=now) == 0.0
    # email.utils reads "91" as 1991; within 50 years ahead of 2090 it is 2091.
    ahead = parse_retry_after("Monday, 01-Jan-91 00:00:00 GMT", now=now)
    assert ahead == datetime(2091, 1, 1, tzinfo=UTC).timestamp() - now.timestamp()
    # And a year that would be more than 50 years ahead is taken from the past.
    early = datetime(2010, 1, 1, tzinfo=UTC)
    assert parse_retry_after("Sunday, 01-Jan-68 00:00:00 GMT", now=early) == 0.0
    assert parse_retry_after("Saturday, 01-Jan-11 00:00:00 GMT", now=early) == pytest.approx(
        365 * 86400.0
    )


def test_now_defaults_to_the_clock(virtual_clock: VirtualClock) -> None:
    later = format_datetime(virtual_clock.now() + timedelta(seconds=90), usegmt=True)
    assert parse_retry_after(later) == 90.0
    virtual_clock.advance(30)
    assert parse_retry_after(later) == 60.0
    virtual_clock.advance(120)
    assert parse_retry_after(later) == 0.0


def test_a_naive_now_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_retry_after("5", now=datetime(2015, 10, 21))
    with pytest.raises(TypeError, match="timezone-aware"):
        parse_retry_after("5", now="2015-10-21")  # type: ignore[arg-type]


# -- property ------------------------------------------------------------------------------

date_like = st.builds(
    "{}, {:02d} {} {:04d} {:02d}:{:02d}:{:02d} {}".format,
    st.sampled_from(["Mon", "Wed", "Sunday", "X"]),
    st.integers(-1, 40),
    st.sampled_from(["Jan", "Feb", "Oct", "Dec", "Foo"]),
    st.integers(0, 10000),
    st.integers(0, 30),
    st.integers(0, 70),
    st.integers(0, 70),
    st.sampled_from(["GMT", "UT", "+2400", "-9999", "", "EST", "XYZ"]),
)
rfc850_like = st.builds(
    "Sunday, {:02d}-{}-{:02d} {:02d}:{:02d}:{:02d} GMT".format,
    st.integers(0, 40),
    st.sampled_from(["Jan", "Feb", "Mar"]),
    st.integers(0, 99),
    st.integers(0, 25),
    st.integers(0, 61),
    st.integers(0, 61),
)
header_values = st.one_of(
    st.none(),
    st.text(),
    st.binary(),
    st.from_regex(r"\s*-?[0-9]{0,400}(\.[0-9]*)?\s*", fullmatch=True),
    date_like,
    rfc850_like,
)
aware_nows = st.datetimes(
    min_value=datetime(1, 1, 2),  # hypothesis takes naive bounds
    max_value=datetime(9999, 12, 30),
    timezones=st.sampled_from([UTC, timezone(timedelta(hours=14)), timezone(-timedelta(hours=12))]),
)


@settings(max_examples=500, deadline=None)
@given(header_values, st.none() | aware_nows)
def test_any_header_value_gives_none_or_a_non_negative_float(
    value: str | bytes | None, now: datetime | None
) -> None:
    result = parse_retry_after(value, now=now)
    assert result is None or (type(result) is float and result >= 0.0)


@settings(max_examples=300, deadline=None)
@given(st.from_regex(r"[0-9]{1,12}", fullmatch=True), st.text(" \t\r\n"), st.text(" \t\r\n"))
def test_delay_seconds_round_trip_whatever_the_whitespace(
    digits: str, lead: str, tail: str
) -> None:
    assert parse_retry_after(lead + digits + tail) == float(int(digits))


@settings(max_examples=300, deadline=None)
@given(st.integers(-(10**6), 10**9))
def test_a_formatted_date_parses_back_to_its_distance(offset: int) -> None:
    when = NOW + timedelta(seconds=offset)
    assert parse_retry_after(format_datetime(when, usegmt=True), now=NOW) == max(0.0, offset)


# -- retry_after(exc) ----------------------------------------------------------------------


def _httpx_status_error(headers: dict[str, str]) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "http://service.test/")
    response = httpx.Response(503, headers=headers, request=request)
    try:
        response.raise_for_status()
    except httpx.HTTPStatusError as exc:
        return exc
    raise AssertionError("raise_for_status() did not raise for a 503")


def _requests_http_error(headers: dict[str, str]) -> requests.HTTPError:
    response = requests.Response()
    response.status_code = 429
    response.headers.update(headers)
    response.url = "http://service.test/"
    try:
        response.raise_for_status()
    except requests.HTTPError as exc:
        return exc
    raise AssertionError("raise_for_status() did not raise for a 429")


def test_retry_after_reads_an_httpx_status_error() -> None:
    assert retry_after(_httpx_status_error({"Retry-After": "7"})) == 7.0
    assert retry_after(_httpx_status_error({"retry-after": " 3 "})) == 3.0
    assert retry_after(_httpx_status_error({})) is None
    assert retry_after(_httpx_status_error({"Retry-After": "later"})) is None


def test_retry_after_reads_a_requests_http_error() -> None:
    assert retry_after(_requests_http_error({"Retry-After": "11"})) == 11.0
    assert retry_after(_requests_http_error({"RETRY-AFTER": "2"})) == 2.0
    assert retry_after(_requests_http_error({})) is None


def test_retry_after_reads_an_http_date(virtual_clock: VirtualClock) -> None:
    later = format_datetime(virtual_clock.now() + timedelta(seconds=42), usegmt=True)
    assert retry_after(_httpx_status_error({"Retry-After": later})) == 42.0


class _WithResponse(Exception):
    def __init__(self, response: object) -> None:
        super().__init__("failed")
        self.response = response


class _Headers:
    def __init__(self, headers: object) -> None:
        self.headers = headers


class _RaisingResponse(Exception):
    @property
    def response(self) -> object:
        raise RuntimeError("The .response property has not been set.")


@pytest.mark.parametrize(
    "exc",
    [
        OSError("down"),
        httpx.ConnectError("refused"),
        requests.ConnectionError("refused"),  # .response is None
        _WithResponse(None),
        _WithResponse(object()),
        _WithResponse(_Headers(None)),
        _WithResponse(_Headers(["Retry-After", "5"])),
        _RaisingResponse(),
    ],
)
def test_retry_after_without_a_response_header_is_none(exc: BaseException) -> None:
    assert retry_after(exc) is None


def test_retry_after_reads_any_mapping_of_headers_whatever_the_case() -> None:
    assert retry_after(_WithResponse(_Headers({"retry-after": "4"}))) == 4.0
    assert retry_after(_WithResponse(_Headers({"Retry-After": "5"}))) == 5.0


def test_retry_after_drives_policy_retry(virtual_clock: VirtualClock) -> None:
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=60, jitter="none")
    dictated = ["2", format_datetime(virtual_clock.now() + timedelta(seconds=9), usegmt=True)]
    calls = 0

    @policy.retry(retry_after=retry_after)
    def fetch() -> str:
        nonlocal calls
        calls += 1
        if dictated:
            raise _httpx_status_error({"Retry-After": dictated.pop(0)})
        return "ok"

    assert fetch() == "ok"
    assert calls == 3
    # 2 s as dictated, then the date 9 s after the start, reached 2 s in: 7 s more.
    assert virtual_clock.sleeps == [2.0, 7.0]


def test_a_retry_after_beyond_the_budget_ends_the_run(virtual_clock: VirtualClock) -> None:
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=60, jitter="none")

    @policy.retry(retry_after=retry_after)
    def fetch() -> None:
        raise _httpx_status_error({"Retry-After": "3600"})

    with pytest.raises(BudgetExhausted) as info:
        fetch()
    assert virtual_clock.sleeps == []
    assert info.value.report.reason is StopReason.SLEEP_BUDGET
    assert info.value.report.attempts == 1


def test_importing_the_module_imports_no_http_library() -> None:
    code = (
        "import sys, tenacity_budget.http; "
        "print(sorted(m for m in ('httpx', 'requests', 'aiohttp') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"


# -- the deadline header -------------------------------------------------------------------


def test_the_deadline_header_name() -> None:
    assert DEADLINE_HEADER == "X-Request-Timeout-Ms"


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (1.5, "1500"),
        (1.2345, "1234"),
        (0.0009, "0"),
        (0.0, "0"),
        (-3.0, "0"),
        (86400, "86400000"),
        (1.7, "1700"),
        (0.29, "290"),
        (5.4879999999999995, "5487"),  # the product rounds up to 5488.0
    ],
)
def test_format_timeout_ms_rounds_down_to_whole_milliseconds(seconds: float, expected: str) -> None:
    assert format_timeout_ms(seconds) == expected


@pytest.mark.parametrize("seconds", [math.inf, -math.inf, math.nan])
def test_format_timeout_ms_needs_a_finite_time(seconds: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        format_timeout_ms(seconds)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1500", 1.5), (b"1500", 1.5), (" 250\t", 0.25), ("0", 0.0), ("9" * 400, math.inf)],
)
def test_parse_timeout_ms(value: str | bytes, expected: float) -> None:
    assert parse_timeout_ms(value) == expected


@pytest.mark.parametrize(
    "value", [None, "", " ", "-1", "+1", "1.5", "1e3", "ten", "١٢", "1 2", "0x10", 1500]
)
def test_parse_timeout_ms_ignores_anything_else(value: Any) -> None:
    assert parse_timeout_ms(value) is None


@settings(max_examples=500, deadline=None)
@given(st.floats(0.0, 1e9))
def test_the_header_never_gives_more_time_than_was_left(seconds: float) -> None:
    received = parse_timeout_ms(format_timeout_ms(seconds))
    assert received is not None
    assert seconds - 0.0011 < received <= seconds  # float products may lose one ms more


@settings(max_examples=500, deadline=None)
@given(st.none() | st.text() | st.binary())
def test_parse_timeout_ms_never_raises(value: str | bytes | None) -> None:
    result = parse_timeout_ms(value)
    assert result is None or result >= 0.0


# -- wait hints beyond Retry-After -----------------------------------------------------------


def _aiohttp_error(headers: dict[str, str] | None) -> aiohttp.ClientResponseError:
    from multidict import CIMultiDict, CIMultiDictProxy
    from yarl import URL

    info = aiohttp.RequestInfo(
        URL("http://service.test/"),
        "GET",
        CIMultiDictProxy(CIMultiDict()),
        URL("http://service.test/"),
    )
    raw = None if headers is None else CIMultiDictProxy(CIMultiDict(headers))
    return aiohttp.ClientResponseError(info, (), status=429, headers=raw)


def test_retry_after_reads_an_aiohttp_client_response_error() -> None:
    assert retry_after(_aiohttp_error({"Retry-After": "30"})) == 30.0
    assert retry_after(_aiohttp_error({"retry-after-ms": "250"})) == 0.25
    assert retry_after(_aiohttp_error({})) is None
    assert retry_after(_aiohttp_error(None)) is None


def test_retry_after_reads_any_object_with_headers() -> None:
    assert retry_after(_Headers({"Retry-After": "6"})) == 6.0
    assert retry_after(httpx.Response(429, headers={"x-ms-retry-after-ms": "1500"})) == 1.5


def test_retry_after_reads_headers_that_are_a_list_of_pairs() -> None:
    # ASGI's raw headers, or a client's own list: read as they are, not passed over for a
    # .response (here one whose headers say something else).
    pairs = [(b"retry-after", b"7"), (b"content-type", b"text/plain")]
    assert retry_after(_Headers(pairs)) == 7.0
    both = _Headers([("Retry-After", "3")])
    both.response = _Headers({"Retry-After": "60"})  # type: ignore[attr-defined]
    assert retry_after(both) == 3.0


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "1500"}, 1.5),
        ({"Retry-After-Ms": "20.5"}, 0.0205),
        ({"x-ms-retry-after-ms": "0"}, 0.0),
        ({"Retry-After": "30", "retry-after-ms": "1500"}, 1.5),  # the smallest wins
        ({"Retry-After": "1", "x-ms-retry-after-ms": "9000"}, 1.0),
        ({"Retry-After": "2", "retry-after-ms": "3000", "x-ms-retry-after-ms": "2500"}, 2.0),
        ({"Retry-After": "later", "retry-after-ms": "400"}, 0.4),  # the malformed one ignored
        ({"RateLimit-Reset": "7"}, 7.0),
        ({"RateLimit-Reset": "7", "Retry-After": "60"}, 60.0),  # only when none of the three
        ({"RateLimit-Reset": "7", "retry-after-ms": "-1"}, 7.0),
        ({"RateLimit-Reset": "1.5"}, None),  # delta-seconds: digits only
        ({"retry-after-ms": "-5"}, None),
        ({"retry-after-ms": "1e3"}, None),
        ({"retry-after-ms": "nan"}, None),
        ({"retry-after-ms": ""}, None),
        ({"retry-after-ms": "\u0661\u0662"}, None),  # Arabic-Indic digits are not ASCII
        ({}, None),
    ],
)
def test_wait_hint(headers: dict[str, str], expected: float | None) -> None:
    assert wait_hint(headers) == expected
    assert wait_hint(httpx.Headers(headers, encoding="utf-8")) == expected
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    assert wait_hint(raw) == expected


def test_wait_hint_reads_an_http_date_against_now() -> None:
    later = format_datetime(NOW + timedelta(seconds=42), usegmt=True)
    assert wait_hint({"Retry-After": later, "retry-after-ms": "50000"}, now=NOW) == 42.0
    with pytest.raises(ValueError, match="aware"):
        wait_hint({}, now=datetime(2015, 10, 21))


@pytest.mark.parametrize("headers", [None, 5, "Retry-After: 5", ["Retry-After", "5"], [(1,)]])
def test_wait_hint_of_anything_but_headers_is_none(headers: object) -> None:
    assert wait_hint(headers) is None


_HINT_NAMES = st.sampled_from(
    ["Retry-After", "retry-after-ms", "X-MS-Retry-After-Ms", "RateLimit-Reset", "Other"]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_HINT_NAMES, st.text(max_size=30) | st.binary(max_size=30)), max_size=6))
def test_wait_hint_never_raises_and_never_goes_negative(
    pairs: list[tuple[str, str | bytes]],
) -> None:
    hint = wait_hint(pairs, now=NOW)
    assert hint is None or hint >= 0.0


def test_a_wait_hint_in_milliseconds_drives_policy_retry(virtual_clock: VirtualClock) -> None:
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=60, jitter="none")
    hints = [{"retry-after-ms": "250"}, {"x-ms-retry-after-ms": "1500", "Retry-After": "9"}]

    @policy.retry(retry_after=retry_after)
    def fetch() -> str:
        if hints:
            raise _httpx_status_error(hints.pop(0))
        return "ok"

    assert fetch() == "ok"
    assert virtual_clock.sleeps == [0.25, 1.5]


# -- the errors of a spent budget pickle (httpx's; requests' and aiohttp's in their tests) --


@pytest.mark.parametrize(
    "error", [httpx.ConnectError("refused"), httpx.ReadTimeout("slow"), httpx.ReadError("reset")]
)
def test_an_httpx_error_of_a_spent_budget_pickles(
    error: httpx.TransportError, virtual_clock: VirtualClock
) -> None:
    import pickle

    from tenacity_budget.httpx import BudgetTransport

    def refuse(request: httpx.Request) -> httpx.Response:
        raise error

    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=12, jitter="none")
    transport = BudgetTransport(policy, transport=httpx.MockTransport(refuse))
    with httpx.Client(transport=transport) as client, pytest.raises(type(error)) as info:
        client.get("http://service.test/x")
    spent = info.value
    assert isinstance(spent, BudgetExhausted)
    again = pickle.loads(pickle.dumps(spent))
    assert type(again) is type(spent)
    assert isinstance(again, type(error))
    assert isinstance(again, BudgetExhausted)
    assert again.report.attempts == spent.report.attempts
    assert again.report.reason is spent.report.reason
    assert type(again.report.last_exception) is type(error)
    assert again.last_attempt.exception() is again.report.last_exception
    assert again.request.url == "http://service.test/x"
    assert str(again) == str(spent)


# -- one retry rule: TLS failures are not retried by httpx either -------------------------


def test_httpx_does_not_retry_a_tls_failure() -> None:
    from tenacity_budget.httpx import BudgetTransport, _retryable
    from tenacity_budget.testing import virtual_clock
    from tests._scripted import scripted_server

    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=12, jitter="none")
    with (
        scripted_server() as url,
        virtual_clock() as clock,
        httpx.Client(transport=BudgetTransport(policy)) as client,
        pytest.raises(httpx.ConnectError) as info,
    ):
        # https:// to a plain HTTP server: the TLS handshake fails, and would again.
        client.get(url.replace("http://", "https://", 1) + "/whoami")
    assert not isinstance(info.value, BudgetExhausted)  # sent once: nothing was retried
    assert clock.sleeps == []
    assert _retryable(httpx.ConnectError("refused"))
    assert _retryable(httpx.RemoteProtocolError("eh"))
    assert _retryable(httpx.ProxyError("proxy down"))
    assert not _retryable(httpx.LocalProtocolError("bad request"))
