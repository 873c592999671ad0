"""Benchmark: start-up cost, ``import tenacity_budget`` next to ``import tenacity`` and stamina.

Each statement runs in a fresh interpreter under ``python -X importtime``; the figure is
the cumulative time of the statement's top-level import (microseconds, as CPython reports
it), and the headline is the median over ``--runs`` interpreters, candidates interleaved
run after run so a slow spell of the machine slows all of them alike. Bytecode is compiled
first (``compileall``), so the figures are those of an installed package, not of a first
import that compiles (this machine may set ``PYTHONDONTWRITEBYTECODE``).

Statements: ``import tenacity`` (the reference), ``import tenacity_budget`` (target: at
most 2x the reference), ``import stamina``, ``import pydantic`` (the floor the model adds),
and ``from tenacity_budget import BackoffPolicy`` (what a user's module pays, model
included). Issue 16's target is timed apart, as process wall time: a fresh interpreter
constructing a ``BackoffPolicy`` against one importing tenacity and constructing a trivial
pydantic model (the floor pydantic sets), at least 9 runs, interleaved. Run::

    python -m benchmarks.import_time [--runs 7] [--quick]
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ._common import command_line, write_results

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = "import tenacity"
TARGET = "import tenacity_budget"
STATEMENTS: dict[str, str] = {
    REFERENCE: "tenacity",
    TARGET: "tenacity_budget",
    "import stamina": "stamina",
    "import pydantic": "pydantic",
    "from tenacity_budget import BackoffPolicy": "tenacity_budget",
}
FLOOR = "import tenacity; a trivial pydantic model defined and constructed"
POLICY = "from tenacity_budget import BackoffPolicy; BackoffPolicy(...)"
PROGRAMS: dict[str, str] = {
    FLOOR: (
        "import tenacity\nfrom pydantic import BaseModel\n"
        "class M(BaseModel):\n    x: float\nM(x=1.0)"
    ),
    POLICY: (
        "from tenacity_budget import BackoffPolicy\n"
        "BackoffPolicy(base=1, factor=2, cap=60, max_elapsed=300, jitter='full')"
    ),
}
"""Issue 16's start-up target: the policy's program against the floor pydantic sets."""


def wall_ns(code: str) -> int:
    """The wall time of a fresh interpreter running ``code``, start to exit (ns)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.perf_counter_ns()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=env)
    return time.perf_counter_ns() - start


_LINE = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)\s*$")


def top_level_us(code: str) -> dict[str, int]:
    """Cumulative import time (µs) of each top-level import a fresh interpreter makes."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=env,
    )
    tops: dict[str, int] = {}
    for line in result.stderr.splitlines():
        match = _LINE.match(line)
        if match and match.group(3) == " ":  # a top-level entry (one space of indent)
            tops[match.group(4)] = int(match.group(2))
    return tops


def cumulative_us(statement: str, module: str) -> int:
    """The import time of ``statement`` in a fresh interpreter.

    For ``import X``, the cumulative time CPython reports for ``X``. A ``from ... import``
    also loads, on first access, modules that appear as top-level entries of their own (the
    lazily loaded model and what pydantic loads lazily), so its figure is every top-level
    entry of the run less those of an interpreter that imports nothing (``site``).
    """
    if statement.startswith("import "):
        return top_level_us(statement)[module]
    baseline = top_level_us("pass")
    tops = top_level_us(statement)
    return sum(us for name, us in tops.items() if name not in baseline)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="fresh interpreters per statement")
    parser.add_argument("--quick", action="store_true", help="3 runs, no result file")
    args = parser.parse_args(argv)
    runs = 3 if args.quick else args.runs
    compileall.compile_dir(str(ROOT / "tenacity_budget"), quiet=1)

    programs: dict[str, list[int]] = {name: [] for name in PROGRAMS}
    for _ in range(max(9, runs)):
        for name, code in PROGRAMS.items():
            programs[name].append(wall_ns(code))
    program_medians = {name: statistics.median(v) for name, v in programs.items()}
    policy_ratio = program_medians[POLICY] / program_medians[FLOOR]

    samples: dict[str, list[int]] = {statement: [] for statement in STATEMENTS}
    for _ in range(runs):
        for statement, module in STATEMENTS.items():
            samples[statement].append(cumulative_us(statement, module))
    medians = {statement: statistics.median(values) for statement, values in samples.items()}
    reference = medians[REFERENCE]

    print(f"start-up cost, median of {runs} fresh interpreters (python -X importtime)")
    print(f"{'statement':<44}{'median':>12}{'vs tenacity':>14}")
    for statement, median in medians.items():
        print(f"{statement:<44}{median / 1000:>9.1f} ms{median / reference:>13.2f}x")
    ratio = medians[TARGET] / reference
    verdict = "met" if ratio <= 2.0 else "NOT MET"
    print(f"target (import tenacity_budget <= 2x import tenacity): {ratio:.2f}x -> {verdict}")
    runs_9 = len(programs[FLOOR])
    print(f"\nprocess wall time, median of {runs_9} fresh interpreters, interleaved")
    for name, median in program_medians.items():
        spread = (max(programs[name]) - min(programs[name])) / 1e6
        print(f"{name:<72}{median / 1e6:>8.1f} ms (spread {spread:.1f} ms)")
    met = "met" if policy_ratio <= 1.10 else "NOT MET"
    print(f"target (the policy's program <= 1.10x the floor): {policy_ratio:.3f}x -> {met}")

    if not args.quick:
        write_results(
            "import_time",
            command_line("benchmarks.import_time"),
            {
                "runs": runs,
                "median_us": medians,
                "samples_us": samples,
                "ratio_to_tenacity": {s: m / reference for s, m in medians.items()},
                "target_met": ratio <= 2.0,
                "programs_wall_ns": programs,
                "programs_median_ns": program_medians,
                "policy_to_floor": policy_ratio,
                "policy_target_met": policy_ratio <= 1.10,
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
