"""Benchmark 1: the budget solver, constant time from a budget/base ratio of 1e1 to 1e300.

Times one ``compute_max_attempts`` call for budget/base ratios from ``1e1`` to ``1e300`` in
three regimes, next to the loop of the design notes this library started from (the
"seed", copied verbatim below) wherever that loop finishes, and shows where it raises
``OverflowError`` instead:

* ``capped``: ``cap = 60 * base``; almost every affordable retry waits the cap, so the
  affordable count grows like the ratio itself (``1.7e298`` retries at ``1e300``).
* ``geometric``: ``cap = budget``; no affordable delay reaches the cap, so the count grows
  like ``log2(ratio)`` (996 retries at ``1e300``) and the seed's loop always finishes.
* ``capped+duration``: the capped regime with ``attempt_duration = base / 2``.

Target (issue 5): constant time, the slowest ratio within 2x of the fastest.

Then (issue 9) the calls that pin the solver's exactness, each timed on its own:

* ``pair``: ``compute_max_attempts(1e300, 1e-300, 1.5, 1e10)`` against
  ``compute_max_attempts(10, 1, 2, 5)``, interleaved; target: at most 2x.
* ``issue``: the eight calls of the issue's table (five of them put the budget within an
  ulp of a partial sum, which only summing delays exactly can decide).
* ``adversarial``: budgets one ulp either side of a partial sum of thousands of nearly
  equal delays below the cap (the solver's slow path: the cost is one float power per
  delay summed), up to the slowest input found: a budget one ulp from a partial sum of
  ``2**14`` delays, the most the solver sums in one call before it raises ``ValueError``.

Target (issue 9): every call well under 50 µs.

Then (issue 16) ``construction``: ``BackoffPolicy(...)`` built whole (pydantic validation,
the solver, the capped index) for the slowest accepted inputs found, for inputs past the
line (timed to their refusal), and for a plain policy as the reference. Target: every
construction the policy accepts under 10 ms (per-call minimum, thread CPU time). Run::

    python -m benchmarks.solver [--repeat 60] [--quick] [--construction]
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from tenacity_budget import BackoffPolicy, compute_max_attempts
from tenacity_budget.solver._exact import _window

from ._common import Timing, command_line, fmt_ns, interleaved, paired_ratio, write_results

__all__ = [
    "CONSTRUCTION_CASES",
    "ISSUE_CASES",
    "PAIR",
    "RATIOS",
    "REGIMES",
    "Regime",
    "adversarial_cases",
    "construction_cases",
    "main",
    "run",
    "run_cases",
    "run_construction",
    "seed_compute_max_attempts",
    "seed_outcome",
]

RATIOS: tuple[float, ...] = (
    1e1,
    1e2,
    1e3,
    1e4,
    1e5,
    1e10,
    1e15,
    1e18,
    1e20,
    1e50,
    1e100,
    1e200,
    1e300,
)
"""The budget/base ratios timed (``base = 1``)."""


# --- the seed ---------------------------------------------------------------------------
# Copied from the design notes this project started from ("Configuring Exponential Backoff
# Within SLA Budgets", step 2). Kept verbatim, flaws included: it is the baseline.
def seed_compute_max_attempts(budget: float, base: float, factor: float, cap: float) -> int:
    """Largest attempt count whose total nominal delay stays within ``budget``.

    Sums capped exponential delays until the next one would exceed the remaining
    SLA window, guaranteeing the cumulative retry time can never breach it.
    """
    if budget <= 0:
        return 0
    elapsed = 0.0
    attempts = 0
    while True:
        delay = min(cap, base * factor**attempts)
        if elapsed + delay > budget:
            return attempts  # the next delay would overrun the budget
        elapsed += delay
        attempts += 1


@dataclass(frozen=True, slots=True)
class Regime:
    """One way of scaling the other parameters with the budget/base ratio."""

    name: str
    description: str
    cap: Callable[[float], float]
    attempt_duration: float
    has_seed: bool


REGIMES: tuple[Regime, ...] = (
    Regime("capped", "cap = 60 * base: the count grows like the ratio", lambda r: 60.0, 0.0, True),
    Regime("geometric", "cap = budget: the count grows like log2(ratio)", lambda r: r, 0.0, True),
    Regime(
        "capped+duration",
        "cap = 60 * base, attempt_duration = base / 2",
        lambda r: 60.0,
        0.5,
        False,
    ),
)
"""The regimes timed; ``base = 1`` and ``factor = 2`` throughout."""

Call = tuple[float, ...]

PAIR: tuple[Call, Call] = ((10, 1, 2, 5), (1e300, 1e-300, 1.5, 1e10))
"""Issue 9: the second at most 2x the time of the first."""

ISSUE_CASES: tuple[Call, ...] = (
    (100, 1e-306, 2, 60, 30),
    (1e12, 1e9, 1e300, 2e9),
    (
        3.3623008167629866e299,
        1.2385086827331192e-193,
        1.000000000000001,
        1.8659296150597552e60,
        1.242076400725152e296,
    ),
    (3.3372117570494043e283, 1.79e-211, 1.0000000007249579, 2.87e-190, 7.100450546913626e281),
    (1.5e308, 1.5e306, 3, 1.3e308, 1),
    (5.0952364962085985, 0.01, 1.001, 50.896777613142916),
    (268.1457858812036, 0.1, 1.0000040521554148, 3.84e189),
    (23875094.02853341, 0.11048075672548034, 1.1, 39341.0027613904),
)
"""The calls of issue 9's table, in its order."""


