"""DeadlineMiddleware: the caller's time left becomes the request's ambient deadline."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget import (
    BackoffPolicy,
    BudgetExhausted,
    StopReason,
    deadline_scope,
    remaining,
)
from tenacity_budget.asgi import DeadlineMiddleware
from tenacity_budget.http import DIALECTS
from tenacity_budget.runtime import RetryObserver
from tenacity_budget.testing import VirtualClock

Scope = dict[str, Any]


class Recorder:
    """A tiny ASGI app recording remaining() as its handler sees it."""

    def __init__(self) -> None:
        self.seen: list[float | None] = []
        self.scopes: list[Scope] = []

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        self.scopes.append(scope)
        self.seen.append(remaining())
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
        elif scope["type"] == "websocket":
            await send({"type": "websocket.accept"})


async def call(
    app: Any, scope_type: str = "http", headers: list[tuple[bytes, bytes]] | None = None
) -> list[dict[str, Any]]:
    """Run one ASGI connection of ``app`` by hand; return the messages it sent."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": f"{scope_type}.request" if scope_type == "http" else "websocket.connect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope: Scope = {"type": scope_type, "headers": headers or []}
    await app(scope, receive, send)
    return sent


def client(app: Any, **headers: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://service.test", headers=headers
    )


# -- the header becomes a scope ------------------------------------------------------------


async def test_the_header_sets_the_time_left(virtual_clock: VirtualClock) -> None:
    inner = Recorder()
    async with client(DeadlineMiddleware(inner), **{"X-Request-Timeout-Ms": "1500"}) as c:
        response = await c.get("/")
    assert response.status_code == 200
    assert inner.seen == [pytest.approx(1.5, abs=1e-6)]
    assert remaining() is None  # the scope ends with the request


async def test_without_the_header_there_is_no_scope() -> None:
    inner = Recorder()
    async with client(DeadlineMiddleware(inner)) as c:
        assert (await c.get("/")).status_code == 200
    assert inner.seen == [None]


@pytest.mark.parametrize(
    "value", ["", "soon", "-5", "1.5", "+100", "1e3", "0x10", "١٢".encode(), "12 ms", "NaN", "inf"]
)
async def test_a_malformed_or_negative_header_is_ignored_never_a_500(value: str | bytes) -> None:
    inner = Recorder()
    async with client(DeadlineMiddleware(inner), **{"X-Request-Timeout-Ms": value}) as c:
        response = await c.get("/")
    assert response.status_code == 200
    assert inner.seen == [None]


async def test_a_header_too_large_for_a_float_is_no_deadline() -> None:
    inner = Recorder()
    await call(DeadlineMiddleware(inner), headers=[(b"x-request-timeout-ms", b"9" * 400)])
    assert inner.seen == [None]


async def test_zero_means_no_time_left(virtual_clock: VirtualClock) -> None:
    inner = Recorder()
    await call(DeadlineMiddleware(inner), headers=[(b"x-request-timeout-ms", b"0")])
    assert inner.seen == [0.0]


async def test_the_smallest_of_repeated_headers_holds(virtual_clock: VirtualClock) -> None:
    inner = Recorder()
    headers = [
        (b"x-request-timeout-ms", b"3000"),
        (b"x-request-timeout-ms", b"bogus"),
        (b"X-Request-Timeout-Ms", b"1200"),
        (b"x-request-timeout-ms", b"2000"),
    ]
    await call(DeadlineMiddleware(inner), headers=headers)
    assert inner.seen == [pytest.approx(1.2, abs=1e-6)]


async def test_a_custom_header_name_in_any_case(virtual_clock: VirtualClock) -> None:
    inner = Recorder()
    app = DeadlineMiddleware(inner, header="Grpc-Like-Timeout")
    await call(app, headers=[(b"grpc-like-timeout", b"700"), (b"x-request-timeout-ms", b"1")])
    assert inner.seen == [pytest.approx(0.7, abs=1e-6)]


