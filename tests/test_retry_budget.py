"""Tests for tenacity_budget.retry_budget: the in-process retry budget and its tenacity stop.

Time is the virtual clock's (``virtual_clock``): windows expire by moving it, never by
sleeping. The rule is checked exactly on the issue's figures, against a plain reference
model (every event kept, counted by its slice) with Hypothesis, and under 16 threads and
16 asyncio tasks with exact totals. What every budget promises, the Redis ones too, is
checked once in ``tests/test_budget_contract.py``.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import pickle
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import tenacity
from hypothesis import given, settings
from hypothesis import strategies as st
from tenacity import retry, retry_if_exception_type

import tenacity_budget
from tenacity_budget import BackoffPolicy, BudgetExhausted, StopReason
from tenacity_budget.retry_budget import (
    ALWAYS,
    NEVER,
    SLICES,
    Budget,
    BudgetHooks,
    BudgetTerms,
    CountRing,
    RetryBudget,
    async_stop_retry_budget,
    budget_terms,
    slicing,
    stop_retry_budget,
)
from tenacity_budget.testing import VirtualClock, virtual_clock

# Instant failures, 1-2-4 s waits: affords 5 retries within 30 s.
POLICY = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=30, jitter="none")


class Clock:
    """A hand-moved ``time.monotonic`` (cheaper than the virtual clock, for Hypothesis)."""

    def __init__(self, start: float = 1_000_000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@contextmanager
def hand_clock() -> Iterator[Clock]:
    clock = Clock()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "monotonic", clock.monotonic)
        yield clock


def deposits(budget: RetryBudget, n: int) -> None:
    for _ in range(n):
        budget.deposit()


def grants(budget: RetryBudget, attempts: int) -> int:
    return sum(budget.try_withdraw() for _ in range(attempts))


# -- the interface -------------------------------------------------------------------------


def test_defaults_and_signature_are_the_issues() -> None:
    params = inspect.signature(RetryBudget).parameters
    assert [(p.name, p.default) for p in list(params.values())[:3]] == [
        ("ratio", 0.2),
        ("min_per_second", 10.0),
        ("ttl", 10.0),
    ]
    assert all(p.kind is p.KEYWORD_ONLY for p in list(params.values())[3:])
    budget = RetryBudget()
    assert (budget.ratio, budget.min_per_second, budget.ttl) == (0.2, 10.0, 10.0)
    assert budget.name == "default"
    assert budget.is_async is False
    assert tenacity_budget.RetryBudget is RetryBudget
    assert isinstance(budget.stop(), tenacity.stop.stop_base)
    assert repr(budget) == "RetryBudget(ratio=0.2, min_per_second=10, ttl=10, name='default')"


def test_importing_the_package_does_not_import_redis() -> None:
    import subprocess
    import sys

    code = "import sys, tenacity_budget; print('redis' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- the issue's exact figures -------------------------------------------------------------


def test_defaults_grant_the_floor_plus_a_fifth_of_the_calls(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget()
    deposits(budget, 1000)
    assert grants(budget, 1000) == 100 + 200


@settings(max_examples=300, deadline=None)
@given(
    ratio=st.decimals(min_value=0, max_value=3, places=3),
    floor=st.decimals(min_value=0, max_value=50, places=2),
    ttl=st.sampled_from(["0.3", "1", "2.5", "10", "60"]),
    calls=st.integers(0, 400),
)
def test_counts_are_exact_for_decimal_parameters(
    ratio: Decimal, floor: Decimal, ttl: str, calls: int
) -> None:
    # The parameters as a user writes them (floats), the expectation in exact decimals:
    # float rounding would, e.g., make 0.29 * 100 = 28.999999999999996 retries.
    budget = RetryBudget(ratio=float(ratio), min_per_second=float(floor), ttl=float(ttl))
    expected = math.floor(ratio * calls + floor * Decimal(ttl))
    with hand_clock():
        deposits(budget, calls)
        assert budget.balance == expected
        assert grants(budget, expected + 3) == expected


def test_exact_parameter_types_are_accepted() -> None:
    assert RetryBudget(Fraction(1, 3), Decimal("0.5"), 4).terms.ratio == Fraction(1, 3)
    budget = RetryBudget(ratio=Fraction(1, 3), min_per_second=0)
    with virtual_clock():
        deposits(budget, 10)
        assert budget.balance == 3


# -- validation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"ratio": -0.1}, ValueError, "ratio must be >= 0"),
        ({"min_per_second": -1}, ValueError, "min_per_second must be >= 0"),
        # Issue 15: a negative ttl says what it must be, as a zero one does.
        ({"ttl": -10}, ValueError, "ttl must be > 0"),
        ({"ttl": -1}, ValueError, "ttl must be > 0"),
        ({"ttl": -0.5}, ValueError, "ttl must be > 0"),
        ({"ttl": Decimal("-1")}, ValueError, "ttl must be > 0"),
        ({"ttl": Fraction(-1, 3)}, ValueError, "ttl must be > 0"),
        ({"ttl": 0}, ValueError, "ttl must be > 0"),
        ({"ttl": 0.0}, ValueError, "ttl must be > 0"),
        ({"ttl": Decimal("0E-999999")}, ValueError, "ttl must be > 0"),
        ({"ratio": math.nan}, ValueError, "ratio must be finite"),
        ({"ratio": math.inf}, ValueError, "ratio must be finite"),
        ({"min_per_second": math.inf}, ValueError, "min_per_second must be finite"),
        ({"ttl": math.inf}, ValueError, "ttl must be finite"),
        ({"ttl": Decimal("NaN")}, ValueError, "ttl must be finite"),
        ({"ratio": True}, TypeError, "ratio must be a number, got bool"),
        ({"ttl": "10"}, TypeError, "ttl must be a number, got str"),
        ({"min_per_second": None}, TypeError, "min_per_second must be a number"),
        ({"name": ""}, ValueError, "name must not be empty"),
        ({"name": 3}, TypeError, "name must be a str"),
        ({"observers": [object()]}, TypeError, "observers must be BudgetObservers"),
    ],
)
def test_bad_parameters_are_refused_at_construction(
    kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        RetryBudget(**kwargs)


TOO_LARGE = "too large or too finely divided to count exactly"
EXTREME_EXACT: list[object] = [
    Decimal("1e999999"),
    Decimal("1e-999999"),
    Decimal("1e999999999999999999"),
    Decimal("1e-999999999999999999"),
    Decimal("18446744073709551617"),  # 2**64 + 1
    Decimal("1e-65"),
    Decimal("0." + "3" * 90),
    2**64 + 1,
    10**100_000,
    Fraction(1, 2**64 + 1),
    Fraction(2**64 + 1, 3),
    Fraction(3, 10**100_000),
]


@pytest.mark.parametrize("name", ["ratio", "min_per_second", "ttl"])
@pytest.mark.parametrize("value", EXTREME_EXACT, ids=lambda v: f"{type(v).__name__}-{hash(v)}")
def test_exact_parameters_beyond_two_to_the_64_are_refused_naming_them(
    name: str, value: object
) -> None:
    with pytest.raises(ValueError, match=TOO_LARGE) as caught:
        RetryBudget(**{name: value})  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith(f"{name} is {TOO_LARGE}")
    assert "2**64" in message
    assert len(message) < 300  # the value is shown in a few words, however large


@pytest.mark.parametrize(
    "value",
    [
        2**64,
        Fraction(1, 2**64),
        Fraction(2**64, 2**64 - 1),
        Decimal("18446744073709551616"),  # 2**64
        Decimal("5.421010862427522170037264004349708557128906250E-20"),  # 2**-64
        Decimal("1" + "0" * 100_000 + "e-100000"),  # 1, written with 100001 digits
        Decimal("0.5" + "0" * 1000),
    ],
    ids=repr,
)
def test_exact_parameters_up_to_two_to_the_64_count_exactly(value: object) -> None:
    exact = Fraction(value)  # type: ignore[arg-type]
    budget = RetryBudget(ratio=value, min_per_second=0, ttl=value)  # type: ignore[arg-type]
    assert budget.terms.ratio == exact
    assert budget.terms.ttl == exact


def test_the_extreme_parameters_are_refused_within_a_generous_bound() -> None:
    # The promise is "at once": never a long computation or a MemoryError (10**10**18 cannot
    # be built at all). A fresh process, ended at 60 s, bounds it whatever the machine's load.
    code = (
        "from decimal import Decimal\n"
        "from tenacity_budget import RetryBudget\n"
        "for name in ('ratio', 'min_per_second', 'ttl'):\n"
        "    for text in ('1e999999', '1e-999999', '1e999999999999999999', "
        "'1e-999999999999999999'):\n"
        "        try:\n"
        "            RetryBudget(**{name: Decimal(text)})\n"
        "        except ValueError as exc:\n"
        "            print(str(exc).split(':')[0])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"{name} is {TOO_LARGE}" for name in ("ratio", "min_per_second", "ttl") for _ in range(4)
    ]


def _any_parameter() -> st.SearchStrategy[object]:
    return st.one_of(
        st.decimals(allow_nan=True, allow_infinity=True),
        st.builds(
            lambda digits, exponent: Decimal(f"{digits}e{exponent}"),
            st.integers(min_value=-(10**30), max_value=10**30),
            st.integers(min_value=-(10**18) + 100, max_value=10**18 - 100),
        ),
        st.fractions(),
        st.builds(Fraction, st.integers(), st.integers(min_value=1)),
        st.integers(),
        st.integers(min_value=0, max_value=400).map(lambda e: 10**e),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.text(max_size=5),
        st.none(),
    )


@settings(max_examples=300, deadline=None)
@given(ratio=_any_parameter(), min_per_second=_any_parameter(), ttl=_any_parameter())
def test_any_parameters_construct_or_are_refused_with_a_type_or_value_error(
    ratio: object, min_per_second: object, ttl: object
) -> None:
    try:
        budget = RetryBudget(ratio, min_per_second, ttl)  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        message = str(exc)
        assert message.split(" ", 1)[0] in ("ratio", "min_per_second", "ttl"), message
        return
    # Constructed: every exact parameter was taken exactly, and its terms stayed small.
    terms = budget.terms
    for given_value, kept in zip(
        (ratio, min_per_second, ttl), (terms.ratio, terms.min_per_second, terms.ttl), strict=True
    ):
        if isinstance(given_value, int | Fraction | Decimal):
            assert kept == Fraction(given_value)
            assert kept.numerator <= 2**64
            assert kept.denominator <= 2**64
    assert terms.ttl > 0
    assert budget.balance >= 0


def test_huge_and_tiny_parameters_count_exactly(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=1e300, min_per_second=0, ttl=1e-9)
    budget.deposit()
    assert budget.balance == int(Fraction("1e300"))
    assert budget.try_withdraw() is True
    big = RetryBudget(ratio=0, min_per_second=1e200, ttl=1e100)
    assert big.balance == 10**300


# -- the window ----------------------------------------------------------------------------


def test_withdrawals_expire_too_so_the_floor_comes_back(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0, min_per_second=1, ttl=10)
    assert grants(budget, 20) == 10
    virtual_clock.advance(9.999)
    assert budget.try_withdraw() is False
    virtual_clock.advance(0.001)
    assert grants(budget, 20) == 10


@settings(max_examples=200, deadline=None)
@given(
    ttl=st.sampled_from([0.5, 1.0, 3.0, 10.0, 7.3]),
    offset=st.integers(0, 10**7),
    age=st.integers(0, 2 * 10**7),
)
def test_an_event_counts_for_between_nine_tenths_of_ttl_and_ttl(
    ttl: float, offset: int, age: int
) -> None:
    # age and offset in microseconds: the virtual clock's resolution.
    budget = RetryBudget(ratio=1, min_per_second=0, ttl=ttl)
    with hand_clock() as clock:
        clock.advance(offset / 1e6)
        budget.deposit()
        clock.advance(age / 1e6)
        counted = budget.balance == 1
    ttl_us = round(ttl * 1e6)
    if age >= ttl_us:
        assert not counted  # nothing older than ttl counts
    if age < ttl_us * (SLICES - 1) // SLICES:
        assert counted  # everything younger than 0.9 ttl does


class Model:
    """The rule, stated plainly: keep every event; count those in the 10 latest slices."""

    def __init__(self, ratio: Fraction, floor: Fraction, ttl: Fraction) -> None:
        self.ratio, self.floor, self.ttl = ratio, floor, ttl
        self.events: list[tuple[int, str]] = []  # (slice, kind)
        self.latest = -(10**30)

    def _slice(self, micros: int) -> int:
        return math.floor(Fraction(micros, 10**6) / (self.ttl / SLICES))

    def window(self, now: int) -> tuple[int, int]:
        self.latest = max(self.latest, self._slice(now))
        counted = [kind for s, kind in self.events if s > self.latest - SLICES]
        return counted.count("d"), counted.count("w")

    def affordable(self, now: int) -> int:
        d, w = self.window(now)
        return max(0, math.floor(self.floor * self.ttl + self.ratio * d - w))

    def deposit(self, now: int) -> None:
        self.events.append((self._slice(now), "d"))

    def try_withdraw(self, now: int) -> bool:
        if self.affordable(now) >= 1:
            self.events.append((self._slice(now), "w"))
            return True
        return False


operations = st.lists(
    st.one_of(
        st.tuples(st.just("deposit"), st.integers(1, 30)),
        st.tuples(st.just("withdraw"), st.integers(1, 30)),
        st.tuples(st.just("advance"), st.integers(0, 4_000_000)),  # microseconds
        st.tuples(st.just("balance"), st.just(0)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(
    ratio=st.sampled_from(["0", "0.1", "0.2", "0.25", "0.33", "1", "1.5"]),
    floor=st.sampled_from(["0", "0.3", "1", "2"]),
    ttl=st.sampled_from(["1", "2.5", "10"]),
    ops=operations,
)
def test_the_budget_matches_the_plain_model(
    ratio: str, floor: str, ttl: str, ops: list[tuple[str, int]]
) -> None:
    budget = RetryBudget(ratio=float(ratio), min_per_second=float(floor), ttl=float(ttl))
    model = Model(Fraction(ratio), Fraction(floor), Fraction(ttl))
    with hand_clock() as clock:
        now = round(clock.monotonic() * 1e6)
        for op, n in ops:
            if op == "advance":
                clock.advance(n / 1e6)
                now += n
            elif op == "deposit":
                for _ in range(n):
                    budget.deposit()
                    model.deposit(now)
            elif op == "withdraw":
                for _ in range(n):
                    assert budget.try_withdraw() == model.try_withdraw(now)
            assert budget.balance == model.affordable(now)


@settings(max_examples=200, deadline=None)
@given(ops=operations, refused=st.integers(1, 20))
def test_a_refusal_leaves_the_budget_untouched(ops: list[tuple[str, int]], refused: int) -> None:
    # Two budgets see the same operations; one is also asked, and refused, `refused` times
    # whenever it is empty. They must stay indistinguishable.
    plain = RetryBudget(ratio=0.2, min_per_second=0.5, ttl=5)
    asked = RetryBudget(ratio=0.2, min_per_second=0.5, ttl=5)
    with hand_clock() as clock:
        for op, n in ops:
            if op == "advance":
                clock.advance(n / 1e6)
            elif op == "deposit":
                for _ in range(n):
                    plain.deposit()
                    asked.deposit()
            elif op == "withdraw":
                for _ in range(n):
                    assert plain.try_withdraw() == asked.try_withdraw()
            if asked.balance == 0:
                assert not any(asked.try_withdraw() for _ in range(refused))
            assert plain.balance == asked.balance


def test_a_clock_read_earlier_than_before_counts_as_no_time() -> None:
    from freezegun import freeze_time

    budget = RetryBudget(ratio=0, min_per_second=1, ttl=10)
    with freeze_time("2024-03-01 12:00:00") as clock:
        assert grants(budget, 20) == 10
        clock.move_to("2024-03-01 11:00:00")  # an hour back: stands still
        assert budget.try_withdraw() is False
        clock.move_to("2024-03-01 11:00:09")
        assert budget.try_withdraw() is False
        clock.move_to("2024-03-01 11:00:10")
        assert grants(budget, 20) == 10


class _Instant(float):
    """A float of another type: a budget reading its clock as one never skips the roll."""


_DIRECTIONS = {True: math.inf, False: -math.inf}


@settings(max_examples=300, deadline=None)
@given(
    ttl=st.sampled_from([1.0, 2.5, 10.0, 7.3, 0.0003, 1e-9, 1e100]),
    start=st.sampled_from([0.0, 1_000_000.0, 123_456.789, 2.0**33, 3e9]),
    index=st.integers(-(10**6), 10**6),
)
def test_a_slice_span_holds_exactly_the_floats_of_its_slice(
    ttl: float, start: float, index: int
) -> None:
    terms = budget_terms(0.2, 1, ttl)
    index += terms.slice_of(start)
    span = terms.slice_span(index)
    assert span is not None
    first, end = span
    assert first <= end
    # Every float in [first, end) is in the slice (the interval's ends are checked, the
    # slice index never decreases), the float before it is in an earlier one, end in a
    # later one.
    if first < end:
        assert terms.slice_of(first) == index
        assert terms.slice_of(math.nextafter(end, -math.inf)) == index
    assert terms.slice_of(math.nextafter(first, -math.inf)) < index
    assert terms.slice_of(end) > index
    if ttl >= 1e-3:  # a slice of at least 100 us holds floats; a slice of 1e-10 s may not
        assert first < end


def test_a_slice_span_is_none_where_the_floats_end() -> None:
    terms = budget_terms(0.2, 1, 10)
    last = sys.float_info.max / 1e6  # the latest instant with a slice: t * 1e6 is finite
    while math.isinf(last * 1e6):
        last = math.nextafter(last, 0)
    assert terms.slice_span(terms.slice_of(last)) is None  # its slice ends past the floats
    assert terms.slice_span(terms.slice_of(1.79e302)) is not None
    with hand_clock() as clock:  # a budget at such an instant rolls on every call, as before
        budget = RetryBudget(ratio=0, min_per_second=1, ttl=10)
        clock.now = last
        assert grants(budget, 12) == 10
        assert budget.balance == 0


steps = st.lists(
    st.tuples(
        st.integers(-3, 12),  # slices from the current instant's (negative: the clock goes back)
        st.integers(-3, 3),  # floats from the slice's first (>= 0) or past its last (< 0)
        st.sampled_from(["deposit", "try_withdraw", "balance"]),
        st.integers(1, 4),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(
    ttl=st.sampled_from([1.0, 2.5, 10.0, 7.3, 0.0003]),
    start=st.sampled_from([0.0, 1_000_000.0, 123_456.789, 2.0**33]),
    steps=steps,
)
def test_the_roll_is_skipped_exactly_while_the_clock_stays_in_the_slice(
    ttl: float, start: float, steps: list[tuple[int, int, str, int]]
) -> None:
    # Two budgets see the same instants, at the edges of slices, forwards and backwards;
    # one reads them as a float subclass, so it brings its window to now on every call, as
    # before the hot path skipped that. They must decide alike.
    fast = RetryBudget(ratio=0.5, min_per_second=0.4, ttl=ttl)
    slow = RetryBudget(ratio=0.5, min_per_second=0.4, ttl=ttl)
    terms = fast.terms
    now = start
    skipped = 0
    with hand_clock() as clock:

        def both(op: str) -> tuple[object, object]:
            clock.now = now
            here = fast.balance if op == "balance" else getattr(fast, op)()
            clock.now = _Instant(now)
            there = slow.balance if op == "balance" else getattr(slow, op)()
            return here, there

        for slices, floats, op, n in steps:
            span = terms.slice_span(terms.slice_of(now) + slices)
            assert span is not None
            now = span[0] if floats >= 0 else span[1]
            for _ in range(abs(floats)):
                now = math.nextafter(now, _DIRECTIONS[floats >= 0])
            for _ in range(n):
                here, there = both(op)
                assert here == there
            assert both("balance")[0] == both("balance")[1]
            clock.now = now
            if fast._start <= now < fast._end:
                skipped += 1
    assert slow._start == math.inf  # the reference never skipped
    if steps:
        assert skipped  # and the budget under test did, after each step's first call


@settings(max_examples=300, deadline=None)
@given(
    window=st.sampled_from([1.0, 2.5, 10.0, 7.3, 0.0003, 120.0]),
    start=st.integers(0, 2**40),
    steps=st.lists(
        st.tuples(st.integers(0, 3_000_000), st.integers(0, 3), st.integers(0, 3)), max_size=60
    ),
)
def test_the_count_ring_keeps_exactly_the_counts_of_the_last_slices(
    window: float, start: int, steps: list[tuple[int, int, int]]
) -> None:
    # The ring a RetryBudget and an AdaptiveThrottle share, against a model: on a clock
    # that never goes back, the totals are the counts added in the last SLICES slices.
    ring = CountRing(slicing(window, "window"))
    micros = start
    a = b = 0
    added: list[tuple[int, int, int]] = []  # (slice, a, b)
    for step, da, db in steps:
        micros += step
        now = micros / 1_000_000
        index = ring.slicing.slice_of(now)
        a, b, begin, end = ring.roll(now, a, b)
        assert begin <= now < end  # the span the owner skips the roll in holds the instant
        a, b = a + da, b + db
        added.append((index, da, db))
        kept = [(x, y) for s, x, y in added if s > index - SLICES]
        assert (a, b) == (sum(x for x, _ in kept), sum(y for _, y in kept))


# -- concurrency ---------------------------------------------------------------------------


def test_16_threads_never_get_more_than_the_budget(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0.2, min_per_second=1, ttl=10)
    granted = [0] * 16
    start = threading.Barrier(16)

    def work(i: int) -> None:
        start.wait()
        for _ in range(200):
            budget.deposit()
            granted[i] += budget.try_withdraw() + budget.try_withdraw()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # 3,200 calls: 640 + 10 retries in all. Each grant was affordable when made, and what
    # was not granted is still there: granted + balance is exactly the total.
    assert sum(granted) <= 650
    assert sum(granted) + budget.balance == 650


def test_16_threads_share_the_floor_exactly(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0, min_per_second=10, ttl=10)
    granted = [0] * 16
    start = threading.Barrier(16)

    def work(i: int) -> None:
        start.wait()
        for _ in range(50):
            budget.deposit()
            granted[i] += budget.try_withdraw()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(granted) == 100


def test_16_threads_keep_exact_counts_while_the_clock_crosses_slices() -> None:
    # One deposit affords one retry, over an hour: each thread's retry follows its own
    # deposit, so every one is granted however the threads interleave, while one thread
    # moves the clock by 50 minutes, across 8 or 9 slices of 6 minutes (of the 10 counted).
    budget = RetryBudget(ratio=1, min_per_second=0, ttl=3600)
    granted = [0] * 16
    start = threading.Barrier(16)
    with hand_clock() as clock:
        first = clock.now
        budget.deposit()  # the window starts at the first instant

        def work(i: int) -> None:
            start.wait()
            for n in range(1, 1001):
                budget.deposit()
                granted[i] += budget.try_withdraw()
                if i == 0 and n % 50 == 0:
                    clock.advance(150)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert clock.now - first == 3000
        assert budget.terms.slice_of(clock.now) - budget.terms.slice_of(first) in (8, 9)
        assert sum(granted) == 16_000
        assert budget.balance == 1  # the first deposit's retry, never withdrawn
        clock.advance(3600)
        assert budget.balance == 0


async def test_16_tasks_never_get_more_than_the_budget(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0.2, min_per_second=1, ttl=10)

    async def work() -> int:
        got = 0
        for _ in range(200):
            budget.deposit()
            await asyncio.sleep(0)
            got += budget.try_withdraw()
            await asyncio.sleep(0)
            got += budget.try_withdraw()
        return got

    results = await asyncio.gather(*(work() for _ in range(16)))
    assert sum(results) + budget.balance == 650
    assert sum(results) <= 650


# -- the tenacity stop and before hook -------------------------------------------------------


def budgeted(budget: BudgetHooks, fails: int, policy: BackoffPolicy = POLICY) -> Any:
    """A function failing ``fails`` times, retried by plain tenacity with the budget."""
    calls = {"n": 0}

    @retry(
        wait=policy.wait(),
        stop=policy.stop() | budget.stop(),
        before=budget.before,
        retry=retry_if_exception_type(ConnectionError),
        retry_error_cls=BudgetExhausted,
    )
    def call() -> int:
        calls["n"] += 1
        if calls["n"] <= fails:
            raise ConnectionError("down")
        return calls["n"]

    call.calls = calls  # type: ignore[attr-defined]
    return call


def test_a_refused_retry_ends_the_run_at_once_with_reason_retry_budget(
    virtual_clock: VirtualClock,
) -> None:
    budget = RetryBudget(ratio=0.2, min_per_second=0, ttl=10)
    fn = budgeted(budget, fails=100)
    with pytest.raises(BudgetExhausted) as info:
        fn()
    assert info.value.report.reason is StopReason.RETRY_BUDGET
    assert info.value.report.reason.value == "retry_budget"
    assert info.value.report.attempts == 1
    assert virtual_clock.sleeps == []  # a refusal never sleeps
    assert fn.calls["n"] == 1


def test_retries_are_drawn_until_the_budget_refuses(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0, min_per_second=0.2, ttl=10)  # 2 retries in the window
    fn = budgeted(budget, fails=100)
    with pytest.raises(BudgetExhausted) as info:
        fn()
    assert info.value.report.reason is StopReason.RETRY_BUDGET
    assert info.value.report.attempts == 3
    assert virtual_clock.sleeps == [1.0, 2.0]


def test_the_budget_is_only_asked_when_the_policy_allows_the_retry(
    virtual_clock: VirtualClock,
) -> None:
    budget = RetryBudget(ratio=0, min_per_second=10, ttl=100)  # plenty
    fn = budgeted(budget, fails=100)
    with pytest.raises(BudgetExhausted) as info:
        fn()
    assert info.value.report.reason is StopReason.COUNT
    # 5 retries made: 5 withdrawals; the 6th retry was refused by the policy, not drawn.
    assert info.value.report.attempts == POLICY.max_attempts() + 1
    assert budget.balance == 1000 - POLICY.max_attempts()


def test_written_the_other_way_round_the_budget_pays_for_refused_retries(
    virtual_clock: VirtualClock,
) -> None:
    budget = RetryBudget(ratio=0, min_per_second=10, ttl=100)

    @retry(wait=POLICY.wait(), stop=budget.stop() | POLICY.stop(), before=budget.before)
    def down() -> None:
        raise ConnectionError("down")

    with pytest.raises(tenacity.RetryError):
        down()
    assert budget.balance == 1000 - POLICY.max_attempts() - 1


def test_before_deposits_once_per_run_never_per_retry(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=1, min_per_second=0, ttl=100)
    budget.deposit()  # one retry in hand
    fn = budgeted(budget, fails=2)
    assert fn() == 3
    # the run deposited 1 and withdrew 2: 1 + 1 - 2
    assert budget.balance == 0


def test_always_and_never_are_budgets_for_plain_tenacity_and_policy_retry(
    virtual_clock: VirtualClock,
) -> None:
    assert isinstance(ALWAYS, Budget)
    assert isinstance(NEVER, Budget)
    assert (ALWAYS.is_async, NEVER.is_async) == (False, False)
    assert (repr(ALWAYS), repr(NEVER)) == ("ALWAYS", "NEVER")
    assert (ALWAYS.balance, NEVER.balance) == (sys.maxsize, 0)
    assert pickle.loads(pickle.dumps(NEVER)) is NEVER
    never = budgeted(NEVER, fails=100)
    with pytest.raises(BudgetExhausted) as info:
        never()
    assert info.value.report.reason is StopReason.RETRY_BUDGET
    assert never.calls["n"] == 1
    assert budgeted(ALWAYS, fails=5)() == 6  # 5 retries: the policy's

    @POLICY.retry(budget=NEVER, retry=retry_if_exception_type(ConnectionError))
    def refused() -> None:
        raise ConnectionError("down")

    with pytest.raises(BudgetExhausted) as info:
        refused()
    assert info.value.report.reason is StopReason.RETRY_BUDGET
    assert info.value.report.attempts == 1

    @POLICY.retry(budget=ALWAYS, retry=retry_if_exception_type(ConnectionError))
    def granted() -> None:
        raise ConnectionError("down")

    with pytest.raises(BudgetExhausted) as info:
        granted()
    assert info.value.report.reason is StopReason.COUNT  # the policy ended it, not the budget


def test_one_budget_serves_several_functions(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0, min_per_second=0.3, ttl=10)  # 3 retries
    first, second = budgeted(budget, fails=100), budgeted(budget, fails=100)
    with pytest.raises(BudgetExhausted):
        first()
    with pytest.raises(BudgetExhausted) as info:
        second()
    assert first.calls["n"] == 4
    assert second.calls["n"] == 1
    assert info.value.report.reason is StopReason.RETRY_BUDGET


async def test_the_stop_works_in_async_retrying(virtual_clock: VirtualClock) -> None:
    budget = RetryBudget(ratio=0, min_per_second=0.1, ttl=10)  # 1 retry
    attempts = 0

    async def down() -> None:
        nonlocal attempts
        attempts += 1
        raise ConnectionError("down")

    retrying = tenacity.AsyncRetrying(
        wait=POLICY.wait(),
        stop=POLICY.stop() | budget.stop(),
        before=budget.before,
        retry_error_cls=BudgetExhausted,
    )
    with pytest.raises(BudgetExhausted) as info:
        await retrying(down)
    assert attempts == 2
    assert info.value.report.reason is StopReason.RETRY_BUDGET


def test_the_stop_alone_stops_when_refused_and_reports_other() -> None:
    # Without a policy stop there is no budgeted-run record to carry the reason.
    budget = RetryBudget(ratio=0, min_per_second=0, ttl=10)

    @retry(stop=budget.stop(), retry_error_cls=BudgetExhausted)
    def down() -> None:
        raise ConnectionError("down")

    with pytest.raises(BudgetExhausted) as info:
        down()
    assert info.value.report.attempts == 1
    assert isinstance(budget.stop(), stop_retry_budget)


class _AsyncBudget:
    name = "fake"

    def __init__(self, answer: bool) -> None:
        self.answer = answer

    async def try_withdraw(self) -> bool:
        return self.answer


async def test_the_async_stop_is_awaited_and_refuses_composition() -> None:
    stop = async_stop_retry_budget(_AsyncBudget(False))
    state = tenacity.RetryCallState(tenacity.AsyncRetrying(), fn=None, args=(), kwargs={})
    assert await stop(state) is True
    assert await async_stop_retry_budget(_AsyncBudget(True))(state) is False
    with pytest.raises(TypeError, match="cannot be composed"):
        stop | POLICY.stop()
    with pytest.raises(TypeError, match="cannot be composed"):
        stop & POLICY.stop()


# -- the terms -----------------------------------------------------------------------------


def test_terms_are_integers_in_one_unit() -> None:
    terms = budget_terms(0.2, 10.0, 10.0)
    assert (terms.deposit_units, terms.cost, terms.reserve_units) == (1, 5, 500)
    assert terms.affordable(100, 0) == 120
    assert terms.affordable(0, 101) == 0
    third = budget_terms(Fraction(1, 3), 0.5, 3)
    assert (third.deposit_units, third.cost, third.reserve_units) == (2, 6, 9)
    assert third.slice_of(0.9) == 3
    assert third.slice_of(0.899999) == 2
    assert timedelta(seconds=float(third.ttl)) == timedelta(seconds=3)


@settings(max_examples=300, deadline=None)
@given(
    ratio=st.sampled_from(["0", "0.1", "0.2", "0.25", "1", "1.5", "1e-6"]),
    floor=st.sampled_from(["0", "0.3", "1", "10", "0.07"]),
    ttl=st.sampled_from(["1", "2.5", "10", "7.3"]),
    deposits=st.integers(0, 10**6),
    withdrawals=st.integers(0, 10**6),
)
def test_grants_is_the_rule_and_affordable_counts_what_it_grants(
    ratio: str, floor: str, ttl: str, deposits: int, withdrawals: int
) -> None:
    terms = budget_terms(float(ratio), Decimal(floor), Fraction(ttl))
    rule = withdrawals <= Fraction(ratio) * deposits + Fraction(floor) * Fraction(ttl)
    assert terms.grants(deposits, withdrawals) is rule
    more = terms.affordable(deposits, withdrawals)
    assert more >= 0
    assert not terms.grants(deposits, withdrawals + more + 1)
    if more:
        assert terms.grants(deposits, withdrawals + more)


def test_grants_on_the_issues_figures() -> None:
    terms = budget_terms(0.2, 0, 10)
    assert [w for w in range(30) if terms.grants(100, w)] == list(range(21))
    floor = budget_terms(0, 10, 10)
    assert [w for w in range(110) if floor.grants(0, w)] == list(range(101))


def test_try_withdraw_decides_by_the_terms_rule_alone(
    monkeypatch: pytest.MonkeyPatch, virtual_clock: VirtualClock
) -> None:
    asked: list[tuple[int, int]] = []
    answers = iter([True, False, True, True])

    def rule(self: BudgetTerms, deposits: int, withdrawals: int) -> bool:
        asked.append((deposits, withdrawals))
        return next(answers)

    monkeypatch.setattr(BudgetTerms, "grants", rule)
    budget = RetryBudget(ratio=0, min_per_second=0)  # affords nothing by its own figures
    deposits(budget, 2)
    assert grants(budget, 3) == 2
    assert asked == [(2, 1), (2, 2), (2, 2)]
    virtual_clock.advance(10)  # the window empties: the rule is asked about the new counts
    assert budget.try_withdraw() is True
    assert asked[-1] == (0, 1)
