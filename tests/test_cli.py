"""The ``tenacity-budget plan`` command line."""

from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget import BackoffPolicy
from tenacity_budget.cli import main, plan_rows


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["plan", *argv])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def run_quietly(*argv: str) -> tuple[int, str, str]:
    """``main`` without pytest's capture fixture (usable inside hypothesis tests)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    return code, out.getvalue(), err.getvalue()


PERCENT = re.compile(r"(\d+\.\d)%")


def check_plan_output(code: int, out: str, err: str) -> None:
    """What every invocation must satisfy: a plan that fits, or one line of error."""
    assert "Traceback" not in out + err
    if code == 2:
        assert out == ""
        assert err.startswith("tenacity-budget")
        assert err.endswith("\n")
        assert err.count("\n") == 1, err
        return
    assert code == 0, err
    assert err == ""
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    for row in rows:  # the budget share of an affordable retry never passes 100%
        assert float(PERCENT.findall(row)[-1]) <= 100.0, row
    footer = out.splitlines()[-1]
    assert float(PERCENT.findall(footer)[-1]) <= 100.0, footer


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


def test_attempt_duration_is_counted_alike_in_every_column_and_the_footer(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before: the last row said 91.0% of the budget while the footer said 21.0%.
    code, out, _ = run(capsys, "--attempt-duration", "30", "--jitter", "none")
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.strip().startswith("retry"))
    assert "waits+calls s" in header
    assert "bound+calls s" in header
    assert any("30 s for each call so far" in line for line in lines)
    rows = [line.split() for line in lines if line.strip()[:1].isdigit()]
    # 6 retries: delays 1..32 (63 s) and 7 calls of 30 s = 273 s of 300 s = 91.0%
    assert [float(r[-2]) for r in rows] == [61, 93, 127, 165, 211, 273]
    assert [float(r[-3]) for r in rows] == [61, 93, 127, 165, 211, 273]
    assert rows[-1][-1] == "91.0%"
    assert "affordable retries: 6 (at most 7 calls)" in out
    assert lines[-1].startswith("total: 63.000 s of nominal delay + 7 calls x 30 s = 273.000 s")
    assert "(91.0%)" in lines[-1]


def test_json_counts_the_calls_too(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--attempt-duration", "30", "--jitter", "none", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["max_attempts"] == 6
    assert doc["total_nominal"] == 63.0
    assert doc["total_calls"] == 7 * 30.0
    assert doc["budget_used"] == 273 / 300
    last = doc["rows"][-1]
    assert last["calls"] == 7 * 30.0
    assert last["budget_used"] == doc["budget_used"]
    for row in doc["rows"]:
        exact = Fraction(row["cumulative_nominal"]) + Fraction(row["calls"])
        assert row["budget_used"] == float(exact / 300)
        assert row["calls"] == (row["retry"] + 1) * 30.0


def test_help_prints_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for default in ("1.0", "2.0", "60.0", "300.0", "full", "0.0", "200"):
        assert f"(default: {default})" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--base", "abc"],
        ["--base", ""],
        ["--base", "nan"],
        ["--base", "inf"],
        ["--factor", "-inf"],
        ["--base", "-1"],
        ["--base", "0"],
        ["--base", "1e-400"],  # underflows to 0
        ["--base", "1e400"],  # overflows to inf
        ["--cap", "1e-330"],
        ["--max-elapsed", "1e-320"],
        ["--max-elapsed", "-300"],
        ["--attempt-duration", "-1"],
        ["--attempt-duration", "nan"],
        ["--attempt-duration", "1e308"],
        ["--factor", "1"],
        ["--factor", "0.5"],
        ["--seed", "x"],
        ["--seed", "1.5"],
        ["--max-rows", "x"],
        ["--max-rows", "-5"],
        ["--jitter", ""],
        ["--bogus"],
        # the budget within float rounding of a partial sum of 2.4e17 delays: undecidable
        [
            "--base",
            "5e-324",
            "--factor",
            "1.0000000000000002",
            "--cap",
            "1e-300",
            "--max-elapsed",
            "1e300",
        ],
        # every row of 10**300 retries, or 10**100 of them
        ["--max-rows", "0", "--max-elapsed", "1e300", "--cap", "1"],
        ["--max-rows", str(10**100), "--max-elapsed", "1e300", "--cap", "1"],
        # the cases whose cap exceeds the budget
        [
            "--max-elapsed",
            "5.0952364962085985",
            "--base",
            "0.01",
            "--factor",
            "1.001",
            "--cap",
            "50.896777613142916",
        ],
        [
            "--max-elapsed",
            "268.1457858812036",
            "--base",
            "0.1",
            "--factor",
            "1.0000040521554148",
            "--cap",
            "3.84e189",
        ],
    ],
)
def test_any_bad_input_exits_2_with_one_line(argv: list[str]) -> None:
    code, out, err = run_quietly("plan", *argv)
    assert code == 2, (out, err)
    check_plan_output(code, out, err)


def test_no_command_is_one_line_too() -> None:
    code, out, err = run_quietly()
    assert code == 2
    assert err.count("\n") == 1
    assert "required" in err
    assert out == ""


@pytest.mark.parametrize(
    "argv",
    [
        # the solver cases that are valid policies (cap within the budget)
        ["--max-elapsed", "100", "--base", "1e-306", "--cap", "60", "--attempt-duration", "30"],
        ["--max-elapsed", "1e12", "--base", "1e9", "--factor", "1e300", "--cap", "2e9"],
        [
            "--max-elapsed",
            "3.3623008167629866e299",
            "--base",
            "1.2385086827331192e-193",
            "--factor",
            "1.000000000000001",
            "--cap",
            "1.8659296150597552e60",
            "--attempt-duration",
            "1.242076400725152e296",
        ],
        [
            "--max-elapsed",
            "3.3372117570494043e283",
            "--base",
            "1.79e-211",
            "--factor",
            "1.0000000007249579",
            "--cap",
            "2.87e-190",
            "--attempt-duration",
            "7.100450546913626e281",
        ],
        [
            "--max-elapsed",
            "1.5e308",
            "--base",
            "1.5e306",
            "--factor",
            "3",
            "--cap",
            "1.3e308",
            "--attempt-duration",
            "1",
        ],
        [
            "--max-elapsed",
            "23875094.02853341",
            "--base",
            "0.11048075672548034",
            "--factor",
            "1.1",
            "--cap",
            "39341.0027613904",
        ],
        # tiny, subnormal and huge figures
        ["--base", "5e-324"],
        ["--base", "5e-324", "--cap", "1e-320", "--max-elapsed", "1e-318", "--max-rows", "0"],
        ["--max-elapsed", "1.7976931348623157e308", "--cap", "1e308", "--base", "1e307"],
        ["--max-elapsed", "63", "--jitter", "none"],  # exactly full: 100.0%, not more
        ["--max-elapsed", "70", "--attempt-duration", "1", "--jitter", "none"],
    ],
)
def test_extreme_valid_inputs_plan_within_the_budget(argv: list[str]) -> None:
    code, out, err = run_quietly("plan", *argv)
    assert code == 0, err
    check_plan_output(code, out, err)
    code, out, err = run_quietly("plan", *argv, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert all(row["budget_used"] <= 1.0 for row in doc["rows"])
    assert doc["budget_used"] <= 1.0


def test_a_schedule_that_exactly_fills_the_budget_shows_100_percent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(capsys, "--max-elapsed", "63", "--jitter", "none")
    assert code == 0
    assert "affordable retries: 6" in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert rows[-1][-1] == "100.0%"


numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(5e-324, 1e-300),
    st.floats(0.5, 1e4),
    st.sampled_from([0.0, -0.0, 1.0, 2.0, 60.0, 300.0, 1e308, 5e-324]),
).map(repr)
texts = st.one_of(numbers, st.text(max_size=5))


@settings(max_examples=120, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            ["--base", "--factor", "--cap", "--max-elapsed", "--attempt-duration", "--jitter"]
        ),
        texts,
    ),
    st.booleans(),
)
def test_never_a_traceback_nor_a_row_past_the_budget(
    options: dict[str, str], as_json: bool
) -> None:
    argv = ["plan", "--max-rows", "50"]
    for option, value in options.items():
        argv.append(f"{option}={value}")
    if as_json:
        argv.append("--json")
    code, out, err = run_quietly(*argv)
    if as_json and code == 0:
        doc = json.loads(out)
        assert all(row["budget_used"] <= 1.0 for row in doc["rows"])
        assert doc["budget_used"] <= 1.0
    else:
        check_plan_output(code, out, err)
