"""Generate the documentation figures from the library itself.

Every number plotted here is computed by ``tenacity_budget`` (or, for the comparison, by the
installed tenacity, stamina and backoff), from fixed seeds, so the figures cannot drift from
the code. The SVGs are deterministic (a fixed ``svg.hashsalt`` and no date in the metadata):
running the script twice writes identical bytes.

Usage::

    python docs/gen_figures.py            # (re)write docs/figures/*.svg
    python docs/gen_figures.py --check    # regenerate into a temp dir; exit 1 if any differ
    python docs/gen_figures.py --out DIR  # write into DIR instead

The contention figures (``docs/figures/contention*.svg``) come from the benchmarks, not
from this script, and ``--check`` leaves them alone.
"""

from __future__ import annotations

import argparse
import contextlib
import filecmp
import random
import sys
import tempfile
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from tenacity_budget import BackoffPolicy
from tenacity_budget.solver import compute_max_attempts, total_delay

FIGURES = Path(__file__).resolve().parent / "figures"

SEED = 2026
"""The one seed every random figure draws from."""

SAMPLES = 20_000
"""Waits drawn per strategy in the distribution figure."""

SATURATED_RETRY = 12
"""0-based retry index sampled in the distribution figure: 2**12 s is far past the 60 s cap."""

# The default policy of the design notes (and of ``tenacity-budget plan``).
BASE, FACTOR, CAP, MAX_ELAPSED = 1.0, 2.0, 60.0, 300.0

WAIT_COLOURS = ("#9ecae1", "#4292c6")
ATTEMPT_COLOUR = "#d94801"
BUDGET_COLOUR = "#cb181d"


def _style() -> None:
    """Settings that make the SVG output byte-for-byte reproducible and compact."""
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


def _save(fig: Figure, path: Path) -> None:
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)


# -- figure 1: a schedule against its budget ------------------------------------------------


def _timeline_rows() -> list[tuple[str, BackoffPolicy, list[float]]]:
    """(label, policy, waits) for each row of the timeline, all from the library."""
    rows: list[tuple[str, BackoffPolicy, list[float]]] = []
    for jitter in ("none", "full", "equal", "decorrelated"):
        policy = BackoffPolicy(
            base=BASE, factor=FACTOR, cap=CAP, max_elapsed=MAX_ELAPSED, jitter=jitter
        )
        waits = policy.schedule(seed=SEED)
        label = "none (nominal)" if jitter == "none" else f"{jitter}, seed={SEED}"
        rows.append((label, policy, waits))
    timed = BackoffPolicy(
        base=BASE,
        factor=FACTOR,
        cap=CAP,
        max_elapsed=MAX_ELAPSED,
        jitter="none",
        attempt_duration=5.0,
    )
    rows.append(("none, attempt_duration=5 s", timed, timed.schedule(seed=SEED)))
    return rows


def schedule_timeline(path: Path) -> None:
    """Each row is one run of an always-failing call: attempts, the waits between, the budget."""
    rows = _timeline_rows()
    fig, ax = plt.subplots(figsize=(9.0, 3.6))
    height = 0.6
    for row, (_label, policy, waits) in enumerate(reversed(rows)):
        y = row - height / 2
        duration = policy.attempt_duration
        t = 0.0
        for i in range(len(waits) + 1):
            # An attempt: a block when it has a duration, a tick when it is instantaneous.
            if duration > 0:
                ax.broken_barh([(t, duration)], (y, height), facecolors=ATTEMPT_COLOUR)
            else:
                ax.vlines(t, y, y + height, colors=ATTEMPT_COLOUR, linewidth=1.2)
            t += duration
            if i < len(waits):
                colour = WAIT_COLOURS[i % 2]
                ax.broken_barh([(t, waits[i])], (y, height), facecolors=colour)
                t += waits[i]
        calls = len(waits) + 1
        ax.text(
            MAX_ELAPSED + 4,
            row,
            f"{len(waits)} retries ({calls} calls), ends at {t:.1f} s",
            va="center",
            fontsize=8,
        )
    ax.axvline(MAX_ELAPSED, color=BUDGET_COLOUR, linestyle="--", linewidth=1.2)
    ax.text(
        MAX_ELAPSED,
        len(rows) - 0.35,
        f"max_elapsed = {MAX_ELAPSED:g} s",
        color=BUDGET_COLOUR,
        ha="right",
        va="bottom",
        fontsize=8,
    )
    ax.set_yticks(range(len(rows)), [label for label, _, _ in reversed(rows)])
    ax.set_xlim(0, MAX_ELAPSED + 110)
    ax.set_ylim(-0.6, len(rows) - 0.1)
    ax.set_xlabel("seconds since the first attempt began")
    ax.set_title(
        f"One always-failing run per row: BackoffPolicy(base={BASE:g}, factor={FACTOR:g}, "
        f"cap={CAP:g}, max_elapsed={MAX_ELAPSED:g})\norange: an attempt; blue: a wait",
        fontsize=9,
        loc="left",
    )
    fig.tight_layout()
    _save(fig, path)


