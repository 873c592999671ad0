"""The ``tenacity-budget`` command: ``plan`` prints a policy's retry schedule.

Usage: ``tenacity-budget plan [--base ...] [--max-elapsed ...] [--seed 7] [--json]`` (also
``python -m tenacity_budget plan --help``). Every figure counts what the solver counts
(``attempt_duration`` per call included), sums are exact before they are rounded, and a
bad input exits with status 2 and a one-line message. See docs/getting-started.md.
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
from fractions import Fraction
from typing import Any, NoReturn

from pydantic import ValidationError

from .jitter import jitter_bounds
from .policy import BackoffPolicy

__all__: list[str] = []  # a command (main, the console entry point), not an API

_DEFAULTS: dict[str, Any] = {
    "base": 1.0,
    "factor": 2.0,
    "cap": 60.0,
    "max_elapsed": 300.0,
    "jitter": "full",
    "attempt_duration": 0.0,
}
# --max-rows 0 prints every row, up to this many (a budget can afford 10**300 retries).
_MAX_ALL_ROWS = 1_000_000


@dataclass(frozen=True, slots=True)
class PlanRow:
    """One retry of a schedule.

    Attributes:
        retry: 1-based retry number (the call it precedes is ``retry + 1``).
        nominal: the nominal (capped) delay.
        low, high: the range jitter draws the wait from.
        wait: the wait sampled for this row.
        cumulative: total sampled wait so far.
        cumulative_nominal: total nominal delay so far (the exact sum, rounded once).
        calls: ``attempt_duration`` for each call so far, the first included:
            ``(retry + 1) * attempt_duration`` (0 without an attempt duration).
        budget_used: ``cumulative_nominal + calls`` (exactly) as a fraction of
            ``max_elapsed``: what the solver counts, so at most 1 for every affordable retry.
    """

    retry: int
    nominal: float
    low: float
    high: float
    wait: float
    cumulative: float
    cumulative_nominal: float
    calls: float
    budget_used: float


def plan_rows(policy: BackoffPolicy, rng: random.Random | None = None) -> Iterator[PlanRow]:
    """The schedule of ``policy`` row by row, lazily, sampling waits from ``rng``."""
    waited = nominal_total = Fraction(0)
    duration, budget = Fraction(policy.attempt_duration), Fraction(policy.max_elapsed)
    # The sampled waits are exactly the ones a run drawing from ``rng`` would sleep.
    sampled = zip(policy.nominal_delays(), policy.iter_waits(rng), strict=False)
    for index, (nominal, wait) in enumerate(sampled):
        waited += Fraction(wait)
        nominal_total += Fraction(nominal)
        calls = (index + 2) * duration
        low, high = jitter_bounds(policy.jitter, nominal, policy.base)
        yield PlanRow(
            retry=index + 1,
            nominal=nominal,
            low=low,
            high=high,
            wait=wait,
            cumulative=float(waited),
            cumulative_nominal=float(nominal_total),
            calls=float(calls),
            budget_used=float((nominal_total + calls) / budget),
        )


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block): ``prog: error: message``."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tenacity-budget",
        description="Retries that respect a deadline: inspect a backoff policy's budget.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    plan = commands.add_parser(
        "plan",
        help="print a policy's retry schedule against its budget",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description=(
            "Print one row per affordable retry: nominal delay, jitter range, a sampled "
            "wait and the cumulative time against the budget (with --attempt-duration, "
            "the cumulative figures and the budget share also count that long for every "
            "call so far); then the affordable retry count and total. Defaults: the "
            "design notes' example policy."
        ),
    )
    plan.add_argument("--base", type=float, default=_DEFAULTS["base"], help="first delay, s")
    plan.add_argument("--factor", type=float, default=_DEFAULTS["factor"], help="growth (> 1)")
    plan.add_argument("--cap", type=float, default=_DEFAULTS["cap"], help="max one delay, s")
    plan.add_argument(
        "--max-elapsed", type=float, default=_DEFAULTS["max_elapsed"], help="total budget, s"
    )
    plan.add_argument(
        "--jitter", default=_DEFAULTS["jitter"], help="none, full, equal or decorrelated"
    )
    plan.add_argument(
        "--attempt-duration",
        type=float,
        default=_DEFAULTS["attempt_duration"],
        help="seconds one attempt takes at most, counted in the budget for every call",
    )
    plan.add_argument("--seed", type=int, default=None, help="seed the sampled waits")
    plan.add_argument(
        "--max-rows",
        type=int,
        default=200,
        help=f"rows to print before eliding the rest (0: all; at most {_MAX_ALL_ROWS})",
    )
    plan.add_argument("--json", action="store_true", help="machine-readable output")
    return parser


def _num(x: float, width: int) -> str:
    """A figure in ``width`` columns: 3 decimals, or 4 significant digits when extreme."""
    if x == 0 or 1e-3 <= abs(x) < 1e12:
        return f"{x:>{width}.3f}"
    return f"{x:>{width}.4g}"


def _total(policy: BackoffPolicy) -> float:
    # The exact total is at most max_elapsed; the closed form of a huge prefix could round a
    # hair above it, which is not what the solver counted.
    return min(policy.total_nominal(), policy.max_elapsed)


def _totals(policy: BackoffPolicy) -> tuple[float, float, float]:
    """The whole schedule's nominal delay, its calls' time, and their share of the budget."""
    total = _total(policy)
    calls = Fraction(policy.attempt_duration) * (policy.max_attempts() + 1)
    used = min(Fraction(total) + calls, Fraction(policy.max_elapsed))
    return total, float(calls), float(used / Fraction(policy.max_elapsed))


def _format_table(policy: BackoffPolicy, rows: list[PlanRow], elided: int) -> str:
    timed = policy.attempt_duration > 0
    waited, bound = ("waits+calls s", "bound+calls s") if timed else ("cumulative s", "bound s")
    header = (
        f"{'retry':>7}  {'nominal s':>10}  {'jitter range s':>19}  {'wait s':>9}  "
        f"{waited:>12}  {bound:>10}  {'budget':>7}"
    )
    lines = [
        f"policy: base={policy.base:g} factor={policy.factor:g} cap={policy.cap:g} "
        f"max_elapsed={policy.max_elapsed:g} jitter={policy.jitter} "
        f"attempt_duration={policy.attempt_duration:g}",
    ]
    if timed:
        lines.append(
            f"counted: the delays so far plus {policy.attempt_duration:g} s for each call so "
            "far (retry + 1 calls), as the budget counts them"
        )
    lines += ["", header, "-" * len(header)]
    for row in rows:
        lines.append(
            f"{row.retry:>7}  {_num(row.nominal, 10)}  {_num(row.low, 8)} - "
            f"{_num(row.high, 8)}  {_num(row.wait, 9)}  "
            f"{_num(row.cumulative + row.calls, len(waited) if timed else 12)}  "
            f"{_num(row.cumulative_nominal + row.calls, len(bound) if timed else 10)}  "
            f"{row.budget_used:>6.1%}"
        )
    if elided:
        lines.append(f"{'...':>7}  ({elided} more retries not shown; --max-rows 0 shows all)")
    total, calls, used = _totals(policy)
    affordable = policy.max_attempts()
    lines += ["", f"affordable retries: {affordable} (at most {affordable + 1} calls)"]
    if timed:
        lines.append(
            f"total: {_num(total, 0)} s of nominal delay + {affordable + 1} calls x "
            f"{policy.attempt_duration:g} s = {_num(total + calls, 0)} s of "
            f"{policy.max_elapsed:g} s budget ({used:.1%}); jittered waits never exceed it"
        )
    else:
        lines.append(
            f"total nominal delay: {_num(total, 0)} s of {policy.max_elapsed:g} s budget "
            f"({used:.1%}); jittered waits never exceed it"
        )
    return "\n".join(lines)


def _describe(loc: tuple[int | str, ...], message: str) -> str:
    """One validation problem, named after the command-line option it came from."""
    if not loc:
        return message.removeprefix("Value error, ")
    return f"--{str(loc[0]).replace('_', '-')}: {message}"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 for bad options)."""
    parser = _parser()
    args = parser.parse_args(argv)
    fail = "tenacity-budget plan: error: "
    if args.max_rows < 0:
        parser.exit(2, f"{fail}--max-rows must be >= 0\n")
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
        parser.exit(2, f"{fail}invalid policy: {_one_line(problems)}\n")
    except (ValueError, TypeError, ArithmeticError) as error:
        parser.exit(2, f"{fail}invalid policy: {_one_line(str(error))}\n")
    affordable = policy.max_attempts()
    wanted = min(args.max_rows, affordable) if args.max_rows else affordable
    if wanted > _MAX_ALL_ROWS:
        parser.exit(
            2,
            f"{fail}--max-rows {args.max_rows} would print {wanted} rows (at most "
            f"{_MAX_ALL_ROWS}); pass a smaller row count\n",
        )
    try:
        rows = list(itertools.islice(plan_rows(policy, random.Random(args.seed)), wanted))
        text = _render(policy, rows, affordable - len(rows), args.seed, as_json=args.json)
    except (ValueError, TypeError, ArithmeticError) as error:  # pragma: no cover - defensive
        parser.exit(2, f"{fail}cannot plan this policy: {_one_line(str(error))}\n")
    try:
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly, like other CLIs
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keep interpreter exit quiet
    return 0


def _render(
    policy: BackoffPolicy, rows: list[PlanRow], elided: int, seed: int | None, *, as_json: bool
) -> str:
    if not as_json:
        return _format_table(policy, rows, elided)
    total, calls, used = _totals(policy)
    document = {
        "policy": policy.model_dump(mode="json"),
        "seed": seed,
        "max_attempts": policy.max_attempts(),
        "max_calls": policy.max_attempts() + 1,
        "total_nominal": total,
        "total_calls": calls,
        "budget_used": used,
        "budget": policy.max_elapsed,
        "rows": [asdict(row) for row in rows],
        "rows_elided": elided,
    }
    return json.dumps(document, indent=2, allow_nan=False)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
