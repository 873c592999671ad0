"""The ``tenacity-budget plan`` command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tenacity_budget import BackoffPolicy
from tenacity_budget.cli import main, plan_rows


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["plan", *argv])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_defaults_print_the_design_notes_policy(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--jitter", "none")
    assert code == 0
    assert "affordable retries: 9 (at most 10 calls)" in out
    assert "total nominal delay: 243.000 s of 300 s budget" in out
    # one row per retry, numbered 1..9, with the nominal delays of the seed's formula
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [int(r[0]) for r in rows] == list(range(1, 10))
    assert [float(r[1]) for r in rows] == [1, 2, 4, 8, 16, 32, 60, 60, 60]


def test_json_matches_the_policy(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--json", "--seed", "3", "--jitter", "equal")
    assert code == 0
    doc = json.loads(out)
    policy = BackoffPolicy(base=1, cap=60, max_elapsed=300, jitter="equal")
    assert doc["max_attempts"] == policy.max_attempts() == 9
    assert doc["max_calls"] == 10
    assert doc["total_nominal"] == 243.0
    assert doc["policy"] == policy.model_dump(mode="json")
    assert [row["wait"] for row in doc["rows"]] == policy.schedule(seed=3)
    for row in doc["rows"]:
        assert row["low"] <= row["wait"] <= row["high"] == row["nominal"]
        assert row["low"] == row["nominal"] / 2


def test_seed_makes_output_reproducible(capsys: pytest.CaptureFixture[str]) -> None:
    first = run(capsys, "--seed", "11")[1]
    assert run(capsys, "--seed", "11")[1] == first
    assert run(capsys, "--seed", "12")[1] != first


def test_long_schedules_are_elided(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--max-elapsed", "2592000", "--max-rows", "5", "--json")
    doc = json.loads(out)
    assert code == 0
    assert len(doc["rows"]) == 5
    assert doc["rows_elided"] == doc["max_attempts"] - 5 == 43199


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cap", "400"], "cap (400 s) exceeds max_elapsed (300 s)"),
        (["--base", "nan"], "--base: Input should be a finite number"),
        (["--factor", "1"], "--factor: Input should be greater than 1"),
        (["--jitter", "loud"], "--jitter: Input should be 'none', 'full', 'equal' or"),
        (["--base", "500"], "base (500 s) exceeds max_elapsed (300 s)"),
        (["--max-rows", "-1"], "--max-rows must be >= 0"),
        (["--base", "abc"], "invalid float value"),
    ],
)
def test_bad_options_exit_2_without_traceback(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    assert "Traceback" not in err
    assert out == ""


def test_plan_rows_accumulate() -> None:
    policy = BackoffPolicy(base=1, cap=60, max_elapsed=300, jitter="none", attempt_duration=1)
    rows = list(plan_rows(policy))
    assert len(rows) == policy.max_attempts()
    assert rows[-1].cumulative == rows[-1].cumulative_nominal == policy.total_nominal()
    # n delays plus n + 1 attempts fit in the budget
    assert rows[-1].budget_used <= 1.0


def test_module_entry_point_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tenacity_budget", "plan", "--jitter", "none"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "affordable retries: 9" in done.stdout
