"""Deadlines that travel, against real components: uvicorn servers and real httpx clients.

The chain of the issue: a client with 2 s left calls service A, whose handler calls service
B through AsyncBudgetTransport; both services run DeadlineMiddleware. B answers 503 with a
Retry-After, then hangs. What each hop received and how each run stopped is read from the
runs' own records (the header values, remaining() inside them, their ExhaustionReports),
never from the wall time a test took.

Each server is a uvicorn.Server on a free loopback port, in a thread of this process,
stopped at the end of its test. The chain takes about the 2 s its client allows.
"""

from __future__ import annotations

import asyncio
import re
import socket
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tenacity_budget import (
    BackoffPolicy,
    BudgetExhausted,
    ExhaustionReport,
    StopReason,
    deadline_scope,
    remaining,
)
from tenacity_budget.asgi import DeadlineMiddleware
from tenacity_budget.httpx import AsyncBudgetTransport, BudgetTransport, exhaustion_report
from tests._servers import respond, serve

ROOT = Path(__file__).resolve().parent.parent
HEADER = b"x-request-timeout-ms"

# Every hop's own budget (30 s) is far longer than the client's 2 s: whatever stops a run
# early is the deadline that travelled to it.
POLICY = BackoffPolicy(base=0.1, cap=1, max_elapsed=30, attempt_duration=0.1, jitter="none")


def received(scope: dict[str, Any]) -> int | None:
    """The deadline header value a request arrived with, in ms."""
    for name, value in scope["headers"]:
        if name == HEADER:
            return int(value)
    return None


@dataclass
class Hop:
    """What one service recorded of the requests it handled."""

    headers: list[int | None] = field(default_factory=list)
    entry_left: list[float | None] = field(default_factory=list)
    run_left: list[float | None] = field(default_factory=list)
    reports: list[ExhaustionReport] = field(default_factory=list)
    outcomes: list[str] = field(default_factory=list)


def report_of(outcome: httpx.Response | BudgetExhausted) -> tuple[str, ExhaustionReport | None]:
    """How a transport's run ended: a response it gave up on, or BudgetExhausted."""
    if isinstance(outcome, BudgetExhausted):
        return "exhausted", outcome.report
    return f"response {outcome.status_code}", exhaustion_report(outcome)


# -- the chain -----------------------------------------------------------------------------


def test_the_deadline_travels_client_to_a_to_b() -> None:
    a, b = Hop(), Hop()

    @POLICY.retry(hard_deadline=True)
    async def b_work() -> None:
        """B's own budgeted work, which hangs: cut at B's deadline, the caller's."""
        b.run_left.append(remaining())
        await asyncio.Event().wait()

    async def service_b(scope: dict[str, Any], receive: Any, send: Any) -> None:
        b.headers.append(received(scope))
        b.entry_left.append(remaining())
        if len(b.headers) == 1:
            await respond(send, 503, [(b"retry-after", b"1")])
            return
        try:
            await b_work()
        except BudgetExhausted as exc:
            b.reports.append(exc.report)
        await respond(send, 504)

    with serve(DeadlineMiddleware(service_b)) as b_url:

        async def service_a(scope: dict[str, Any], receive: Any, send: Any) -> None:
            a.headers.append(received(scope))
            a.entry_left.append(remaining())
            transport = AsyncBudgetTransport(POLICY)
            async with httpx.AsyncClient(transport=transport, base_url=b_url) as client:
                a.run_left.append(remaining())
                try:
                    outcome: httpx.Response | BudgetExhausted = await client.get("/work")
                except BudgetExhausted as exc:
                    outcome = exc
            kind, report = report_of(outcome)
            a.outcomes.append(kind)
            if report is not None:
                a.reports.append(report)
            await respond(send, 504)

        with serve(DeadlineMiddleware(service_a)) as a_url:
            transport = BudgetTransport(POLICY)
            with httpx.Client(transport=transport, base_url=a_url) as client, deadline_scope(2.0):
                client_left = remaining()
                assert client_left is not None
                client_deadline = datetime.now(UTC) + timedelta(seconds=client_left)
                try:
                    result: httpx.Response | BudgetExhausted = client.get("/")
                except BudgetExhausted as exc:
                    result = exc
            client_kind, client_report = report_of(result)

    # What each hop received: the caller's time left, which only shrinks down the chain.
    [h_a] = a.headers
    h_b1, h_b2 = b.headers
    assert h_a is not None
    assert h_b1 is not None
    assert h_b2 is not None
    assert 0 < h_a <= 2000
    assert h_b1 <= h_a
    assert h_b2 <= h_b1 - 999  # A honoured B's Retry-After: 1 before asking again
    # Each hop's remaining() starts at no more than what its caller sent...
    [a_left] = a.entry_left
    assert a_left is not None
    assert a_left <= h_a / 1000
    b_left1, b_left2 = b.entry_left
    assert b_left1 is not None
    assert b_left1 <= h_b1 / 1000
    assert b_left2 is not None
    assert b_left2 <= h_b2 / 1000
    # ...and A's header to B is A's own time left, which began below the client's.
    [a_left_before] = a.run_left
    assert h_b1 / 1000 <= a_left
    assert a_left_before is not None
    assert h_b1 / 1000 <= a_left_before <= a_left
    # B's run inside the hanging request counted down from the caller's time, not its 30 s.
    [b_run_left] = b.run_left
    assert b_run_left is not None
    assert b_run_left <= b_left2

    # How each run stopped: every one at the deadline that reached it.
    [b_report] = b.reports
    assert b_report.reason is StopReason.DEADLINE
    assert b_report.attempts == 1
    [a_report] = a.reports
    assert a.outcomes[0] in ("exhausted", "response 504")
    assert a_report.reason is StopReason.DEADLINE
    assert a_report.attempts == 2
    assert client_report is not None, client_kind
    assert client_report.reason is StopReason.DEADLINE
    assert client_report.attempts == 1

    # No hop's run outlived its caller's deadline. Each run ended (elapsed, from its report)
    # within the time it had left when it began (remaining(), recorded by the hop), up to
    # the moment a cancellation or a timeout takes to land, and long before its own 30 s.
    slop = 0.25
    assert client_report.elapsed <= client_left + slop
    assert a_report.elapsed <= a_left_before + slop
    assert b_report.elapsed <= b_run_left + slop
    # The deadline each run observed is its caller's (within the transit time of the
    # request, which a relative header does not subtract), never its own budget's end.
    assert client_report.deadline is not None
    assert client_report.deadline <= client_deadline + timedelta(milliseconds=1)
    assert a_report.deadline is not None
    assert a_report.deadline <= client_deadline + timedelta(seconds=slop)
    for report in (client_report, a_report, b_report):
        assert report.budget == 30.0


