"""tenacity_budget.http.DIALECTS: each deadline header's codec, in and out."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget._clients import DeadlineHeaders
from tenacity_budget.http import DIALECTS, _deadline_senders, format_timeout_ms, parse_timeout_ms

NAMES = sorted(DIALECTS)


def test_the_dialects_known() -> None:
    assert NAMES == [
        "connect-timeout-ms",
        "grpc-timeout",
        "x-envoy-expected-rq-timeout-ms",
        "x-envoy-upstream-rq-timeout-ms",
        "x-request-timeout-ms",
    ]
    assert DIALECTS["x-request-timeout-ms"].header == "X-Request-Timeout-Ms"
    assert DIALECTS["connect-timeout-ms"].header == "Connect-Timeout-Ms"
    with pytest.raises(TypeError):
        DIALECTS["mine"] = DIALECTS["grpc-timeout"]  # type: ignore[index]


def test_our_dialect_is_the_deadline_header_functions() -> None:
    ours = DIALECTS["x-request-timeout-ms"]
    assert ours.format is format_timeout_ms
    assert ours.parse("1500") == parse_timeout_ms("1500") == 1.5
    assert ours.format(1e300) == format_timeout_ms(1e300)  # no largest: exact, any size


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-1.0, "0n"),
        (0.0, "0n"),
        (1e-10, "0n"),
        (1e-9, "1n"),
        (0.05, "50000000n"),
        (0.0999999999, "99999999n"),
        (0.1, "100000u"),
        (1.5, "1500000u"),
        (99.9999999, "99999999u"),
        (100.0, "100000m"),
        (99_999.0, "99999000m"),
        (100_000.0, "100000S"),
        (1e9, "16666666M"),
        (5_999_999_940.0, "99999999M"),
        (6e9, "1666666H"),
        (1e12, "99999999H"),  # clamped to the largest
        (math.inf, "99999999H"),
    ],
)
def test_grpc_timeout_takes_the_finest_unit_that_fits(seconds: float, expected: str) -> None:
    assert DIALECTS["grpc-timeout"].format(seconds) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1H", 3600.0),
        ("2M", 120.0),
        ("3S", 3.0),
        ("250m", 0.25),
        ("1500u", 0.0015),
        ("7n", 7e-9),
        (b"99999999H", 99_999_999 * 3600.0),
        (" 5S\t", 5.0),
        ("0m", 0.0),
    ],
)
def test_grpc_timeout_parses_its_grammar(value: str | bytes, expected: float) -> None:
    assert DIALECTS["grpc-timeout"].parse(value) == expected


@pytest.mark.parametrize(
    "value",
    ["", "5", "S", "123456789S", "1.5S", "-1S", "5s", "5 S", "5SS", "\u0661S", b"\xff5S", "5h"],
)
def test_grpc_timeout_refuses_anything_else(value: str | bytes) -> None:
    assert DIALECTS["grpc-timeout"].parse(value) is None


@pytest.mark.parametrize(
    "name", ["x-envoy-expected-rq-timeout-ms", "x-envoy-upstream-rq-timeout-ms"]
)
def test_envoy_never_writes_below_one(name: str) -> None:
    dialect = DIALECTS[name]
    assert dialect.format(0.0) == "1"  # 0 means "no timeout" to Envoy
    assert dialect.format(-5.0) == "1"
    assert dialect.format(0.0004) == "1"
    assert dialect.format(1.2345) == "1234"
    assert dialect.format(math.inf) == "315576000000000"  # a protobuf Duration's largest
    assert dialect.format(1e300) == "315576000000000"
    assert dialect.parse("1500") == 1.5
    assert dialect.smallest == 0.001


def test_connect_timeout_ms() -> None:
    dialect = DIALECTS["connect-timeout-ms"]
    assert dialect.format(0.0) == "0"
    assert dialect.format(2.5) == "2500"
    assert dialect.format(1e12) == "9999999999"  # at most 10 digits
    assert dialect.format(math.inf) == "9999999999"
    assert dialect.parse(b"2500") == 2.5


@pytest.mark.parametrize("name", NAMES)
def test_format_refuses_nan(name: str) -> None:
    with pytest.raises(ValueError, match="time left"):
        DIALECTS[name].format(math.nan)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("value", ["", "-1", "abc", "1e3", "nan", "inf", " ", "1,5", b"\x00"])
def test_parse_gives_none_for_malformed_negative_or_non_finite(
    name: str, value: str | bytes
) -> None:
    assert DIALECTS[name].parse(value) is None


# -- properties ------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(NAMES), st.floats(min_value=0.0, max_value=1e15) | st.just(math.inf))
def test_every_codec_never_gives_more_time_than_was_left(name: str, seconds: float) -> None:
    dialect = DIALECTS[name]
    if seconds == math.inf and name == "x-request-timeout-ms":
        return  # our own dialect has no largest value: it needs a finite time
    parsed = dialect.parse(dialect.format(seconds))
    assert parsed is not None
    assert parsed >= 0.0
    assert parsed <= max(seconds, dialect.smallest)  # Envoy writes 1 ms for less


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(NAMES), st.floats(min_value=0.001, max_value=1e15))
def test_parse_of_format_is_at_most_t(name: str, seconds: float) -> None:
    dialect = DIALECTS[name]
    parsed = dialect.parse(dialect.format(seconds))
    assert parsed is not None
    assert parsed <= seconds


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(NAMES), st.text(max_size=40) | st.binary(max_size=40))
def test_parse_never_raises(name: str, value: str | bytes) -> None:
    parsed = DIALECTS[name].parse(value)
    assert parsed is None or parsed >= 0.0


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(NAMES), st.from_regex(r"\A[0-9]{1,8}[HMSmun]?\Z"))
def test_parse_reads_well_formed_values(name: str, value: str) -> None:
    parsed = DIALECTS[name].parse(value)
    grpc = name == "grpc-timeout"
    if name.startswith("x-envoy-") and value.isdigit() and int(value) == 0:
        assert parsed is None  # Envoy's 0 is "no timeout": no deadline (issue 17 review)
        return
    assert (parsed is not None) == (grpc == (not value[-1].isdigit()))


# -- the clients' deadline_headers= ------------------------------------------------------------


def test_senders_default_to_our_header_in_our_format() -> None:
    assert _deadline_senders("X-Request-Timeout-Ms", None) == (
        ("X-Request-Timeout-Ms", format_timeout_ms),
    )
    assert _deadline_senders("X-Deadline", None) == (("X-Deadline", format_timeout_ms),)
    assert _deadline_senders(None, None) == ()


def test_senders_of_deadline_headers_by_name_in_any_case() -> None:
    senders = _deadline_senders(
        "X-Request-Timeout-Ms", ("x-request-timeout-ms", "X-Envoy-Upstream-Rq-Timeout-Ms")
    )
    assert [name for name, _ in senders] == [
        "X-Request-Timeout-Ms",
        "x-envoy-upstream-rq-timeout-ms",
    ]
    assert _deadline_senders("X-Request-Timeout-Ms", ()) == ()


@settings(max_examples=200, deadline=None)
@given(
    budget=st.floats(min_value=1e-3, max_value=1e9),
    left=st.floats(min_value=-1e9, max_value=1e9) | st.just(0.0),
)
def test_the_deadline_headers_written_are_each_dialects_format_of_the_time_left(
    budget: float, left: float
) -> None:
    # The whole budget's values are formatted once; every other time left (none below 0)
    # is formatted for its attempt: the same strings either way.
    writer = DeadlineHeaders(_deadline_senders("X-Request-Timeout-Ms", NAMES), budget)
    for time_left in (budget, left):
        headers: dict[str, str] = {}
        writer.write(headers, time_left)
        expected = max(time_left, 0.0)
        assert headers == {d.header: d.format(expected) for d in DIALECTS.values()}
    nothing: dict[str, str] = {}
    DeadlineHeaders((), budget).write(nothing, left)
    assert nothing == {}


@pytest.mark.parametrize(
    ("header", "headers", "error"),
    [
        ("X-Deadline", ("grpc-timeout",), TypeError),  # both
        (None, ("grpc-timeout",), TypeError),
        ("X-Request-Timeout-Ms", ("x-deadline",), ValueError),  # unknown
        ("X-Request-Timeout-Ms", "grpc-timeout", TypeError),  # a string, not a sequence
        ("X-Request-Timeout-Ms", (b"grpc-timeout",), TypeError),
        ("X Bad", None, ValueError),
    ],
)
def test_senders_refuse_bad_options(header: str | None, headers: object, error: type) -> None:
    with pytest.raises(error):
        _deadline_senders(header, headers)  # type: ignore[arg-type]


# -- the codecs' edges: every float written, non-finite never read --------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("digits", [312, 399, 400, 401, 1000, 5000])
def test_parse_of_too_many_digits_is_none_not_infinite(name: str, digits: int) -> None:
    value = "9" * digits + ("m" if name == "grpc-timeout" else "")
    assert DIALECTS[name].parse(value) is None
    assert DIALECTS[name].parse(value.encode("ascii")) is None


@pytest.mark.parametrize(
    "name", ["x-envoy-expected-rq-timeout-ms", "x-envoy-upstream-rq-timeout-ms"]
)
@pytest.mark.parametrize("value", ["0", "000", b"0", " 0\t"])
def test_envoy_zero_is_no_timeout_not_expired(name: str, value: str | bytes) -> None:
    assert DIALECTS[name].parse(value) is None  # 0 means "no timeout" to Envoy
    assert DIALECTS[name].parse("1") == 0.001


@pytest.mark.parametrize(
    ("name", "smallest", "largest"),
    [
        ("x-envoy-expected-rq-timeout-ms", "1", "315576000000000"),
        ("x-envoy-upstream-rq-timeout-ms", "1", "315576000000000"),
        ("connect-timeout-ms", "0", "9999999999"),
        ("grpc-timeout", "0n", "99999999H"),
    ],
)
def test_format_clamps_every_infinity(name: str, smallest: str, largest: str) -> None:
    dialect = DIALECTS[name]
    assert dialect.format(-math.inf) == dialect.format(-1.0) == smallest
    assert dialect.format(-1e308) == smallest
    assert dialect.format(math.inf) == dialect.format(1.7e308) == largest


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(NAMES), st.floats(allow_nan=True, allow_infinity=True))
def test_format_of_any_float(name: str, seconds: float) -> None:
    dialect = DIALECTS[name]
    ours = name == "x-request-timeout-ms"
    if math.isnan(seconds) or (ours and math.isinf(seconds)):
        # NaN is no time left at all, and our dialect (no largest value) needs a finite
        # time: both refused (pinned by test_format_refuses_nan and test_http).
        with pytest.raises(ValueError, match="time left"):
            dialect.format(seconds)
        return
    parsed = dialect.parse(dialect.format(seconds))
    assert parsed is not None
    assert 0.0 <= parsed <= max(seconds, dialect.smallest)


def test_the_default_deadline_header_written_out_beside_deadline_headers_is_accepted() -> None:
    # It equals the default, so it cannot be told from it: deadline_headers alone is sent
    # (documented in the clients' docstrings and docs/deadline-propagation.md).
    senders = _deadline_senders("X-Request-Timeout-Ms", ("grpc-timeout",))
    assert [name for name, _ in senders] == ["grpc-timeout"]
    with pytest.raises(TypeError, match="not both"):
        _deadline_senders("x-request-timeout-ms", ("grpc-timeout",))  # not the default
