"""Render the benchmark results into ``docs/benchmarks.md``, ``benchmarks/README.md`` and figures.

Reads ``benchmarks/results/*.json`` (the files in :data:`RESULTS`, written by the benchmark
commands) and the shape figures :func:`benchmarks.shape.measure` computes from the code now,
and

* replaces every generated block of ``docs/benchmarks.md`` and ``benchmarks/README.md``
  (the lines between ``<!-- BEGIN GENERATED: name -->`` and
  ``<!-- END GENERATED: name -->``) with tables made from them, leaving the prose alone;
  the README holds the issue 16 ``targets`` and ``shape`` tables, the same as the docs';
* draws ``docs/figures/contention-*.svg`` and ``storm.svg`` deterministically (fixed
  ``svg.hashsalt``, no date in the metadata): the same results give the same bytes.

So the numbers and figures in the docs come from the same runs. Run::

    python -m benchmarks.report            # rewrite the tables and the figures
    python -m benchmarks.report --check    # exit 1 if any is stale (for CI)
"""

from __future__ import annotations

import argparse
import io
import json
import math
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._common import RESULTS_DIR, fmt_ns

__all__ = [
    "FIGURES",
    "OVERHEAD_TARGETS",
    "STORM_FIGURES",
    "blocks",
    "figures",
    "main",
    "overload_figures",
    "readme_blocks",
    "render_doc",
    "storm_blocks",
    "storm_figures",
    "tail_blocks",
    "tail_figures",
]

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
README = ROOT / "benchmarks" / "README.md"
RESULTS = (
    "solver",
    "overhead",
    "memory",
    "contention",
    "storm",
    "transport",
    "http_clients",
    "celery_plan",
    "budget_ops",
    "import_time",
    "overload",
    "tail",
)
"""The results files this script reads, in the order of the machine table."""
FIGURE_DIR = ROOT / "docs" / "figures"
FIGURES = ("contention-writes.svg", "contention-time.svg", "contention-budget.svg")
STORM_FIGURES = ("storm.svg",)
"""The retry-storm figure, also this script's, in ``docs/figures``."""
TAIL_FIGURES = ("tail-simulated.svg", "tail-real.svg")
"""The hedging figures (latency by quantile), also this script's, in ``docs/figures``."""
"""The figures this script owns, in ``docs/figures``."""

MODE_LABELS = {
    "none": "no backoff",
    "exponential": "exponential",
    "full": "full jitter",
    "equal": "equal jitter",
    "decorrelated": "decorrelated (post)",
    "decorrelated-bounded": "decorrelated (bounded, ours)",
}
MODE_STYLE = {
    "none": ("#636363", "-"),
    "exponential": ("#cb181d", "-"),
    "full": ("#2171b5", "-"),
    "equal": ("#6baed6", "--"),
    "decorrelated": ("#238b45", "-"),
    "decorrelated-bounded": ("#74c476", "--"),
}
TABLE_CLIENTS = (10, 50, 100, 150, 190)
"""Client counts shown in the contention tables (the figures show every one)."""

_BLOCK = re.compile(
    r"(<!-- BEGIN GENERATED: (?P<name>[\w-]+) -->\n)(?P<body>.*?)"
    r"(<!-- END GENERATED: (?P=name) -->)",
    re.DOTALL,
)


def _load(name: str) -> dict[str, Any]:
    path = RESULTS_DIR / f"{name}.json"
    if not path.exists():
        raise SystemExit(f"{path} is missing: run `python -m benchmarks.{name}` first")
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: str = "") -> str:
    align = align or "l" + "r" * (len(header) - 1)
    marks = {"l": ":--", "r": "--:", "c": ":-:"}
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(marks[a] for a in align) + "|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


# -- blocks -------------------------------------------------------------------------------


def _machine(results: dict[str, dict[str, Any]]) -> str:
    first = results["solver"]["machine"]
    packages = ", ".join(f"{name} {version}" for name, version in first["packages"].items())
    rows = [
        [
            f"`{data['command']}`",
            data["date"],
            f"`{data['machine'].get('commit') or 'unknown'}`",
            data["machine"]["python"],
            data["machine"]["cpu"],
        ]
        for data in results.values()
    ]
    return (
        f"Machine (of the solver's run; each run's CPU is in the table): {first['cpu']}, "
        f"{first['cpus']} CPUs (`nproc`), {first['platform']}; "
        f"{first['implementation']} {first['python']}; {packages}.\n\n"
        + _table(["command", "date", "library at commit", "Python", "CPU"], rows, "llccl")
    )


def _solver(data: dict[str, Any]) -> str:
    out: list[str] = []
    regimes: dict[str, list[dict[str, Any]]] = {}
    for row in data["rows"]:
        regimes.setdefault(row["regime"], []).append(row)
    header = ["budget/base", "retries afforded", "ours (min)", "ours (median)", "seed's loop"]
    for regime, rows in regimes.items():
        table_rows = []
        for row in rows:
            retries = row["affordable"]
            retries = retries if len(retries) <= 12 else f"{float(retries):.3g}"
            seed = "n/a"
            if "seed" in row:
                seed_ns = fmt_ns(row["seed_time"]["min_ns"])
                if row["seed"].startswith("OverflowError"):
                    seed = f"**raises OverflowError** (after {seed_ns})"
                else:
                    ratio = row["seed_time"]["min_ns"] / row["ours"]["min_ns"]
                    same = "same count" if row["seed_agrees"] else "**different count**"
                    seed = f"{seed_ns} ({ratio:.1f}x ours; {same})"
            table_rows.append(
                [
                    f"1e{round(math.log10(row['ratio']))}",
                    retries,
                    fmt_ns(row["ours"]["min_ns"]),
                    fmt_ns(row["ours"]["median_ns"]),
                    seed,
                ]
            )
        out.append(f"**{regime}**\n\n" + _table(header, table_rows, "lrrrl"))
    summary = data["summary"]
    spreads = []
    for regime in [*regimes, "all"]:
        lo, md = summary[regime]["min"], summary[regime]["median"]
        spreads.append(
            [
                regime,
                f"{lo['slowest_over_fastest']:.2f}x",
                f"{md['slowest_over_fastest']:.2f}x",
                f"1e{round(math.log10(lo['slowest_ratio']))}",
            ]
        )
    verdict = "met" if summary["target_met"] else "**not met**"
    out.append(
        _table(["regime", "slowest / fastest (min)", "(median)", "slowest at"], spreads, "lrrr")
    )
    out.append(
        f"\nTarget, the slowest ratio within 2x of the fastest (per-call minimum, every "
        f"regime together): {verdict}.\n"
    )
    return "\n".join(out)


