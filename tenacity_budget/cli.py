"""The ``tenacity-budget`` command: ``plan`` prints a policy's retry schedule.

Usage::

    tenacity-budget plan                     # the design notes' example policy
    tenacity-budget plan --max-elapsed 2592000 --cap 60 --seed 7
    tenacity-budget plan --jitter none --json
    python -m tenacity_budget plan --help

Bad options exit with status 2 and the validation message, never a traceback.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pydantic import ValidationError

from .jitter import jitter_bounds
from .policy import BackoffPolicy

__all__ = ["PlanRow", "main", "plan_rows"]

_DEFAULTS: dict[str, Any] = {
    "base": 1.0,
    "factor": 2.0,
    "cap": 60.0,
    "max_elapsed": 300.0,
    "jitter": "full",
    "attempt_duration": 0.0,
}


@dataclass(frozen=True, slots=True)
class PlanRow:
    """One retry of a schedule.

    Attributes:
        retry: 1-based retry number (the call it precedes is ``retry + 1``).
        nominal: the nominal (capped) delay.
        low, high: the range jitter draws the wait from.
        wait: the wait sampled for this row.
        cumulative: total sampled wait so far.
        cumulative_nominal: total nominal delay so far (the solver's bound).
        budget_used: ``cumulative_nominal`` plus this many attempts' ``attempt_duration``,
            as a fraction of ``max_elapsed``.
    """

    retry: int
    nominal: float
    low: float
    high: float
    wait: float
    cumulative: float
    cumulative_nominal: float
    budget_used: float


def plan_rows(policy: BackoffPolicy, rng: random.Random | None = None) -> Iterator[PlanRow]:
    """The schedule of ``policy`` row by row, lazily, sampling waits from ``rng``."""
    cumulative = cumulative_nominal = 0.0
    # The sampled waits are exactly the ones a run drawing from ``rng`` would sleep.
    sampled = zip(policy.nominal_delays(), policy.iter_waits(rng), strict=False)
    for index, (nominal, wait) in enumerate(sampled):
        cumulative += wait
        cumulative_nominal += nominal
        low, high = jitter_bounds(policy.jitter, nominal, policy.base)
        used = cumulative_nominal + (index + 2) * policy.attempt_duration
        yield PlanRow(
            retry=index + 1,
            nominal=nominal,
            low=low,
            high=high,
            wait=wait,
            cumulative=cumulative,
            cumulative_nominal=cumulative_nominal,
            budget_used=used / policy.max_elapsed,
        )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tenacity-budget",
        description="Retries that respect a deadline: inspect a backoff policy's budget.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    plan = commands.add_parser(
        "plan",
        help="print a policy's retry schedule against its budget",
        description=(
            "Print one row per affordable retry: nominal delay, jitter range, a sampled "
            "wait and the cumulative time against the budget; then the affordable retry "
            "count and total. Defaults: the design notes' example policy."
        ),
    )
    plan.add_argument("--base", type=float, default=_DEFAULTS["base"], help="first delay, s")
    plan.add_argument("--factor", type=float, default=_DEFAULTS["factor"], help="growth (> 1)")
    plan.add_argument("--cap", type=float, default=_DEFAULTS["cap"], help="max one delay, s")
    plan.add_argument(
        "--max-elapsed", type=float, default=_DEFAULTS["max_elapsed"], help="total budget, s"
    )
    plan.add_argument(
        "--jitter",
        default=_DEFAULTS["jitter"],
        help="none, full, equal or decorrelated (default: full)",
    )
    plan.add_argument(
        "--attempt-duration",
        type=float,
        default=_DEFAULTS["attempt_duration"],
        help="seconds one attempt takes at most, counted in the budget",
    )
    plan.add_argument("--seed", type=int, default=None, help="seed the sampled waits")
    plan.add_argument(
        "--max-rows",
        type=int,
        default=200,
        help="rows to print before eliding the rest (default 200; 0 for all)",
    )
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _format_table(policy: BackoffPolicy, rows: list[PlanRow], elided: int) -> str:
    header = (
        f"{'retry':>7}  {'nominal s':>10}  {'jitter range s':>19}  {'wait s':>9}  "
        f"{'cumulative s':>12}  {'bound s':>10}  {'budget':>7}"
    )
    lines = [
        f"policy: base={policy.base:g} factor={policy.factor:g} cap={policy.cap:g} "
        f"max_elapsed={policy.max_elapsed:g} jitter={policy.jitter} "
        f"attempt_duration={policy.attempt_duration:g}",
        "",
        header,
        "-" * len(header),
    ]
    for row in rows:
        lines.append(
            f"{row.retry:>7}  {row.nominal:>10.3f}  {row.low:>8.3f} - {row.high:>8.3f}  "
            f"{row.wait:>9.3f}  {row.cumulative:>12.3f}  {row.cumulative_nominal:>10.3f}  "
            f"{row.budget_used:>6.1%}"
        )
    if elided:
        lines.append(f"{'...':>7}  ({elided} more retries not shown; --max-rows 0 shows all)")
    total = policy.total_nominal()
    lines += [
        "",
        f"affordable retries: {policy.max_attempts()} (at most {policy.max_attempts() + 1} calls)",
        f"total nominal delay: {total:.3f} s of {policy.max_elapsed:g} s budget "
        f"({total / policy.max_elapsed:.1%}); jittered waits never exceed it",
    ]
    return "\n".join(lines)


def _describe(loc: tuple[int | str, ...], message: str) -> str:
    """One validation problem, named after the command-line option it came from."""
    if not loc:
        return message.removeprefix("Value error, ")
    return f"--{str(loc[0]).replace('_', '-')}: {message}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for bad options)."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.max_rows < 0:
        parser.error("--max-rows must be >= 0")
    try:
        policy = BackoffPolicy(
            base=args.base,
            factor=args.factor,
            cap=args.cap,
            max_elapsed=args.max_elapsed,
            jitter=args.jitter,
            attempt_duration=args.attempt_duration,
        )
    except ValidationError as error:
        problems = "; ".join(_describe(e["loc"], e["msg"]) for e in error.errors())
        parser.exit(2, f"tenacity-budget plan: error: invalid policy: {problems}\n")
    rng = random.Random(args.seed)
    limit = args.max_rows or None
    rows = list(itertools.islice(plan_rows(policy, rng), limit))
    elided = policy.max_attempts() - len(rows)
    try:
        _emit(policy, rows, elided, args.seed, as_json=args.json)
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly, like other CLIs
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keep interpreter exit quiet
    return 0


def _emit(
    policy: BackoffPolicy, rows: list[PlanRow], elided: int, seed: int | None, *, as_json: bool
) -> None:
    if as_json:
        document = {
            "policy": policy.model_dump(mode="json"),
            "seed": seed,
            "max_attempts": policy.max_attempts(),
            "max_calls": policy.max_attempts() + 1,
            "total_nominal": policy.total_nominal(),
            "budget": policy.max_elapsed,
            "rows": [asdict(row) for row in rows],
            "rows_elided": elided,
        }
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(_format_table(policy, rows, elided))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