def _cost_units(n: int, base: float, factor: float) -> int:
    """The exact sum of the first ``n`` delays (all below the cap), in units of 2**-1074."""
    return _window(base, factor, 0, n)


def adversarial_cases(*, largest: int = 2**14) -> list[tuple[str, Call]]:
    """Budgets one ulp either side of the exact cost of ``n`` retries, all below the cap.

    The delays are nearly equal (a factor barely above 1), so no prefix can be bracketed
    away: deciding which side the budget lies on means summing most of them exactly.
    """
    out: list[tuple[str, Call]] = []
    for label, base, factor, n in (
        ("3000 delays, factor 1.001", 0.01, 1.001, 3000),
        ("2667 delays, factor 1 + 4e-6", 0.1, 1.0000040521554148, 2667),
        (f"{largest} delays, factor 1 + 2**-40 (slowest found)", 1.0, 1.0 + 2.0**-40, largest),
    ):
        exact = _cost_units(n, base, factor)
        nearest = exact / (1 << 1074)
        for side, budget in (
            ("below", math.nextafter(nearest, -math.inf)),
            ("above", math.nextafter(nearest, math.inf)),
        ):
            out.append((f"{label}, one ulp {side}", (budget, base, factor, 1e300)))
    return out


def _time_one(fn: Callable[[], object], repeat: int) -> Timing:
    return interleaved({"x": fn}, repeat=repeat)["x"]


def run_cases(*, repeat: int, quick: bool = False) -> dict[str, Any]:
    """Time the pair (interleaved), the issue's calls and the adversarial budgets."""
    small, big = (partial(compute_max_attempts, *args) for args in PAIR)
    pair = interleaved({"small": small, "big": big}, repeat=repeat)
    paired = paired_ratio(pair["big"], pair["small"])
    result: dict[str, Any] = {
        "pair": {
            "small": {"call": repr(PAIR[0]), **pair["small"].as_dict()},
            "big": {"call": repr(PAIR[1]), **pair["big"].as_dict()},
            "ratio_min": round(pair["big"].min_ns / pair["small"].min_ns, 3),
            "ratio_paired_median": round(paired, 3),
            "target": "big at most 2x small (per-call minimum)",
            "target_met": bool(pair["big"].min_ns <= 2 * pair["small"].min_ns),
        }
    }
    rows = []
    for args in ISSUE_CASES:
        timing = _time_one(partial(compute_max_attempts, *args), repeat)
        rows.append({"call": repr(args), "answer": compute_max_attempts(*args), **timing.as_dict()})
    result["issue"] = rows
    rows = []
    for label, args in adversarial_cases(largest=2**12 if quick else 2**14):
        slow = args[2] == 1.0 + 2.0**-40
        timing = _time_one(partial(compute_max_attempts, *args), 3 if slow else repeat)
        rows.append(
            {
                "case": label,
                "call": repr(args),
                "answer": compute_max_attempts(*args),
                **timing.as_dict(),
            }
        )
    result["adversarial"] = rows
    every = [*result["issue"], *result["adversarial"]]
    slowest = max(every, key=lambda row: row["min_ns"])
    result["slowest"] = {"call": slowest["call"], "min_ns": slowest["min_ns"]}
    result["under_50us"] = {
        "target": "every call under 50 µs (per-call minimum)",
        "issue_met": all(row["min_ns"] < 50_000 for row in result["issue"]),
        "issue_over": [row["call"] for row in result["issue"] if row["min_ns"] >= 50_000],
    }
    return result