def _overhead(data: dict[str, Any]) -> str:
    k = data["k"]
    rows = []
    for kind, row in data["end_to_end"].items():
        rounds = ", ".join(f"{r:.3f}" for r in row["ratio_rounds"])
        rows.append(
            [
                kind,
                fmt_ns(row["per_retry_min_ns"]),
                fmt_ns(row["per_retry_median_ns"]),
                f"{row['ratio']:.3f} ({rounds})",
                fmt_ns(row["marginal_per_retry_min_ns"]),
                f"{row['marginal_ratio']:.3f}",
            ]
        )
    verdicts = []
    for name, met in data["target_met"].items():
        ratio = data["end_to_end"][name]["ratio"]
        verdicts.append(f"`{name}`: {ratio:.3f}x, {'met' if met else '**not met**'}")
    return (
        f"A call failing {k} times, then succeeding; per retry = one call / {k}; ratio to "
        f"`{data['reference']}` in the same run: per round, the median over interleaved "
        "batches of the ratio of two batches timed back to back; the median of "
        f"{data['rounds']} rounds, each round in brackets. Marginal = (T(k) - T(0)) / k.\n\n"
        + _table(
            ["candidate", "per retry (min)", "(median)", "ratio", "marginal", "ratio"],
            rows,
            "lrrrrr",
        )
        + "\nTarget, within 5% of tenacity's own pair: "
        + "; ".join(verdicts)
        + ".\n"
    )


def _overhead_instructions(data: dict[str, Any]) -> str:
    counted = data.get("instructions")
    if not counted:
        return "(run `python -m benchmarks.overhead --instructions` to fill this table)\n"
    reference = data["reference"]
    base = counted[reference]["per_call"]
    rows = [
        [
            name,
            f"{row['per_call']:,}",
            f"{row['per_call'] - base:+,}",
            f"{row['ratio']:.3f}",
        ]
        for name, row in counted.items()
    ]
    return (
        f"Instructions per call failing {data['k']} times (callgrind: the difference of "
        f"runs of 600 and 100 calls), against `{reference}`.\n\n"
        + _table(["candidate", "instructions a call", "vs the reference", "ratio"], rows, "lrrr")
    )


def _strategies(data: dict[str, Any]) -> str:
    rows = [
        [
            f"`{name.split(': ', 1)[1]}`",
            name.split(":", 1)[0],
            fmt_ns(t["min_ns"]),
            fmt_ns(t["median_ns"]),
        ]
        for name, t in data["strategies"].items()
    ]
    pair = data["strategy_pair_ns"]
    return (
        _table(["strategy", "kind", "one call (min)", "(median)"], rows, "llrr")
        + f"\nOne wait plus one stop per retry: ours (full jitter, stop with deadline) "
        f"{fmt_ns(pair['ours full + stop(deadline)'])}, tenacity's "
        f"`wait_random_exponential` + `stop_after_attempt` "
        f"{fmt_ns(pair['tenacity wait_random_exponential + stop_after_attempt'])}.\n"
    )


def _profile(data: dict[str, Any]) -> str:
    profile = data.get("profile")
    if not profile:
        return "(run `python -m benchmarks.overhead --profile` to fill this table)\n"
    name = "ours wait()+stop()"
    entry = profile[name]
    rows = [
        [f"`{row['function']}`", fmt_ns(row["ns_per_retry"])]
        for row in entry["tenacity_budget_functions"]
    ]
    return (
        f"cProfile of `{name}`: {fmt_ns(entry['profiled_ns_per_retry'])} per retry under "
        f"the profiler, {fmt_ns(entry['tenacity_budget_ns_per_retry'])} of it in "
        "`tenacity_budget` (own time; the profiler inflates every Python call alike, so "
        "read the shares, not the absolute figures).\n\n"
        + _table(["function (file:line)", "own time per retry"], rows, "lr")
    )


def _memory(data: dict[str, Any]) -> str:
    policy = data["policy"]
    rows = [
        [
            f"{row['retries']:,}",
            row["outcome"],
            _kib(row["peak_bytes"]),
            _kib(row["retained_bytes"][-1]),
        ]
        for row in data["long_run"]
    ]
    walk = data["iter_waits"]
    out = (
        f"Policy: base {policy['base']} s, cap {policy['cap']} s, max_elapsed "
        f"{policy['max_elapsed']:,.3f} s, affording exactly {policy['max_attempts']:,} retries.\n\n"
        + _table(["retries made", "outcome", "peak", "retained after"], rows, "rlrr")
        + f"\nWalking `policy.iter_waits()` over all {walk['waits']:,} waits: peak "
        f"{_kib(walk['peak_bytes'])}.\n\n"
    )
    conc_rows = []
    for kind, entries in data["concurrent"].items():
        for row in entries:
            retained = ", ".join(_kib(b) for b in row["retained_bytes"])
            conc_rows.append(
                [
                    kind,
                    f"{row['runs']:,}",
                    f"{row['max_in_flight']:,}",
                    _kib(row["peak_bytes"]),
                    f"{row['peak_bytes_per_run']:,.0f} B",
                    retained,
                    f"{row['growth_bytes_per_run']:.2f} B",
                ]
            )
    return out + _table(
        [
            "decorator",
            "runs",
            "in flight at once",
            "peak",
            "peak per run",
            "retained after each batch",
            "growth per run",
        ],
        conc_rows,
        "lrrrrrr",
    )


def _by(data: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(p["mode"], p["clients"]): p for p in data["points"]}


def _contention_table(data: dict[str, Any], field: str, fmt: Callable[[Any], str]) -> str:
    by = _by(data)
    clients = [n for n in TABLE_CLIENTS if n in data["clients"]]
    rows = [
        [MODE_LABELS[mode], *(fmt(by[(mode, n)][field]) for n in clients)] for mode in data["modes"]
    ]
    return _table(["mode", *(f"N = {n}" for n in clients)], rows)


