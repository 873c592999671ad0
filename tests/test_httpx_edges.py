"""The httpx transports at their edges: bad statuses, a missing extra, cut attempts, bodies.

Attempts cut by the hard deadline run against a real loopback server that never answers
(``tests/_servers.py``), with httpx's own pool: no slot of the pool may stay reserved after
them. Bodies that cannot be sent twice go to a real uvicorn server that records what it
received: each body it got is complete, and the same on every attempt.
"""

from __future__ import annotations

import asyncio
import io
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget import BackoffPolicy, BudgetExhausted, StopReason, deadline_scope
from tenacity_budget.httpx import AsyncBudgetTransport, BudgetTransport, exhaustion_report
from tenacity_budget.testing import virtual_clock
from tests._servers import Stalled, receive_body, respond, serve, stalled_server

POLICY = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=12, jitter="none")
TRANSPORTS = [BudgetTransport, AsyncBudgetTransport]

# -- retry_statuses: 4xx and 5xx only ---------------------------------------------------


@pytest.mark.parametrize("cls", TRANSPORTS)
@pytest.mark.parametrize("status", [200, 100, 204, 301, 304, 399, 600, 0, -503])
def test_a_status_that_is_no_error_is_refused(cls: type[Any], status: int) -> None:
    with pytest.raises(ValueError, match=rf"^retry_statuses .*, got {re.escape(str(status))}$"):
        cls(POLICY, retry_statuses=frozenset({503, status}))


@settings(max_examples=60, deadline=None)
@given(
    good=st.frozensets(st.integers(400, 599), max_size=5),
    bad=st.integers().filter(lambda status: not 400 <= status <= 599),
    transport=st.sampled_from(TRANSPORTS),
)
def test_retry_statuses_accept_exactly_the_error_codes(
    good: frozenset[int], bad: int, transport: type[Any]
) -> None:
    assert transport(POLICY, retry_statuses=good).retry_statuses == good
    with pytest.raises(ValueError, match=rf"^retry_statuses .*, got {re.escape(str(bad))}$"):
        transport(POLICY, retry_statuses=good | {bad})


@pytest.mark.parametrize("cls", TRANSPORTS)
@pytest.mark.parametrize("status", [True, False, 503.0, "503", None])
def test_a_status_that_is_no_int_stays_a_type_error(cls: type[Any], status: object) -> None:
    with pytest.raises(TypeError, match="retry_statuses"):
        cls(POLICY, retry_statuses=frozenset({status}))


# -- a fresh machine: httpx not installed ------------------------------------------------

MISSING = "tenacity_budget.httpx needs httpx: pip install 'tenacity-budget[httpx]'"


def _import_without_httpx(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where ``import httpx`` fails as if not installed."""
    prelude = "import sys\nsys.modules['httpx'] = None  # what an absent package gives\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_importing_the_module_without_httpx_names_the_extra() -> None:
    code = (
        "try:\n"
        "    import tenacity_budget.httpx\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__)\n"
        "    print(exc)\n"
        "    print(type(exc.__cause__).__name__)\n"
        "    print(exc.__cause__.name)\n"
    )
    out = _import_without_httpx(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["ImportError", MISSING, "ModuleNotFoundError", "httpx"]


def test_the_package_itself_imports_without_httpx() -> None:
    out = _import_without_httpx("import tenacity_budget, tenacity_budget.http; print('ok')")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# -- attempts cut by the hard deadline give their connection back ---------------------------

CUT_POLICY = BackoffPolicy(base=0.001, cap=0.002, max_elapsed=30, jitter="none")
SLOTS = 5  # the pool's size: httpx.Limits(max_connections=SLOTS)


def pooled_client() -> httpx.AsyncClient:
    """An async client with a small pool of httpx's own, behind an AsyncBudgetTransport."""
    inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=SLOTS))
    return httpx.AsyncClient(transport=AsyncBudgetTransport(CUT_POLICY, transport=inner))


def pool_of(client: httpx.AsyncClient) -> httpcore.AsyncConnectionPool:
    transport = client._transport
    assert isinstance(transport, AsyncBudgetTransport)
    assert isinstance(transport.transport, httpx.AsyncHTTPTransport)
    return transport.transport._pool


async def cut(client: httpx.AsyncClient, url: str) -> BudgetExhausted:
    """A request to a server that never answers: the run ends at its deadline."""
    with pytest.raises(BudgetExhausted) as info:
        await client.get(url)
    assert info.value.report.reason is StopReason.DEADLINE
    assert isinstance(info.value, httpx.TimeoutException)  # issue 17: both kinds at once
    return info.value


