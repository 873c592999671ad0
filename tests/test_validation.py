"""Refuse what cannot be meant; validate alike everywhere (issue 9, sections 4 and 5)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import pydantic
import pytest
import tenacity
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget import (
    BackoffPolicy,
    BudgetExhausted,
    ExhaustionReport,
    RetryBudget,
    StopReason,
)
from tenacity_budget.testing import VirtualClock, virtual_clock

VALID = {"base": 1.0, "cap": 60.0, "max_elapsed": 300.0}
NUMERIC = ("base", "factor", "cap", "max_elapsed", "attempt_duration")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


# -- 4. refuse what cannot be meant ----------------------------------------------------------


def test_cap_below_base_is_refused_saying_what_to_change() -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        BackoffPolicy(base=100, cap=60, max_elapsed=300)
    message = str(caught.value)
    assert "cap (60 s) is below base (100 s)" in message
    assert "raise cap" in message
    assert "lower base" in message


def test_cap_equal_to_base_is_a_constant_schedule() -> None:
    policy = BackoffPolicy(base=60, cap=60, max_elapsed=300, jitter="none")
    assert policy.waits() == [60.0] * 5


@pytest.mark.parametrize("field", NUMERIC)
@pytest.mark.parametrize("flag", [True, False])
def test_booleans_are_refused_for_every_numeric_field(field: str, flag: bool) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        BackoffPolicy(**{**VALID, field: flag})
    assert field in str(caught.value)
    assert "bool" in str(caught.value)


@pytest.mark.parametrize("field", NUMERIC)
@pytest.mark.parametrize("text", ["1.5", " 300 ", "2", b"1.5", bytearray(b"2")])
def test_strings_and_bytes_are_refused_for_every_numeric_field(field: str, text: object) -> None:
    # Issue 15 inverts issue 9's "numeric strings stay accepted": text is not a number.
    fields = {"base": 1.5, "factor": 2.0, "cap": 60.0, "max_elapsed": 300.0}
    with pytest.raises(pydantic.ValidationError) as caught:
        BackoffPolicy(**{**fields, field: text})
    errors = caught.value.errors()
    assert [error["loc"] for error in errors] == [(field,)]
    assert f"{field} must be a number" in str(caught.value)
    assert type(text).__name__ in str(caught.value)


def test_numeric_strings_in_json_are_refused_too() -> None:
    with pytest.raises(pydantic.ValidationError, match="base must be a number, got the str"):
        BackoffPolicy.model_validate_json('{"base": "1.5", "cap": 60, "max_elapsed": 300}')


def test_for_deadline_refuses_text_naming_the_field() -> None:
    with pytest.raises(pydantic.ValidationError, match="cap must be a number, got the str"):
        BackoffPolicy.for_deadline(NOW + timedelta(hours=1), now=NOW, base=1, cap="60")


@pytest.mark.parametrize("number", [1, 1.5, Decimal("1.5"), Fraction(3, 2)], ids=repr)
def test_numbers_of_every_kind_stay_accepted(number: object) -> None:
    policy = BackoffPolicy(base=number, cap=60, max_elapsed=300, attempt_duration=number)
    assert policy.base == float(number)  # type: ignore[arg-type]
    assert policy.attempt_duration == float(number)  # type: ignore[arg-type]
    assert type(policy.base) is float


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=12) | st.binary(max_size=12), st.sampled_from(NUMERIC))
def test_no_text_is_ever_read_as_a_number(text: str | bytes, field: str) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        BackoffPolicy(**{**VALID, field: text})
    assert f"{field} must be a number" in str(caught.value)


def test_the_extreme_policy_of_the_issue_is_valid() -> None:
    policy = BackoffPolicy(
        base=1.5e306, factor=3, cap=1.3e308, max_elapsed=1.5e308, attempt_duration=1
    )
    assert policy.max_attempts() == 4


def test_seed_and_rng_together_are_refused_alike() -> None:
    import random

    policy = BackoffPolicy(**VALID)
    with pytest.raises(ValueError, match="not both") as by_schedule:
        policy.schedule(seed=1, rng=random.Random(1))
    with pytest.raises(ValueError, match="not both") as by_wait:
        policy.wait(seed=1, rng=random.Random(1))
    assert str(by_schedule.value) == str(by_wait.value)


@pytest.mark.parametrize("missing", ["base", "cap"])
def test_for_deadline_missing_field_errors_do_not_show_max_elapsed(missing: str) -> None:
    fields = {"base": 1.0, "cap": 60.0}
    del fields[missing]
    with pytest.raises(pydantic.ValidationError) as caught:
        BackoffPolicy.for_deadline(NOW + timedelta(hours=1), now=NOW, **fields)
    assert missing in str(caught.value)
    assert "max_elapsed" not in str(caught.value)


@pytest.mark.parametrize("seed", ["x", 1.5, True, b"1"])
def test_schedule_and_wait_refuse_the_same_seeds_with_one_message(seed: object) -> None:
    policy = BackoffPolicy(**VALID)
    with pytest.raises(TypeError) as by_schedule:
        policy.schedule(seed=seed)  # type: ignore[arg-type]
    with pytest.raises(TypeError) as by_wait:
        policy.wait(seed=seed)  # type: ignore[arg-type]
    assert str(by_schedule.value) == str(by_wait.value)
    assert "seed must be an int" in str(by_wait.value)


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"base": 1, "cap": 5000}, ("cap", "deadline", "reserve")),
        ({"base": 100, "cap": 100, "attempt_duration": 1000}, ("deadline", "reserve", "base")),
        ({"base": 4000, "cap": 4000}, ("base", "deadline", "reserve")),
        ({"base": -1, "cap": 5}, ("base",)),
    ],
)
def test_for_deadline_errors_name_what_the_caller_can_change(
    fields: dict[str, float], names: tuple[str, ...]
) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        BackoffPolicy.for_deadline(NOW + timedelta(hours=1), now=NOW, **fields)
    message = str(caught.value)
    assert "max_elapsed" not in message
    for name in names:
        assert name in message


@settings(max_examples=50, deadline=None)
@given(
    window=st.floats(min_value=1.0, max_value=1e6),
    reserve=st.floats(min_value=0.0, max_value=0.99),
    base=st.floats(min_value=1e-3, max_value=1e6),
    cap=st.floats(min_value=1e-3, max_value=1e7),
    attempt_duration=st.floats(min_value=0.0, max_value=1e6),
)
def test_for_deadline_never_speaks_of_max_elapsed(
    window: float, reserve: float, base: float, cap: float, attempt_duration: float
) -> None:
    message = ""
    try:
        BackoffPolicy.for_deadline(
            NOW + timedelta(seconds=window),
            now=NOW,
            reserve=reserve,
            base=base,
            cap=cap,
            attempt_duration=attempt_duration,
        )
    except pydantic.ValidationError as exc:
        message = str(exc)
    assert "max_elapsed" not in message


# -- 5. the virtual clock is exact -----------------------------------------------------------


def test_ten_tenths_are_exactly_one() -> None:
    with virtual_clock() as clock:
        for _ in range(10):
            clock.advance(0.1)
        assert clock.elapsed == 1.0
        assert time.monotonic() == 1.0
        assert clock.now() == clock.start + timedelta(seconds=1)


def test_a_billion_seconds_then_tiny_steps_sum_exactly() -> None:
    with virtual_clock() as clock:
        clock.advance(1e9)
        for _ in range(100_000):
            clock.advance(1e-7)
        assert clock.elapsed == 1000000000.01
        assert clock.now() == clock.start + timedelta(seconds=1_000_000_000, milliseconds=10)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e4), max_size=40))
def test_elapsed_is_the_exact_sum_of_every_advance(steps: list[float]) -> None:
    with virtual_clock() as clock:
        for step in steps:
            clock.advance(step)
        assert clock.elapsed == float(sum(map(Fraction, steps), Fraction(0)))


@pytest.mark.parametrize(
    "policy",
    [
        BackoffPolicy(base=0.1, cap=0.1, max_elapsed=1.6, jitter="none"),
        BackoffPolicy(base=1e-6, factor=2, cap=1e-6 * 2**10, max_elapsed=0.005, jitter="none"),
        BackoffPolicy(base=3e-7, cap=3e-7, max_elapsed=3e-6, jitter="none"),
        BackoffPolicy(base=0.000_000_7, factor=1.5, cap=1e-5, max_elapsed=1e-4, jitter="none"),
        # The elapsed time reads 0.30000000000000004 before the fourth retry.
        BackoffPolicy(base=0.1, factor=2, cap=0.1, max_elapsed=0.4, jitter="none"),
        BackoffPolicy(base=0.1, factor=2, cap=0.7, max_elapsed=2.1, jitter="none"),
    ],
    ids=repr,
)
def test_a_schedule_filling_its_budget_gets_every_retry_on_the_virtual_clock(
    policy: BackoffPolicy, virtual_clock: VirtualClock
) -> None:
    @policy.retry()
    def fails() -> None:
        raise OSError("down")

    with pytest.raises(BudgetExhausted) as caught:
        fails()
    assert virtual_clock.sleeps == policy.waits()
    assert caught.value.report.attempts == policy.max_attempts() + 1


def test_virtual_clock_fixture_keeps_pytest_durations_real(tmp_path: Path) -> None:
    test = tmp_path / "test_hour.py"
    test.write_text(
        textwrap.dedent(
            """
            import time

            def test_an_hour(virtual_clock):
                time.sleep(3600)  # virtual clock: allow-sleep
                assert virtual_clock.elapsed == 3600
            """
        )
    )
    result = subprocess.run(
        # The fixture comes with the installed package (its pytest11 entry point).
        [
            sys.executable,
            "-m",
            "pytest",
            "--durations=0",
            "-q",
            "-p",
            "no:cacheprovider",
            str(test),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    durations = [line for line in result.stdout.splitlines() if "test_an_hour" in line]
    assert durations, result.stdout
    for line in durations:
        seconds = float(line.split("s", 1)[0])
        assert seconds < 60, line  # the real duration: not 3600 s, not the epoch


def _fenced_blocks(page: str, language: str) -> list[str]:
    """The bodies of the page's fenced blocks in ``language``, in page order."""
    found: list[str] = []
    lines = page.splitlines(keepends=True)
    inside: list[str] | None = None
    for line in lines:
        if inside is None:
            if line.strip() == f"```{language}":
                inside = []
        elif line.strip() == "```":
            found.append("".join(inside))
            inside = None
        else:
            inside.append(line)
    return found


