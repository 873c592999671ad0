"""Tests for tenacity_budget.throttle: the in-process adaptive throttle (issue 18).

Time is the virtual clock's (or a hand-moved ``time.monotonic`` for Hypothesis): windows
expire by moving it, never by sleeping. Draws come from seeded or scripted generators, so
every rejection is predictable. The rule is checked on exact figures, against a reference
model with Hypothesis, and under 16 threads and 1,000 asyncio tasks with exact totals.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tenacity_budget
from tenacity_budget import AdaptiveThrottle
from tenacity_budget.retry_budget import SLICES
from tenacity_budget.testing import virtual_clock
from tenacity_budget.throttle import default_rejected, probability_of


class Fixed(random.Random):
    """A generator whose every draw is ``value`` (and that counts its draws)."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value
        self.draws = 0

    def random(self) -> float:
        self.draws += 1
        return self.value


class Clock:
    """A hand-moved ``time.monotonic`` (cheaper than the virtual clock, for Hypothesis)."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now


@contextmanager
def hand_clock() -> Iterator[Clock]:
    clock = Clock()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "monotonic", clock.monotonic)
        yield clock


class Status:
    def __init__(self, **fields: object) -> None:
        self.__dict__.update(fields)


def fill(throttle: AdaptiveThrottle, requests: int, accepts: int) -> None:
    """Bring the window to ``requests`` requests and ``accepts`` accepts (admitting all)."""
    for i in range(requests):
        assert throttle.admit() or True
        throttle.record(Status(status_code=200 if i < accepts else 429))


def always_admitting(**kwargs: Any) -> AdaptiveThrottle:
    return AdaptiveThrottle(rng=Fixed(0.999999999), **kwargs)


# -- construction -------------------------------------------------------------------------------


def test_the_defaults_are_the_issues() -> None:
    throttle = AdaptiveThrottle()
    assert (throttle.k, throttle.window, throttle.name) == (2.0, 120.0, "default")
    assert throttle.observers == ()
    assert throttle.probability == 0.0
    assert tenacity_budget.AdaptiveThrottle is AdaptiveThrottle
    assert "AdaptiveThrottle" in tenacity_budget.__all__
    assert repr(throttle) == "AdaptiveThrottle(k=2.0, window=120.0, name='default')"


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"k": 1}, ValueError, "k"),
        ({"k": 0.5}, ValueError, "k"),
        ({"k": math.inf}, ValueError, "k"),
        ({"k": math.nan}, ValueError, "k"),
        ({"k": True}, TypeError, "k"),
        ({"k": "2"}, TypeError, "k"),
        ({"window": 0}, ValueError, "window"),
        ({"window": -1.0}, ValueError, "window"),
        ({"window": math.inf}, ValueError, "window"),
        ({"window": math.nan}, ValueError, "window"),
        ({"window": "60"}, TypeError, "window"),
        ({"window": False}, TypeError, "window"),
        ({"name": ""}, ValueError, "name"),
        ({"name": 3}, TypeError, "name"),
        ({"rejected": 429}, TypeError, "rejected"),
        ({"observers": 3}, TypeError, "observers"),
        ({"observers": "prometheus"}, TypeError, "observers"),
        ({"rng": 7}, TypeError, "rng"),
    ],
)
def test_bad_input_is_refused_at_construction(
    kwargs: dict[str, Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        AdaptiveThrottle(**kwargs)


def test_k_and_window_take_any_real_number() -> None:
    throttle = AdaptiveThrottle(Fraction(3, 2), 60)
    assert (throttle.k, throttle.window) == (1.5, 60.0)
    assert type(throttle.k) is float
    assert type(throttle.window) is float


# -- the overload signals -----------------------------------------------------------------------


@pytest.mark.parametrize("status", [429, 503])
def test_429_and_503_are_overload_signals(status: int) -> None:
    assert default_rejected(Status(status_code=status))  # httpx, requests
    assert default_rejected(Status(status=status))  # aiohttp
    assert default_rejected(Status(response=Status(status_code=status)))  # HTTPStatusError
    assert default_rejected(Status(response=Status(status=status)))


@pytest.mark.parametrize("status", [200, 201, 404, 500, 502, 504])
def test_other_statuses_are_accepts(status: int) -> None:
    assert not default_rejected(Status(status_code=status))
    assert not default_rejected(Status(response=Status(status_code=status)))


def test_errors_without_a_response_are_accepts() -> None:
    assert not default_rejected(None)
    assert not default_rejected("429")
    assert not default_rejected(ConnectionError("refused"))
    assert not default_rejected(TimeoutError())
    assert not default_rejected(Status(response=None))
    assert not default_rejected(Status(status_code="429", status=True))


def test_a_property_that_raises_is_no_signal() -> None:
    class Unset:
        @property
        def response(self) -> object:
            raise RuntimeError("no response set")

        @property
        def status_code(self) -> int:
            raise RuntimeError("not sent")

    assert not default_rejected(Unset())


def test_the_http_libraries_outcomes() -> None:
    httpx = pytest.importorskip("httpx")
    requests = pytest.importorskip("requests")
    aiohttp = pytest.importorskip("aiohttp")
    request = httpx.Request("GET", "http://127.0.0.1/")
    overloaded = httpx.Response(429, request=request)
    assert default_rejected(overloaded)
    assert default_rejected(httpx.HTTPStatusError("429", request=request, response=overloaded))
    assert not default_rejected(httpx.Response(404, request=request))
    assert not default_rejected(httpx.ConnectError("refused"))
    assert not default_rejected(httpx.ReadTimeout("slow", request=request))

    response = requests.Response()
    response.status_code = 503
    assert default_rejected(response)
    assert default_rejected(requests.HTTPError(response=response))
    assert not default_rejected(requests.ConnectionError("refused"))

    from multidict import CIMultiDict, CIMultiDictProxy
    from yarl import URL

    info = aiohttp.RequestInfo(URL("http://127.0.0.1/"), "GET", CIMultiDictProxy(CIMultiDict()))
    assert default_rejected(aiohttp.ClientResponseError(info, (), status=429))
    assert not default_rejected(aiohttp.ClientResponseError(info, (), status=500))
    assert not default_rejected(aiohttp.ClientConnectionError("refused"))


def test_a_custom_predicate_decides_what_is_rejected() -> None:
    throttle = AdaptiveThrottle(rejected=lambda outcome: outcome == "busy", rng=Fixed(0.99))
    assert throttle.rejected("busy")
    assert not throttle.rejected(Status(status_code=429))
    for _ in range(4):
        throttle.admit()
        throttle.record("busy")
    # 4 requests, 0 accepts: 4 / 5.
    assert throttle.probability == 0.8
    throttle.admit()
    throttle.record(Status(status_code=429))  # an accept under this predicate
    assert throttle.probability == probability_of(5, 1, 2.0) == 3 / 6


# -- the rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "accepts", "k", "expected"),
    [
        (0, 0, 2.0, 0.0),
        (10, 5, 2.0, 0.0),
        (10, 4, 2.0, 2 / 11),
        (10, 0, 2.0, 10 / 11),
        (100, 20, 1.5, 70 / 101),
        (1, 0, 2.0, 0.5),
    ],
)
def test_the_probability_for_given_counts(
    requests: int, accepts: int, k: float, expected: float
) -> None:
    throttle = always_admitting(k=k)
    with virtual_clock():
        fill(throttle, requests, accepts)
        assert throttle.probability == expected == probability_of(requests, accepts, k)


def test_it_rejects_exactly_when_the_draw_is_below_the_probability() -> None:
    with virtual_clock():
        below = AdaptiveThrottle(rng=Fixed(2 / 11 - 1e-9))
        at = AdaptiveThrottle(rng=Fixed(2 / 11))
        for throttle in (below, at):
            # Ten requests, four accepted, each admitted (the draws were above the probability).
            for i in range(10):
                throttle._random = Fixed(0.99).random  # type: ignore[attr-defined]
                throttle.admit()
                throttle.record(Status(status_code=200 if i < 4 else 503))
        below._random = Fixed(2 / 11 - 1e-9).random  # type: ignore[attr-defined]
        at._random = Fixed(2 / 11).random  # type: ignore[attr-defined]
        assert not below.admit()  # 2/11 computed from the counts before this attempt
        assert at.admit()
        # A rejected attempt counts as a request all the same.
        assert below.probability == at.probability == probability_of(11, 4, 2.0)


def test_no_draw_while_the_probability_is_zero() -> None:
    rng = Fixed(0.0)  # would reject anything with a positive probability
    throttle = AdaptiveThrottle(rng=rng)
    with virtual_clock():
        for _ in range(50):
            assert throttle.admit()
            throttle.record(Status(status_code=200))
    assert rng.draws == 0
    assert throttle.probability == 0.0


def test_a_seeded_generator_replays_the_same_decisions() -> None:
    def run(seed: int) -> list[bool]:
        throttle = AdaptiveThrottle(rng=random.Random(seed))
        decisions = []
        for _ in range(200):
            admitted = throttle.admit()
            decisions.append(admitted)
            if admitted:
                throttle.record(Status(status_code=429))
        return decisions

    with virtual_clock():
        first, again, other = run(7), run(7), run(8)
    assert first == again
    assert first != other
    assert not all(first)  # the backend rejected everything: some were rejected locally


def test_an_overloaded_backend_is_sent_about_k_times_what_it_accepts() -> None:
    # 100 attempts a second against a backend that accepts 10 a second (429 past that):
    # the rule keeps requests - k * accepts at about p * requests, so in the steady state
    # the throttle sends about k times the backend's capacity (the SRE book's figure).
    throttle = AdaptiveThrottle(k=2.0, window=10.0, rng=random.Random(1))
    sent = accepted = 0
    with virtual_clock() as clock:
        for second in range(60):
            served = 0
            for _ in range(100):
                if not throttle.admit():
                    continue
                ok = served < 10
                served += ok
                if second >= 30:
                    sent += 1
                    accepted += ok
                throttle.record(Status(status_code=200 if ok else 429))
                clock.advance(0.01)
    assert accepted == 30 * 10  # the backend stayed busy
    assert 1.8 < sent / accepted < 2.2


# -- the window ---------------------------------------------------------------------------------


def test_the_window_forgets_a_slice_exactly_at_its_boundary() -> None:
    # window=10: slices of exactly 1 s; an event at 0.5 s (slice 0) counts while the
    # current slice is 0..9, so until 10.0 (exclusive).
    throttle = always_admitting(window=10)
    with virtual_clock() as clock:
        clock.advance(0.5)
        fill(throttle, 4, 0)
        assert throttle.probability == 0.8
        clock.advance(9.499999)  # 9.999999
        assert throttle.probability == 0.8
        clock.advance(0.000001)  # 10.0: slice 10 begins, slice 0 leaves
        assert throttle.probability == 0.0


def test_slices_expire_one_by_one() -> None:
    throttle = always_admitting(window=10)
    with virtual_clock() as clock:
        fill(throttle, 3, 0)  # slice 0: 3 requests
        clock.advance(4)
        fill(throttle, 2, 2)  # slice 4: 2 requests, 2 accepts
        assert throttle.probability == probability_of(5, 2, 2.0)  # 1 / 6
        clock.advance(6)  # 10.0: slice 0 gone
        assert throttle.probability == probability_of(2, 2, 2.0) == 0.0
        fill(throttle, 5, 0)
        assert throttle.probability == probability_of(7, 2, 2.0)
        clock.advance(4)  # 14.0: slice 4 gone
        assert throttle.probability == probability_of(5, 0, 2.0)
        clock.advance(100)  # everything gone at once
        assert throttle.probability == 0.0


def test_an_accept_recorded_after_its_slice_counts_in_the_current_one() -> None:
    throttle = always_admitting(window=10)
    with virtual_clock() as clock:
        for _ in range(4):
            throttle.admit()
        clock.advance(9.5)  # the attempts took 9.5 s
        for _ in range(4):
            throttle.record(Status(status_code=200))
        assert throttle.probability == 0.0
        clock.advance(0.5)  # the requests leave, the accepts stay
        assert throttle.probability == 0.0
        fill(throttle, 10, 0)
        assert throttle.probability == probability_of(10, 4, 2.0)


def test_a_clock_that_goes_back_stands_still() -> None:
    throttle = always_admitting(window=10)
    with hand_clock() as clock:
        fill(throttle, 4, 0)
        clock.now -= 5.0
        fill(throttle, 1, 0)
        assert throttle.probability == probability_of(5, 0, 2.0)


class Model:
    """Every event kept with its slice; the counts are those of the last SLICES slices."""

    def __init__(self, window: float) -> None:
        self.width = Fraction(repr(window)) / SLICES
        self.events: list[tuple[int, str]] = []

    def slice_of(self, seconds: float) -> int:
        return math.floor(Fraction(round(seconds * 1_000_000), 1_000_000) / self.width)

    def counts(self, now: float) -> tuple[int, int]:
        current = self.slice_of(now)
        live = [kind for s, kind in self.events if s > current - SLICES]
        return live.count("request"), live.count("accept")


@settings(max_examples=150, deadline=None)
@given(
    window=st.sampled_from([1.0, 10.0, 120.0, 0.3]),
    k=st.floats(min_value=1.01, max_value=5.0),
    steps=st.lists(
        st.tuples(st.sampled_from(["admit", "accept", "reject", "wait"]), st.floats(0, 5)),
        max_size=80,
    ),
    seed=st.integers(0, 2**32),
)
def test_the_counts_follow_the_reference_model(
    window: float, k: float, steps: list[tuple[str, float]], seed: int
) -> None:
    throttle = AdaptiveThrottle(k, window, rng=random.Random(seed))
    model = Model(window)
    with hand_clock() as clock:
        for kind, amount in steps:
            now = clock.now
            if kind == "wait":
                clock.now += amount * window / 3
                continue
            if kind == "admit":
                requests, accepts = model.counts(now)
                p = throttle.probability
                assert p == probability_of(requests, accepts, k)
                throttle.admit()
                model.events.append((model.slice_of(now), "request"))
            else:
                throttle.record(Status(status_code=200 if kind == "accept" else 503))
                if kind == "accept":
                    model.events.append((model.slice_of(now), "accept"))
        requests, accepts = model.counts(clock.now)
        assert throttle.probability == probability_of(requests, accepts, k)


@settings(max_examples=300)
@given(
    requests=st.integers(0, 10**12),
    accepts=st.integers(0, 10**12),
    k=st.floats(min_value=1.0, max_value=1e6, exclude_min=True),
)
def test_the_probability_is_always_in_zero_to_one(requests: int, accepts: int, k: float) -> None:
    p = probability_of(requests, accepts, k)
    assert 0.0 <= p < 1.0
    exact = max(Fraction(0), (requests - Fraction(k) * accepts) / (requests + 1))
    assert math.isclose(p, float(exact), rel_tol=1e-12, abs_tol=1e-15)


@settings(max_examples=50, deadline=None)
@given(outcomes=st.lists(st.sampled_from([200, 404, 429, 503]), max_size=60), seed=st.integers())
def test_the_throttle_probability_is_always_in_zero_to_one(outcomes: list[int], seed: int) -> None:
    throttle = AdaptiveThrottle(k=1.01, rng=random.Random(seed))
    with hand_clock():
        for status in outcomes:
            if throttle.admit():
                throttle.record(Status(status_code=status))
            assert 0.0 <= throttle.probability < 1.0


# -- observers ----------------------------------------------------------------------------------


class Hooked:
    def __init__(self) -> None:
        self.seen: list[tuple[str, bool, float]] = []

    def on_throttle(self, name: str, admitted: bool, probability: float) -> None:
        self.seen.append((name, admitted, probability))


def test_observers_hear_every_admission() -> None:
    hooked, silent = Hooked(), object()  # an observer without the hook is skipped
    throttle = AdaptiveThrottle(name="api", observers=[hooked, silent], rng=Fixed(0.3))
    with virtual_clock():
        throttle.admit()
        throttle.record(Status(status_code=429))
        throttle.admit()
    assert hooked.seen == [("api", True, 0.0), ("api", False, 0.5)]
    assert throttle.observers == (hooked, silent)


# -- concurrency --------------------------------------------------------------------------------


def test_sixteen_threads_count_exactly() -> None:
    throttle = AdaptiveThrottle(rng=random.Random(3))
    admitted = [0] * 16
    start = threading.Barrier(16)

    def work(i: int) -> None:
        start.wait()
        for n in range(1000):
            if throttle.admit():
                admitted[i] += 1
                throttle.record(Status(status_code=200 if n % 3 else 429))

    with virtual_clock():
        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        sent = sum(admitted)
        accepts = sum(
            1 for i in range(16) for n in range(1000) if n % 3
        )  # an upper bound: only admitted attempts are recorded
        assert throttle._requests == 16_000  # type: ignore[attr-defined]
        assert throttle._accepts <= min(sent, accepts)  # type: ignore[attr-defined]
        assert throttle.probability == probability_of(
            16_000,
            throttle._accepts,  # type: ignore[attr-defined]
            2.0,
        )


def test_sixteen_threads_of_accepts_count_exactly() -> None:
    throttle = AdaptiveThrottle(rng=random.Random(3))

    def work() -> None:
        for _ in range(1000):
            throttle.record(Status(status_code=200))
            throttle.admit()

    with virtual_clock():
        threads = [threading.Thread(target=work) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # Every admission came after its own accept: never throttled.
        assert (throttle._requests, throttle._accepts) == (16_000, 16_000)  # type: ignore[attr-defined]
        throttle._random = Fixed(0.0).random  # type: ignore[attr-defined]
        for _ in range(16_001):  # up to 32,000 requests before it: p = 0, no draw
            assert throttle.admit()
        assert not throttle.admit()  # 32,001 requests against 16,000 accepts at k=2: 0 < p
        assert throttle.probability == probability_of(32_002, 16_000, 2.0)


async def _tasks(throttle: AdaptiveThrottle) -> list[bool]:
    async def one(i: int) -> bool:
        await asyncio.sleep(0)
        admitted = throttle.admit()
        await asyncio.sleep(0)
        if admitted:
            throttle.record(Status(status_code=429 if i % 2 else 200))
        return admitted

    return await asyncio.gather(*(one(i) for i in range(1000)))


def test_a_thousand_tasks_count_exactly() -> None:
    throttle = AdaptiveThrottle(rng=random.Random(5))
    with virtual_clock():
        results = asyncio.run(_tasks(throttle))
        accepted = sum(1 for i, ok in enumerate(results) if ok and not i % 2)
        assert throttle._requests == 1000  # type: ignore[attr-defined]
        assert throttle._accepts == accepted  # type: ignore[attr-defined]
        assert throttle.probability == probability_of(1000, accepted, 2.0)