def _contention_params(data: dict[str, Any]) -> str:
    p = data["params"]
    ref = data["reference"]
    ratio = ref["full_over_exponential_writes"]
    verdict = "less than half: reproduced" if ratio < 0.5 else "**not** less than half"
    return (
        f"Base {p['base_ms']:g} ms, cap {p['cap_ms']:g} ms, message delay "
        f"|Normal({p['net_mean_ms']:g} ms, {p['net_sd_ms']:g} ms)|, {p['runs']} runs per point, "
        f"seed {p['seed']}, N = {data['clients'][0]}..{data['clients'][-1]}; "
        f"{len(data['points'])} points in {data['seconds']:.0f} s.\n\n"
        f"Reference point: at {ref['clients']} clients full jitter needs "
        f"**{ratio:.3f}x** the writes of plain exponential backoff ({verdict}).\n"
    )


def _contention_budget(data: dict[str, Any]) -> str:
    by = _by(data)
    clients = [n for n in TABLE_CLIENTS if n in data["clients"]]
    rows = []
    for mode in data["modes"]:
        cells = []
        for n in clients:
            point = by[(mode, n)]
            cells.append(
                f"{point['within_budget_share']:.1%} / {point['budgeted_within_share']:.1%}"
            )
        rows.append([MODE_LABELS[mode], *cells])
    budget = data["params"]["budget_ms"]
    return (
        f"Share of clients done within {budget:g} ms: retrying until success / giving up "
        "as `policy.stop()` does.\n\n" + _table(["mode", *(f"N = {n}" for n in clients)], rows)
    )


def _contention_budget_writes(data: dict[str, Any]) -> str:
    return _contention_table(data, "budgeted_writes_mean", lambda v: f"{v:,.0f}")


def blocks(
    results: dict[str, dict[str, Any]], shape: dict[str, Any] | None = None
) -> dict[str, str]:
    """The body of every generated block of ``docs/benchmarks.md``, by block name.

    ``shape`` is :func:`benchmarks.shape.measure`'s figures; measured now when not given.
    """
    contention = results["contention"]
    return {
        **readme_blocks(results, shape),
        "machine": _machine(results),
        "solver": _solver(results["solver"]),
        "overhead": _overhead(results["overhead"]),
        "overhead-instructions": _overhead_instructions(results["overhead"]),
        "strategies": _strategies(results["overhead"]),
        "profile": _profile(results["overhead"]),
        "memory": _memory(results["memory"]),
        "contention-params": _contention_params(contention),
        "contention-writes": _contention_table(contention, "writes_mean", lambda v: f"{v:,.0f}"),
        "contention-time": _contention_table(
            contention, "completion_ms_mean", lambda v: f"{v:,.0f} ms"
        ),
        "contention-budget": _contention_budget(contention),
        "contention-budget-writes": _contention_budget_writes(contention),
        **storm_blocks(results["storm"]),
        "transport": _transport(results["transport"]),
        "http-clients": _http_clients(results["http_clients"]),
        "celery-plan": _celery_plan(results["celery_plan"]),
        "budget-ops": _budget_ops(results["budget_ops"]),
        "import-time": _import_time(results["import_time"]),
        "overload": _overload(results["overload"]),
        "overload-real": _overload_real(results["overload"]),
        **tail_blocks(results["tail"]),
    }


def readme_blocks(
    results: dict[str, dict[str, Any]], shape: dict[str, Any] | None = None
) -> dict[str, str]:
    """The generated blocks ``benchmarks/README.md`` shares with ``docs/benchmarks.md``."""
    if shape is None:
        from dataclasses import asdict

        from .shape import measure

        shape = asdict(measure())
    return {"targets": _targets(results), "shape": _shape(shape)}


def render_doc(text: str, bodies: dict[str, str], where: str = "docs/benchmarks.md") -> str:
    """``text`` with every generated block's body replaced; unknown blocks are an error."""
    seen: set[str] = set()

    def replace(match: re.Match[str]) -> str:
        name = match.group("name")
        if name not in bodies:
            raise SystemExit(f"{where} has an unknown generated block {name!r}")
        seen.add(name)
        return match.group(1) + bodies[name] + match.group(4)

    rendered = _BLOCK.sub(replace, text)
    missing = set(bodies) - seen
    if missing:
        raise SystemExit(f"{where} lacks generated blocks: {sorted(missing)}")
    return rendered


# -- figures ------------------------------------------------------------------------------