def test_the_async_example_of_the_testing_guide_runs_in_a_fresh_project(tmp_path: Path) -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "testing.md").read_text()
    # What a user copies from the guide: the configuration block and the example file.
    config = next(b for b in _fenced_blocks(page, "toml") if "[tool.pytest.ini_options]" in b)
    example = next(b for b in _fenced_blocks(page, "python") if "async def test_async_retries" in b)
    (tmp_path / "pyproject.toml").write_text(config)
    (tmp_path / "test_example.py").write_text(example)
    # A fresh project: its own rootdir, only the guide's configuration; every warning is an
    # error, as in a strict suite (pytest-asyncio warns at start-up when it lacks its loop scope).
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "error"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


# -- issue 15: exhaustion messages name what was spent ---------------------------------------


def _exhausted(**retry: Any) -> BudgetExhausted:
    policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=30, jitter="none")

    @policy.retry(**retry)
    def fails() -> None:
        raise OSError("down")

    with virtual_clock(NOW), pytest.raises(BudgetExhausted) as caught:
        fails()
    return caught.value


def test_a_run_that_spent_its_time_budget_says_so() -> None:
    exhausted = _exhausted()
    assert exhausted.report.reason is StopReason.COUNT
    assert str(exhausted).startswith("time budget exhausted (count): 6 attempts, slept 23.000 s")
    assert "retry budget" not in str(exhausted)


