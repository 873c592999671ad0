"""Shared helpers of the benchmarks: interleaved timing, machine facts and result files.

Timing follows :mod:`timeit`'s rules (garbage collector off during a batch, the fastest of
several batches is the least disturbed one), with three changes that matter on a machine
shared with other processes:

* batches are timed on the thread's CPU clock (:data:`CLOCK`), so time spent preempted by
  a neighbour is not counted;
* candidates compared with each other are timed *interleaved*, one batch of each in turn,
  repeat after repeat, so a slow spell slows all of them alike instead of skewing a ratio;
* batches are short (about 2 ms) and many, so the per-call minimum comes from an
  undisturbed batch.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import timeit
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "CLOCK",
    "RESULTS_DIR",
    "Timing",
    "calibrate",
    "callgrind_per_unit",
    "command_line",
    "fmt_ns",
    "interleaved",
    "machine",
    "noop_sleep",
    "paired_ratio",
    "write_results",
]

CLOCK = time.thread_time
"""The clock every batch is timed with: CPU time of the calling thread. On a machine shared
with other processes, time spent preempted is not counted, so a neighbour's burst of load
cannot inflate one candidate's figure; the work timed here is pure CPU (sleeps are no-ops)."""

RESULTS_DIR = Path(__file__).resolve().parent / "results"
"""Where every benchmark leaves its JSON file."""

ROOT = RESULTS_DIR.parent.parent
"""The repository root, where ``python -m benchmarks.<name>`` runs."""


def noop_sleep(seconds: float) -> None:
    """A ``sleep`` that returns at once: the benchmarks time the machinery, not the waits."""


@dataclass(frozen=True, slots=True)
class Timing:
    """Per-call time of one candidate: the best and the median of ``repeat`` batches.

    Attributes:
        number: calls per batch.
        repeat: batches timed.
        min_ns: the fastest batch, in nanoseconds per call (the least disturbed figure).
        median_ns: the median batch, in nanoseconds per call.
        samples_ns: every batch, in the order timed (per call; not written to JSON).
    """

    number: int
    repeat: int
    min_ns: float
    median_ns: float
    samples_ns: tuple[float, ...] = ()

    def as_dict(self) -> dict[str, float | int]:
        """Plain values for the JSON result files."""
        return {
            "number": self.number,
            "repeat": self.repeat,
            "min_ns": round(self.min_ns, 1),
            "median_ns": round(self.median_ns, 1),
        }


def calibrate(fn: Callable[[], object], target_s: float) -> int:
    """Calls per batch so that one batch of ``fn`` takes about ``target_s`` seconds."""
    timer = timeit.Timer(fn, timer=CLOCK)
    number = 1
    while True:
        took = timer.timeit(number)
        if took >= target_s / 4 or number >= 1 << 30:
            break
        number *= 4
    return max(1, round(number * target_s / max(took, 1e-9)))


def interleaved(
    candidates: Mapping[str, Callable[[], object]],
    *,
    repeat: int = 25,
    target_s: float = 0.002,
) -> dict[str, Timing]:
    """Time each candidate in interleaved batches; per-call min and median, in ns.

    Args:
        candidates: name to a zero-argument callable (one call is one unit of work).
        repeat: batches per candidate.
        target_s: rough duration of one batch.
    """
    timers = {name: timeit.Timer(fn, timer=CLOCK) for name, fn in candidates.items()}
    numbers = {name: calibrate(fn, target_s) for name, fn in candidates.items()}
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeat):
        for name, timer in timers.items():
            number = numbers[name]
            samples[name].append(timer.timeit(number) / number * 1e9)
    return {
        name: Timing(
            number=numbers[name],
            repeat=repeat,
            min_ns=min(values),
            median_ns=statistics.median(values),
            samples_ns=tuple(values),
        )
        for name, values in samples.items()
    }


def paired_ratio(candidate: Timing, reference: Timing) -> float:
    """Median over interleaved batches of ``candidate / reference``, batch by batch.

    Both must come from the same :func:`interleaved` call, so batch ``i`` of each was timed
    back to back: the pairing cancels slow drifts of the machine that the ratio of two
    minima or two medians would not.
    """
    pairs = zip(candidate.samples_ns, reference.samples_ns, strict=True)
    return statistics.median(c / r for c, r in pairs)


def fmt_ns(ns: float) -> str:
    """A duration in ns as a short human figure (``812 ns``, ``3.41 µs``, ``2.05 ms``)."""
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        return f"{ns / 1_000:.2f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1_000_000:.2f} ms"
    return f"{ns / 1_000_000_000:.2f} s"


def _cpu_model() -> str:
    lscpu = shutil.which("lscpu")
    if lscpu is not None:
        try:
            out = subprocess.run([lscpu], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            out = ""
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name":
                return value.strip()
    return platform.processor() or platform.machine()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _commit() -> str | None:
    """The repository's commit, ``+dirty`` when the library's sources differ from it."""
    git = shutil.which("git")
    if git is None:
        return None
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            [git, "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            [git, "status", "--porcelain", "--", "tenacity_budget"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return None
    return (head + ("+dirty" if dirty else "")) or None


def machine() -> dict[str, Any]:
    """The facts a reader needs to weigh the numbers: CPU, cores, Python, library versions."""
    return {
        "commit": _commit(),
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "packages": {
            name: _version(name)
            for name in ("tenacity-budget", "tenacity", "stamina", "backoff", "pydantic")
        },
    }


def write_results(name: str, command: str, data: Mapping[str, Any]) -> Path:
    """Write ``benchmarks/results/<name>.json`` with the machine, command and date."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    payload = {
        "benchmark": name,
        "command": command,
        "date": datetime.now(UTC).date().isoformat(),
        "machine": machine(),
        **data,
    }
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def callgrind_per_unit(module: str, *args: str, small: int = 100, large: int = 600) -> float:
    """Instructions per unit of work of ``python -m <module> <args...> <units>``, counted by
    valgrind's callgrind (a figure the machine's load does not move): the difference of a
    run of ``large`` units and one of ``small``, so start-up and imports cancel out. String
    hashing is seeded alike in every run (``PYTHONHASHSEED=0``): randomised, it moves a
    count by up to about 1% from run to run."""
    counts = []
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    for units in (small, large):
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
        command += [sys.executable, "-m", module, *args, str(units)]
        out = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, check=True
        ).stderr
        counts.append(int(out.rsplit("Collected :", 1)[1].split()[0]))
    return (counts[1] - counts[0]) / (large - small)


def command_line(module: str) -> str:
    """The command that reproduces this run, as typed from the repository root."""
    args = " ".join(sys.argv[1:])
    return f"python -m {module}" + (f" {args}" if args else "")
