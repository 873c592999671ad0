"""The adaptive throttle (issue 18) in the requests adapter, against a real local server.

Every attempt asks the throttle, the first included (before the request's deposit in the
retry budget), a retry after the time budget and before the retry budget; every attempt
sent is recorded once, the first one included although the adapter replays it inside its
run. The throttles are real (:class:`AdaptiveThrottle`, seeded); their windows are read
inside the virtual clock, where their counts were made.
"""

from __future__ import annotations

import itertools
import pickle
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tenacity_budget import AdaptiveThrottle, BackoffPolicy, BudgetExhausted, StopReason
from tenacity_budget.exhaustion import Throttled
from tenacity_budget.requests import BudgetAdapter
from tenacity_budget.testing import virtual_clock
from tests._servers import respond, serve
from tests._throttles import TOO_MANY, Counting, Ledger, fed, twin

POLICY = BackoffPolicy(base=1, cap=1, max_elapsed=10, jitter="none")
_EXAMPLES = itertools.count()


class Scripted:
    """An ASGI app: a request for ``/<key>/<s1>,<s2>,...`` gets the statuses in turn, then
    200; it counts the requests it received, by key."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        key, _, script = scope["path"].strip("/").partition("/")
        statuses = [int(s) for s in script.split(",") if s]
        with self.lock:
            n = self.seen[key]
            self.seen[key] += 1
        await respond(send, statuses[n] if n < len(statuses) else 200)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.fixture(scope="module")
def app() -> Scripted:
    return Scripted()


@pytest.fixture(scope="module")
def server(app: Scripted) -> Iterator[str]:
    with serve(app) as url:
        yield url


def session(adapter: BudgetAdapter) -> requests.Session:
    s = requests.Session()
    s.mount("http://", adapter)
    return s


def url_of(server: str, key: str, *statuses: int) -> str:
    return f"{server}/{key}/{','.join(map(str, statuses))}"


# -- construction ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [object(), 3, "items"])
def test_bad_throttles_are_refused_at_construction(bad: object) -> None:
    with pytest.raises(TypeError, match="throttle must be an adaptive throttle"):
        BudgetAdapter(POLICY, throttle=bad)


def test_a_host_callable_returning_no_throttle_is_refused_before_sending(
    app: Scripted, server: str
) -> None:
    with (
        virtual_clock(),
        session(BudgetAdapter(POLICY, throttle=lambda host: None)) as s,
        pytest.raises(TypeError, match="the throttle callable must return an AdaptiveThrottle"),
    ):
        s.get(url_of(server, "no-throttle"))
    assert app.seen["no-throttle"] == 0


def test_the_throttle_is_kept_as_given() -> None:
    throttle = AdaptiveThrottle()
    assert BudgetAdapter(POLICY, throttle=throttle).throttle is throttle
    assert BudgetAdapter(POLICY).throttle is None


# -- the first attempt -----------------------------------------------------------------------


def test_the_probability_rises_and_a_rejected_call_sends_nothing_and_deposits_nothing(
    app: Scripted, server: str
) -> None:
    throttle, budget = Counting(seed=1), Ledger(ratio=0.2, min_per_second=0.0, ttl=60.0)
    adapter = BudgetAdapter(POLICY, throttle=throttle, budget=budget)
    url = url_of(server, "overloaded", *[429] * 1000)  # every request answered 429
    outcomes: list[int | str] = []
    with virtual_clock(), session(adapter) as s:
        model = twin(seed=1)
        expected: list[int | str] = []
        for _ in range(60):
            try:  # a POST is sent once: its first attempt alone asks the throttle
                outcomes.append(s.post(url).status_code)
            except BudgetExhausted as exc:
                assert isinstance(exc, requests.ConnectionError)  # noqa: PT017
                outcomes.append("rejected")
            if model.admit():  # the same rule, the same draws: the same decisions
                model.record(TOO_MANY)
                expected.append(429)
            else:
                expected.append("rejected")
        # Read on the virtual clock, where the windows' counts were made.
        probability, balance = throttle.probability, budget.balance
    sent = outcomes.count(429)
    assert outcomes == expected
    assert outcomes[0] == 429  # no history: the first call is always sent
    assert 0 < sent < 60
    assert app.seen["overloaded"] == sent  # nothing sent for a rejected call
    assert throttle.decisions.count(True) == sent
    # Every call was asked (60 requests), none accepted: (60 - 2 * 0) / 61.
    assert probability == pytest.approx(60 / 61)
    # One deposit per call sent, none for a rejected one (nothing withdrawn: POSTs are not
    # retried), 0.2 each, whole withdrawals.
    assert (budget.deposits, budget.withdrawals) == (sent, 0)
    assert balance == sent // 5


def test_a_rejected_first_attempt_is_requests_own_connection_error(
    app: Scripted, server: str
) -> None:
    url = url_of(server, "rejected-first", 503)
    with virtual_clock() as clock:
        assert not twin(seed=1, overloads=10).admit()  # the seed's next draw rejects
        throttle = fed(Counting(seed=1), 10)
        budget = Ledger()
        with (
            session(BudgetAdapter(POLICY, throttle=throttle, budget=budget)) as s,
            pytest.raises(requests.ConnectionError) as caught,
        ):
            s.get(url)  # a GET, retried: the rejection still ends the call at once
        probability = throttle.probability
    error = caught.value
    assert isinstance(error, requests.RequestException)
    assert isinstance(error, BudgetExhausted)
    assert type(error).__name__ == "ConnectionError"
    report = error.report
    assert report.reason is StopReason.THROTTLED
    assert report.attempts == 0  # nothing was sent
    assert report.slept == 0.0
    assert report.budget == POLICY.max_elapsed
    assert report.affordable == POLICY.max_attempts()
    rejection = error.last_attempt.exception()
    assert isinstance(rejection, Throttled)
    assert report.last_exception is rejection
    assert isinstance(error.__cause__, Throttled)
    # Read as the transports and policy.retry read it: after the rejected request counted.
    assert (rejection.throttle, rejection.probability) == ("items", probability)
    assert probability == pytest.approx(11 / 12)
    assert "rejected locally (throttled)" in str(error)
    assert error.request is not None
    assert error.request.url == url
    assert app.seen["rejected-first"] == 0
    assert (budget.deposits, budget.withdrawals) == (0, 0)
    assert throttle.recorded[10:] == []  # nothing sent, nothing told
    assert clock.sleeps == []


def test_a_rejected_first_attempt_carries_the_ambient_deadline(server: str) -> None:
    from tenacity_budget import deadline_scope

    with virtual_clock():
        throttle = twin(seed=1, overloads=10)
        with (
            session(BudgetAdapter(POLICY, throttle=throttle)) as s,
            deadline_scope(5) as scope,
            pytest.raises(BudgetExhausted) as caught,
        ):
            s.get(url_of(server, "rejected-in-scope"))
        deadline = scope.deadline()  # read on the virtual clock, as the report was made
    assert deadline is not None
    assert caught.value.report.deadline == deadline


# -- retries ---------------------------------------------------------------------------------


def test_a_rejected_retry_returns_the_last_response(app: Scripted, server: str) -> None:
    url = url_of(server, "rejected-retry", 429, 429)
    with virtual_clock() as clock:
        model = twin(seed=1)
        assert model.admit()  # the first attempt: no history, admitted without a draw
        model.record(TOO_MANY)
        assert not model.admit()  # the retry: rejected with probability 1/2
        throttle, budget = Counting(seed=1), Ledger()
        with session(BudgetAdapter(POLICY, throttle=throttle, budget=budget)) as s:
            response = s.get(url)
        probability = throttle.probability
    assert response.status_code == 429  # the last response, as for any spent budget
    assert app.seen["rejected-retry"] == 1
    assert throttle.decisions == [True, False]
    assert [r.status_code for r in throttle.recorded] == [429]  # type: ignore[attr-defined]
    assert throttle.recorded[0] is response  # the replayed first attempt, told once
    # The retry was rejected before the retry budget was asked, and before any sleep.
    assert (budget.deposits, budget.withdrawals) == (1, 0)
    assert clock.sleeps == []
    assert probability == pytest.approx(2 / 3)


def test_a_rejected_retry_after_a_connection_error_raises_requests_own_error() -> None:
    url = f"http://127.0.0.1:{closed_port()}/"
    with virtual_clock() as clock:
        model = twin(seed=1, overloads=3)
        assert model.admit()  # p = 3/4, the seed's draw admits the first attempt
        model.record(requests.ConnectionError())  # not an overload signal: an accept
        assert not model.admit()  # p = (4 - 2) / 5, the next draw rejects the retry
        throttle, budget = fed(Counting(seed=1), 3), Ledger()
        with (
            session(BudgetAdapter(POLICY, throttle=throttle, budget=budget)) as s,
            pytest.raises(requests.ConnectionError) as caught,
        ):
            s.get(url)
    error = caught.value
    assert isinstance(error, BudgetExhausted)
    assert error.report.reason is StopReason.THROTTLED
    assert error.report.attempts == 1
    assert isinstance(error.__cause__, requests.ConnectionError)
    assert not isinstance(error.__cause__, BudgetExhausted)
    assert error.last_attempt.exception() is error.__cause__
    assert throttle.decisions[3:] == [True, False]
    [told] = throttle.recorded[3:]
    assert told is error.__cause__  # the first attempt's error, told once
    assert (budget.deposits, budget.withdrawals) == (1, 0)
    assert clock.sleeps == []


def test_each_attempt_is_asked_and_recorded_once(app: Scripted, server: str) -> None:
    # A throttle whose predicate sees no overload never rejects: every retry is sent.
    throttle, budget = Counting(rejected=lambda outcome: False), Ledger()
    with (
        virtual_clock() as clock,
        session(BudgetAdapter(POLICY, throttle=throttle, budget=budget)) as s,
    ):
        retried = s.get(url_of(server, "asked-once", 503, 502))
        at_once = s.get(url_of(server, "asked-once-ok"))
        post = s.post(url_of(server, "asked-once-post", 503))
        with pytest.raises(requests.ConnectionError):
            s.get(f"http://127.0.0.1:{closed_port()}/")
    assert (retried.status_code, at_once.status_code, post.status_code) == (200, 200, 503)
    sent = 3 + 1 + 1 + (POLICY.max_attempts() + 1)
    assert throttle.decisions == [True] * sent
    told = [getattr(r, "status_code", type(r).__name__) for r in throttle.recorded]
    assert told == [503, 502, 200, 200, 503] + ["ConnectionError"] * (POLICY.max_attempts() + 1)
    assert throttle.recorded[2] is retried
    # Each request deposits once; each retry asked the retry budget after the throttle.
    assert budget.deposits == 4
    # (the run of the closed port ends on its count, before the throttle or the budget).
    assert budget.withdrawals == 2 + POLICY.max_attempts()
    assert len(clock.sleeps) == 2 + POLICY.max_attempts()


def test_one_throttle_per_host(app: Scripted, server: str) -> None:
    port = server.rsplit(":", 1)[1]
    hosts: list[str] = []
    with virtual_clock():
        assert not twin(seed=1, overloads=10).admit()
        overloaded = fed(Counting(seed=1), 10)  # its next draw rejects
        model = twin(seed=0)
        model.admit()
        model.record(SimpleNamespace(status_code=503))
        assert model.admit()  # after one 503, p = 1/2: the seed's draw admits the retry
        healthy = Counting(seed=0)
        throttles = {"127.0.0.1": overloaded, "localhost": healthy}

        def throttle_of(host: str) -> AdaptiveThrottle:
            hosts.append(host)
            return throttles[host]

        adapter = BudgetAdapter(POLICY, throttle=throttle_of)
        with session(adapter) as s:
            with pytest.raises(BudgetExhausted) as caught:
                s.get(url_of(server, "per-host-a"))
            response = s.get(f"http://localhost:{port}/per-host-b/503")
    assert caught.value.report.reason is StopReason.THROTTLED
    assert response.status_code == 200
    assert hosts == ["127.0.0.1", "localhost"]  # asked once per request
    assert app.seen["per-host-a"] == 0
    assert app.seen["per-host-b"] == 2
    assert overloaded.decisions[10:] == [False]
    assert overloaded.recorded[10:] == []
    # The other host's request and its retry asked (and told) that host's own throttle.
    assert healthy.decisions == [True, True]
    assert [r.status_code for r in healthy.recorded] == [503, 200]  # type: ignore[attr-defined]


# -- the invariants, for any seed and any script ---------------------------------------------


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    seed=st.integers(0, 2**32 - 1),
    scripts=st.lists(
        st.lists(st.sampled_from([200, 429, 503, 500]), max_size=6), min_size=1, max_size=6
    ),
    overloads=st.integers(0, 8),
)
def test_every_attempt_is_asked_once_sent_if_admitted_and_recorded_once(
    app: Scripted, server: str, seed: int, scripts: list[list[int]], overloads: int
) -> None:
    key = f"prop-{next(_EXAMPLES)}"  # not random: Hypothesis seeds it alike for every example
    rejected_first = 0
    with virtual_clock():
        throttle, budget = fed(Counting(seed=seed), overloads), Ledger()
        start = len(throttle.decisions)
        with session(BudgetAdapter(POLICY, throttle=throttle, budget=budget)) as s:
            for n, script in enumerate(scripts):
                try:
                    s.get(url_of(server, f"{key}-{n}", *script))
                except BudgetExhausted as exc:
                    assert exc.report.reason is StopReason.THROTTLED  # noqa: PT017
                    assert exc.report.attempts == 0  # noqa: PT017
                    rejected_first += 1
    decisions = throttle.decisions[start:]
    sent = sum(app.seen[f"{key}-{n}"] for n in range(len(scripts)))
    assert decisions.count(True) == sent  # an attempt is sent if and only if admitted
    assert len(throttle.recorded) - overloads == sent  # and each one sent is told once
    assert budget.deposits == len(scripts) - rejected_first  # a rejected call deposits nothing
    # The retry budget is asked only of a retry the throttle admitted (it grants them all).
    assert budget.withdrawals == sent - budget.deposits


# -- pickling ---------------------------------------------------------------------------------


def test_a_rejected_first_attempt_pickles_with_its_rejection(server: str) -> None:
    with virtual_clock():
        throttle = twin(seed=1, overloads=10)
        with (
            session(BudgetAdapter(POLICY, throttle=throttle)) as s,
            pytest.raises(BudgetExhausted) as caught,
        ):
            s.get(url_of(server, "pickled"))
    again = pickle.loads(pickle.dumps(caught.value))
    assert isinstance(again, requests.ConnectionError)
    assert again.report.reason is StopReason.THROTTLED
    assert isinstance(again.report.last_exception, Throttled)
    assert isinstance(again.last_attempt.exception(), Throttled)
    assert again.report.attempts == 0