def test_a_run_stopped_by_its_deadline_names_the_time_budget() -> None:
    exhausted = _exhausted(deadline=NOW + timedelta(seconds=5))
    assert exhausted.report.reason is StopReason.DEADLINE
    assert str(exhausted).startswith("time budget exhausted (deadline): ")
    assert "retry budget" not in str(exhausted)


def test_a_run_stopped_by_another_stop_names_the_time_budget() -> None:
    exhausted = _exhausted(stop=tenacity.stop_after_attempt(2))
    assert exhausted.report.reason is StopReason.OTHER
    assert str(exhausted).startswith("time budget exhausted (other): 2 attempts")


def test_only_a_retry_budget_refusal_speaks_of_the_retry_budget() -> None:
    exhausted = _exhausted(budget=RetryBudget(ratio=0, min_per_second=0))
    assert exhausted.report.reason is StopReason.RETRY_BUDGET
    assert str(exhausted).startswith("retry budget exhausted (retry_budget): 1 attempts")
    assert "time budget" not in str(exhausted)


@settings(max_examples=60, deadline=None)
@given(
    reason=st.sampled_from(StopReason),
    attempts=st.integers(min_value=1, max_value=10**6),
    budget=st.none() | st.floats(min_value=1e-3, max_value=1e9),
)
def test_every_reason_names_what_was_spent_with_its_value_in_parentheses(
    reason: StopReason, attempts: int, budget: float | None
) -> None:
    last = tenacity.Future(attempts)
    last.set_exception(OSError("down"))
    report = ExhaustionReport(
        attempts=attempts,
        affordable=None,
        slept=0.0,
        elapsed=0.0,
        budget=budget,
        deadline=None,
        reason=reason,
        last_exception=OSError("down"),
    )
    message = str(BudgetExhausted(last, report))
    if reason is StopReason.NOT_REPLAYABLE:  # no budget was spent: the body cannot be re-sent
        assert message.startswith(f"not retried ({reason.value}): ")
        assert "exhausted" not in message
    elif reason is StopReason.THROTTLED:  # no budget was spent: the throttle shed the attempt
        assert message.startswith(f"rejected locally ({reason.value}): ")
        assert "exhausted" not in message
    else:
        spent = "retry budget" if reason is StopReason.RETRY_BUDGET else "time budget"
        assert message.startswith(f"{spent} exhausted ({reason.value}): {attempts} attempts")
    assert ("retry budget" in message) is (reason is StopReason.RETRY_BUDGET)
