"""tenacity_budget.requests.BudgetAdapter against real local servers (uvicorn, raw sockets).

Servers are started before the virtual clock, which then makes every backoff sleep
instant; the tests against a server that never answers or dribbles run on the real clock
with budgets of a fraction of a second, and assert what happened, never how long it took.
"""

from __future__ import annotations

import pickle
import socket
import ssl
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import requests
import urllib3

import tenacity_budget.requests as budget_requests
from tenacity_budget import BackoffPolicy, BudgetExhausted, ExhaustionReport, StopReason
from tenacity_budget.requests import BudgetAdapter, _timeouts
from tenacity_budget.testing import virtual_clock
from tests._scripted import scripted_server

POLICY = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=12, jitter="none")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with scripted_server() as url:
        yield url


def script(server: str, *statuses: int, headers: dict[str, str] | None = None) -> tuple[str, str]:
    """A URL answering ``statuses`` in turn (then 200), and the key its requests are seen by."""
    key = uuid.uuid4().hex
    query = "&".join(f"h={name}:{value}" for name, value in (headers or {}).items())
    return f"{server}/{key}/{','.join(map(str, statuses))}?{query}", key


def seen(server: str, key: str) -> list[dict[str, str]]:
    """The headers of each request the server received for ``key``."""
    found: list[dict[str, str]] = requests.get(f"{server}/_seen/{key}", timeout=10).json()
    return found


def session(adapter: BudgetAdapter) -> requests.Session:
    return session_for("http://", adapter)


def session_for(prefix: str, adapter: BudgetAdapter) -> requests.Session:
    s = requests.Session()
    s.mount(prefix, adapter)
    return s


def closed_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


# -- the module ------------------------------------------------------------------------------


def test_the_module_uses_the_real_requests() -> None:
    assert budget_requests.requests is sys.modules["requests"]
    assert budget_requests.HTTPAdapter is requests.adapters.HTTPAdapter
    assert budget_requests.__all__ == ["BudgetAdapter"]


def test_defaults_and_urllib3_retries_off() -> None:
    adapter = BudgetAdapter(POLICY, pool_maxsize=3, pool_block=True)
    assert isinstance(adapter, requests.adapters.HTTPAdapter)
    assert adapter.max_retries.total == 0
    assert adapter._pool_maxsize == 3
    assert adapter._pool_block is True
    assert adapter.retry_statuses == frozenset({429, 502, 503, 504})
    assert adapter.methods == frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE", "TRACE"})


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_retries": 3}, TypeError),
        ({"deadline_header": "X-Deadline", "deadline_headers": ("grpc-timeout",)}, TypeError),
        ({"deadline_headers": ("x-deadline",)}, ValueError),
        ({"deadline_header": "X Bad"}, ValueError),
        ({"retry_statuses": {200}}, ValueError),
        ({"methods": {"GET ME"}}, ValueError),
        ({"budget": object()}, TypeError),
    ],
)
def test_bad_options_are_refused_at_construction(
    kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        BudgetAdapter(POLICY, **kwargs)


def test_a_policy_is_required() -> None:
    with pytest.raises(TypeError, match="BackoffPolicy"):
        BudgetAdapter("policy")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("own", "left", "expected"),
    [
        (None, 5.0, (5.0, 5.0)),
        (2.0, 5.0, (2.0, 2.0)),
        ((1.0, 9.0), 5.0, (1.0, 5.0)),
        ((None, 3.0), 5.0, (5.0, 3.0)),
        (None, 0.0, (0.001, 0.001)),  # an admitted attempt is sent, never as non-blocking
        (None, 1e12, (None, None)),  # no socket timeout that large: the caller's own
        ((1.0, None), 1e12, (1.0, None)),
    ],
)
def test_each_attempt_is_bounded_by_the_time_left(
    own: Any, left: float, expected: tuple[float | None, float | None]
) -> None:
    assert _timeouts(own, left) == expected


def _phases(timeout: Any) -> tuple[Any, Any, Any]:
    """What a urllib3 Timeout holds: (connect, read, total), as its repr states them."""
    assert isinstance(timeout, urllib3.Timeout)
    probe = timeout.clone()
    total, probe.total = probe.total, None
    return probe.connect_timeout, probe.read_timeout, total