# -- max_timeout ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([(b"x-request-timeout-ms", b"60000")], 5.0),  # clamped
        ([(b"x-request-timeout-ms", b"2000")], 2.0),  # within the cap
        ([], 5.0),  # no header: the cap
        ([(b"x-request-timeout-ms", b"-1")], 5.0),  # ignored header: the cap
        ([(b"x-request-timeout-ms", b"9" * 400)], 5.0),
    ],
)
async def test_max_timeout_caps_every_request(
    virtual_clock: VirtualClock, headers: list[tuple[bytes, bytes]], expected: float
) -> None:
    inner = Recorder()
    await call(DeadlineMiddleware(inner, max_timeout=5), headers=headers)
    assert inner.seen == [pytest.approx(expected, abs=1e-6)]


# -- scope types ---------------------------------------------------------------------------


async def test_websocket_connections_get_the_scope_too(virtual_clock: VirtualClock) -> None:
    inner = Recorder()
    sent = await call(
        DeadlineMiddleware(inner), "websocket", headers=[(b"x-request-timeout-ms", b"250")]
    )
    assert inner.seen == [pytest.approx(0.25, abs=1e-6)]
    assert sent == [{"type": "websocket.accept"}]


async def test_lifespan_passes_through_untouched() -> None:
    inner = Recorder()
    scope: Scope = {"type": "lifespan", "asgi": {"version": "3.0"}}
    await DeadlineMiddleware(inner, max_timeout=5)(scope, _never, _never)
    assert inner.scopes == [scope]
    assert inner.seen == [None]  # no scope, even with a cap


async def _never(*_args: Any) -> Any:
    raise AssertionError("not called")


# -- what the handler's runs see -----------------------------------------------------------


async def test_an_enclosing_deadline_still_holds(virtual_clock: VirtualClock) -> None:
    inner = Recorder()
    with deadline_scope(0.5):
        await call(DeadlineMiddleware(inner), headers=[(b"x-request-timeout-ms", b"9000")])
    assert inner.seen == [pytest.approx(0.5, abs=1e-6)]


