"""Benchmark: the cost of one ``RetryBudget`` operation, against a bare lock in the same run.

The reference is the floor any thread-safe counter pays: a method of a slotted object that
takes a :class:`threading.Lock` with ``with`` and increments an integer attribute. Timed
against it, interleaved batch by batch on the thread's CPU clock (``benchmarks._common``):

* ``deposit``: :meth:`RetryBudget.deposit` on the default budget;
* ``try_withdraw (granted)``: a budget whose floor (10**9 retries a window) never refuses,
  so every call pays for a withdrawal;
* ``try_withdraw (refused)``: ``RetryBudget(ratio=0, min_per_second=0)``, which refuses
  every call;
* ``balance``: the property, for information (no target).

The budgets run on the real monotonic clock, so their window rolls once per slice
(``ttl / 10``, one second for the defaults) as it would in production. Each round is one
interleaved timing of every candidate; a candidate's ratio in a round is the median over
batches of its batch time over the reference's batch timed right before it
(:func:`~benchmarks._common.paired_ratio`); the headline is the median over rounds, with
the rounds' lowest and highest ratio as the spread. Target (issue 16): ``try_withdraw`` and
``deposit`` at most 2x the bare lock. Run::

    python -m benchmarks.budget_ops [--rounds 7] [--repeat 40] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
from collections.abc import Callable
from typing import Any

from tenacity_budget import RetryBudget

from ._common import Timing, command_line, fmt_ns, interleaved, paired_ratio, write_results

__all__ = ["REFERENCE", "TARGET", "TARGETED", "LockedCounter", "build", "main", "run"]

REFERENCE = "lock + increment"
"""The candidate every ratio is taken against."""

TARGETED = ("deposit", "try_withdraw (granted)", "try_withdraw (refused)")
"""The operations the target applies to."""

TARGET = 2.0
"""The highest ratio to the reference the issue accepts for each targeted operation."""


class LockedCounter:
    """The reference: an integer incremented under a lock, the floor of a thread-safe count."""

    __slots__ = ("_lock", "count")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def increment(self) -> None:
        """Add one, under the lock."""
        with self._lock:
            self.count += 1


def build() -> dict[str, Callable[[], object]]:
    """One zero-argument callable per candidate, the reference first (bound methods)."""
    counter = LockedCounter()
    granting = RetryBudget(ratio=0, min_per_second=10**8, ttl=10)
    refusing = RetryBudget(ratio=0, min_per_second=0)
    if not granting.try_withdraw() or refusing.try_withdraw():
        raise RuntimeError("the granting budget must grant and the refusing one refuse")
    balance = RetryBudget()
    for _ in range(100):
        balance.deposit()

    def read_balance(budget: RetryBudget = balance) -> int:
        return budget.balance

    return {
        REFERENCE: counter.increment,
        "deposit": RetryBudget().deposit,
        "try_withdraw (granted)": granting.try_withdraw,
        "try_withdraw (refused)": refusing.try_withdraw,
        "balance": read_balance,
    }


def run(*, rounds: int, repeat: int) -> dict[str, Any]:
    """Time every candidate in ``rounds`` interleaved rounds; ratios to the reference."""
    if rounds < 1:
        raise ValueError("rounds must be >= 1")
    candidates = build()
    per_round: list[dict[str, Timing]] = [
        interleaved(candidates, repeat=repeat) for _ in range(rounds)
    ]
    operations: dict[str, Any] = {}
    for name in candidates:
        ratios = [paired_ratio(r[name], r[REFERENCE]) for r in per_round]
        median = statistics.median(ratios)
        operations[name] = {
            "min_ns": round(min(r[name].min_ns for r in per_round), 1),
            "median_ns": round(statistics.median(r[name].median_ns for r in per_round), 1),
            "ratio": round(median, 3),
            "ratio_rounds": [round(r, 3) for r in ratios],
            "spread": [round(min(ratios), 3), round(max(ratios), 3)],
            "spread_pct": round((max(ratios) - min(ratios)) / median * 100, 1),
        }
    return {
        "rounds": rounds,
        "repeat": repeat,
        "reference": REFERENCE,
        "operations": operations,
        "target": f"deposit and try_withdraw at most {TARGET}x the reference (median of the "
        "rounds' paired ratios)",
        "target_met": {name: bool(operations[name]["ratio"] <= TARGET) for name in TARGETED},
    }


def _print(result: dict[str, Any]) -> None:
    print(
        f"one budget operation vs {result['reference']!r}, {result['rounds']} rounds of "
        f"{result['repeat']} interleaved batches (thread CPU clock)"
    )
    print(f"{'operation':<26} {'min':>9} {'median':>9} {'ratio':>7}  rounds (spread)")
    for name, row in result["operations"].items():
        rounds = ", ".join(f"{r:.3f}" for r in row["ratio_rounds"])
        low, high = row["spread"]
        print(
            f"{name:<26} {fmt_ns(row['min_ns']):>9} {fmt_ns(row['median_ns']):>9} "
            f"{row['ratio']:>6.3f}x  {rounds} ({low:.3f}..{high:.3f}, {row['spread_pct']}%)"
        )
    for name, met in result["target_met"].items():
        verdict = "MET" if met else "NOT MET"
        ratio = result["operations"][name]["ratio"]
        print(f"target (<= {TARGET}x): {name}: {ratio:.3f}x -> {verdict}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds (>= 5)")
    parser.add_argument("--repeat", type=int, default=40, help="batches per candidate a round")
    parser.add_argument("--quick", action="store_true", help="2 rounds of 5, no result file")
    args = parser.parse_args(argv)
    rounds, repeat = (2, 5) if args.quick else (args.rounds, args.repeat)
    result = run(rounds=rounds, repeat=repeat)
    _print(result)
    if not args.quick:
        path = write_results("budget_ops", command_line("benchmarks.budget_ops"), result)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