def figures(contention: dict[str, Any]) -> dict[str, bytes]:
    """The contention figures as SVG bytes, by file name (deterministic)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import PercentFormatter

    plt.rcdefaults()
    plt.rcParams.update(
        {
            "svg.hashsalt": "tenacity-budget",
            "svg.fonttype": "none",
            "font.family": "DejaVu Sans",
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "figure.dpi": 100,
        }
    )
    by = _by(contention)
    clients = contention["clients"]
    p = contention["params"]
    budget = p["budget_ms"]
    specs: list[tuple[str, str, str, str | None]] = [
        ("contention-writes.svg", "writes_mean", "writes attempted (mean per run)", None),
        (
            "contention-time.svg",
            "completion_ms_mean",
            "completion time, ms (mean, log scale)",
            "log",
        ),
        (
            "contention-budget.svg",
            "within_budget_share",
            f"clients done within {budget:g} ms (retrying until success)",
            None,
        ),
    ]
    out: dict[str, bytes] = {}
    for name, field, ylabel, yscale in specs:
        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        for mode in contention["modes"]:
            colour, style = MODE_STYLE[mode]
            ax.plot(
                clients,
                [by[(mode, n)][field] for n in clients],
                color=colour,
                linestyle=style,
                marker="o",
                markersize=2.5,
                linewidth=1.4,
                label=MODE_LABELS[mode],
            )
        if yscale:
            ax.set_yscale(yscale)
        if field == "within_budget_share":
            ax.yaxis.set_major_formatter(PercentFormatter(1.0))
            ax.set_ylim(0, 1.02)
        ax.set_xlabel("clients contending for one row")
        ax.set_ylabel(ylabel)
        ax.set_xlim(0, clients[-1] + 10)
        ax.grid(True, linewidth=0.4, alpha=0.5)
        ax.legend(frameon=False, fontsize=8)
        ax.set_title(
            f"OCC contention, base {p['base_ms']:g} ms, cap {p['cap_ms']:g} ms, "
            f"{p['runs']} runs per point",
            fontsize=9,
        )
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None})
        plt.close(fig)
        out[name] = buffer.getvalue()
    return out


# -- the retry storm ----------------------------------------------------------------------

STORM_STYLE = {
    "tenacity": ("#cb181d", "-"),
    "stamina": ("#fd8d3c", "-"),
    "policy": ("#6a51a3", "-"),
    "policy+budget": ("#2171b5", "-"),
    "tenacity+budget": ("#41ab5d", "--"),
}


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _storm_params(data: dict[str, Any]) -> str:
    p, policy = data["params"], data["policy"]
    verdict = "met" if data["target_met"] else "**not met**"
    return (
        f"{p['calls_per_second']:g} calls per second for {p['duration']:g} s; the dependency "
        f"fails every call from {p['outage_start']:g} s to {p['outage_end']:g} s, then "
        f"answers every call. Policy: base {policy['base']:g} s, factor {policy['factor']:g}, "
        f"cap {policy['cap']:g} s, max_elapsed {policy['max_elapsed']:g} s, "
        f"{policy['jitter']} jitter: `max_attempts()` = {policy['max_attempts']}. Budget: "
        f"`RetryBudget()` (ratio {p['ratio']:g}, min_per_second {p['min_per_second']:g}, "
        f"ttl {p['ttl']:g} s). Seed {p['seed']}; simulated in {data['simulated_seconds']:.0f} s."
        f"\n\nTarget with the budget: at most x{p['bound']:.3g} attempts per call sustained "
        "(over the outage's whole budget windows once the retries banked before it are spent) "
        f"and x{p['whole_bound']:.3g} over the whole outage (the bank included), every call "
        f"after the recovery succeeding: {verdict}.\n"
    )


def _storm_rows(candidates: dict[str, Any]) -> list[list[str]]:
    return [
        [
            c["label"].replace("|", "\\|"),  # a pipe would end the table cell
            f"x{c['amplification']:.3f}",
            f"x{c['sustained_amplification']:.3f}",
            f"{c['peak_attempts_per_second']:,.0f}",
            str(c["most_attempts_per_call"]),
            _pct(c["success_after_recovery"]),
            _pct(c["rescued_during_outage"]),
        ]
        for c in candidates.values()
    ]


_STORM_HEADER = [
    "retried by",
    "attempts per call, outage",
    "sustained",
    "peak attempts/s",
    "most per call",
    "calls after recovery succeeding",
    "outage calls rescued",
]


def _storm_table(data: dict[str, Any]) -> str:
    return _table(_STORM_HEADER, _storm_rows(data["simulated"]), "lrrrrrr")


def _storm_real(data: dict[str, Any]) -> str:
    real = data["real"]
    if "skipped" in real:
        return f"The real run was skipped: {real['skipped']}.\n"
    p, policy = real["params"], real["policy"]
    return (
        f"{p['processes']} processes, {p['calls_per_second']:g} calls per second in all, for "
        f"{p['duration']:g} s, the dependency down from {p['outage_start']:g} s to "
        f"{p['outage_end']:g} s; real sleeps; policy base {policy['base']:g} s, cap "
        f"{policy['cap']:g} s, max_elapsed {policy['max_elapsed']:g} s "
        f"(`max_attempts()` = {policy['max_attempts']}); one "
        f"`RedisRetryBudget(ratio={p['ratio']:g}, min_per_second={p['min_per_second']:g}, "
        f"ttl={p['ttl']:g})` shared by all the processes through a `redis-server` on loopback. "
        f"Target x{p['bound']:.3g} sustained, x{p['whole_bound']:.3g} over the whole outage: "
        f"{'met' if real['target_met'] else '**not met**'}; {real['seconds']:.0f} s.\n\n"
        + _table(_STORM_HEADER, _storm_rows(real["candidates"]), "lrrrrrr")
    )


def storm_blocks(storm: dict[str, Any]) -> dict[str, str]:
    """The generated blocks of the retry-storm section, by block name."""
    return {
        "storm-params": _storm_params(storm),
        "storm": _storm_table(storm),
        "storm-real": _storm_real(storm),
    }


def storm_figures(storm: dict[str, Any]) -> dict[str, bytes]:
    """The retry-storm figure (attempts per second over time) as SVG bytes (deterministic)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcdefaults()
    plt.rcParams.update(
        {
            "svg.hashsalt": "tenacity-budget",
            "svg.fonttype": "none",
            "font.family": "DejaVu Sans",
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "figure.dpi": 100,
        }
    )
    p = storm["params"]
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    ax.axvspan(p["outage_start"], p["outage_end"], color="#f0f0f0", zorder=0)
    ax.axhline(
        p["calls_per_second"] * p["bound"],
        color="#2171b5",
        linewidth=0.8,
        linestyle=":",
        label=f"x{p['bound']:.3g} the call rate",
    )
    for name, candidate in storm["simulated"].items():
        colour, style = STORM_STYLE.get(name, ("#636363", "-"))
        timeline = candidate["timeline"]
        ax.plot(
            [(i + 0.5) * p["bucket"] for i in range(len(timeline))],
            timeline,
            color=colour,
            linestyle=style,
            linewidth=1.2,
            label=candidate["label"],
        )
    ax.set_xlabel(
        f"seconds (the dependency is down from {p['outage_start']:g} s to {p['outage_end']:g} s)"
    )
    ax.set_ylabel("attempts reaching the dependency per second")
    ax.set_xlim(0, p["duration"] + 5)
    ax.set_ylim(0, None)
    ax.grid(True, linewidth=0.4, alpha=0.5)
    ax.legend(frameon=False, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    ax.set_title(
        f"Retry storm: {p['calls_per_second']:g} calls/s, every call failing during the outage",
        fontsize=9,
    )
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    return {"storm.svg": buffer.getvalue()}


# -- hedged requests: the tail at scale ---------------------------------------------------

TAIL_STYLE = {
    "none": ("#cb181d", "-", "o"),
    "p95": ("#2171b5", "-", "s"),
    "fixed": ("#238b45", "--", "^"),
}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.1f} ms"


def _tail_table(candidates: dict[str, Any]) -> str:
    none = candidates["none"]["p999"]
    rows = [
        [
            c["label"].replace("|", "\\|"),
            _ms(c["p50"]),
            _ms(c["p99"]),
            _ms(c["p999"]),
            f"{none / c['p999']:.1f}x",
            f"{c['extra']:.2%}",
            f"{c['requests']:,}",
        ]
        for c in candidates.values()
    ]
    header = ["hedging", "p50", "p99", "p99.9", "p99.9 lower by", "extra requests", "requests"]
    return _table(header, rows, "lrrrrrr")