# -- figure 2: the solver ---------------------------------------------------------------------


def solver_curve(path: Path) -> None:
    """S(n), the sum of the first n nominal delays, against the budget, with and without time
    spent in attempts; the largest n under the budget is max_attempts()."""
    fig, ax = plt.subplots(figsize=(7.0, 3.8))
    last = 12
    ns = list(range(last + 1))
    k = BackoffPolicy(base=BASE, factor=FACTOR, cap=CAP, max_elapsed=MAX_ELAPSED).capped_index()
    for duration, marker, colour in ((0.0, "o", "#2171b5"), (5.0, "s", "#6a51a3")):
        cost = [total_delay(n, BASE, FACTOR, CAP) + (n + 1) * duration for n in ns]
        best = compute_max_attempts(MAX_ELAPSED, BASE, FACTOR, CAP, attempt_duration=duration)
        label = "S(n)" if duration == 0 else f"S(n) + (n + 1) * {duration:g} s"
        ax.plot(ns, cost, marker=marker, color=colour, markersize=4, linewidth=1, label=label)
        ax.annotate(
            f"max_attempts() = {best} ({cost[best]:g} s)",
            xy=(best, cost[best]),
            xytext=(best + 0.6, 200) if duration == 0 else (best - 4.5, 400),
            arrowprops={"arrowstyle": "->", "color": colour},
            color=colour,
            fontsize=8,
        )
    ax.axhline(MAX_ELAPSED, color=BUDGET_COLOUR, linestyle="--", linewidth=1.2)
    ax.text(0, MAX_ELAPSED + 8, f"budget = {MAX_ELAPSED:g} s", color=BUDGET_COLOUR, fontsize=8)
    ax.axvspan(-0.5, k, color="#f0f0f0", zorder=0)
    ax.text(k / 2, 560, "geometric part\n(n ≤ k)", ha="center", fontsize=8)
    ax.text(
        (k + last) / 2, 560, f"linear part: + cap = {CAP:g} s per retry", ha="center", fontsize=8
    )
    ax.axvline(k, color="#737373", linewidth=0.8)
    ax.text(k + 0.1, 20, f"k = {k}", fontsize=8, color="#525252")
    ax.set_xlim(-0.5, last + 0.5)
    ax.set_ylim(0, 640)
    ax.set_xticks(ns)
    ax.set_xlabel("n (retries)")
    ax.set_ylabel("seconds")
    ax.set_title(f"base={BASE:g}, factor={FACTOR:g}, cap={CAP:g}: what n retries cost", fontsize=9)
    ax.legend(loc="lower right", fontsize=8, frameon=False)
    fig.tight_layout()
    _save(fig, path)


# -- figure 3: waits at saturation, per jitter mode and per library -------------------------


def _ours(jitter: str) -> list[float]:
    """SAMPLES waits at retry SATURATED_RETRY, each from one run of the library's schedule."""
    policy = BackoffPolicy(base=BASE, factor=FACTOR, cap=CAP, max_elapsed=3600.0, jitter=jitter)  # type: ignore[arg-type]
    assert policy.max_attempts() > SATURATED_RETRY
    rng = random.Random(SEED)
    out = []
    for _ in range(SAMPLES):
        run: Iterator[float] = policy.iter_waits(rng)
        out.append(next(islice(run, SATURATED_RETRY, None)))
    return out


def _tenacity(strategy_name: str) -> list[float]:
    """SAMPLES calls of a tenacity wait strategy on a retry state at the saturated retry."""
    import tenacity

    strategy: Callable[[tenacity.RetryCallState], float]
    if strategy_name == "wait_exponential_jitter":
        strategy = tenacity.wait_exponential_jitter(multiplier=BASE, max=CAP, exp_base=FACTOR)
    else:
        strategy = tenacity.wait_random_exponential(multiplier=BASE, max=CAP, exp_base=FACTOR)
    state = tenacity.RetryCallState(retry_object=tenacity.Retrying(), fn=None, args=(), kwargs={})
    state.attempt_number = SATURATED_RETRY + 1  # tenacity's n is attempt_number - 1
    random.seed(SEED)  # tenacity draws from the random module
    return [strategy(state) for _ in range(SAMPLES)]


STAMINA_SOURCE = "stamina._core._compute_backoff"