CONSTRUCTION_CASES: tuple[tuple[str, dict[str, float]], ...] = (
    ("plain: base 1, cap 60, max_elapsed 300 (the reference)", {"base": 1.0, "cap": 60.0}),
    (
        "16080 subnormal delays, factor 1 + 2**-45, decided twice (slowest found)",
        {
            "max_elapsed": 4.051625e-318,
            "base": 2.5e-322,
            "factor": 1.0000000000000284,
            "cap": 2.52e-321,
        },
    ),
    (
        "3000 subnormal delays, factor 1 + 1e-6, decided six times",
        {"max_elapsed": 1.482e-320, "base": 5e-324, "factor": 1.000001, "cap": 5e-323},
    ),
    (
        "3036 subnormal delays of one unit, factor 1 + 2**-40",
        {"max_elapsed": 1.5e-320, "base": 5e-324, "factor": 1.0 + 2.0**-40, "cap": 1e-320},
    ),
    (
        "5013 subnormal delays and attempt_duration, factor 1.0001, decided 14 times",
        {
            "max_elapsed": 7.905e-320,
            "base": 5e-324,
            "factor": 1.0001,
            "cap": 5e-323,
            "attempt_duration": 1e-323,
        },
    ),
    (
        "past the line: 202402 subnormal delays, factor 1 + 2**-40 (refused)",
        {"max_elapsed": 1e-318, "base": 5e-324, "factor": 1.0 + 2.0**-40, "cap": 1e-320},
    ),
)
"""``BackoffPolicy`` keywords (``jitter="none"``; ``max_elapsed`` 300 unless given) timed
whole; :func:`construction_cases` adds budgets one ulp from a partial sum of ``2**14 - 1``
and ``2**14 + 1`` delays."""


def construction_cases() -> list[tuple[str, dict[str, float]]]:
    """:data:`CONSTRUCTION_CASES` plus budgets one ulp from partial sums near the line."""
    out = list(CONSTRUCTION_CASES)
    base, factor = 1.0, 1.0 + 2.0**-40
    for n in (2**14 - 1, 2**14 + 1, 20_000):
        nearest = _cost_units(n, base, factor) / (1 << 1074)
        for side, budget in (
            ("below", math.nextafter(nearest, -math.inf)),
            ("above", math.nextafter(nearest, math.inf)),
        ):
            kwargs = {"max_elapsed": budget, "base": base, "factor": factor, "cap": 1e4}
            out.append((f"{n} delays, factor 1 + 2**-40, one ulp {side}", kwargs))
    return out


_COSTLIEST_SUMS: tuple[tuple[str, tuple[float, float]], ...] = (
    ("base 1, factor 1 + 2**-40", (1.0, 1.0 + 2.0**-40)),
    ("base 1e306, factor 1 + 2**-40 (sums past the float range)", (1e306, 1.0 + 2.0**-40)),
    ("base 5e-324, factor 1.04 (subnormal to 1e-45)", (5e-324, 1.04)),
    ("base 1e-300, factor 1.02", (1e-300, 1.02)),
)


def _construct(kwargs: dict[str, float]) -> int | str:
    """``BackoffPolicy(**kwargs).max_attempts()``, or ``"refused"`` for a ``ValueError``."""
    try:
        keywords: dict[str, Any] = {"max_elapsed": 300.0, "jitter": "none", **kwargs}
        return BackoffPolicy(**keywords).max_attempts()
    except ValueError:
        return "refused"


