"""Tests for tenacity_budget.breaker: budgeted retries behind a real pybreaker breaker.

Time is frozen (freezegun patches the clocks both tenacity's budget and pybreaker's reset
timeout read); sleeps are recorded and advance the frozen clock.
"""

from __future__ import annotations

from typing import Any

import pybreaker
import pytest
import tenacity
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory
from hypothesis import given, settings
from hypothesis import strategies as st
from tenacity.stop import stop_base

from tenacity_budget import BackoffPolicy, BudgetExhausted, ExhaustionReport, RetryStats, StopReason
from tenacity_budget.breaker import guarded, stop_when_open
from tests._helpers import async_sleeper, sleeper

# Affords 5 retries (sleeps 1, 2, 4, 8, 8) when attempts are instant.
POLICY = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=30, jitter="none")
AFFORDABLE = POLICY.max_attempts()


def exhaust_behind(
    breaker: pybreaker.CircuitBreaker, frozen: FrozenDateTimeFactory, *, stop: bool = True
) -> tuple[BudgetExhausted, list[float]]:
    """Run a call that always fails behind ``breaker`` until :data:`POLICY` gives up.

    Returns the error and the sleeps. With ``stop``, ``stop_when_open(breaker)`` joins the
    budget's own stop.
    """
    sleeps: list[float] = []
    options: dict[str, Any] = {"stop": stop_when_open(breaker)} if stop else {}

    @POLICY.retry(sleep=sleeper(frozen, sleeps), **options)
    @guarded(breaker)
    def fetch() -> str:
        raise ConnectionError("down")

    with pytest.raises(BudgetExhausted) as info:
        fetch()
    return info.value, sleeps


def state_after(exc: BaseException | None) -> tenacity.RetryCallState:
    """A retry state whose last attempt raised ``exc`` (or returned, for ``None``)."""
    state = tenacity.RetryCallState(tenacity.Retrying(), fn=None, args=(), kwargs={})
    if exc is None:
        state.set_result("fine")
    else:
        state.set_exception((type(exc), exc, None))
    return state


# -- the stop strategy ---------------------------------------------------------------------


def test_stop_when_open_is_a_tenacity_stop() -> None:
    stop = stop_when_open(pybreaker.CircuitBreaker())
    assert isinstance(stop, stop_base)
    assert isinstance(stop | tenacity.stop_after_attempt(3), tenacity.stop.stop_any)


def test_stop_when_open_needs_a_breaker() -> None:
    with pytest.raises(TypeError, match=r"pybreaker\.CircuitBreaker"):
        stop_when_open(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"pybreaker\.CircuitBreaker"):
        guarded("breaker")  # type: ignore[arg-type]


def test_stop_follows_the_breaker_state(frozen: FrozenDateTimeFactory) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=10)
    stop = stop_when_open(breaker)
    failed = state_after(ConnectionError("down"))
    assert stop(failed) is False  # closed
    breaker.open()
    assert stop(failed) is True
    assert stop(state_after(None)) is True
    breaker.half_open()
    assert stop(failed) is False  # the trial call may be retried by the budget
    breaker.close()
    assert stop(failed) is False


def test_stop_never_retries_a_circuit_breaker_error() -> None:
    breaker = pybreaker.CircuitBreaker()  # closed, e.g. another instance closed it already
    refused = state_after(pybreaker.CircuitBreakerError("open"))
    assert stop_when_open(breaker)(refused) is True


def test_stop_reads_shared_storage() -> None:
    """Two breakers on one storage (as with Redis across processes) share the decision."""
    storage = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
    ours = pybreaker.CircuitBreaker(state_storage=storage)
    theirs = pybreaker.CircuitBreaker(state_storage=storage)
    stop = stop_when_open(ours)
    failed = state_after(OSError("x"))
    assert stop(failed) is False
    theirs.open()
    assert stop(failed) is True


# -- the recipe: policy.retry(stop=stop_when_open(b)) over guarded(b) ----------------------


def test_breaker_opening_mid_run_stops_at_once(frozen: FrozenDateTimeFactory) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=3, reset_timeout=60)
    sleeps: list[float] = []
    reports: list[ExhaustionReport] = []
    stats = RetryStats()
    calls = {"n": 0}

    @POLICY.retry(
        stop=stop_when_open(breaker),
        on_exhausted=reports.append,
        stats=stats,
        sleep=sleeper(frozen, sleeps),
    )
    @guarded(breaker)
    def fetch() -> str:
        calls["n"] += 1
        raise ConnectionError(f"down {calls['n']}")

    with pytest.raises(BudgetExhausted) as info:
        fetch()

    report = info.value.report
    assert calls["n"] == 3  # the third failure trips the breaker
    assert sleeps == [1.0, 2.0]  # and nothing is slept after it
    assert breaker.current_state == pybreaker.STATE_OPEN
    assert report.reason is StopReason.OTHER
    assert report.attempts == 3
    assert report.affordable == AFFORDABLE
    assert report.slept == 3.0
    assert isinstance(report.last_exception, pybreaker.CircuitBreakerError)
    assert info.value.__cause__ is report.last_exception
    assert reports == [report]
    assert (stats.retries, stats.exhausted) == (2, 1)