def _stamina() -> tuple[list[float], str]:
    """SAMPLES backoffs from stamina's own formula (its default wait_jitter = 1 s)."""
    try:
        from stamina._core import _compute_backoff

        compute: Callable[[int, float, float, float, float], float] = _compute_backoff
        source = f"{STAMINA_SOURCE} (called)"
    except ImportError:  # pragma: no cover - only if stamina moves its internals
        # The same formula, copied from stamina 26.1's _core.py.
        def compute(num: int, high: float, initial: float, base: float, jit: float) -> float:
            jitter = random.uniform(0, jit) if jit else 0
            return min(high, initial * base ** (num - 1) + jitter)

        source = "stamina's formula, copied from its source"
    random.seed(SEED)
    # stamina's num is tenacity's attempt_number (1-based).
    return [compute(SATURATED_RETRY + 1, CAP, BASE, FACTOR, 1.0) for _ in range(SAMPLES)], source


def _backoff() -> list[float]:
    """SAMPLES waits from backoff's expo generator with its default full_jitter."""
    import backoff

    random.seed(SEED)
    out = []
    for _ in range(SAMPLES):
        gen = backoff.expo(base=FACTOR, factor=BASE, max_value=CAP)
        next(gen)  # backoff primes its generators with one send(None)
        value = next(islice(gen, SATURATED_RETRY, None))
        out.append(backoff.full_jitter(value))
    return out


def _panel(ax: Axes, title: str, samples: list[float], colour: str) -> None:
    ax.hist(samples, bins=[i * 1.0 for i in range(62)], color=colour, edgecolor="none")
    low, high = min(samples), max(samples)
    distinct = len(set(samples))
    if distinct == 1:
        summary = f"all {len(samples)} waits = {low:.3f} s"
    else:
        summary = f"{low:.1f} s to {high:.1f} s, {distinct} distinct"
    ax.set_title(f"{title}\n{summary}", fontsize=8.5, loc="left")
    ax.set_xlim(0, 62)
    ax.set_yticks([])


def jitter_at_cap(path: Path) -> None:
    """Histogram of the wait at a retry far past the cap, for each strategy."""
    stamina_samples, stamina_source = _stamina()
    ours = "#2171b5"
    theirs = "#636363"
    panels: list[tuple[str, list[float], str]] = [
        ('tenacity-budget jitter="full"', _ours("full"), ours),
        ("tenacity wait_exponential_jitter(max=60)", _tenacity("wait_exponential_jitter"), theirs),
        ('tenacity-budget jitter="equal"', _ours("equal"), ours),
        (f"stamina: {stamina_source}", stamina_samples, theirs),
        ('tenacity-budget jitter="decorrelated"', _ours("decorrelated"), ours),
        ("tenacity wait_random_exponential(max=60)", _tenacity("wait_random_exponential"), theirs),
        ('tenacity-budget jitter="none"', _ours("none"), ours),
        ("backoff expo(max_value=60) + full_jitter", _backoff(), theirs),
    ]
    fig, axes = plt.subplots(4, 2, figsize=(9.0, 8.0), sharex=True)
    for ax, (title, samples, colour) in zip(axes.flat, panels, strict=True):
        _panel(ax, title, samples, colour)
    for ax in axes[-1]:
        ax.set_xlabel("wait before retry 13 (seconds)")
    fig.suptitle(
        f"Waits once saturated: {SAMPLES} draws each at retry {SATURATED_RETRY + 1}, "
        f"base={BASE:g}, factor={FACTOR:g}, cap={CAP:g}, seed={SEED}",
        fontsize=9.5,
    )
    fig.tight_layout()
    _save(fig, path)


# -- figure 4: when does a run end, once attempts take time? -------------------------------

OVERRUN_DURATIONS = list(range(0, 41))
"""Seconds each attempt takes, one run per value and per library."""


def _run_end(decorate: Callable[[Callable[[], None]], Callable[[], None]], took: float) -> float:
    """Seconds from the first attempt's start to the end of a run of an always-failing call
    whose every attempt takes ``took`` seconds, on the virtual clock (no real waiting)."""
    from tenacity_budget.testing import virtual_clock

    with virtual_clock() as clock:

        def attempt() -> None:
            clock.advance(took)
            raise OSError("upstream down")

        call = decorate(attempt)
        # Every library gives up in its own way; only the time matters here.
        with contextlib.suppress(Exception):
            call()
        return clock.elapsed