async def test_a_budgeted_run_in_the_handler_ends_by_the_callers_deadline(
    virtual_clock: VirtualClock,
) -> None:
    policy = BackoffPolicy(base=0.2, cap=1, max_elapsed=60, jitter="none")
    reports: list[Any] = []
    left_in_attempts: list[float | None] = []

    @policy.retry()
    async def flaky() -> None:
        left_in_attempts.append(remaining())
        raise OSError("down")

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        try:
            await flaky()
        except BudgetExhausted as exc:
            reports.append(exc.report)
        await send({"type": "http.response.start", "status": 503, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    start = virtual_clock.now()
    sent = await call(DeadlineMiddleware(app), headers=[(b"x-request-timeout-ms", b"1000")])
    assert sent[0]["status"] == 503
    [report] = reports
    assert report.reason is StopReason.DEADLINE
    assert report.deadline is not None
    assert (report.deadline - start).total_seconds() == pytest.approx(1.0)
    # The run's own remaining() counts down from the caller's second, not its 60 s budget.
    assert left_in_attempts[0] == pytest.approx(1.0, abs=1e-6)
    assert all(left is not None and left <= 1.0 for left in left_in_attempts)
    assert virtual_clock.elapsed <= 1.0


async def test_concurrent_requests_each_see_their_own_deadline(
    virtual_clock: VirtualClock,
) -> None:
    seen: dict[str, float | None] = {}

    async def app(scope: Scope, receive: Any, send: Any) -> None:
        await asyncio.sleep(0)  # interleave the requests
        seen[scope["path"]] = remaining()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async with client(DeadlineMiddleware(app)) as c:
        await asyncio.gather(
            *(c.get(f"/{ms}", headers={"X-Request-Timeout-Ms": str(ms)}) for ms in (100, 2000, 30))
        )
    assert virtual_clock.elapsed == 0.0  # asyncio.sleep(0) jumps nothing
    assert seen == pytest.approx({"/100": 0.1, "/2000": 2.0, "/30": 0.03}, abs=1e-6)


# -- construction --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_timeout": 0}, ValueError),
        ({"max_timeout": -1.0}, ValueError),
        ({"max_timeout": math.inf}, ValueError),
        ({"max_timeout": math.nan}, ValueError),
        ({"max_timeout": "5"}, TypeError),
        ({"max_timeout": True}, TypeError),
        ({"header": ""}, ValueError),
        ({"header": "X Timeout"}, ValueError),
        ({"header": "X-Timeout:"}, ValueError),
        ({"header": b"x-timeout"}, TypeError),
    ],
)
def test_bad_configuration_is_refused_at_construction(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        DeadlineMiddleware(Recorder(), **kwargs)


def test_the_app_must_be_callable() -> None:
    with pytest.raises(TypeError, match="ASGI application"):
        DeadlineMiddleware("app")  # type: ignore[arg-type]


def test_defaults() -> None:
    app = DeadlineMiddleware(Recorder())
    assert app.header == "X-Request-Timeout-Ms"
    assert app.max_timeout is None


# -- every dialect -----------------------------------------------------------------------------


async def test_every_dialect_is_read_by_default(virtual_clock: VirtualClock) -> None:
    for name, value, left in [
        (b"grpc-timeout", b"1500m", 1.5),
        (b"grpc-timeout", b"2S", 2.0),
        (b"x-envoy-expected-rq-timeout-ms", b"800", 0.8),
        (b"x-envoy-upstream-rq-timeout-ms", b"900", 0.9),
        (b"connect-timeout-ms", b"1100", 1.1),
        (b"x-request-timeout-ms", b"1200", 1.2),
    ]:
        inner = Recorder()
        await call(DeadlineMiddleware(inner), headers=[(name, value)])
        assert inner.seen == [pytest.approx(left, abs=1e-6)], name


async def test_the_earliest_valid_deadline_among_the_dialects_holds(
    virtual_clock: VirtualClock,
) -> None:
    inner = Recorder()
    headers = [
        (b"x-request-timeout-ms", b"3000"),
        (b"grpc-timeout", b"2500m"),
        (b"x-envoy-expected-rq-timeout-ms", b"soon"),  # malformed: ignored
        (b"grpc-timeout", b"1S2"),  # malformed: ignored
        (b"connect-timeout-ms", b"2700"),
    ]
    await call(DeadlineMiddleware(inner), headers=headers)
    assert inner.seen == [pytest.approx(2.5, abs=1e-6)]


async def test_headers_narrows_the_dialects_read(virtual_clock: VirtualClock) -> None:
    inner = Recorder()
    app = DeadlineMiddleware(inner, headers=("GRPC-Timeout", "x-envoy-expected-rq-timeout-ms"))
    assert app.headers == ("grpc-timeout", "x-envoy-expected-rq-timeout-ms")
    await call(app, headers=[(b"x-request-timeout-ms", b"100"), (b"grpc-timeout", b"4S")])
    await call(app, headers=[(b"x-request-timeout-ms", b"100")])
    assert inner.seen == [pytest.approx(4.0, abs=1e-6), None]
    nothing = Recorder()
    await call(DeadlineMiddleware(nothing, headers=()), headers=[(b"grpc-timeout", b"1S")])
    assert nothing.seen == [None]


async def test_header_reads_one_header_in_our_format_only(virtual_clock: VirtualClock) -> None:
    inner = Recorder()
    app = DeadlineMiddleware(inner, header="X-Request-Timeout-Ms")
    assert app.headers == ("x-request-timeout-ms",)
    await call(app, headers=[(b"grpc-timeout", b"1S"), (b"x-request-timeout-ms", b"3000")])
    assert inner.seen == [pytest.approx(3.0, abs=1e-6)]


def test_default_reads_every_dialect() -> None:
    assert set(DeadlineMiddleware(Recorder()).headers) == set(DIALECTS)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"header": "X-Request-Timeout-Ms", "headers": ("grpc-timeout",)}, TypeError),
        ({"headers": ("x-deadline",)}, ValueError),
        ({"headers": "grpc-timeout"}, TypeError),
        ({"headers": (b"grpc-timeout",)}, TypeError),
        ({"min_timeout": 0}, ValueError),
        ({"min_timeout": "1"}, TypeError),
        ({"shed_expired": 1}, TypeError),
    ],
)
def test_bad_dialect_options_are_refused(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        DeadlineMiddleware(Recorder(), **kwargs)


# -- shedding expired requests -----------------------------------------------------------------


class ShedRecorder:
    """An observer with the optional on_shed hook (and the usual ones)."""

    def __init__(self) -> None:
        self.shed: list[tuple[str, float]] = []

    def on_call(self, name: str) -> None: ...
    def on_retry(self, name: str, attempt: int, sleep: float) -> None: ...
    def on_success(self, name: str, attempts: int) -> None: ...
    def on_exhausted(self, name: str, report: Any) -> None: ...

    def on_shed(self, name: str, left: float) -> None:
        self.shed.append((name, left))


async def test_an_expired_request_is_answered_504_without_the_app(
    virtual_clock: VirtualClock,
) -> None:
    inner = Recorder()
    observer = ShedRecorder()
    plain = type("Plain", (), {"on_call": lambda self, name: None})()  # no on_shed
    assert isinstance(observer, RetryObserver)  # the hook is optional: still an observer
    app = DeadlineMiddleware(inner, shed_expired=True, observers=(observer, plain))
    for _ in range(4):
        await call(app, headers=[(b"x-request-timeout-ms", b"5000")])
    sent = await call(app, headers=[(b"grpc-timeout", b"0m")])
    assert sent[0]["status"] == 504
    assert b"deadline" in sent[1]["body"]
    assert len(inner.seen) == 4  # the app never saw the shed request
    assert observer.shed == [("Recorder", 0.0)]


async def test_the_metrics_observers_count_shed_requests(virtual_clock: VirtualClock) -> None:
    from prometheus_client import CollectorRegistry

    from tenacity_budget.instrumentation import PrometheusObserver

    registry = CollectorRegistry()
    app = DeadlineMiddleware(
        Recorder(), shed_expired=True, observers=(PrometheusObserver(registry),)
    )
    for _ in range(4):
        await call(app, headers=[(b"x-request-timeout-ms", b"5000")])
    assert (await call(app, headers=[(b"x-request-timeout-ms", b"0")]))[0]["status"] == 504
    shed = registry.get_sample_value("tenacity_budget_shed_requests_total", {"app": "Recorder"})
    assert shed == 1.0


async def test_the_shed_is_off_by_default(virtual_clock: VirtualClock) -> None:
    inner = Recorder()
    sent = await call(DeadlineMiddleware(inner), headers=[(b"x-request-timeout-ms", b"0")])
    assert sent[0]["status"] == 200
    assert inner.seen == [0.0]


async def test_min_timeout_sheds_requests_with_too_little_time(
    virtual_clock: VirtualClock,
) -> None:
    inner = Recorder()
    app = DeadlineMiddleware(inner, shed_expired=True, min_timeout=0.05)
    for _ in range(4):
        await call(app)  # no header: never shed, but counted
    assert (await call(app, headers=[(b"grpc-timeout", b"49m")]))[0]["status"] == 504
    for _ in range(5):
        await call(app)
    assert (await call(app, headers=[(b"grpc-timeout", b"50m")]))[0]["status"] == 200
    assert (await call(app, headers=[(b"grpc-timeout", b"10m")]))[0]["status"] == 504


async def test_never_more_than_a_fifth_of_ten_seconds_of_requests_is_shed(
    virtual_clock: VirtualClock,
) -> None:
    inner = Recorder()
    app = DeadlineMiddleware(inner, shed_expired=True)
    expired = [(b"x-request-timeout-ms", b"0")]
    statuses = [(await call(app, headers=expired))[0]["status"] for _ in range(20)]
    # The 5th request is the first a shed leaves at 20%: 1 of 5, then 2 of 10, ...
    assert [i + 1 for i, status in enumerate(statuses) if status == 504] == [5, 10, 15, 20]
    assert inner.seen == [0.0] * 16  # the others ran, with no time left
    virtual_clock.advance(9.9)
    assert (await call(app, headers=expired))[0]["status"] == 200  # 5 of 21 would be > 20%
    virtual_clock.advance(0.2)  # the first 20 requests and their 4 sheds left the window
    statuses = [(await call(app, headers=expired))[0]["status"] for _ in range(5)]
    assert statuses == [200, 200, 200, 504, 200]  # 1 of the 5 in the window, then 1 of 6


async def test_websockets_are_never_shed(virtual_clock: VirtualClock) -> None:
    inner = Recorder()
    app = DeadlineMiddleware(inner, shed_expired=True)
    for _ in range(5):
        await call(app, "websocket", headers=[(b"x-request-timeout-ms", b"0")])
    assert inner.seen == [0.0] * 5


# -- property ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([name.encode() for name in DIALECTS] + [b"other"]),
            st.binary(max_size=30),
        ),
        max_size=4,
    ),
    st.none() | st.floats(0.001, 1e6),
)
def test_any_header_lets_the_request_through_with_a_sane_time_left(
    headers: list[tuple[bytes, bytes]], cap: float | None
) -> None:
    inner = Recorder()
    sent = asyncio.run(call(DeadlineMiddleware(inner, max_timeout=cap), headers=headers))
    assert sent[0]["status"] == 200
    [left] = inner.seen
    if left is not None:
        assert left >= 0.0
        assert cap is None or left <= cap
    else:
        assert cap is None