def _tail_verdicts(candidates: dict[str, Any], goals: dict[str, float]) -> str:
    none = candidates["none"]["p999"]
    parts = []
    for name, what in (("fixed", "the fixed delay"), ("p95", '`delay="p95"`')):
        c = candidates[name]
        tail_met = none / c["p999"] >= goals["tail_ratio"]
        extra_met = c["extra"] <= goals[f"extra_{name}"]
        parts.append(
            f"{what}: p99.9 {none / c['p999']:.1f}x lower (goal at least "
            f"{goals['tail_ratio']:g}x: {'met' if tail_met else '**not met**'}), "
            f"{c['extra']:.2%} extra requests (goal at most {goals[f'extra_{name}']:.0%}: "
            f"{'met' if extra_met else '**not met**'})"
        )
    return "Goals: " + "; ".join(parts) + ".\n"


def _tail_params(data: dict[str, Any]) -> str:
    p = data["params"]
    return (
        f"The server answers in {_ms(p['fast'])} for {1 - p['slow_share']:.0%} of attempts and "
        f"in {_ms(p['slow'])} for {p['slow_share']:.0%}, drawn independently per attempt "
        f"(seed {p['seed']}); {p['requests']:,} requests per candidate arriving "
        f"{p['rate']:g} per second, each one call of `hedged_call` (what "
        "`policy.retry(hedge=...)` runs) with `max_attempts=2`, in virtual time.\n"
    )


def _tail_real(data: dict[str, Any]) -> str:
    real = data["real"]
    if "skipped" in real:
        return f"The real run was skipped: {real['skipped']}.\n"
    p, goals = real["params"], data["params"]["goals"]
    return (
        f"{p['requests']:,} requests at {p['rate']:g} per second, the three candidates "
        "interleaved (request i by candidate i mod 3), against an aiohttp server in another "
        "process on loopback that sleeps 10 ms (1 s for 1% of requests, its own seeded "
        f"draws); aiohttp as the client. The fixed delay is the p95 of {p['warmup']:,} "
        f"unhedged requests measured first: {_ms(real['server_p95'])}. {real['seconds']:.0f} s."
        "\n\n" + _tail_table(real["candidates"]) + "\n" + _tail_verdicts(real["candidates"], goals)
    )


def tail_blocks(tail: dict[str, Any]) -> dict[str, str]:
    """The generated blocks of the hedging section, by block name."""
    goals = tail["params"]["goals"]
    return {
        "tail-params": _tail_params(tail),
        "tail": _tail_table(tail["simulated"]) + "\n" + _tail_verdicts(tail["simulated"], goals),
        "tail-real": _tail_real(tail),
    }


def _tail_figure(candidates: dict[str, Any], title: str) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcdefaults()
    plt.rcParams.update(
        {
            "svg.hashsalt": "tenacity-budget",
            "svg.fonttype": "none",
            "font.family": "DejaVu Sans",
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "figure.dpi": 100,
        }
    )
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for name, c in candidates.items():
        colour, style, marker = TAIL_STYLE.get(name, ("#636363", "-", "."))
        shares = [q for q, _ in c["curve"]]
        ax.plot(
            [1 / (1 - q) for q in shares],
            [v * 1e3 for _, v in c["curve"]],
            color=colour,
            linestyle=style,
            marker=marker,
            markersize=4,
            linewidth=1.2,
            label=f"{c['label']}: {c['extra']:.1%} extra requests",
        )
    ticks = [q for q, _ in next(iter(candidates.values()))["curve"]]
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks([1 / (1 - q) for q in ticks])
    ax.set_xticklabels([f"p{q * 100:g}" for q in ticks], rotation=45)
    ax.minorticks_off()
    ax.set_xlabel("quantile")
    ax.set_ylabel("latency (ms, log scale)")
    ax.grid(True, linewidth=0.4, alpha=0.5)
    ax.legend(frameon=False, fontsize=7, loc="upper left")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def tail_figures(tail: dict[str, Any]) -> dict[str, bytes]:
    """The hedging figures (latency by quantile, per candidate) as SVG bytes (deterministic)."""
    out = {
        "tail-simulated.svg": _tail_figure(
            tail["simulated"], "Simulated: 10 ms for 99% of attempts, 1 s for 1%"
        )
    }
    real = tail["real"]
    if "skipped" not in real:
        out["tail-real.svg"] = _tail_figure(
            real["candidates"], "Real: an aiohttp server on loopback, the same latencies"
        )
    return out


# -- issue 16's targets, the shape figures, transports, HTTP clients, Celery planning -----

SHAPE_BEFORE = {
    "cycles": "2",
    "cc_max": "43 (`compute_max_attempts`)",
    "cc_over_10": "12",
    "public_all": "128",
    "docstring": "26 / 70 lines",
}
"""The shape figures measured on e074a27, as issue 16 states them."""


OVERHEAD_TARGETS = (
    (
        "per_call",
        "ours wait()+stop()",
        "`wait=policy.wait(), stop=policy.stop()` per call, {k} retries, vs tenacity's pair",
        "1.10x",
        1.00,
    ),
    (
        "per_call",
        "ours policy.retry()",
        "`policy.retry()` per call, {k} retries, vs tenacity's pair",
        "1.19x",
        1.05,
    ),
    (
        "per_call",
        "ours policy.retry(budget=RetryBudget())",
        "`policy.retry(budget=RetryBudget())` per call, {k} retries",
        "1.34x",
        1.10,
    ),
    (
        "per_call",
        "ours async policy.retry(hard_deadline=True)",
        "async `hard_deadline=True` per call, {k} retries, vs `AsyncRetrying`",
        "1.43x",
        1.15,
    ),
    (
        "first_try",
        "ours policy.retry()",
        "first-try success, `policy.retry()` vs tenacity's `@retry`",
        "1.50x",
        1.10,
    ),
    (
        "first_try",
        "ours async policy.retry(hard_deadline=True)",
        "first-try success, async `hard_deadline=True` vs `AsyncRetrying`",
        "1.75x",
        1.30,
    ),
)
"""Issue 16's overhead rows: section of ``targets``, candidate, figure, value on e074a27, limit."""


def _verdict(met: bool) -> str:
    return "met" if met else "**not met**"


def _ratio_cell(ratio: float, lo: float | None = None, hi: float | None = None) -> str:
    if lo is None or hi is None:
        return f"{ratio:.3f}x"
    return f"{ratio:.3f}x ({lo:.3f}-{hi:.3f})"


def _target_row(
    figure: str, before: str, now: str, value: float, limit: float, at_least: bool = False
) -> list[str]:
    met = value >= limit if at_least else value <= limit
    target = f"{'>=' if at_least else '<='} {limit:.2f}x"
    return [figure, before, now, target, _verdict(met)]