def _overrun_strategies() -> dict[str, Callable[[Callable[[], None]], Callable[[], None]]]:
    """Each library configured for the same schedule: 1, 2, 4, ... capped at 60 s, no jitter,
    a 300 s budget, retrying on every OSError."""
    import backoff
    import stamina
    import tenacity

    policy = BackoffPolicy(
        base=BASE, factor=FACTOR, cap=CAP, max_elapsed=MAX_ELAPSED, jitter="none"
    )
    expo = tenacity.wait_exponential(multiplier=BASE, exp_base=FACTOR, max=CAP)
    return {
        "tenacity stop_after_delay(300)": tenacity.retry(
            wait=expo, stop=tenacity.stop_after_delay(MAX_ELAPSED)
        ),
        "stamina timeout=300": stamina.retry(
            on=OSError,
            attempts=None,
            timeout=MAX_ELAPSED,
            wait_initial=BASE,
            wait_max=CAP,
            wait_exp_base=FACTOR,
            wait_jitter=0,
        ),
        "backoff max_time=300": backoff.on_exception(
            backoff.expo, OSError, max_time=MAX_ELAPSED, max_value=CAP, jitter=None, logger=None
        ),
        "tenacity stop_before_delay(300)": tenacity.retry(
            wait=expo, stop=tenacity.stop_before_delay(MAX_ELAPSED)
        ),
        "tenacity-budget policy.retry()": policy.retry(),
    }


def overrun(path: Path) -> None:
    """End of a run against the budget, as a function of how long each attempt takes."""
    import stamina.instrumentation

    hooks = stamina.instrumentation.get_on_retry_hooks()
    stamina.instrumentation.set_on_retry_hooks([])  # no log line per simulated retry
    try:
        ends = {
            name: [_run_end(decorate, took) for took in OVERRUN_DURATIONS]
            for name, decorate in _overrun_strategies().items()
        }
    finally:
        stamina.instrumentation.set_on_retry_hooks(hooks)
    styles = {
        "tenacity stop_after_delay(300)": ("#969696", "-", "o"),
        "stamina timeout=300": ("#636363", ":", "x"),
        "backoff max_time=300": ("#fd8d3c", "-", "^"),
        "tenacity stop_before_delay(300)": ("#74c476", "-", "s"),
        "tenacity-budget policy.retry()": ("#2171b5", "-", "D"),
    }
    fig, ax = plt.subplots(figsize=(8.0, 4.8))
    for name, values in ends.items():
        colour, line, marker = styles[name]
        ax.plot(
            OVERRUN_DURATIONS,
            values,
            label=name,
            color=colour,
            linestyle=line,
            marker=marker,
            markersize=3.5,
            linewidth=1.2,
        )
    ax.axhline(MAX_ELAPSED, color=BUDGET_COLOUR, linestyle="--", linewidth=1.2)
    ax.text(
        40,
        MAX_ELAPSED - 3,
        f"budget {MAX_ELAPSED:g} s",
        color=BUDGET_COLOUR,
        fontsize=8,
        ha="right",
        va="top",
    )
    ax.set_xlabel("seconds every attempt takes (the call always fails)")
    ax.set_ylabel("run ends at (s after the first attempt began)")
    ax.set_xlim(-0.5, OVERRUN_DURATIONS[-1] + 0.5)
    ax.set_ylim(200, 400)
    ax.set_title(
        "Same schedule (1, 2, 4 ... capped at 60 s, no jitter), same 300 s budget, virtual clock",
        fontsize=9,
        loc="left",
    )
    fig.tight_layout(rect=(0, 0.13, 1, 1))
    fig.legend(fontsize=8, frameon=False, loc="lower center", ncol=3)
    _save(fig, path)


# -- driver ---------------------------------------------------------------------------------

GENERATORS: dict[str, Callable[[Path], None]] = {
    "schedule-timeline.svg": schedule_timeline,
    "solver.svg": solver_curve,
    "jitter-at-cap.svg": jitter_at_cap,
    "overrun.svg": overrun,
}


def generate(out: Path) -> list[Path]:
    """Write every figure into ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in GENERATORS.items():
        _style()
        path = out / name
        make(path)
        written.append(path)
    return written


def check(committed: Path = FIGURES) -> list[str]:
    """Names of the figures whose committed SVG is missing or differs from a fresh run."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = generate(Path(tmp))
        return [
            path.name
            for path in fresh
            if not (committed / path.name).is_file()
            or not filecmp.cmp(path, committed / path.name, shallow=False)
        ]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check",
        action="store_true",
        help="regenerate into a temporary directory and exit 1 if a committed SVG differs",
    )
    parser.add_argument("--out", type=Path, default=FIGURES, help="output directory")
    args = parser.parse_args(argv)
    if args.check:
        stale = check(args.out)
        if stale:
            print(
                f"out of date: {', '.join(stale)}; run `python docs/gen_figures.py` and commit",
                file=sys.stderr,
            )
            return 1
        print(f"{len(GENERATORS)} figures up to date")
        return 0
    for path in generate(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