def test_open_breaker_refuses_the_next_call_without_calling(
    frozen: FrozenDateTimeFactory,
) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    sleeps: list[float] = []
    calls = {"n": 0}

    @POLICY.retry(stop=stop_when_open(breaker), sleep=sleeper(frozen, sleeps))
    @guarded(breaker)
    def fetch() -> str:
        calls["n"] += 1
        raise ConnectionError("down")

    with pytest.raises(BudgetExhausted):
        fetch()
    assert calls["n"] == 1

    frozen.tick(59)
    with pytest.raises(BudgetExhausted) as info:
        fetch()
    assert calls["n"] == 1  # refused by the breaker, never called
    assert sleeps == []
    assert info.value.report.attempts == 1
    assert info.value.report.reason is StopReason.OTHER
    assert isinstance(info.value.report.last_exception, pybreaker.CircuitBreakerError)


def test_after_the_reset_timeout_the_next_call_is_the_trial(
    frozen: FrozenDateTimeFactory,
) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=2, reset_timeout=30)
    sleeps: list[float] = []
    healthy = {"now": False}
    calls = {"n": 0}

    @POLICY.retry(stop=stop_when_open(breaker), sleep=sleeper(frozen, sleeps))
    @guarded(breaker)
    def fetch() -> str:
        calls["n"] += 1
        if not healthy["now"]:
            raise ConnectionError("down")
        return "ok"

    with pytest.raises(BudgetExhausted):
        fetch()
    assert breaker.current_state == pybreaker.STATE_OPEN
    assert calls["n"] == 2

    # The trial fails: the breaker opens again and the run ends after one attempt.
    frozen.tick(31)
    with pytest.raises(BudgetExhausted) as info:
        fetch()
    assert calls["n"] == 3
    assert info.value.report.attempts == 1
    assert breaker.current_state == pybreaker.STATE_OPEN

    # The trial succeeds: the breaker closes.
    frozen.tick(31)
    healthy["now"] = True
    assert fetch() == "ok"
    assert calls["n"] == 4
    assert breaker.current_state == pybreaker.STATE_CLOSED


def test_failures_below_fail_max_are_retried_and_success_resets(
    frozen: FrozenDateTimeFactory,
) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=3)
    sleeps: list[float] = []
    calls = {"n": 0}

    @POLICY.retry(stop=stop_when_open(breaker), sleep=sleeper(frozen, sleeps))
    @guarded(breaker)
    def fetch() -> int:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise ConnectionError("blip")
        return calls["n"]

    assert fetch() == 3
    assert sleeps == [1.0, 2.0]
    assert breaker.current_state == pybreaker.STATE_CLOSED
    assert breaker.fail_counter == 0


def test_budget_reasons_win_while_the_breaker_stays_closed(
    frozen: FrozenDateTimeFactory,
) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=100)
    error, sleeps = exhaust_behind(breaker, frozen)
    assert error.report.reason is StopReason.COUNT
    assert len(sleeps) == AFFORDABLE
    assert breaker.fail_counter == AFFORDABLE + 1


def test_without_the_stop_the_run_keeps_knocking(frozen: FrozenDateTimeFactory) -> None:
    """The control: with the breaker alone, the run sleeps towards refused attempts."""
    breaker = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=600)
    error, sleeps = exhaust_behind(breaker, frozen, stop=False)
    assert len(sleeps) == AFFORDABLE
    assert error.report.reason is StopReason.COUNT


def test_breaker_opened_elsewhere_stops_before_sleeping(frozen: FrozenDateTimeFactory) -> None:
    """An attempt fails normally while another caller trips the breaker: no sleep follows."""
    breaker = pybreaker.CircuitBreaker(fail_max=5)
    sleeps: list[float] = []

    @POLICY.retry(stop=stop_when_open(breaker), sleep=sleeper(frozen, sleeps))
    @guarded(breaker)
    def fetch() -> str:
        breaker.open()  # another thread's failure reaches fail_max meanwhile
        raise ConnectionError("down")

    with pytest.raises(BudgetExhausted) as info:
        fetch()
    assert sleeps == []
    assert info.value.report.reason is StopReason.OTHER
    assert isinstance(info.value.report.last_exception, ConnectionError)


def test_no_new_error_on_trip_still_stops(frozen: FrozenDateTimeFactory) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=2, throw_new_error_on_trip=False)
    error, sleeps = exhaust_behind(breaker, frozen)
    assert sleeps == [1.0]
    assert isinstance(error.report.last_exception, ConnectionError)
    assert error.report.reason is StopReason.OTHER