@pytest.mark.parametrize(
    ("own", "left", "expected"),
    [
        (urllib3.Timeout(read=5), 3.0, (3.0, 3.0, None)),
        (urllib3.Timeout(read=2), 3.0, (3.0, 2.0, None)),
        (urllib3.Timeout(connect=1), 3.0, (1.0, 3.0, None)),
        (urllib3.Timeout(total=3), 5.0, (5.0, 5.0, 3.0)),
        (urllib3.Timeout(total=9), 5.0, (5.0, 5.0, 5.0)),
        (urllib3.Timeout(connect=2, read=4, total=3), 5.0, (2.0, 4.0, 3.0)),
        (urllib3.Timeout(connect=2, read=4, total=3), 1.5, (1.5, 1.5, 1.5)),
        (urllib3.Timeout(), 0.0, (0.001, 0.001, None)),
    ],
)
def test_a_urllib3_timeout_is_clamped_phase_by_phase(
    own: urllib3.Timeout, left: float, expected: tuple[Any, Any, Any]
) -> None:
    before = _phases(own)
    sent = _timeouts(own, left)
    assert isinstance(sent, urllib3.Timeout)
    assert _phases(sent) == expected
    assert _phases(own) == before  # the caller's own is left as it was


def test_a_urllib3_timeout_without_a_bound_on_the_time_left_is_the_callers() -> None:
    own = urllib3.Timeout(connect=1, read=2, total=3)
    assert _timeouts(own, 1e12) is own


# -- real servers ----------------------------------------------------------------------------


def test_a_503_with_retry_after_then_200(server: str) -> None:
    url, key = script(server, 503, headers={"Retry-After": "3"})
    with virtual_clock() as clock, session(BudgetAdapter(POLICY)) as s:
        response = s.get(url)
    assert response.status_code == 200
    assert response.text == "ok"
    assert clock.sleeps == [3.0]  # as the server dictated, not the 1 s backoff
    assert [h["x-request-timeout-ms"] for h in seen(server, key)] == ["12000", "9000"]


def test_a_wait_in_milliseconds_is_honoured(server: str) -> None:
    url, _ = script(server, 429, 429, headers={"retry-after-ms": "250", "Retry-After": "30"})
    with virtual_clock() as clock, session(BudgetAdapter(POLICY)) as s:
        assert s.get(url).status_code == 200
    assert clock.sleeps == [0.25, 0.25]  # the smallest valid hint wins


def test_spent_on_a_status_the_last_response_is_returned(server: str) -> None:
    url, key = script(server, *[503] * 20)
    with virtual_clock() as clock, session(BudgetAdapter(POLICY)) as s:
        response = s.get(url)
    assert response.status_code == 503
    assert response.text == "no"  # its body is still there to read
    assert clock.sleeps == POLICY.waits()
    assert len(seen(server, key)) == len(POLICY.waits()) + 1
    with pytest.raises(requests.HTTPError):
        response.raise_for_status()


def test_a_post_and_a_status_not_listed_are_sent_once(server: str) -> None:
    url, key = script(server, 503, 500)
    with virtual_clock() as clock, session(BudgetAdapter(POLICY)) as s:
        assert s.post(url, data=b"x").status_code == 503
        assert s.get(url).status_code == 500
    assert clock.sleeps == []
    headers = seen(server, key)
    assert len(headers) == 2
    assert headers[0]["x-request-timeout-ms"] == "12000"  # still bounded and announced


def test_the_callers_deadline_scope_is_the_time_sent(server: str) -> None:
    from tenacity_budget import deadline_scope

    url, key = script(server, 502)
    with virtual_clock() as clock, session(BudgetAdapter(POLICY)) as s, deadline_scope(5):
        assert s.get(url).status_code == 200
    assert clock.sleeps == [1.0]
    assert [h["x-request-timeout-ms"] for h in seen(server, key)] == ["5000", "4000"]


def test_deadline_headers_sends_every_dialect_chosen(server: str) -> None:
    url, key = script(server)
    adapter = BudgetAdapter(
        POLICY,
        deadline_headers=("X-Request-Timeout-Ms", "x-envoy-upstream-rq-timeout-ms", "grpc-timeout"),
    )
    with virtual_clock(), session(adapter) as s:
        s.get(url)
    [headers] = seen(server, key)
    assert headers["x-request-timeout-ms"] == "12000"
    assert headers["x-envoy-upstream-rq-timeout-ms"] == "12000"
    assert headers["grpc-timeout"] == "12000000u"


def test_no_deadline_header_when_asked(server: str) -> None:
    url, key = script(server)
    with virtual_clock():
        with session(BudgetAdapter(POLICY, deadline_header=None)) as s:
            s.get(url)
        with session(BudgetAdapter(POLICY, deadline_headers=())) as s:
            s.get(url)
    headers = seen(server, key)
    assert len(headers) == 2
    assert all("x-request-timeout-ms" not in h for h in headers)


