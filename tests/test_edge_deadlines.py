"""Issue 15, at the edges of the ambient deadline: ends of any size, scopes left in any order,
``remaining(default)`` checked, and a hard stop that starts no attempt after the run's end.

Time is the virtual clock throughout (nothing waits for real); the HTTP cases also run
against a real uvicorn server on a free loopback port with a real httpx client.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Generator, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from fractions import Fraction
from typing import Any

import httpx
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)
from tenacity import Retrying, stop_after_attempt

from tenacity_budget import (
    BackoffPolicy,
    BudgetExhausted,
    StopReason,
    deadline_scope,
    remaining,
)
from tenacity_budget.asgi import DeadlineMiddleware
from tenacity_budget.http import format_timeout_ms, parse_timeout_ms
from tenacity_budget.runtime import Horizon, ambient_deadline, current_horizon, remaining_until
from tenacity_budget.testing import VirtualClock, virtual_clock
from tests._servers import serve

START = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
# A 30 s budget: whatever stops a run inside a far scope is the budget, never the scope.
POLICY = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=30, jitter="none")
OWN_REASONS = {StopReason.COUNT, StopReason.SLEEP_BUDGET, StopReason.WALL_CLOCK}
UTC_MAX = datetime.max.replace(tzinfo=UTC)
UTC_MIN = datetime.min.replace(tzinfo=UTC)
FAR_SECONDS = [3e11, 1e17, 1e300, 10**300, 1.7e308, math.inf, 10**400]
FAR_IDS = ["3e11", "1e17", "1e300", "int 10**300", "1.7e308", "inf", "int 10**400"]
FAR_DEADLINES = [
    datetime(9999, 12, 31, tzinfo=UTC),
    UTC_MAX,
    datetime.max.replace(tzinfo=timezone(-timedelta(hours=23, minutes=59))),
    datetime.max.replace(tzinfo=timezone(timedelta(hours=23, minutes=59))),
]
# Fixed UTC offsets over their whole range (datetime.max in one of them is past UTC's).
OFFSETS = st.builds(
    timezone,
    st.timedeltas(
        min_value=-timedelta(hours=23, minutes=59), max_value=timedelta(hours=23, minutes=59)
    ),
)
AWARE = st.datetimes(timezones=OFFSETS)


def failing_run(seen: list[float | None] | None = None) -> Any:
    """A sync budgeted function of POLICY that always fails (recording remaining())."""

    @POLICY.retry()
    def fails() -> None:
        if seen is not None:
            seen.append(remaining())
        raise OSError("down")

    return fails


def reason_of(fn: Any) -> BudgetExhausted:
    with pytest.raises(BudgetExhausted) as caught:
        fn()
    return caught.value


# -- deadlines of any size -----------------------------------------------------------------


@pytest.mark.parametrize("seconds", FAR_SECONDS, ids=FAR_IDS)
def test_a_scope_of_any_size_never_crashes_a_run(
    virtual_clock: VirtualClock, seconds: float
) -> None:
    seen: list[float | None] = []
    with deadline_scope(seconds) as horizon:
        left = remaining()
        assert left is None or (math.isfinite(left) and 0 < left <= float(seconds))
        # Past anything a datetime can hold: no deadline to hand on, and no exception.
        assert ambient_deadline() is None
        assert horizon.deadline() is None
        exc = reason_of(failing_run(seen))
        # Hard-stopped and plain-tenacity runs inside it too.
        hard = reason_of(lambda: asyncio.run(_hard_failing()))
        plain = reason_of(
            lambda: Retrying(
                wait=POLICY.wait(), stop=POLICY.stop(), retry_error_cls=BudgetExhausted
            )(failing_run().__wrapped__)
        )
    for caught in (exc, hard, plain):
        assert caught.report.reason in OWN_REASONS  # the run's own budget ended it
        assert caught.report.deadline is None  # the far scope behaves as no deadline
    assert seen[0] == 30.0
    assert remaining() is None


@POLICY.retry(hard_deadline=True)
async def _hard_failing() -> None:
    raise OSError("down")


@pytest.mark.parametrize("deadline", FAR_DEADLINES, ids=str)
def test_a_far_deadline_never_crashes_a_run(
    virtual_clock: VirtualClock, deadline: datetime
) -> None:
    @POLICY.retry(deadline=deadline)
    def fails_with_deadline() -> None:
        raise OSError("down")

    far_policy = BackoffPolicy(
        base=1, factor=2, cap=8, max_elapsed=30, jitter="none", deadline=deadline
    )

    @far_policy.retry()
    def fails_under_far_policy() -> None:
        raise OSError("down")

    for scope in (lambda: deadline_scope(deadline=deadline), lambda: remaining_until(deadline)):
        with scope():
            left = remaining()
            assert left is not None
            assert math.isfinite(left)
            assert left > 0
            found = ambient_deadline()  # never raises
            # That instant, to a float timestamp's precision in year 9999 (some 30 us).
            assert found is None or abs((found - deadline).total_seconds()) < 1e-3
            assert reason_of(failing_run()).report.reason in OWN_REASONS
            assert reason_of(lambda: asyncio.run(_hard_failing())).report.reason in OWN_REASONS
    for fn in (fails_with_deadline, fails_under_far_policy):
        assert reason_of(fn).report.reason in OWN_REASONS
    assert remaining() is None


def test_the_ambient_deadline_contract(virtual_clock: VirtualClock) -> None:
    # A representable instant comes back as it is, even in year 9999 ...
    end = datetime(9999, 12, 31, tzinfo=UTC)
    with deadline_scope(deadline=end):
        assert ambient_deadline() == end
    # ... an end later than any datetime (the datetime.max sentinel, a huge scope) is None ...
    for scope in (deadline_scope(deadline=UTC_MAX), deadline_scope(3e11), deadline_scope(1e300)):
        with scope:
            assert ambient_deadline() is None
    # ... one before datetime.min is datetime.min, and long past.
    early = datetime.min.replace(tzinfo=timezone(timedelta(hours=23, minutes=59)))
    with deadline_scope(deadline=early):
        assert ambient_deadline() == UTC_MIN
        assert remaining() == 0.0
    assert Horizon(None, wall_end=-math.inf).deadline() == UTC_MIN
    assert Horizon(None, wall_end=1e300).deadline() is None


def test_a_run_with_a_huge_budget_is_an_enclosing_frame_that_never_crashes(
    virtual_clock: VirtualClock,
) -> None:
    huge = BackoffPolicy(base=1, cap=1, max_elapsed=1e300, jitter="none")
    seen: list[datetime | None] = []

    @huge.retry(stop=stop_after_attempt(2))  # bounded: a 1e300 s budget retries for ever
    def outer() -> str:
        seen.append(ambient_deadline())
        # A run nested in it resolves the outer's end as its deadline: none it can reach.
        assert reason_of(failing_run()).report.deadline is None
        return "ok"

    assert outer() == "ok"
    assert seen == [None]


@settings(max_examples=60, deadline=None)
@given(
    seconds=st.floats(min_value=0.0, allow_nan=False) | st.integers(min_value=0, max_value=10**400)
)
@example(seconds=3e11)
@example(seconds=1e300)
@example(seconds=2**1023)
def test_any_scope_length_gives_a_sane_time_left_and_run(seconds: float) -> None:
    with virtual_clock(START):
        with deadline_scope(seconds):
            left = remaining()
            found = ambient_deadline()
            horizon = current_horizon()
            assert horizon is not None
            assert horizon.deadline() == found
            exc = reason_of(failing_run())
        assert remaining() is None
    if left is None:
        assert seconds > 1e300  # only an end beyond any clock is no end
    else:
        assert math.isfinite(left)
        assert left == pytest.approx(float(seconds), rel=1e-9, abs=1e-6)
    if found is not None:
        assert (found - START).total_seconds() == pytest.approx(float(seconds), abs=1e-3)
    if seconds >= 60:
        assert exc.report.reason in OWN_REASONS
    else:
        assert exc.report.reason in OWN_REASONS | {StopReason.DEADLINE}


@settings(max_examples=80, deadline=None)
@given(deadline=AWARE)
@example(deadline=UTC_MAX)
@example(deadline=datetime(9999, 12, 31, tzinfo=UTC))
@example(deadline=datetime.max.replace(tzinfo=timezone(-timedelta(hours=23, minutes=59))))
@example(deadline=datetime.min.replace(tzinfo=timezone(timedelta(hours=23, minutes=59))))
@example(deadline=START)
def test_any_aware_deadline_gives_a_sane_time_left_and_run(deadline: datetime) -> None:
    with virtual_clock(START):
        with remaining_until(deadline):
            until_left = remaining()
            until_found = ambient_deadline()
        with deadline_scope(deadline=deadline):
            left = remaining()
            found = ambient_deadline()
            sync = reason_of(failing_run())
            hard = reason_of(lambda: asyncio.run(_hard_failing()))
        own = reason_of(POLICY.retry(deadline=deadline)(failing_run().__wrapped__))
    assert (until_left, until_found) == (left, found)
    distance = deadline.timestamp() - START.timestamp()
    assert left is not None
    assert math.isfinite(left)
    assert left == pytest.approx(max(0.0, distance), abs=1e-3)
    if found is None:
        assert deadline.timestamp() >= UTC_MAX.timestamp()  # later than any datetime
    elif deadline < UTC_MIN:
        assert found == UTC_MIN
    else:
        assert abs((found - deadline).total_seconds()) < 1e-3
    for caught in (sync, hard, own):
        if distance > 60:
            assert caught.report.reason in OWN_REASONS
        elif distance <= 0:
            assert caught.report.reason is StopReason.DEADLINE
    if distance <= 0:
        assert sync.report.attempts == 1  # a sync run's first attempt always runs
        assert hard.report.attempts == (1 if distance == 0 else 0)  # none once it is past


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0.0, allow_nan=False, allow_infinity=False))
@example(1.7976931348623157e308)
@example(1e300)
@example(2.0**43 + 0.5)
def test_the_deadline_header_of_any_finite_time_round_trips_down(seconds: float) -> None:
    text = format_timeout_ms(seconds)
    assert text.isdigit()
    ms = int(text)
    assert ms / 1000 <= seconds  # rounded down ...
    assert (ms + 1) / 1000 > seconds or seconds >= 2**43  # ... by less than a millisecond
    if seconds >= 2**43:
        assert ms == math.floor(Fraction(seconds) * 1000)  # exact, however large
    received = parse_timeout_ms(text)
    assert received is not None
    assert received <= seconds  # never more time than the caller had
    assert received >= seconds - 0.0011 or seconds > 2**43  # whole ms lost, no more


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10**500))
@example(99999999999999999999)
def test_any_whole_ms_header_parses_to_a_sane_time(ms: int) -> None:
    received = parse_timeout_ms(str(ms))
    assert received is not None
    assert received >= 0.0
    if received != math.inf:
        assert received <= ms / 1000 * (1 + 1e-15)


# -- the caller's header, behind DeadlineMiddleware on a real server -----------------------


@dataclass
class Budgeted:
    """An ASGI app whose handler makes budgeted runs: one plain, one hard-stopped."""

    seen: list[tuple[float | None, float | None, str | None]] = field(default_factory=list)
    reasons: list[StopReason] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        attempts: list[float | None] = []

        @POLICY.retry()
        async def flaky() -> float | None:
            attempts.append(remaining())
            if len(attempts) < 2:
                raise OSError("blip")
            return remaining()

        @POLICY.retry(hard_deadline=True)
        async def hard() -> float | None:
            return remaining()

        entry = remaining()
        deadline = ambient_deadline()
        for run in (flaky, hard):
            try:
                await run()
            except BudgetExhausted as exc:  # a short caller deadline (a few ms) may end it
                self.reasons.append(exc.report.reason)
        self.seen.append((entry, attempts[0], None if deadline is None else deadline.isoformat()))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


@pytest.mark.parametrize(
    "value", ["99999999999999999999", "300000000000000", "9" * 308, "9" * 400, "0" * 5000 + "1"]
)
def test_a_huge_caller_deadline_is_served_by_a_budgeted_handler_not_a_500(value: str) -> None:
    app = Budgeted()
    with serve(DeadlineMiddleware(app)) as url:
        response = httpx.get(url, headers={"X-Request-Timeout-Ms": value}, timeout=10.0)
    assert response.status_code == 200
    [(entry, first_attempt, deadline)] = app.seen
    assert entry is None or math.isfinite(entry)
    assert first_attempt is not None
    assert first_attempt <= 30.0
    if len(value.lstrip("0")) >= 15:
        assert deadline is None  # past any datetime: no deadline to hand on
        assert app.reasons == []  # and the runs had all of their own budget


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=10**400))
@example(99999999999999999999)
def test_any_whole_ms_header_reaches_a_budgeted_handler(ms: int) -> None:
    app = Budgeted()
    headers = [(b"x-request-timeout-ms", str(ms).encode())]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    with virtual_clock(START):
        asyncio.run(DeadlineMiddleware(app)({"type": "http", "headers": headers}, receive, send))
    assert sent[0]["status"] == 200
    [(entry, first_attempt, _)] = app.seen
    assert entry is None or math.isfinite(entry)
    sent_left = parse_timeout_ms(str(ms))
    assert sent_left is not None
    assert first_attempt is not None
    assert first_attempt <= min(30.0, sent_left)
    if ms > 60_000:
        assert app.reasons == []  # nothing but their own budget could end the runs


# -- remaining(default) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("default", "error"),
    [
        ("x", TypeError),
        (b"1", TypeError),
        (True, TypeError),
        (False, TypeError),
        ([1.0], TypeError),
        (math.nan, ValueError),
        (-1, ValueError),
        (-0.5, ValueError),
        (math.inf, ValueError),
        (-math.inf, ValueError),
    ],
)
def test_a_bad_default_is_refused_inside_and_outside_a_scope(
    virtual_clock: VirtualClock, default: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match="default"):
        remaining(default)
    with deadline_scope(5), pytest.raises(error, match="default"):
        remaining(default)


@given(st.floats(min_value=0.0, allow_infinity=False, allow_nan=False) | st.integers(min_value=0))
def test_a_good_default_is_returned_unchanged_outside(default: float) -> None:
    assert remaining(default) is default
    assert remaining(None) is None


# -- scopes left in any order --------------------------------------------------------------


def test_scopes_exited_out_of_order_leave_no_stale_deadline(virtual_clock: VirtualClock) -> None:
    a, b = deadline_scope(5), deadline_scope(10)
    a.__enter__()
    b.__enter__()
    assert remaining() == 5.0  # b's end was fixed at enter: the earlier of a's and its own
    a.__exit__(None, None, None)
    assert remaining() == 5.0  # b is still open and keeps the end it had
    b.__exit__(None, None, None)
    assert remaining() is None
    assert ambient_deadline() is None
    # A later run outside any scope keeps its own budget.
    seen: list[float | None] = []
    exc = reason_of(failing_run(seen))
    assert exc.report.reason in OWN_REASONS
    assert seen[0] == 30.0


def test_three_scopes_left_in_every_order(virtual_clock: VirtualClock) -> None:
    import itertools

    for order in itertools.permutations(range(3)):
        scopes = [deadline_scope(s) for s in (30, 20, 10)]
        for scope in scopes:
            scope.__enter__()
        assert remaining() == 10.0
        for i in order:
            scopes[i].__exit__(None, None, None)
        assert remaining() is None, order


def test_a_scope_held_by_a_generator_across_its_yields(virtual_clock: VirtualClock) -> None:
    def held() -> Generator[float | None]:
        with deadline_scope(5):
            yield remaining()
            yield remaining()

    gen = held()
    assert next(gen) == 5.0
    with deadline_scope(10):
        assert remaining() == 5.0  # entered inside the generator's scope
        assert next(gen) == 5.0
        with pytest.raises(StopIteration):
            next(gen)  # the generator's scope is left while the caller's is open
        assert remaining() == 5.0  # the caller's keeps the end it had at enter
    assert remaining() is None  # neither the caller's nor the generator's scope stays behind
    seen: list[float | None] = []
    assert reason_of(failing_run(seen)).report.reason in OWN_REASONS
    assert seen[0] == 30.0


def test_a_generator_scope_entered_in_a_caller_scope_and_closed_after_it(
    virtual_clock: VirtualClock,
) -> None:
    def held() -> Generator[float | None]:
        with deadline_scope(50):
            yield remaining()

    with deadline_scope(10):
        gen = held()
        assert next(gen) == 10.0
    # The caller's scope is left; the generator's, still open, keeps its end (10 s) ...
    assert remaining() == 10.0
    gen.close()
    # ... and once it is closed too, no deadline is left, not even the caller's.
    assert remaining() is None
    assert reason_of(failing_run()).report.reason in OWN_REASONS


def test_a_generator_scope_left_inside_a_run_does_not_survive_the_run(
    virtual_clock: VirtualClock,
) -> None:
    def held() -> Generator[None]:
        with deadline_scope(5):
            yield

    gen = held()
    next(gen)

    @POLICY.retry()
    def closes_it() -> float | None:
        gen.close()
        return remaining()

    assert closes_it() == 5.0  # the run's end was fixed at its start
    assert remaining() is None
    assert reason_of(failing_run()).report.reason in OWN_REASONS


async def test_a_scope_held_by_an_async_generator(virtual_clock: VirtualClock) -> None:
    async def held() -> AsyncGenerator[float | None]:
        async with deadline_scope(5):
            yield remaining()
            await asyncio.sleep(1)
            yield remaining()

    agen = held()
    assert await anext(agen) == 5.0
    async with deadline_scope(3):
        assert await anext(agen) == 2.0  # 1 s later; its own 5 s scope, not the caller's
        assert remaining() == 2.0  # the caller's scope: min(5, 3) fixed at enter, 1 s ago
        await agen.aclose()
        assert remaining() == 2.0
    assert remaining() is None

    @POLICY.retry(hard_deadline=True)
    async def fails() -> None:
        raise OSError("down")

    with pytest.raises(BudgetExhausted) as caught:
        await fails()
    assert caught.value.report.reason in OWN_REASONS


async def test_tasks_leaving_their_scopes_out_of_order_do_not_disturb_each_other(
    virtual_clock: VirtualClock,
) -> None:
    async def worker(seconds: float, out_of_order: bool) -> tuple[float | None, float | None]:
        a, b = deadline_scope(seconds), deadline_scope(seconds * 2)
        await a.__aenter__()
        await b.__aenter__()
        await asyncio.sleep(0)
        if out_of_order:
            await a.__aexit__(None, None, None)
            inside = remaining()
            await asyncio.sleep(0)
            await b.__aexit__(None, None, None)
        else:
            await b.__aexit__(None, None, None)
            inside = remaining()
            await asyncio.sleep(0)
            await a.__aexit__(None, None, None)
        return inside, remaining()

    results = await asyncio.gather(*(worker(s, s % 2 == 0) for s in (1, 2, 3, 4)))
    assert results == [(1.0, None), (2.0, None), (3.0, None), (4.0, None)]
    assert remaining() is None


async def test_exiting_a_scope_in_another_task_is_a_runtime_error(
    virtual_clock: VirtualClock,
) -> None:
    scope = deadline_scope(5)

    async def enter() -> None:
        scope.__enter__()

    await asyncio.create_task(enter())
    with pytest.raises(RuntimeError, match="task"):
        scope.__exit__(None, None, None)
    assert remaining() is None  # this task never had it


def test_exiting_a_scope_in_another_thread_is_a_runtime_error(virtual_clock: VirtualClock) -> None:
    scope = deadline_scope(5)
    scope.__enter__()
    errors: list[BaseException] = []

    def leave() -> None:
        try:
            scope.__exit__(None, None, None)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=leave)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert isinstance(errors[0], RuntimeError)
    assert "task (or thread) that entered it" in str(errors[0])
    assert remaining() is None  # exited, if wrongly: no deadline stays behind
    scope.__exit__(None, None, None)  # its own thread may still leave it
    assert remaining() is None


def test_a_scope_exited_twice_or_never_entered_says_so() -> None:
    with pytest.raises(RuntimeError, match="without being entered"):
        deadline_scope(5).__exit__(None, None, None)
    scope = deadline_scope(5)
    with scope:
        pass
    with pytest.raises(RuntimeError, match="already exited"):
        scope.__exit__(None, None, None)
    with pytest.raises(RuntimeError, match="entered once"):
        scope.__enter__()
    assert remaining() is None


class ScopesInAnyOrder(RuleBasedStateMachine):
    """Enter scopes, leave any open one, let time pass, run: the ambient deadline is always
    the end (fixed at its enter) of the most recently entered scope still open."""

    scopes = Bundle("scopes")

    def __init__(self) -> None:
        super().__init__()
        self.clock = virtual_clock(START)
        self.clock.__enter__()
        self.open: list[tuple[deadline_scope, float]] = []  # (scope, its end), entry order
        self.all: list[deadline_scope] = []

    def expected(self) -> float | None:
        return self.open[-1][1] - time.monotonic() if self.open else None

    @initialize()
    def nothing_ambient(self) -> None:
        assert remaining() is None

    @rule(target=scopes, seconds=st.integers(1, 100), absolute=st.booleans())
    def enter(self, seconds: int, absolute: bool) -> deadline_scope:
        if absolute:
            scope = deadline_scope(deadline=datetime.now(UTC) + timedelta(seconds=seconds))
        else:
            scope = deadline_scope(seconds)
        outer = self.expected()
        scope.__enter__()
        end = time.monotonic() + (seconds if outer is None else min(seconds, outer))
        self.open.append((scope, end))
        self.all.append(scope)
        return scope

    @rule(scope=consumes(scopes))
    def leave(self, scope: deadline_scope) -> None:
        scope.__exit__(None, None, None)
        self.open = [(s, end) for s, end in self.open if s is not scope]

    @rule(seconds=st.integers(0, 20))
    def advance(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule()
    def run(self) -> None:
        seen: list[float | None] = []
        expected = self.expected()
        exc = reason_of(failing_run(seen))
        if expected is None:
            assert seen[0] == 30.0
            assert exc.report.reason in OWN_REASONS  # never a scope already left
        else:
            assert seen[0] == pytest.approx(min(30.0, max(0.0, expected)), abs=1e-6)

    @invariant()
    def the_most_recent_open_scope_holds(self) -> None:
        expected = self.expected()
        left = remaining()
        if expected is None:
            assert left is None
            assert ambient_deadline() is None
        else:
            assert left == pytest.approx(max(0.0, expected), abs=1e-6)

    def teardown(self) -> None:
        try:
            for scope, _ in list(self.open):
                scope.__exit__(None, None, None)
            assert remaining() is None
        finally:
            self.clock.__exit__(None, None, None)


ScopesInAnyOrder.TestCase.settings = settings(
    max_examples=60, stateful_step_count=25, deadline=None
)
test_scopes_in_any_order = ScopesInAnyOrder.TestCase


# -- the hard stop starts no attempt after the run's end -----------------------------------


def test_no_attempt_starts_once_the_budget_end_has_passed(virtual_clock: VirtualClock) -> None:
    calls: list[float | None] = []

    # The hook runs after the stop admitted the retry: it makes the sleep overrun the end.
    @POLICY.retry(hard_deadline=True, before_sleep=lambda _: virtual_clock.advance(100))
    async def flaky() -> None:
        calls.append(remaining())  # the synchronous prefix of the attempt
        raise OSError("down")

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(flaky())
    report = caught.value.report
    assert calls == [30.0]  # the second attempt was never called
    assert report.reason is StopReason.WALL_CLOCK
    assert report.attempts == 1
    assert report.slept == 1.0
    assert isinstance(caught.value.__cause__, TimeoutError)


def test_no_attempt_starts_once_the_scope_end_has_passed(virtual_clock: VirtualClock) -> None:
    calls: list[float | None] = []
    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=300, jitter="none")

    @policy.retry(hard_deadline=True, before_sleep=lambda _: virtual_clock.advance(20))
    async def flaky() -> None:
        calls.append(remaining())
        raise OSError("down")

    async def main() -> None:
        async with deadline_scope(10):
            await flaky()

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(main())
    assert calls == [10.0]
    assert caught.value.report.reason is StopReason.DEADLINE
    assert caught.value.report.attempts == 1


def test_no_first_attempt_starts_in_a_scope_already_past(virtual_clock: VirtualClock) -> None:
    calls: list[float | None] = []

    @POLICY.retry(hard_deadline=True)
    async def fetch() -> str:
        calls.append(remaining())
        return "ok"

    async def main() -> str:
        async with deadline_scope(5):
            virtual_clock.advance(6)
            return await fetch()

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(main())
    assert calls == []
    assert caught.value.report.reason is StopReason.DEADLINE
    assert caught.value.report.attempts == 0


def test_an_attempt_admitted_at_exactly_the_budget_end_is_started(
    virtual_clock: VirtualClock,
) -> None:
    # Sleeps 1 + 2 fill the 3 s budget exactly: the third attempt starts with 0 s left.
    exact = BackoffPolicy(base=1, factor=2, cap=2, max_elapsed=3, jitter="none")
    calls: list[float | None] = []

    @exact.retry(hard_deadline=True)
    async def flaky() -> None:
        calls.append(remaining())
        raise OSError("down")

    with pytest.raises(BudgetExhausted) as caught:
        asyncio.run(flaky())
    assert calls == [3.0, 2.0, 0.0]
    assert virtual_clock.sleeps == [1.0, 2.0]
    assert caught.value.report.attempts == 3
    assert isinstance(caught.value.report.last_exception, OSError)


def test_an_attempt_admitted_at_exactly_the_scope_end_is_started(
    virtual_clock: VirtualClock,
) -> None:
    policy = BackoffPolicy(base=1, factor=2, cap=2, max_elapsed=300, jitter="none")
    calls: list[float | None] = []

    @policy.retry(hard_deadline=True)
    async def flaky() -> str:
        calls.append(remaining())
        if len(calls) < 3:
            raise OSError("down")
        return "ok"

    async def main() -> str:
        async with deadline_scope(deadline=virtual_clock.now() + timedelta(seconds=3)):
            return await flaky()

    assert asyncio.run(main()) == "ok"
    assert calls == [3.0, 2.0, 0.0]


async def test_a_task_started_in_a_scope_keeps_its_deadline_as_its_context_copy_has_it(
    virtual_clock: VirtualClock,
) -> None:
    # Behaviour as before issue 15: a task copies the context it starts in, scope included.
    go = asyncio.Event()
    seen: list[float | None] = []

    async def background() -> StopReason:
        seen.append(remaining())  # started inside the scope: it holds
        await go.wait()
        seen.append(remaining())  # the scope's code left it; the task's copy still has it
        with pytest.raises(BudgetExhausted) as caught:
            await _hard_failing()
        return caught.value.report.reason

    async with deadline_scope(5):
        task = asyncio.create_task(background())
        await asyncio.sleep(0)
    go.set()
    reason = await task
    assert seen == [5.0, 5.0]
    assert reason is StopReason.DEADLINE
    assert remaining() is None


async def test_an_async_generator_finalized_elsewhere_leaves_no_stale_deadline(
    virtual_clock: VirtualClock,
) -> None:
    # Left with break and never closed: the event loop finalizes the generator in a task of
    # its own, whose exit is refused (another task), yet the deadline must not stay behind.
    async def pages() -> AsyncIterator[int]:
        with deadline_scope(0.05):
            for page in range(10):
                yield page

    async for page in pages():
        if page == 1:
            break
    for _ in range(3):
        await asyncio.sleep(0)  # let the loop run its finalizer
    assert remaining() is None
    with pytest.raises(BudgetExhausted) as caught:
        await _hard_failing()
    assert caught.value.report.reason in OWN_REASONS


def test_a_generator_closed_by_another_thread_leaves_no_stale_deadline(
    virtual_clock: VirtualClock,
) -> None:
    def pages() -> Generator[int, None, None]:
        with deadline_scope(5):
            yield from range(10)

    gen = pages()
    assert next(gen) == 0
    assert remaining() == 5.0
    errors: list[BaseException] = []

    def close() -> None:
        try:
            gen.close()
        except RuntimeError as exc:
            errors.append(exc)

    thread = threading.Thread(target=close)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert "task (or thread) that entered it" in str(errors[0])
    assert remaining() is None


@settings(max_examples=60, deadline=None)
@given(
    base=st.floats(0.001, 2.0),
    factor=st.floats(1.01, 3.0),
    cap_ratio=st.floats(1.0, 50.0),
    delays=st.integers(1, 8),
    roomier=st.booleans(),
    in_scope=st.booleans(),
    started_at=st.floats(0.0, 1e5),
)
def test_every_attempt_the_stop_admits_on_an_exact_fill_is_started(
    base: float,
    factor: float,
    cap_ratio: float,
    delays: int,
    roomier: bool,
    in_scope: bool,
    started_at: float,
) -> None:
    cap = base * cap_ratio
    exact = math.fsum(min(cap, base * factor**k) for k in range(delays))
    assume(cap <= exact * (10 if roomier else 1))  # a policy refuses a cap over its budget
    # The budget, or an enclosing scope, filled exactly by the first delays.
    policy = BackoffPolicy(
        base=base, factor=factor, cap=cap, max_elapsed=exact * (10 if roomier else 1), jitter="none"
    )
    calls: list[float | None] = []

    @policy.retry(hard_deadline=True)
    async def flaky() -> None:
        calls.append(remaining())
        raise OSError("down")

    async def main() -> None:
        if in_scope:
            async with deadline_scope(exact):
                await flaky()
        else:
            await flaky()

    with virtual_clock(START) as clock:
        clock.advance(started_at)
        with pytest.raises(BudgetExhausted) as caught:
            asyncio.run(main())
    report = caught.value.report
    # The run ended on a decision of the stop, never on an attempt kept from starting.
    assert isinstance(report.last_exception, OSError)
    assert report.attempts == len(calls)
    assert len(calls) == len(clock.sleeps) + 1


@pytest.mark.parametrize(
    "default", [Decimal("1.5"), Fraction(1, 2), 10**400, Decimal("1e999999"), 0], ids=repr
)
def test_a_default_of_any_number_kind_is_returned_unchanged(default: object) -> None:
    # Numbers other than floats were handed back before issue 15: they still are.
    assert remaining(default) is default  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "default", [Decimal("NaN"), Decimal("sNaN"), Decimal("-1"), Decimal("Infinity")], ids=repr
)
def test_a_decimal_that_is_no_finite_number_is_refused(default: Decimal) -> None:
    with pytest.raises(ValueError, match="finite number >= 0"):
        remaining(default)  # type: ignore[arg-type]