async def assert_every_slot_is_free(client: httpx.AsyncClient, server: Stalled) -> None:
    """SLOTS requests at once, none willing to wait for a pool slot: each gets its 200.

    A POST is sent once (no retry would hide a PoolTimeout), and a pool timeout of 0 takes
    a slot only if one is free at once: a slot left reserved fails one of them.
    """
    before = server.paths["/ok"]
    no_wait = httpx.Timeout(10.0, pool=0)
    outcomes = await asyncio.gather(
        *[client.post(f"{server.url}/ok", timeout=no_wait) for _ in range(SLOTS)],
        return_exceptions=True,
    )
    connections = [connection.info() for connection in pool_of(client).connections]
    assert [getattr(o, "status_code", o) for o in outcomes] == [200] * SLOTS, connections
    assert server.paths["/ok"] - before == SLOTS


async def test_attempts_cut_by_the_deadline_leave_no_pool_slot_reserved() -> None:
    # 200 requests to a server that never answers, 20 at a time on 5 slots, each in a scope
    # of its own that ends a little apart from the others': some are cut on a connection,
    # most while they wait for one, while slots change hands all the time.
    async with stalled_server() as server, pooled_client() as client:
        await assert_every_slot_is_free(client, server)  # connected once: warm
        for _ in range(10):

            async def within(seconds: float) -> BudgetExhausted:
                with deadline_scope(seconds):
                    return await cut(client, f"{server.url}/hang")

            ends = await asyncio.gather(*[within(0.02 + 0.001 * (i % 7)) for i in range(20)])
            assert len(ends) == 20
        assert server.paths["/hang"] > 0  # real requests, cut on their connection
        await assert_every_slot_is_free(client, server)


async def test_a_burst_cut_at_one_instant_leaves_no_pool_slot_reserved() -> None:
    # 40 requests sharing one run end (one scope) on 5 slots: 35 of them wait for a slot.
    async with stalled_server() as server, pooled_client() as client:
        await assert_every_slot_is_free(client, server)  # connected once: warm
        for _ in range(5):
            sent = server.paths["/hang"]
            with deadline_scope(0.1):
                ends = await asyncio.gather(*[cut(client, f"{server.url}/hang") for _ in range(40)])
            assert len(ends) == 40
            # At most 5 were sent (and cut on their connection); the others waited for a
            # slot until the run's end.
            assert server.paths["/hang"] - sent <= SLOTS
        assert server.paths["/hang"] > 0
        await assert_every_slot_is_free(client, server)


async def until(condition: Any, what: str) -> None:
    """Wait, a bounded while, for a real server to have seen something."""
    for _ in range(5000):
        if condition():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"not within 5 s: {what}")


async def test_a_slot_left_reserved_by_another_request_is_given_back() -> None:
    # The repair itself, on httpx's real pool: connections handed to requests that went
    # away (httpcore's leak, made by hand here) are reclaimed by the next attempt that
    # fails, and their slots handed to the requests waiting; a connection in use stays.
    async with stalled_server() as server, pooled_client() as client:
        pool = pool_of(client)
        in_use = asyncio.ensure_future(client.get(f"{server.url}/hang"))  # its run: 30 s
        await until(lambda: server.paths["/hang"] == 1, "the request in use was received")
        [busy] = pool.connections
        origin = httpcore.Origin(b"http", b"127.0.0.1", httpx.URL(server.url).port or 80)
        orphans = [pool.create_connection(origin) for _ in range(SLOTS - 1)]
        pool._connections.extend(orphans)  # reserved, owned by no request: the leak
        assert [c.info() for c in orphans] == ["CONNECTING"] * (SLOTS - 1)
        with deadline_scope(0.05):
            await cut(client, f"{server.url}/hang")  # waits for a slot: given one back
        assert not set(orphans) & set(pool.connections)
        assert busy in pool.connections
        assert not in_use.done()  # untouched: still waiting for its answer
        in_use.cancel()
        with pytest.raises(asyncio.CancelledError):
            await in_use
        await assert_every_slot_is_free(client, server)


class SlowToClose(httpx.AsyncByteStream):
    """A response body whose close takes until the test lets it finish."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.fate = "open"

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b""

    async def aclose(self) -> None:
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.fate = "cut halfway"
            raise
        self.fate = "closed"


async def test_a_response_discarded_by_an_attempt_that_is_cut_is_closed_to_the_end() -> None:
    # The attempt after a 503 first closes that response (httpcore hands its connection
    # back at the end of the close); cut by the deadline meanwhile, the close goes on.
    bodies: list[SlowToClose] = []

    def unavailable(request: httpx.Request) -> httpx.Response:
        bodies.append(SlowToClose())
        return httpx.Response(503, stream=bodies[-1])

    transport = AsyncBudgetTransport(CUT_POLICY, transport=httpx.MockTransport(unavailable))
    async with httpx.AsyncClient(transport=transport) as client:
        with deadline_scope(0.05):
            await cut(client, "http://service.test/")
    [body] = bodies  # the run was cut while it closed the first response
    assert body.fate == "open"
    body.release.set()
    for _ in range(100):  # the shielded close resumes at the next turns of the loop
        if body.fate != "open":
            break
        await asyncio.sleep(0)
    assert body.fate == "closed"


# -- bodies that cannot be sent twice -------------------------------------------------------

SCAN = bytes(range(256)) * 320  # 80 KiB: more than one read (httpx reads 64 KiB at a time)
BUSY_POLICY = BackoffPolicy(base=0.001, cap=0.002, max_elapsed=10, jitter="none")


class BodyRecorder:
    """A uvicorn app that records every body it receives: 503 to the first, 201 after."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.bodies.append(await receive_body(receive))
        await respond(send, 503 if len(self.bodies) == 1 else 201)