def test_a_custom_deadline_header_name_in_our_format(server: str) -> None:
    url, key = script(server)
    with virtual_clock(), session(BudgetAdapter(POLICY, deadline_header="X-Deadline")) as s:
        s.get(url)
    assert seen(server, key)[0]["x-deadline"] == "12000"


@pytest.mark.parametrize(
    "timeout",
    [
        None,
        5.0,
        (3.0, 4.0),
        (None, 4.0),
        urllib3.Timeout(read=5),
        urllib3.Timeout(total=3),
        urllib3.Timeout(connect=2, read=4, total=3),
    ],
)
def test_every_timeout_form_requests_takes_is_sent(server: str, timeout: Any) -> None:
    url, key = script(server, 503)
    with virtual_clock(), session(BudgetAdapter(POLICY)) as s:
        assert s.get(url, timeout=timeout).status_code == 200
    assert len(seen(server, key)) == 2  # the 503 retried, with the caller's timeout each time


def test_the_callers_own_timeout_still_holds(server: str) -> None:
    url, _ = script(server)
    with virtual_clock(), session(BudgetAdapter(POLICY)) as s:
        assert s.get(url, timeout=(3.0, 4.0)).status_code == 200


def test_a_closed_port_raises_requests_own_error_with_the_report() -> None:
    url = f"http://127.0.0.1:{closed_port()}/"
    with (
        virtual_clock() as clock,
        session(BudgetAdapter(POLICY)) as s,
        pytest.raises(requests.ConnectionError) as info,
    ):
        s.get(url)
    error = info.value
    assert isinstance(error, requests.RequestException)
    assert isinstance(error, BudgetExhausted)
    assert type(error).__name__ == "ConnectionError"
    assert isinstance(error.report, ExhaustionReport)
    assert error.report.attempts == len(POLICY.waits()) + 1
    assert error.report.reason is StopReason.COUNT
    assert isinstance(error.__cause__, requests.ConnectionError)
    assert not isinstance(error.__cause__, BudgetExhausted)
    assert error.request is not None
    assert error.request.url == url
    assert clock.sleeps == POLICY.waits()
    assert "attempts" in str(error)


def test_the_error_reads_as_requests_own_and_pickles() -> None:
    url = f"http://127.0.0.1:{closed_port()}/"
    with (
        virtual_clock(),
        session(BudgetAdapter(POLICY)) as s,
        pytest.raises(requests.ConnectionError) as info,
    ):
        s.get(url)
    error, original = info.value, info.value.__cause__
    assert isinstance(original, requests.ConnectionError)
    assert error.args == original.args != ()
    assert isinstance(error.args[0], urllib3.exceptions.MaxRetryError)
    for field in ("errno", "strerror", "filename", "filename2"):
        assert getattr(error, field) == getattr(original, field)
    assert error.request is original.request
    assert error.response is original.response

    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert isinstance(again, requests.ConnectionError)
    assert isinstance(again, BudgetExhausted)
    # urllib3's MaxRetryError pickles without its pool: as the original itself does
    assert repr(again.args) == repr(pickle.loads(pickle.dumps(original)).args)
    assert again.request.url == url
    assert again.report.attempts == error.report.attempts
    assert again.report.reason is error.report.reason
    assert isinstance(again.report.last_exception, requests.ConnectionError)
    assert not isinstance(again.report.last_exception, BudgetExhausted)
    assert again.last_attempt.exception() is again.report.last_exception
    assert str(again).partition("last:")[0] == str(error).partition("last:")[0]


class Odd(requests.ConnectionError):
    """A connection error whose __init__ does not take its args."""

    def __init__(self, code: int, path: str) -> None:
        super().__init__(code, f"refused: {path}", path)
        self.path = path


def test_an_oserror_kind_keeps_its_fields_and_pickles() -> None:
    from tenacity import Future

    from tenacity_budget._clients import exhausted

    last = Odd(111, "/sock")
    attempt = Future.construct(3, last, True)
    error: Any = exhausted(last, BudgetExhausted(attempt))
    assert isinstance(error, Odd)
    assert isinstance(error, BudgetExhausted)
    assert (error.errno, error.strerror, error.filename) == (111, "refused: /sock", "/sock")
    assert error.args == last.args
    assert error.path == "/sock"
    assert error.report.attempts == 3
    again = pickle.loads(pickle.dumps(error))
    assert (again.errno, again.strerror, again.filename, again.path) == (
        111,
        "refused: /sock",
        "/sock",
        "/sock",
    )
    assert isinstance(again, Odd)
    assert isinstance(again, BudgetExhausted)