# -- the README's httpx example, as written, against a real server ----------------------


def readme_httpx_example() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks: list[str] = re.findall(r"```python\n(.*?)```", text, re.S)
    found = [block for block in blocks if "BudgetTransport" in block]
    assert len(found) == 1, "the README has one httpx example, using BudgetTransport"
    return found[0]


def test_the_readme_httpx_example_works_against_a_real_server() -> None:
    seen: list[tuple[str, int | None]] = []

    async def api(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append((scope["path"], received(scope)))
        if scope["path"] == "/users/404":
            await respond(send, 404)
        elif len([p for p, _ in seen if p == scope["path"]]) == 1:
            # Busy at first: asks to come back at once.
            await respond(send, 503, [(b"retry-after", b"0")])
        else:
            body = b'{"id": "42", "name": "Ada"}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})

    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(readme_httpx_example(), "README.md", "exec"), namespace)
    client = namespace["client"]
    assert isinstance(client, httpx.Client)
    with serve(api) as url:
        client.base_url = url  # the one change: point it at this server
        try:
            assert namespace["get_user"]("42") == {"id": "42", "name": "Ada"}
            with pytest.raises(httpx.HTTPStatusError) as info:
                namespace["get_user"]("404")
        finally:
            client.close()
    assert info.value.response.status_code == 404
    paths = [path for path, _ in seen]
    assert paths == ["/users/42", "/users/42", "/users/404"]  # retried the 503, not the 404
    policy = namespace["policy"]
    assert all(h is not None and 0 < h <= policy.max_elapsed * 1000 for _, h in seen)


def test_request_bodies_are_sent_again_on_a_real_connection() -> None:
    bodies: list[bytes] = []

    async def flaky_store(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        bodies.append(body)
        await respond(send, 503 if len(bodies) % 2 else 201)

    policy = BackoffPolicy(base=0.001, cap=0.002, max_elapsed=5, jitter="none")
    with serve(flaky_store) as url, httpx.Client(transport=BudgetTransport(policy)) as client:
        assert client.put(f"{url}/doc", content=b"version 2").status_code == 201
        assert client.put(f"{url}/doc", files={"scan": b"%PDF-1.7"}).status_code == 201
        one_shot = client.put(f"{url}/doc", content=iter([b"streamed"]))
    assert bodies[:2] == [b"version 2", b"version 2"]
    assert bodies[2] == bodies[3]
    assert b"%PDF-1.7" in bodies[2]
    # A generator's body cannot be replayed: that request was sent once.
    assert bodies[4:] == [b"streamed"]
    assert one_shot.status_code == 503


def test_a_real_server_that_refuses_connections_exhausts_the_budget() -> None:
    # A port nothing listens on: every attempt is a real ConnectError.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    policy = BackoffPolicy(base=0.01, cap=0.02, max_elapsed=0.1, jitter="none")
    with (
        httpx.Client(transport=BudgetTransport(policy)) as client,
        pytest.raises(BudgetExhausted) as info,
    ):
        client.get(f"http://127.0.0.1:{port}/")
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    assert info.value.report.attempts >= 2
    assert isinstance(info.value, httpx.ConnectError)  # issue 17: both kinds at once