def run_construction(*, repeat: int) -> dict[str, Any]:
    """Time every construction case, interleaved; the slowest accepted against 10 ms."""
    cases = construction_cases()
    timings = interleaved({label: partial(_construct, kw) for label, kw in cases}, repeat=repeat)
    reference = timings[cases[0][0]]
    rows: list[dict[str, Any]] = []
    for label, kwargs in cases:
        timing = timings[label]
        rows.append(
            {
                "case": label,
                "kwargs": {key: repr(value) for key, value in kwargs.items()},
                "outcome": _construct(kwargs),
                "over_plain": round(paired_ratio(timing, reference), 2),
                **timing.as_dict(),
            }
        )
    # The line itself: 2**14 delays summed exactly, of the costliest kinds found.
    sums = interleaved(
        {label: partial(_window, *args, 0, 2**14) for label, args in _COSTLIEST_SUMS},
        repeat=max(3, repeat // 4),
    )
    line = [{"delays": label, **sums[label].as_dict()} for label, _ in _COSTLIEST_SUMS]
    accepted = [row for row in rows if row["outcome"] != "refused"]
    slowest = max(accepted, key=lambda row: row["min_ns"])
    return {
        "rows": rows,
        "line": line,
        "slowest_accepted": {"case": slowest["case"], "min_ns": slowest["min_ns"]},
        "slowest_refused_ns": max(
            (row["min_ns"] for row in rows if row["outcome"] == "refused"), default=0.0
        ),
        "target": "every accepted construction under 10 ms (per-call minimum)",
        "target_met": bool(slowest["min_ns"] < 10_000_000),
    }


def _print_construction(result: dict[str, Any]) -> None:
    print("\n[construction] BackoffPolicy(...) built whole, thread CPU time")
    print(f"{'min':>10}  {'median':>10}  {'x plain':>8}  {'outcome':>8}  case")
    for row in result["rows"]:
        print(
            f"{fmt_ns(row['min_ns']):>10}  {fmt_ns(row['median_ns']):>10}  "
            f"{row['over_plain']:>7.1f}x  {row['outcome']!s:>8}  {row['case']}"
        )
    for row in result["line"]:
        print(
            f"{fmt_ns(row['min_ns']):>10}  the line: 2**14 delays summed exactly, {row['delays']}"
        )
    slowest = result["slowest_accepted"]
    print(
        f"slowest accepted: {fmt_ns(slowest['min_ns'])} ({slowest['case']}); slowest refusal: "
        f"{fmt_ns(result['slowest_refused_ns'])}\ntarget (every accepted construction under "
        f"10 ms): {'MET' if result['target_met'] else 'NOT MET'}"
    )


def seed_outcome(budget: float, base: float, factor: float, cap: float) -> int | str:
    """What the seed's loop returns for these parameters, or the error it raises, by name.

    The loop computes ``factor ** attempts`` in floats, so it raises ``OverflowError`` as
    soon as it needs more than 1023 iterations with ``factor = 2``: for any budget that
    affords more than 1023 retries.
    """
    try:
        return seed_compute_max_attempts(budget, base, factor, cap)
    except OverflowError as exc:
        return f"OverflowError: {exc}"


def _seed_until_done(budget: float, base: float, factor: float, cap: float) -> None:
    with contextlib.suppress(OverflowError):
        seed_compute_max_attempts(budget, base, factor, cap)


def run(*, repeat: int, ratios: tuple[float, ...] = RATIOS) -> dict[str, Any]:
    """Time every (regime, ratio) for ours and the seed, interleaved; return the figures."""
    base, factor = 1.0, 2.0
    candidates: dict[str, Callable[[], object]] = {}
    rows: list[dict[str, Any]] = []
    for regime in REGIMES:
        for ratio in ratios:
            budget, cap, duration = ratio * base, regime.cap(ratio), regime.attempt_duration
            key = f"{regime.name}:{ratio:g}"
            candidates[f"ours:{key}"] = partial(
                compute_max_attempts, budget, base, factor, cap, duration
            )
            row: dict[str, Any] = {
                "regime": regime.name,
                "ratio": ratio,
                "cap": cap,
                "attempt_duration": duration,
                "affordable": str(compute_max_attempts(budget, base, factor, cap, duration)),
            }
            if regime.has_seed:
                outcome = seed_outcome(budget, base, factor, cap)
                row["seed"] = outcome if isinstance(outcome, str) else str(outcome)
                row["seed_agrees"] = (
                    None if isinstance(outcome, str) else str(outcome) == row["affordable"]
                )
                candidates[f"seed:{key}"] = partial(_seed_until_done, budget, base, factor, cap)
            rows.append(row)
    timings = interleaved(candidates, repeat=repeat)
    for row in rows:
        key = f"{row['regime']}:{row['ratio']:g}"
        row["ours"] = timings[f"ours:{key}"].as_dict()
        seed: Timing | None = timings.get(f"seed:{key}")
        if seed is not None:
            row["seed_time"] = seed.as_dict()
    return {"rows": rows, "summary": _summary(rows)}


def _spread(rows: list[dict[str, Any]], stat: str) -> dict[str, Any]:
    values = [(row["ours"][stat], row["ratio"]) for row in rows]
    fastest, slowest = min(values), max(values)
    return {
        "fastest_ns": fastest[0],
        "fastest_ratio": fastest[1],
        "slowest_ns": slowest[0],
        "slowest_ratio": slowest[1],
        "slowest_over_fastest": round(slowest[0] / fastest[0], 3),
    }


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for regime in [*(r.name for r in REGIMES), "all"]:
        subset = [row for row in rows if regime in ("all", row["regime"])]
        summary[regime] = {"min": _spread(subset, "min_ns"), "median": _spread(subset, "median_ns")}
    overall = summary["all"]["min"]["slowest_over_fastest"]
    summary["target"] = "slowest ratio within 2x of the fastest (per-call minimum)"
    summary["target_met"] = bool(overall <= 2.0)
    return summary


def _print(result: dict[str, Any]) -> None:
    for regime in REGIMES:
        print(f"\n[{regime.name}] {regime.description}")
        print(f"{'budget/base':>11}  {'retries':>10}  {'ours min':>10}  {'ours med':>10}  seed")
        for row in result["rows"]:
            if row["regime"] != regime.name:
                continue
            retries = row["affordable"]
            if len(retries) > 10:
                retries = f"{float(retries):.3g}"
            seed = "-"
            if "seed" in row:
                seed_time = fmt_ns(row["seed_time"]["min_ns"])
                if row["seed"].startswith("OverflowError"):
                    seed = f"raises OverflowError after {seed_time}"
                else:
                    ratio = row["seed_time"]["min_ns"] / row["ours"]["min_ns"]
                    agree = "agrees" if row["seed_agrees"] else "DISAGREES"
                    seed = f"{seed_time} ({ratio:.1f}x ours, {agree})"
            print(
                f"{row['ratio']:>11g}  {retries:>10}  {fmt_ns(row['ours']['min_ns']):>10}  "
                f"{fmt_ns(row['ours']['median_ns']):>10}  {seed}"
            )
    print()
    for regime, spread in result["summary"].items():
        if not isinstance(spread, dict):
            continue
        lo, md = spread["min"], spread["median"]
        print(
            f"{regime:>16}: slowest/fastest = {lo['slowest_over_fastest']:.2f}x (min), "
            f"{md['slowest_over_fastest']:.2f}x (median); slowest at {lo['slowest_ratio']:g}"
        )
    verdict = "MET" if result["summary"]["target_met"] else "NOT MET"
    print(f"target (slowest within 2x of fastest, overall, min): {verdict}")


def _print_cases(cases: dict[str, Any]) -> None:
    pair = cases["pair"]
    print(
        f"\n[pair] {pair['big']['call']}: {fmt_ns(pair['big']['min_ns'])} against "
        f"{pair['small']['call']}: {fmt_ns(pair['small']['min_ns'])} = "
        f"{pair['ratio_min']:.2f}x (min), {pair['ratio_paired_median']:.2f}x (paired median); "
        f"target 2x: {'MET' if pair['target_met'] else 'NOT MET'}"
    )
    print("\n[issue] the calls of issue 9's table")
    for row in cases["issue"]:
        print(
            f"{fmt_ns(row['min_ns']):>10}  {fmt_ns(row['median_ns']):>10}  "
            f"{row['answer']:>6}  {row['call']}"
        )
    print("\n[adversarial] one ulp from a partial sum of nearly equal delays")
    for row in cases["adversarial"]:
        print(
            f"{fmt_ns(row['min_ns']):>10}  {fmt_ns(row['median_ns']):>10}  "
            f"{row['answer']:>8}  {row['case']}"
        )
    verdict = cases["under_50us"]
    print(
        f"\nslowest found: {fmt_ns(cases['slowest']['min_ns'])} for {cases['slowest']['call']}"
        f"\ntarget (every issue call under 50 µs): "
        f"{'MET' if verdict['issue_met'] else 'NOT MET'}"
        + (f" (over: {len(verdict['issue_over'])} calls)" if verdict["issue_over"] else "")
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=60, help="batches per candidate")
    parser.add_argument("--quick", action="store_true", help="5 repeats, no result file")
    parser.add_argument(
        "--construction", action="store_true", help="only the construction cases, no file"
    )
    args = parser.parse_args(argv)
    if args.construction:
        _print_construction(run_construction(repeat=5 if args.quick else args.repeat))
        return 0
    result = run(repeat=5 if args.quick else args.repeat)
    result["cases"] = run_cases(repeat=5 if args.quick else args.repeat, quick=args.quick)
    _print(result)
    _print_cases(result["cases"])
    result["construction"] = run_construction(repeat=5 if args.quick else args.repeat)
    _print_construction(result["construction"])
    if not args.quick:
        path = write_results("solver", command_line("benchmarks.solver"), result)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