def test_reraise_gives_the_circuit_breaker_error(frozen: FrozenDateTimeFactory) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=2)
    sleeps: list[float] = []

    @POLICY.retry(stop=stop_when_open(breaker), reraise=True, sleep=sleeper(frozen, sleeps))
    @guarded(breaker)
    def fetch() -> str:
        raise ConnectionError("down")

    with pytest.raises(pybreaker.CircuitBreakerError):
        fetch()
    assert sleeps == [1.0]


def test_plain_tenacity_composition(frozen: FrozenDateTimeFactory) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=2)
    sleeps: list[float] = []

    @tenacity.retry(
        stop=POLICY.stop() | stop_when_open(breaker),
        wait=POLICY.wait(),
        retry_error_cls=BudgetExhausted,
        sleep=sleeper(frozen, sleeps),
    )
    def fetch() -> str:
        return breaker.call(fail)

    def fail() -> str:
        raise ConnectionError("down")

    with pytest.raises(BudgetExhausted) as info:
        fetch()
    assert sleeps == [1.0]
    assert info.value.report.reason is StopReason.OTHER
    assert info.value.report.affordable == AFFORDABLE


def test_guarded_keeps_the_function_identity() -> None:
    breaker = pybreaker.CircuitBreaker()

    @guarded(breaker)
    def fetch(x: int, *, y: int = 1) -> int:
        """Doc."""
        return x + y

    assert fetch(1, y=2) == 3
    assert fetch.__name__ == "fetch"
    assert fetch.__doc__ == "Doc."


@settings(max_examples=20, deadline=None)
@given(fail_max=st.integers(min_value=1, max_value=AFFORDABLE + 3))
def test_attempts_are_bounded_by_breaker_and_budget(fail_max: int) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=fail_max)
    sleeps: list[float] = []
    calls = {"n": 0}
    with freeze_time("2024-03-01", tick=False) as clock:
        assert isinstance(clock, FrozenDateTimeFactory)

        @POLICY.retry(stop=stop_when_open(breaker), sleep=sleeper(clock, sleeps))
        @guarded(breaker)
        def fetch() -> str:
            calls["n"] += 1
            raise ConnectionError("down")

        with pytest.raises(BudgetExhausted) as info:
            fetch()
    attempts = min(fail_max, AFFORDABLE + 1)
    assert calls["n"] == info.value.report.attempts == attempts
    assert sleeps == [1.0, 2.0, 4.0, 8.0, 8.0][: attempts - 1]
    # The budget stop is asked first: when both end the run, the count is the reason.
    expected = StopReason.OTHER if fail_max <= AFFORDABLE else StopReason.COUNT
    assert info.value.report.reason is expected
    assert (breaker.current_state == pybreaker.STATE_OPEN) == (fail_max <= AFFORDABLE + 1)


# -- async ---------------------------------------------------------------------------------


async def test_async_breaker_opening_mid_run_stops_at_once(
    frozen: FrozenDateTimeFactory,
) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=3, reset_timeout=60)
    sleeps: list[float] = []
    calls = {"n": 0}

    @POLICY.retry(stop=stop_when_open(breaker), sleep=async_sleeper(frozen, sleeps))
    @guarded(breaker)
    async def fetch() -> str:
        calls["n"] += 1
        raise ConnectionError("down")

    with pytest.raises(BudgetExhausted) as info:
        await fetch()
    assert calls["n"] == 3
    assert sleeps == [1.0, 2.0]
    assert breaker.current_state == pybreaker.STATE_OPEN
    assert info.value.report.reason is StopReason.OTHER
    assert isinstance(info.value.report.last_exception, pybreaker.CircuitBreakerError)

    with pytest.raises(BudgetExhausted) as again:
        await fetch()
    assert calls["n"] == 3  # refused while open
    assert again.value.report.attempts == 1


async def test_async_trial_after_reset_timeout_closes(frozen: FrozenDateTimeFactory) -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=5)
    sleeps: list[float] = []
    healthy = {"now": False}

    @POLICY.retry(stop=stop_when_open(breaker), sleep=async_sleeper(frozen, sleeps))
    @guarded(breaker)
    async def fetch() -> str:
        if not healthy["now"]:
            raise ConnectionError("down")
        return "ok"

    with pytest.raises(BudgetExhausted):
        await fetch()
    assert breaker.current_state == pybreaker.STATE_OPEN
    frozen.tick(6)
    healthy["now"] = True
    assert await fetch() == "ok"
    assert breaker.current_state == pybreaker.STATE_CLOSED
    assert sleeps == []


async def test_async_guard_counts_successes_and_failures() -> None:
    breaker = pybreaker.CircuitBreaker(fail_max=3)
    outcomes = iter([ConnectionError("a"), ConnectionError("b"), None])

    @guarded(breaker)
    async def fetch() -> str:
        exc = next(outcomes)
        if exc is not None:
            raise exc
        return "ok"

    with pytest.raises(ConnectionError):
        await fetch()
    with pytest.raises(ConnectionError):
        await fetch()
    assert breaker.fail_counter == 2
    assert await fetch() == "ok"
    assert breaker.fail_counter == 0