def _targets(results: dict[str, dict[str, Any]]) -> str:
    overhead = results["overhead"]
    rows: list[list[str]] = []
    targets = overhead.get("targets")
    k = overhead["k"]
    if targets:
        per_call, first = targets["per_call"], targets["first_try"]
        for section, name, figure, before, limit in OVERHEAD_TARGETS:
            row = (per_call if section == "per_call" else first)[name]
            figure = figure.format(k=k)
            now = f"{row['ratio']:.3f}x (spread {row['spread']:.3f})"
            rows.append(_target_row(figure, before, now, row["ratio"], limit))
    else:
        rows.append(
            [
                "per-call and first-try ratios",
                "see issue 16",
                "not measured: run `python -m benchmarks.overhead --k 5`",
                "",
                "",
            ]
        )
    transport = results["transport"]
    for kind, label, before in (
        ("sync", "`BudgetTransport`", "0.885x (+49 µs a request)"),
        ("async", "`AsyncBudgetTransport`", "0.885x for both (+103 µs a request async)"),
    ):
        r = transport[kind]["BudgetTransport"]["rps_ratio"]
        now = _ratio_cell(r["ratio"], *r["spread"])
        rows.append(
            _target_row(
                f"{label} requests per second vs plain httpx ({kind})",
                before,
                now,
                r["ratio"],
                0.97,
                at_least=True,
            )
        )
    clients = results["http_clients"]
    for name, label in (
        ("requests", "requests `BudgetAdapter` requests per second"),
        ("aiohttp", "aiohttp `budget_middleware` requests per second"),
    ):
        row = clients[name][clients["candidates"][name][2]]  # plain, floor, budgeted
        r, wall = row["rps_ratio"], row["wall_ratio"]
        now = (
            f"{_ratio_cell(r['ratio'], *r['spread'])}; wall clock "
            f"{_ratio_cell(wall['ratio'], *wall['spread'])}"
        )
        rows.append(
            _target_row(
                f"{label} vs plain {name} (issue 17)",
                "not given",
                now,
                r["ratio"],
                0.97,
                at_least=True,
            )
        )
    ops = results["budget_ops"]
    for name, before in (
        ("try_withdraw (granted)", "3.5x (`try_withdraw`)"),
        ("try_withdraw (refused)", "3.5x (`try_withdraw`)"),
        ("deposit", "not given"),
    ):
        r = ops["operations"][name]
        method, _, extra = name.partition(" ")
        extra = f" {extra}" if extra else ""
        now = _ratio_cell(r["ratio"], *r["spread"])
        rows.append(
            _target_row(
                f"`RetryBudget.{method}`{extra} vs a bare `with lock: n += 1`",
                before,
                now,
                r["ratio"],
                2.0,
            )
        )
    imports = results["import_time"]
    if "policy_to_floor" in imports:
        programs = list(imports["programs_wall_ns"].values())
        floor, policy = programs[0], programs[1]
        per_run = [p / f for p, f in zip(policy, floor, strict=True)]
        now = (
            f"{imports['policy_to_floor']:.3f}x (median of {len(floor)} interpreters each; "
            f"run by run {min(per_run):.3f}-{max(per_run):.3f})"
        )
        rows.append(
            _target_row(
                "`from tenacity_budget import BackoffPolicy; BackoffPolicy(...)` vs "
                "`import tenacity` + a trivial pydantic model, process wall time",
                "not given",
                now,
                imports["policy_to_floor"],
                1.10,
            )
        )
    construction = results["solver"].get("construction")
    if construction:
        slowest = construction["slowest_accepted"]
        ns = slowest["min_ns"]
        refused = fmt_ns(construction["slowest_refused_ns"])
        now = f"{fmt_ns(ns)}: {slowest['case']}; a refusal past the line {refused}"
        rows.append(
            [
                "slowest `BackoffPolicy` construction accepted",
                "538 ms (`base=5e-324, factor=1+2**-40`)",
                now,
                "<= 10 ms",
                _verdict(ns <= 10e6),
            ]
        )
    return (
        "Issue 16's figures (and issue 17's HTTP clients): the value measured on e074a27 as "
        "the issue states it, the value now from `benchmarks/results/*.json` (the median, "
        "with the rounds' lowest and highest, or their spread = highest - lowest), the "
        "target, and whether it is met. Ratios below 1 are faster for times; for requests "
        "per second, above 1 is faster.\n\n"
        + _table(["figure", "before (e074a27)", "now", "target", "met?"], rows, "lllcc")
    )


def _shape(shape: dict[str, Any]) -> str:
    cycles = shape["cycles"]
    over = shape["cc_over_10"]
    rows = [
        [
            "import cycles among `tenacity_budget`'s modules "
            "(function-level and `TYPE_CHECKING` imports counted)",
            SHAPE_BEFORE["cycles"],
            f"{len(cycles)}"
            + (f" ({'; '.join(' -> '.join(c) for c in cycles)})" if cycles else ""),
            "0",
            _verdict(not cycles),
        ],
        [
            "highest cyclomatic complexity (radon)",
            SHAPE_BEFORE["cc_max"],
            f"{shape['cc_max']} (`{shape['cc_max_where']}`)",
            "<= 12",
            _verdict(shape["cc_max"] <= 12),
        ],
        ["functions over 10", SHAPE_BEFORE["cc_over_10"], str(len(over)), "", ""],
        [
            "names in the `__all__` of the public modules together",
            SHAPE_BEFORE["public_all"],
            str(shape["public_all"]),
            "<= 50",
            _verdict(shape["public_all"] <= 50),
        ],
        [
            "mean / longest module docstring",
            SHAPE_BEFORE["docstring"],
            f"{shape['docstring_mean']:g} / {shape['docstring_max']} lines "
            f"(`{shape['docstring_max_where']}`)",
            "<= 12 lines each",
            _verdict(shape["docstring_max"] <= 12),
        ],
    ]
    listing = ", ".join(f"`{item.rsplit(' ', 1)[0]}` {item.rsplit(' ', 1)[1]}" for item in over)
    return (
        f"Computed from the code when the page is rendered (`python -m benchmarks.shape`, "
        f"{shape['modules']} modules), so `--check` fails when the code drifts from this "
        "table.\n\n"
        + _table(["figure", "before (e074a27)", "now", "target", "met?"], rows, "lllcc")
        + (f"\nFunctions over 10: {listing}.\n" if over else "")
    )


