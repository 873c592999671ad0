"""Tests for tenacity_budget.logs: the ``before_sleep`` logging hook, sync and async."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import tenacity
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget import BackoffPolicy, BudgetExhausted
from tenacity_budget.logs import DEFAULT_LOGGER_NAME, EXTRA_FIELDS, log_retry, retry_fields
from tests._helpers import async_sleeper, sleeper

POLICY = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=30, jitter="none")
LOGGER = logging.getLogger("tests.retries")


def flaky(clock: FrozenDateTimeFactory, failures: int, took: float = 0.5) -> Callable[[], str]:
    """A function whose attempts take ``took`` seconds and fail ``failures`` times."""
    calls = {"n": 0}

    def fetch() -> str:
        calls["n"] += 1
        clock.tick(took)
        if calls["n"] <= failures:
            raise ConnectionError(f"boom {calls['n']}")
        return "ok"

    return fetch


def retry_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if hasattr(r, "retry_fn")]


def full_name(fn: Callable[..., Any]) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def test_one_line_per_retry_with_budget_figures(
    frozen: FrozenDateTimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER.name)
    sleeps: list[float] = []
    sleep = sleeper(frozen, sleeps)
    fetch = POLICY.retry(before_sleep=log_retry(LOGGER), sleep=sleep)(flaky(frozen, 2))

    assert fetch() == "ok"

    records = retry_records(caplog)
    affordable = POLICY.max_attempts()
    name = full_name(fetch)
    assert sleeps == [1.0, 2.0]
    assert [r.getMessage() for r in records] == [
        f"Retrying {name} in 1.000 s: attempt 1 raised ConnectionError('boom 1'); "
        f"budget 0.500 s used, 28.500 s left; {affordable - 1} retries left",
        f"Retrying {name} in 2.000 s: attempt 2 raised ConnectionError('boom 2'); "
        f"budget 2.000 s used, 26.000 s left; {affordable - 2} retries left",
    ]
    assert all(r.levelno == logging.WARNING and r.name == LOGGER.name for r in records)

    first, second = records
    assert {k: getattr(first, k) for k in EXTRA_FIELDS} == {
        "retry_fn": name,
        "retry_attempt": 1,
        "retry_exception": "ConnectionError('boom 1')",
        "retry_exception_type": "builtins.ConnectionError",
        "retry_result": None,
        "retry_sleep": 1.0,
        "retry_slept": 0.0,
        "retry_elapsed": 0.5,
        "retry_budget": 30.0,
        "retry_budget_left": 28.5,
        "retry_affordable": affordable,
        "retry_retries_left": affordable - 1,
        "retry_deadline": None,
    }
    assert second.retry_attempt == 2  # type: ignore[attr-defined]
    assert second.retry_slept == 1.0  # type: ignore[attr-defined]
    assert second.retry_elapsed == 2.0  # type: ignore[attr-defined]
    assert second.retry_budget_left == 26.0  # type: ignore[attr-defined]


def test_extra_fields_are_json_ready_and_always_present(
    frozen: FrozenDateTimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER.name)
    sleep = sleeper(frozen, [])
    deadline = datetime(2024, 3, 1, 13, 0, tzinfo=UTC)
    fetch = POLICY.retry(deadline=deadline, before_sleep=log_retry(LOGGER), sleep=sleep)(
        flaky(frozen, 1)
    )
    fetch()
    (record,) = retry_records(caplog)
    payload = {k: getattr(record, k) for k in EXTRA_FIELDS}
    assert json.loads(json.dumps(payload)) == payload
    assert record.retry_deadline == "2024-03-01T13:00:00+00:00"  # type: ignore[attr-defined]
    assert record.getMessage().endswith("; deadline 2024-03-01T13:00:00+00:00")


def test_retry_on_result_logs_the_result(
    frozen: FrozenDateTimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER.name)
    sleep = sleeper(frozen, [])
    answers = iter([None, {"status": "pending"}, "done"])

    @POLICY.retry(
        retry=tenacity.retry_if_result(lambda r: r != "done"),
        before_sleep=log_retry(LOGGER),
        sleep=sleep,
    )
    def poll() -> Any:
        return next(answers)

    assert poll() == "done"
    records = retry_records(caplog)
    assert [r.retry_result for r in records] == ["None", "{'status': 'pending'}"]  # type: ignore[attr-defined]
    assert [r.retry_exception for r in records] == [None, None]  # type: ignore[attr-defined]
    assert [r.retry_exception_type for r in records] == [None, None]  # type: ignore[attr-defined]
    assert "attempt 1 returned None;" in records[0].getMessage()
    assert "attempt 2 returned {'status': 'pending'};" in records[1].getMessage()


def test_without_a_budget_stop_the_hook_degrades(
    frozen: FrozenDateTimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER.name)
    sleep = sleeper(frozen, [])
    fetch = tenacity.retry(
        stop=tenacity.stop_after_attempt(3),
        wait=tenacity.wait_fixed(2),
        before_sleep=log_retry(LOGGER),
        sleep=sleep,
    )(flaky(frozen, 2, took=0.25))
    assert fetch() == "ok"

    first, second = retry_records(caplog)
    name = full_name(fetch)
    assert first.getMessage() == (
        f"Retrying {name} in 2.000 s: attempt 1 raised ConnectionError('boom 1'); no budget"
    )
    for key in ("retry_budget", "retry_budget_left", "retry_affordable", "retry_retries_left"):
        assert getattr(first, key) is None
    assert first.retry_deadline is None  # type: ignore[attr-defined]
    # tenacity's own clock stands in for the budget used
    assert first.retry_elapsed == 0.25  # type: ignore[attr-defined]
    assert second.retry_elapsed == 2.5  # type: ignore[attr-defined]
    assert second.retry_slept == 2.0  # type: ignore[attr-defined]


def test_plain_tenacity_with_the_budget_stop_reports_the_budget(
    frozen: FrozenDateTimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER.name)
    sleep = sleeper(frozen, [])
    fetch = tenacity.retry(
        stop=POLICY.stop(),
        wait=POLICY.wait(),
        before_sleep=log_retry(LOGGER),
        sleep=sleep,
    )(flaky(frozen, 1))
    fetch()
    (record,) = retry_records(caplog)
    assert record.retry_budget == 30.0  # type: ignore[attr-defined]
    assert record.retry_retries_left == POLICY.max_attempts() - 1  # type: ignore[attr-defined]


def test_default_logger_and_level(
    frozen: FrozenDateTimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=DEFAULT_LOGGER_NAME)
    sleep = sleeper(frozen, [])
    POLICY.retry(before_sleep=log_retry(), sleep=sleep)(flaky(frozen, 1))()
    (record,) = retry_records(caplog)
    assert record.name == "tenacity_budget"
    assert record.levelno == logging.WARNING
    assert record.exc_info is None


def test_custom_level_and_exc_info(
    frozen: FrozenDateTimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER.name)
    sleep = sleeper(frozen, [])
    POLICY.retry(before_sleep=log_retry(LOGGER, logging.INFO, exc_info=True), sleep=sleep)(
        flaky(frozen, 1)
    )()
    (record,) = retry_records(caplog)
    assert record.levelno == logging.INFO
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], ConnectionError)
    assert "ConnectionError: boom 1" in caplog.text


def test_nothing_is_logged_below_the_logger_level(
    frozen: FrozenDateTimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger=LOGGER.name)
    sleeps: list[float] = []
    sleep = sleeper(frozen, sleeps)
    POLICY.retry(before_sleep=log_retry(LOGGER, logging.WARNING), sleep=sleep)(flaky(frozen, 2))()
    assert sleeps == [1.0, 2.0]
    assert retry_records(caplog) == []


def test_exhausted_run_logs_only_the_retries_made(
    frozen: FrozenDateTimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER.name)
    sleeps: list[float] = []
    sleep = sleeper(frozen, sleeps)
    fetch = POLICY.retry(before_sleep=log_retry(LOGGER), sleep=sleep)(flaky(frozen, 100))
    with pytest.raises(BudgetExhausted) as info:
        fetch()
    records = retry_records(caplog)
    assert len(records) == len(sleeps) == info.value.report.retries
    assert [r.retry_sleep for r in records] == sleeps  # type: ignore[attr-defined]
    assert [r.retry_attempt for r in records] == list(range(1, len(sleeps) + 1))  # type: ignore[attr-defined]
    assert records[-1].retry_retries_left >= 0  # type: ignore[attr-defined]


async def test_async_runs_log_the_same_way(
    frozen: FrozenDateTimeFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER.name)
    sleeps: list[float] = []
    calls = {"n": 0}

    @POLICY.retry(before_sleep=log_retry(LOGGER), sleep=async_sleeper(frozen, sleeps))
    async def fetch() -> str:
        calls["n"] += 1
        frozen.tick(0.5)
        if calls["n"] <= 2:
            raise TimeoutError("slow")
        return "ok"

    assert await fetch() == "ok"
    records = retry_records(caplog)
    assert sleeps == [1.0, 2.0]
    assert [r.retry_fn for r in records] == [full_name(fetch)] * 2  # type: ignore[attr-defined]
    assert [r.retry_elapsed for r in records] == [0.5, 2.0]  # type: ignore[attr-defined]
    assert [r.retry_budget_left for r in records] == [28.5, 26.0]  # type: ignore[attr-defined]
    assert (
        records[0]
        .getMessage()
        .startswith(
            f"Retrying {full_name(fetch)} in 1.000 s: attempt 1 raised TimeoutError('slow');"
        )
    )


@settings(max_examples=25, deadline=None)
@given(
    failures=st.integers(min_value=1, max_value=4),
    took=st.sampled_from([0.0, 0.25, 1.0, 2.5]),
    base=st.sampled_from([0.5, 1.0, 2.0]),
)
def test_fields_add_up(failures: int, took: float, base: float) -> None:
    """Used + sleep + left is the budget; retries left counts down from max_attempts()."""
    policy = BackoffPolicy(base=base, factor=2, cap=8, max_elapsed=60, jitter="none")
    seen: list[dict[str, Any]] = []
    with freeze_time("2024-03-01", tick=False) as clock:
        assert isinstance(clock, FrozenDateTimeFactory)
        sleeps: list[float] = []
        sleep = sleeper(clock, sleeps)
        policy.retry(before_sleep=lambda rs: seen.append(retry_fields(rs)), sleep=sleep)(
            flaky(clock, failures, took)
        )()
    assert len(seen) == failures == len(sleeps)
    slept = 0.0
    for attempt, (fields, pause) in enumerate(zip(seen, sleeps, strict=True), start=1):
        assert fields["retry_attempt"] == attempt
        assert fields["retry_sleep"] == pause
        assert fields["retry_slept"] == pytest.approx(slept)
        assert fields["retry_elapsed"] == pytest.approx(slept + attempt * took)
        assert fields["retry_budget_left"] == pytest.approx(
            max(0.0, 60 - fields["retry_elapsed"] - pause)
        )
        assert fields["retry_retries_left"] == policy.max_attempts() - attempt
        slept += pause