class ReadOnce(io.RawIOBase):
    """A file object that reads its content once and cannot seek back: a pipe, a socket.

    (In memory: httpx sizes a file with a descriptor by ``fstat``, which a real pipe
    answers wrongly, so httpx itself cannot upload one.)
    """

    def __init__(self, content: bytes) -> None:
        self._content = io.BytesIO(content)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        return self._content.readinto(buffer)


async def put(transport: str, url: str, **request: Any) -> httpx.Response:
    """One PUT through a real client with the sync or the async transport."""
    if transport == "sync":
        with httpx.Client(transport=BudgetTransport(BUSY_POLICY)) as client:
            return client.put(url, **request)
    async with httpx.AsyncClient(transport=AsyncBudgetTransport(BUSY_POLICY)) as client:
        return await client.put(url, **request)


@pytest.mark.parametrize("transport", ["sync", "async"])
async def test_a_multipart_file_that_cannot_seek_back_is_sent_once(transport: str) -> None:
    app = BodyRecorder()
    with serve(app) as url, io.BufferedReader(ReadOnce(SCAN)) as scan:
        assert not scan.seekable()
        response = await put(transport, f"{url}/doc", files={"scan": ("scan.bin", scan)})
    # Sent once, whole: a second attempt would have found the stream at its end.
    [body] = app.bodies
    assert SCAN in body
    assert body.endswith(b"--\r\n")
    assert response.status_code == 503
    report = exhaustion_report(response)  # not retried, and the report says why
    assert report is not None
    assert report.reason is StopReason.NOT_REPLAYABLE
    assert report.attempts == 1


@pytest.mark.parametrize("transport", ["sync", "async"])
async def test_a_multipart_file_that_seeks_is_sent_whole_on_every_attempt(
    transport: str, tmp_path: Path
) -> None:
    app = BodyRecorder()
    path = tmp_path / "scan.bin"
    path.write_bytes(SCAN)
    with serve(app) as url, path.open("rb") as scan:
        response = await put(transport, f"{url}/doc", files={"scan": scan}, data={"title": "Q3"})
    assert response.status_code == 201
    first, second = app.bodies
    assert first == second
    assert SCAN in first
    assert b"Q3" in first


@pytest.mark.parametrize("transport", ["sync", "async"])
async def test_a_generator_body_is_sent_once_and_whole(transport: str) -> None:
    chunks = [b"part-1;", b"part-2;", b"part-3"]

    async def agen() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    app = BodyRecorder()
    with serve(app) as url:
        content: Any = iter(chunks) if transport == "sync" else agen()
        response = await put(transport, f"{url}/doc", content=content)
    assert app.bodies == [b"".join(chunks)]
    assert response.status_code == 503


class NoSeekable:
    """A file-like object with ``read`` and ``seek`` but no word on whether it can seek."""

    def __init__(self, content: bytes) -> None:
        self._content = io.BytesIO(content)

    def read(self, size: int = -1) -> bytes:
        return self._content.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        raise io.UnsupportedOperation("seek")


PART_KINDS = {
    "bytes": lambda content: content,
    "text": lambda content: content.decode("latin-1"),
    "bytesio": io.BytesIO,
    "read-once": ReadOnce,
    "no-seekable": NoSeekable,
}
ONE_SHOT_KINDS = {"read-once", "no-seekable"}