def _transport(data: dict[str, Any]) -> str:
    rows = []
    instructions = data.get("instructions_per_request", {})
    for kind in ("sync", "async"):
        for name, row in data[kind].items():
            if not isinstance(row, dict):
                continue
            cells = [f"{kind} {name}", f"{row['rps']:,.0f}", f"{row['wall_us']:.1f} µs"]
            cells += [f"{row['client_cpu_us']:.1f} µs", f"{row['server_cpu_us']:.1f} µs"]
            if "rps_ratio" in row:
                r = row["rps_ratio"]
                cells += [
                    _ratio_cell(r["ratio"], *r["spread"]),
                    f"{row['client_overhead_us']:+.1f} µs",
                ]
            else:
                cells += ["1 (reference)", ""]
            names = [n for n, r in data[kind].items() if isinstance(r, dict)]
            cells.append(_instructions_cell(instructions.get(kind), names, name))
            rows.append(cells)
    verdicts = "; ".join(
        f"{kind} {_verdict(data[kind]['target_met'])}" for kind in ("sync", "async")
    )
    return (
        f"{data['rounds']} rounds of {data['pairs']} batch groups of {data['batch']} requests, "
        f"a {data['body_bytes']}-byte body; the budget client's policy: `{data['policy']}`. "
        "Ratios are the candidate's requests per second over plain httpx's, and plain "
        "httpx's client instructions over the candidate's (above 1 is faster, below 1 "
        "costs more).\n\n"
        + _table(
            [
                "client",
                "requests/s",
                "wall per request",
                "client CPU",
                "server CPU",
                "requests/s ratio",
                "client CPU added",
                "client instructions (callgrind)",
            ],
            rows,
        )
        + f"\nTarget, at least 0.97x plain httpx's requests per second: {verdicts}.\n"
    )


def _instructions_cell(counted: dict[str, Any] | None, names: list[str], name: str) -> str:
    """A candidate's instructions per request (its place among the client's three names:
    plain, floor, budgeted), with its ratio to the plain client's."""
    if not counted or name not in names:
        return "not counted"
    key = ("plain", "floor", "budgeted")[names.index(name)]
    if key == "plain":
        return f"{counted['plain']:,}"
    ratio = counted["ratio"] if key == "budgeted" else counted.get("floor_ratio")
    if key not in counted or ratio is None:
        return "not counted"
    return f"{counted[key]:,} ({ratio:.3f}x)"


def _http_clients(data: dict[str, Any]) -> str:
    rows = []
    instructions = data.get("instructions_per_request", {})
    for client in ("requests", "aiohttp"):
        for name, row in data[client].items():
            if not isinstance(row, dict):
                continue
            cells = [name, f"{row['rps']:,.0f}", f"{row['wall_us']:.1f} µs"]
            cells += [f"{row['client_cpu_us']:.1f} µs", f"{row['server_cpu_us']:.1f} µs"]
            if "rps_ratio" in row:
                r, wall = row["rps_ratio"], row["wall_ratio"]
                cells += [
                    _ratio_cell(r["ratio"], *r["spread"]),
                    _ratio_cell(wall["ratio"], *wall["spread"]),
                    f"{row['client_overhead_us']:+.1f} µs",
                ]
            else:
                cells += ["1 (reference)", "1 (reference)", ""]
            names = data["candidates"][client]
            cells.append(_instructions_cell(instructions.get(client), names, name))
            rows.append(cells)
    verdicts = "; ".join(
        f"{client} {_verdict(data[client]['target_met'])}" for client in ("requests", "aiohttp")
    )
    out = (
        f"{data['rounds']} rounds of {data['pairs']} batch groups of {data['batch']} requests "
        "per candidate; ratios are the plain client's figure over the candidate's (at least 1 "
        "is as fast); instructions are the client's per request under callgrind.\n\n"
        + _table(
            [
                "client",
                "requests/s",
                "wall per request",
                "client CPU",
                "server CPU",
                "requests/s ratio",
                "wall ratio",
                "client CPU added",
                "instructions (callgrind)",
            ],
            rows,
        )
        + f"\nTarget, at least 0.97x the plain client's requests per second: {verdicts}.\n"
    )
    dribble = data.get("dribble")
    if dribble:
        ends = []
        for name in ("requests", "aiohttp"):
            entry = dribble[name]
            how = f"HTTP {entry['result']}" if "result" in entry else f"`{entry['raised']}`"
            ends.append(f"{name} ended after {entry['ended_after_s']:.3f} s ({how})")
        out += (
            f"\nThe dribbling server (one byte every {dribble['every_s']:g} s, a "
            f"{dribble['budget_s']:g} s budget): " + "; ".join(ends) + ".\n"
        )
    return out


def _celery_plan(data: dict[str, Any]) -> str:
    rows = []
    for retry, candidates in data["per_retry"].items():
        for name, t in candidates.items():
            rows.append(
                [
                    f"{int(retry):,}",
                    name,
                    fmt_ns(t["median_ns"]),
                    f"{fmt_ns(t['low_ns'])}-{fmt_ns(t['high_ns'])}",
                ]
            )
    return f"The policy affords {data['policy_retries']:,} retries.\n\n" + _table(
        ["at retry", "path", "one retry planned (median)", "rounds' spread"], rows, "rlrr"
    )


def _operation(name: str, reference: str) -> str:
    if name == reference:
        return name
    method, _, extra = name.partition(" ")
    return f"`{method}` {extra}".rstrip()


def _budget_ops(data: dict[str, Any]) -> str:
    rows = [
        [
            _operation(name, data["reference"]),
            fmt_ns(row["min_ns"]),
            fmt_ns(row["median_ns"]),
            "1 (reference)"
            if name == data["reference"]
            else _ratio_cell(row["ratio"], *row["spread"]),
        ]
        for name, row in data["operations"].items()
    ]
    met = all(data["target_met"].values())
    return (
        f"{data['rounds']} rounds of {data['repeat']} interleaved batches per operation.\n\n"
        + _table(["operation", "one call (min)", "(median)", "ratio to the reference"], rows)
        + f"\nTarget, {data['target']}: {_verdict(met)}.\n"
    )