def test_a_tls_failure_is_not_retried(server: str) -> None:
    # https:// to a plain HTTP server: the TLS handshake fails, and would again.
    url, _ = script(server)
    with (
        virtual_clock() as clock,
        session_for("https://", BudgetAdapter(POLICY)) as s,
        pytest.raises(requests.exceptions.SSLError) as info,
    ):
        s.get(url.replace("http://", "https://", 1))
    assert not isinstance(info.value, BudgetExhausted)  # sent once: nothing was retried
    assert clock.sleeps == []


def test_a_proxy_that_cannot_be_reached_is_retried_as_httpx_does() -> None:
    proxy = f"http://127.0.0.1:{closed_port()}"
    with (
        virtual_clock() as clock,
        session(BudgetAdapter(POLICY)) as s,
        pytest.raises(requests.exceptions.ProxyError) as info,
    ):
        s.get("http://service.test/", proxies={"http": proxy})
    assert isinstance(info.value, BudgetExhausted)
    assert info.value.report.attempts == len(POLICY.waits()) + 1
    assert clock.sleeps == POLICY.waits()


def test_the_retry_rule_is_the_shared_one() -> None:
    from tenacity_budget._clients import retry_cures
    from tenacity_budget.requests import _retryable

    cert = requests.exceptions.SSLError("certificate verify failed")
    wrapped = requests.ConnectionError("refused")
    wrapped.__cause__ = ssl.SSLCertVerificationError("certificate verify failed")
    assert not _retryable(cert)
    assert not _retryable(wrapped)
    assert not retry_cures(wrapped, (requests.ConnectionError,), ())  # found in the causes
    for error in (
        requests.ConnectionError("refused"),
        requests.ConnectTimeout("slow"),
        requests.ReadTimeout("slow"),
        requests.exceptions.ProxyError("proxy down"),
    ):
        assert _retryable(error)
    assert not _retryable(requests.exceptions.InvalidURL("x"))
    assert not _retryable(ValueError("x"))


def test_a_closed_port_for_a_post_raises_the_plain_error() -> None:
    with (
        virtual_clock(),
        session(BudgetAdapter(POLICY)) as s,
        pytest.raises(requests.ConnectionError) as info,
    ):
        s.post(f"http://127.0.0.1:{closed_port()}/", data=b"x")
    assert not isinstance(info.value, BudgetExhausted)