@pytest.mark.parametrize(
    "name", [b"x-envoy-expected-rq-timeout-ms", b"x-envoy-upstream-rq-timeout-ms"]
)
async def test_an_envoy_zero_is_no_timeout_never_shed(
    name: bytes, virtual_clock: VirtualClock
) -> None:
    inner = Recorder()
    app = DeadlineMiddleware(inner, shed_expired=True)
    statuses = [(await call(app, headers=[(name, b"0")]))[0]["status"] for _ in range(10)]
    assert statuses == [200] * 10  # 0 is "no timeout" to Envoy, not "expired"
    assert inner.seen == [None] * 10  # no deadline at all
    sent = await call(app, headers=[(name, b"0"), (b"grpc-timeout", b"2S")])
    assert sent[0]["status"] == 200
    assert inner.seen[-1] == 2.0  # another dialect's deadline still holds


def test_the_shed_window_stays_bounded_under_healthy_traffic() -> None:
    from tenacity_budget.asgi import REJECT_PERIOD, _ShedWindow

    window = _ShedWindow()
    for i in range(100_000):  # 100 s of 1000 requests a second, none expired
        window.seen(i * 0.001)
    assert len(window.requests) <= 10_001  # one slice per millisecond of the last 10 s
    assert window.seen_count == sum(count for _, count in window.requests)
    assert window.seen_count <= REJECT_PERIOD * 1000 + 1
    for i in range(100_000):  # ten times as many, ten times as close: the same slices
        window.seen(100.0 + i * 0.0001)
    assert len(window.requests) <= 10_001
    assert window.seen_count == 100_000  # exactly the last 10 s of requests


async def test_healthy_traffic_through_the_middleware_keeps_the_window_bounded(
    virtual_clock: VirtualClock,
) -> None:
    app = DeadlineMiddleware(Recorder(), shed_expired=True)
    for _ in range(3_000):
        await call(app, headers=[(b"x-request-timeout-ms", b"5000")])
        virtual_clock.advance(0.005)  # 15 s in all
    window = app._window
    assert len(window.requests) <= 2_001  # the last 10 s only
    assert not window.sheds


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=3.0), st.booleans()),
        min_size=1,
        max_size=300,
    )
)
def test_a_shed_never_takes_the_sheds_past_a_fifth_of_ten_seconds_of_requests(
    events: list[tuple[float, bool]],
) -> None:
    from tenacity_budget.asgi import _ShedWindow

    window = _ShedWindow()
    now = 1000.0
    seen: list[float] = []
    shed: list[float] = []
    for gap, expired in events:
        now += gap
        window.seen(now)
        seen.append(now)
        if expired and window.may_shed(now):
            shed.append(now)
            # the window (t - 10, t] ending at each shed: sheds <= 20% of its requests
            start = now - 10.0
            in_window = sum(1 for t in seen if t > start)
            assert sum(1 for t in shed if t > start) <= 0.2 * in_window