@settings(max_examples=40, deadline=None)
@given(
    parts=st.lists(
        st.tuples(st.sampled_from(sorted(PART_KINDS)), st.binary(min_size=1, max_size=300)),
        min_size=1,
        max_size=4,
    ),
    fields=st.dictionaries(st.sampled_from(["a", "b"]), st.text("xyz", max_size=5), max_size=2),
)
def test_a_multipart_body_is_the_same_on_every_attempt_or_sent_once(
    parts: list[tuple[str, bytes]], fields: dict[str, str]
) -> None:
    bodies: list[bytes] = []

    def busy_once(request: httpx.Request) -> httpx.Response:
        bodies.append(request.read())
        return httpx.Response(503 if len(bodies) == 1 else 200)

    files = [
        (f"part{i}", (f"f{i}.bin", PART_KINDS[kind](content)))
        for i, (kind, content) in enumerate(parts)
    ]
    transport = BudgetTransport(BUSY_POLICY, transport=httpx.MockTransport(busy_once))
    with httpx.Client(transport=transport) as client:
        response = client.put("http://store.test/doc", files=files, data=fields)
    one_shot = any(kind in ONE_SHOT_KINDS for kind, _ in parts)
    if one_shot:
        assert len(bodies) == 1
        assert response.status_code == 503
    else:
        assert len(bodies) == 2
        assert bodies[0] == bodies[1]
        assert response.status_code == 200
    for kind, content in parts:  # every part whole, in every body sent
        sent = content.decode("latin-1").encode() if kind == "text" else content  # as UTF-8
        assert all(sent in body for body in bodies)


# -- a time left no socket can take -----------------------------------------------------------


async def _ok_app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "http":
        await respond(send, 200)


HUGE = BackoffPolicy(base=0.01, cap=0.02, max_elapsed=1e300, jitter="none")


@pytest.mark.parametrize("scope_seconds", [3e11, 1e300])
def test_a_time_left_past_any_socket_timeout_never_crashes_a_sync_request(
    scope_seconds: float,
) -> None:
    # Socket timeouts overflow past about 9.2e9 s: such a time left bounds nothing, and the
    # request's own timeout (here none) applies, sent as usual.
    with (
        serve(_ok_app) as url,
        deadline_scope(scope_seconds),
        httpx.Client(transport=BudgetTransport(HUGE), timeout=None) as client,
    ):
        assert client.get(url).status_code == 200
        # A request sent once, to a port nothing listens on: httpx's own error, not an
        # OverflowError from the socket layer.
        with pytest.raises(httpx.ConnectError):
            client.post(f"http://127.0.0.1:{_closed_port()}/")


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize("transport", ["sync", "async"])
async def test_a_one_shot_body_that_meets_a_refused_connection_says_why_it_was_not_retried(
    transport: str,
) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"payload"

    async def async_chunks() -> AsyncIterator[bytes]:
        yield b"payload"

    body = chunks() if transport == "sync" else async_chunks()
    with pytest.raises(httpx.ConnectError) as caught:
        await put(transport, f"http://127.0.0.1:{_closed_port()}/doc", content=body)
    assert any("not retried (not_replayable)" in note for note in caught.value.__notes__)


def test_a_post_that_meets_a_refused_connection_gets_no_note() -> None:
    # A method not retried at all is not "not retried because of its body".
    with (
        httpx.Client(transport=BudgetTransport(POLICY)) as client,
        pytest.raises(httpx.ConnectError) as caught,
    ):
        client.post(f"http://127.0.0.1:{_closed_port()}/", content=b"x")
    assert not getattr(caught.value, "__notes__", [])


# -- every attempt the run's stop admits is sent ----------------------------------------------


class Busy:
    """A uvicorn app that answers 503 to every request and records the deadline headers."""

    def __init__(self, expected: int) -> None:
        self.headers: list[str | None] = []
        self.expected = expected
        self.all_seen = threading.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        found = dict(scope["headers"]).get(b"x-request-timeout-ms")
        self.headers.append(None if found is None else found.decode())
        if len(self.headers) == self.expected:
            self.all_seen.set()
        await respond(send, 503)


def test_the_last_attempt_the_stop_admits_is_sent_even_with_nothing_left() -> None:
    # 1 s sleeps in a 3 s budget, attempts of no (virtual) time: the stop admits 3 retries,
    # the last one at the budget's very end. It is sent (before issue 16 the transport
    # refused it, "no time left"), with the least timeout a socket can use (1 ms): its 503
    # may or may not be read back within it, and either way the run ends on count.
    policy = BackoffPolicy(base=1, cap=1, max_elapsed=3, jitter="none")
    assert policy.max_attempts() == 3
    app = Busy(expected=4)
    with serve(app) as url, httpx.Client(transport=BudgetTransport(policy)) as client:
        with virtual_clock() as clock:
            try:
                outcome: httpx.Response | BudgetExhausted = client.get(url)
            except BudgetExhausted as exc:
                outcome = exc
        assert app.all_seen.wait(timeout=10), app.headers  # a bounded wait for the server
    assert clock.sleeps == [1.0, 1.0, 1.0]
    assert app.headers == ["3000", "2000", "1000", "1"]
    if isinstance(outcome, BudgetExhausted):
        report = outcome.report
        assert isinstance(outcome.__cause__, httpx.ReadTimeout)
    else:
        assert outcome.status_code == 503
        found = exhaustion_report(outcome)
        assert found is not None
        report = found
    assert report.attempts == 4
    assert report.reason is StopReason.COUNT