def _import_time(data: dict[str, Any]) -> str:
    rows = [
        [f"`{name}`", f"{us / 1000:.1f} ms", f"{data['ratio_to_tenacity'][name]:.2f}x"]
        for name, us in data["median_us"].items()
    ]
    out = (
        f"`-X importtime`, the statement's cumulative import time, median of {data['runs']} "
        "fresh interpreters.\n\n"
        + _table(["statement", "import time (median)", "ratio to `import tenacity`"], rows)
        + f"\nTarget, `import tenacity_budget` at most 2x `import tenacity`: "
        f"{_verdict(data['target_met'])}.\n"
    )
    if "programs_median_ns" in data:
        prog_rows = [
            [f"`{name}`", f"{ns / 1e6:.1f} ms", str(len(data["programs_wall_ns"][name]))]
            for name, ns in data["programs_median_ns"].items()
        ]
        out += (
            "\nIssue 16's figure, process wall time of a fresh interpreter:\n\n"
            + _table(["program", "wall time (median)", "interpreters"], prog_rows, "lrr")
            + f"\nRatio {data['policy_to_floor']:.3f}x; target at most 1.10x: "
            f"{_verdict(data['policy_target_met'])}.\n"
        )
    return out


# -- entry point --------------------------------------------------------------------------


def _overload_table(candidates: dict[str, Any], goals: dict[str, bool]) -> str:
    """One overload run: rejected attempts, goodput, ratios to tenacity's, and the goals."""
    rows = [
        [
            candidate["label"],
            f"{candidate['rejected_attempts']:,}",
            f"{candidate['fewer_rejected']:.1%}",
            f"{candidate['goodput']:.2f}",
            f"{candidate['goodput_ratio']:.2f}x",
            f"{candidate['attempts_per_call']:.2f}",
        ]
        for candidate in candidates.values()
    ]
    header = [
        "candidate",
        "rejected attempts (429)",
        "fewer than tenacity",
        "goodput (calls/s)",
        "goodput vs tenacity",
        "attempts per call",
    ]
    table = _table(header, rows, "lrrrrr")
    verdicts = "\n".join(f"- {goal}: **{_verdict(met)}**" for goal, met in goals.items())
    return f"{table}\n{verdicts}\n"


def _overload(data: dict[str, Any]) -> str:
    """Issue 18's overload scenario, simulated."""
    return _overload_table(data["simulated"], data["goals"])


def _overload_real(data: dict[str, Any]) -> str:
    """The overload scenario for real: its scale, then the same table and goals."""
    real = data.get("real", {"skipped": "not run yet"})
    if "candidates" not in real:
        return f"Not measured: {real['skipped']}.\n"
    p, candidates = real["params"], real["candidates"]
    errors = sum(c["errors"] for c in candidates.values())
    scale = (
        f"{p['processes']} client processes, {p['calls_per_second']:g} calls/s in all for "
        f"{p['duration']:g} s, capacity {p['capacity']:g} units/s (a 429 costs "
        f"{p['rejection_cost']:g}), throttle window {p['window']:g} s; the candidates one after "
        f"the other, {real['seconds']:g} s in all; {errors} attempts failed on a transport error."
    )
    return f"{scale}\n\n{_overload_table(candidates, real['goals'])}"


def _overload_figure(candidates: dict[str, Any], title: str) -> bytes:
    """Rejected attempts and goodput per candidate, side by side, as SVG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcdefaults()
    plt.rcParams.update(
        {
            "svg.hashsalt": "tenacity-budget",
            "svg.fonttype": "none",
            "font.family": "DejaVu Sans",
            "font.size": 8,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "figure.dpi": 100,
        }
    )
    names = list(candidates)
    rejected = [candidates[n]["rejected_attempts"] for n in names]
    goodput = [candidates[n]["goodput"] for n in names]
    fig, (left, right) = plt.subplots(1, 2, figsize=(7.4, 3.6))
    left.barh(names, rejected, color="#cb181d")
    left.set_xlabel("attempts the server rejected (429)")
    left.invert_yaxis()
    right.barh(names, goodput, color="#2171b5")
    right.set_xlabel("goodput (calls that succeeded per second)")
    right.invert_yaxis()
    right.set_yticklabels([])
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(fig)
    return buffer.getvalue()


def overload_figures(data: dict[str, Any]) -> dict[str, bytes]:
    """The overload figures (rejected attempts and goodput per candidate) as SVG bytes.

    ``overload.svg`` for the simulated run, ``overload-real.svg`` for the real one (once
    measured).
    """
    p = data["params"]
    out = {
        "overload.svg": _overload_figure(
            data["simulated"],
            f"Overload: {p['calls_per_second']:g} calls/s offered, capacity "
            f"{p['capacity']:g}/s, {p['duration']:g} s",
        )
    }
    real = data.get("real", {})
    if "candidates" in real:
        r = real["params"]
        out["overload-real.svg"] = _overload_figure(
            real["candidates"],
            f"Real: {r['processes']} processes, {r['calls_per_second']:g} calls/s offered, "
            f"capacity {r['capacity']:g}/s, {r['duration']:g} s",
        )
    return out


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check``, verify) the tables and figures; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 if anything is stale")
    args = parser.parse_args(argv)
    results = {name: _load(name) for name in RESULTS}
    from dataclasses import asdict

    from .shape import measure

    shape = asdict(measure())
    bodies = blocks(results, shape)
    readme = readme_blocks(results, shape)
    wanted: dict[Path, bytes] = {
        DOC: render_doc(DOC.read_text(encoding="utf-8"), bodies).encode("utf-8"),
        README: render_doc(
            README.read_text(encoding="utf-8"), readme, "benchmarks/README.md"
        ).encode("utf-8"),
    }
    for name, svg in figures(results["contention"]).items():
        wanted[FIGURE_DIR / name] = svg
    for name, svg in storm_figures(results["storm"]).items():
        wanted[FIGURE_DIR / name] = svg
    for name, svg in overload_figures(results["overload"]).items():
        wanted[FIGURE_DIR / name] = svg
    for name, svg in tail_figures(results["tail"]).items():
        wanted[FIGURE_DIR / name] = svg
    stale = [
        path
        for path, content in wanted.items()
        if not path.exists() or path.read_bytes() != content
    ]
    if args.check:
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)}", file=sys.stderr)
        if stale:
            print("run `python -m benchmarks.report` and commit the result", file=sys.stderr)
        return 1 if stale else 0
    FIGURE_DIR.mkdir(parents=True, exist_ok=True)
    for path in stale:
        path.write_bytes(wanted[path])
        print(f"wrote {path.relative_to(ROOT)}")
    if not stale:
        print("docs/benchmarks.md, benchmarks/README.md and the figures are up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
