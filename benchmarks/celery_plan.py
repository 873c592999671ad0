"""Benchmark: what planning one Celery retry costs, at retry 10 and at retry 10,000.

A worker plans each retry of a budgeted task from the message it runs: where the run stands
in its seeded schedule, the decision, and the headers of the retry's message. Two paths:

* ``header``: the message carries its run's cursor (``SCHEDULE_HEADER``): one step of the
  schedule from it, then the next cursor encoded (O(1) per retry);
* ``replay``: a message without it (published by the version before the header) replays
  the schedule from retry 0 once, keeping the exact sum as partials to hand the cursor on
  (O(n), once per run: its next message carries the cursor);
* ``plan_retry (the version before)``: the public :func:`plan_retry`, which replays as
  every retry did before the header (O(n) per retry, O(n^2) per run).

The policy is a one-month budget (``base=1, cap=60, max_elapsed=30 days, jitter="full"``,
about 43,000 retries). Timed interleaved on the thread's CPU clock
(``benchmarks._common``), the median over rounds of each candidate's median batch, with the
rounds' spread. Run::

    python -m benchmarks.celery_plan [--rounds 5] [--repeat 15] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from tenacity_budget import BackoffPolicy
from tenacity_budget.celery import plan_retry
from tenacity_budget.celery._plan import (
    _encode_cursor,
    _plan_retry,
    _replay_schedule,
    _schedule_position,
)

from ._common import command_line, fmt_ns, interleaved, write_results

__all__ = ["POLICY", "RETRIES", "build", "main", "run"]

POLICY = BackoffPolicy(base=1, cap=60, max_elapsed=30 * 86_400, jitter="full")
"""A one-month budget: tens of thousands of retries."""

RETRIES = (10, 10_000)
"""The retries at which one retry is planned."""

_TASK = "celery-plan-benchmark"
_T0 = datetime(2026, 3, 2, tzinfo=UTC)


def _planner(retries: int, header: str | None) -> Callable[[], object]:
    """One retry planned as the worker plans it: position, decision, next cursor."""
    slept = _replay_schedule(POLICY, _TASK, retries).slept
    now = _T0 + timedelta(seconds=slept + retries)

    def plan() -> object:
        position, fingerprint = _schedule_position(POLICY, _TASK, retries, header)
        result = _plan_retry(
            POLICY,
            task_id=_TASK,
            retries=retries,
            started=_T0,
            now=now,
            deadline=None,
            longest=0.0,
            position=position,
        )
        assert result.countdown is not None
        assert position.after is not None
        return _encode_cursor(position.after, fingerprint)

    return plan


def build(retries: int) -> dict[str, Callable[[], object]]:
    """The two candidates at retry ``retries``: from the message's cursor, and replayed."""
    before = _replay_schedule(POLICY, _TASK, retries - 1, cursor=True)
    assert before.after is not None
    fingerprint = _schedule_position(POLICY, _TASK, 0)[1]
    header = _encode_cursor(before.after, fingerprint)
    slept = _replay_schedule(POLICY, _TASK, retries).slept
    now = _T0 + timedelta(seconds=slept + retries)

    def before_header() -> object:
        # The previous version's per-retry work: the public plan_retry replays from retry 0.
        return plan_retry(POLICY, task_id=_TASK, retries=retries, started=_T0, now=now)

    return {
        "header": _planner(retries, header),
        "replay": _planner(retries, None),
        "plan_retry (the version before)": before_header,
    }


def run(rounds: int, repeat: int, retries: tuple[int, ...] = RETRIES) -> dict[str, Any]:
    """Per-retry cost of each path at each of ``retries``, over ``rounds`` rounds."""
    figures: dict[str, Any] = {}
    for n in retries:
        candidates = build(n)
        medians: dict[str, list[float]] = {name: [] for name in candidates}
        for _ in range(rounds):
            timings = interleaved(candidates, repeat=repeat)
            for name, timing in timings.items():
                medians[name].append(timing.median_ns)
        figures[str(n)] = {
            name: {
                "median_ns": round(statistics.median(values), 1),
                "low_ns": round(min(values), 1),
                "high_ns": round(max(values), 1),
            }
            for name, values in medians.items()
        }
    return {"policy_retries": POLICY.max_attempts(), "per_retry": figures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="1 round, 3 batches, no file")
    args = parser.parse_args(argv)
    rounds, repeat = (1, 3) if args.quick else (args.rounds, args.repeat)
    data = run(rounds, repeat)
    print(f"one-month policy: {data['policy_retries']} retries")
    for n, figures in data["per_retry"].items():
        line = ", ".join(
            f"{name} {fmt_ns(f['median_ns'])} ({fmt_ns(f['low_ns'])}-{fmt_ns(f['high_ns'])})"
            for name, f in figures.items()
        )
        print(f"retry {n}: {line}")
    if not args.quick:
        path = write_results("celery_plan", command_line("benchmarks.celery_plan"), data)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