@contextmanager
def raw_server(handle: Any) -> Iterator[str]:
    """A loopback TCP server running ``handle(conn)`` for each connection, in threads."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.05)  # so that the acceptor sees the stop
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            thread = threading.Thread(target=handle, args=(conn, stop), daemon=True)
            thread.start()
            threads.append(thread)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        listener.close()
        acceptor.join(timeout=5)
        for thread in threads:
            thread.join(timeout=5)


def never_answer(conn: socket.socket, stop: threading.Event) -> None:
    with conn:
        while not stop.wait(0.01):  # a bounded wait: the test ends it
            pass


def test_a_server_that_never_answers_ends_with_a_timeout_that_is_budget_exhausted() -> None:
    policy = BackoffPolicy(base=0.01, cap=0.02, max_elapsed=0.3, jitter="none")
    with (
        raw_server(never_answer) as url,
        session(BudgetAdapter(policy)) as s,
        pytest.raises(requests.Timeout) as info,
    ):
        s.get(url)
    error = info.value
    assert isinstance(error, requests.ReadTimeout)
    assert isinstance(error, BudgetExhausted)
    assert error.report.reason in (StopReason.DEADLINE, StopReason.WALL_CLOCK)


DRIBBLED = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"


def dribble(conn: socket.socket, stop: threading.Event) -> None:
    """Answer one byte at a time, every 10 ms: each read gets a byte well within its timeout."""
    with conn:
        conn.recv(65536)
        for byte in DRIBBLED:
            if stop.wait(0.01):
                return
            conn.sendall(bytes([byte]))


def test_a_dribbling_server_is_not_bounded_by_requests() -> None:
    # A read timeout is per socket read: the response takes ~0.7 s, the budget is 0.3 s,
    # yet no read waited long enough to time out. The async clients cut it (aiohttp's).
    policy = BackoffPolicy(base=0.01, cap=0.02, max_elapsed=0.3, jitter="none")
    with raw_server(dribble) as url, session(BudgetAdapter(policy)) as s:
        response = s.get(url)
    assert response.status_code == 200
    assert response.content == b"ok"
    assert len(DRIBBLED) * 0.01 > policy.max_elapsed  # the schedule outlasts the budget


# -- the chain: requests -> service A (ASGI, aiohttp) -> service B ---------------------------------


def test_the_deadline_travels_requests_to_a_to_b_in_the_dialects_configured() -> None:
    import json

    import aiohttp

    from tenacity_budget import deadline_scope, remaining
    from tenacity_budget.aiohttp import budget_middleware
    from tenacity_budget.asgi import DeadlineMiddleware
    from tests._servers import serve

    heard: dict[str, dict[str, str]] = {}
    dialects = ("grpc-timeout", "x-envoy-expected-rq-timeout-ms")

    async def service_b(scope: Any, receive: Any, send: Any) -> None:
        left = remaining()  # on entry, as DeadlineMiddleware set it
        heard["b"] = {k.decode(): v.decode() for k, v in scope["headers"]}
        body = json.dumps({"b": left}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    policy = BackoffPolicy(base=0.01, cap=0.05, max_elapsed=30, jitter="none")

    async def service_a(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        left = remaining()
        heard["a"] = {k.decode(): v.decode() for k, v in scope["headers"]}
        middleware = budget_middleware(policy, deadline_headers=dialects)
        async with (
            aiohttp.ClientSession(middlewares=(middleware,)) as client,
            client.get(b_url) as response,
        ):
            downstream = json.loads(await response.read())
        body = json.dumps({"a": left, **downstream}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    with (
        serve(DeadlineMiddleware(service_b, headers=dialects)) as b_url,
        serve(DeadlineMiddleware(service_a)) as a_url,
        session(BudgetAdapter(policy)) as s,
        deadline_scope(2.0),
    ):
        seen = s.get(a_url).json()
    assert 0 < seen["b"] < seen["a"] < 2.0
    assert int(heard["a"]["x-request-timeout-ms"]) <= 2000
    assert "x-request-timeout-ms" not in heard["b"]  # A sends only the dialects configured
    assert heard["b"]["grpc-timeout"].endswith("u")  # about 2 s: microseconds fit 8 digits
    assert 0 < int(heard["b"]["x-envoy-expected-rq-timeout-ms"]) < 2000


def test_a_retry_budget_is_drawn_from_and_deposited_into(server: str) -> None:
    from tenacity_budget import RetryBudget

    refusing = RetryBudget(ratio=0, min_per_second=0)
    url, key = script(server, 503, 503)
    with virtual_clock(), session(BudgetAdapter(POLICY, budget=refusing)) as s:
        assert s.get(url).status_code == 503  # the budget refused the retry
    assert len(seen(server, key)) == 1
    deposits: list[str] = []

    class Counting(RetryBudget):
        def deposit(self) -> None:
            deposits.append("deposit")
            super().deposit()

    url, _ = script(server, 503)
    with virtual_clock(), session(BudgetAdapter(POLICY, budget=Counting())) as s:
        assert s.get(url).status_code == 200  # a retry: the run deposits
        assert s.get(url).status_code == 200  # a first-try success: deposited as well
    assert deposits == ["deposit", "deposit"]


def test_read_timeouts_are_retried_like_connection_errors() -> None:
    # The caller's own read timeout (50 ms) is shorter than the budget: each attempt times
    # out on its own and the run retries it, until the budget ends the run.
    policy = BackoffPolicy(base=0.01, cap=0.02, max_elapsed=0.4, jitter="none")
    with (
        raw_server(never_answer) as url,
        session(BudgetAdapter(policy)) as s,
        pytest.raises(requests.ReadTimeout) as info,
    ):
        s.get(url, timeout=(1.0, 0.05))
    assert isinstance(info.value, BudgetExhausted)
    assert info.value.report.attempts >= 2


@pytest.mark.parametrize(("module", "library"), [("requests", "requests"), ("aiohttp", "aiohttp")])
def test_importing_without_the_library_names_the_extra(module: str, library: str) -> None:
    import subprocess

    code = (
        f"import sys; sys.modules[{library!r}] = None\n"
        "try:\n"
        f"    import tenacity_budget.{module}\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert f"pip install 'tenacity-budget[{library}]'" in out.stdout
