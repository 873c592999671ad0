"""Benchmark 4: Brooker's optimistic-concurrency contention experiment, driven by our jitter.

A discrete-event reproduction of the simulation behind "Exponential Backoff And Jitter"
(Marc Brooker, AWS Architecture Blog, 2015). ``N`` clients start at once; each must make
one successful conditional write to a single versioned row. An attempt is a read (which
returns the row's version) followed by a write carrying that version; the write succeeds
only if the version is still current, which bumps it. Every message (read request, read
response, write request, write response) is delayed by ``|Normal(10 ms, 2 ms)|``. After a
failed write the client backs off, then starts a new attempt. As in the post's simulator,
the backoff after the ``n``-th failure uses the exponent ``n`` (so the first wait's nominal
delay is ``2 * base``), base 5 ms, cap 2000 ms, and the metrics are the writes attempted
and the completion time (when the last client hears its write succeeded), each averaged
over 100 runs per point.

The delays come from this library's own code (:mod:`tenacity_budget.jitter` and
:func:`tenacity_budget.nominal_delay`):

* ``none``: no backoff, retry at once;
* ``exponential``: ``nominal_delay(n, base, 2, cap)``;
* ``full``: ``full_jitter(nominal)``; ``equal``: ``equal_jitter(nominal)``;
* ``decorrelated``: the post's formula, ``min(cap, uniform(base, 3 * previous))`` with
  ``previous`` starting at ``base``, computed as ``decorrelated_jitter(cap, previous, base)``;
* ``decorrelated-bounded`` (extra): what a :class:`~tenacity_budget.BackoffPolicy` with
  ``jitter="decorrelated"`` does, ``decorrelated_jitter(nominal, previous, base)`` with
  ``previous`` starting at 0: every wait within its nominal delay, so the budget holds.

What the post lacks, added here: a time budget per client (default 2000 ms, the cap: the
tightest budget a policy with this cap accepts) and the share of clients that finish within
it, per mode; once with clients that never give up, once with clients that give up as
``policy.stop()`` does (before a retry whose sleep plus the longest attempt so far would
end past the budget).

Seeded and deterministic: every run draws from ``random.Random(f"{seed}/{mode}/{N}/{run}")``.
The full sweep (N = 10..190, 100 runs per point) is one command; the tests run a reduced
size::

    python -m benchmarks.contention                    # full sweep, writes results/contention.json
    python -m benchmarks.contention --quick            # 10, 50, 100 clients, 20 runs, no file
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from tenacity_budget.jitter import decorrelated_jitter, equal_jitter, full_jitter
from tenacity_budget.solver import nominal_delay

from ._common import command_line, write_results

__all__ = [
    "ALL_MODES",
    "MODES",
    "Backoff",
    "Point",
    "RunResult",
    "SimParams",
    "main",
    "make_backoff",
    "run_point",
    "simulate",
    "sweep",
]

MODES: Final = ("none", "exponential", "full", "equal", "decorrelated")
"""The five modes of the post."""

ALL_MODES: Final = (*MODES, "decorrelated-bounded")
"""The post's modes plus this library's bounded decorrelated jitter."""

FULL_CLIENTS: Final = tuple(range(10, 200, 10))
"""Client counts of the full sweep: 10, 20, ..., 190."""

_READ: Final = 0
_WRITE: Final = 1


@dataclass(frozen=True, slots=True)
class SimParams:
    """Parameters of the experiment, in milliseconds (the post's values by default).

    Attributes:
        base_ms: first delay of the exponential (the ``n``-th wait's nominal delay is
            ``min(cap, base * 2**n)``).
        cap_ms: ceiling of any one wait.
        net_mean_ms: mean one-way delay of a message.
        net_sd_ms: standard deviation of that delay (the absolute value is taken).
        budget_ms: the per-client time budget the share-within-budget metric uses.
    """

    base_ms: float = 5.0
    cap_ms: float = 2000.0
    net_mean_ms: float = 10.0
    net_sd_ms: float = 2.0
    budget_ms: float = 2000.0


class Backoff:
    """One client's backoff: the wait after its ``n``-th failed write, from our jitter code.

    Args:
        mode: one of :data:`ALL_MODES`.
        params: base and cap.
        rng: the run's generator (jitter draws come from it).
    """

    __slots__ = ("_base", "_cap", "_draw", "mode", "previous")

    def __init__(self, mode: str, params: SimParams, rng: random.Random) -> None:
        if mode not in ALL_MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {ALL_MODES}")
        self.mode = mode
        self._base = params.base_ms
        self._cap = params.cap_ms
        # The post seeds decorrelated jitter's chain with base; a policy starts it at 0.
        self.previous = params.base_ms if mode == "decorrelated" else 0.0
        self._draw = rng

    def nominal(self, n: int) -> float:
        """Nominal delay after the ``n``-th failure (``n >= 1``): ``min(cap, base * 2**n)``."""
        return nominal_delay(n, self._base, 2.0, self._cap)

    def wait(self, n: int) -> float:
        """The wait after the ``n``-th failed write (``n >= 1``)."""
        mode = self.mode
        if mode == "none":
            return 0.0
        if mode == "exponential":
            return self.nominal(n)
        if mode == "full":
            return full_jitter(self.nominal(n), self._draw)
        if mode == "equal":
            return equal_jitter(self.nominal(n), self._draw)
        if mode == "decorrelated":
            wait = decorrelated_jitter(self._cap, self.previous, self._base, self._draw)
        else:  # decorrelated-bounded
            wait = decorrelated_jitter(self.nominal(n), self.previous, self._base, self._draw)
        self.previous = wait
        return wait


def make_backoff(mode: str, params: SimParams, rng: random.Random) -> Backoff:
    """A client's :class:`Backoff` in ``mode`` (validates the mode)."""
    return Backoff(mode, params, rng)


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run of the simulation.

    Attributes:
        clients: clients in the run.
        writes: writes attempted (conditional writes that reached the row).
        succeeded: clients whose write succeeded.
        gave_up: clients that stopped retrying (only with a give-up budget).
        retries: backoff waits taken (each followed by a new attempt).
        completion_ms: when the last client heard its final answer (success or give-up).
        finish_ms: per client, when it heard its write succeeded (``inf`` if it gave up).
        max_wait_over_nominal: the largest wait divided by its nominal delay (0 if none).
        final_version: the row's version at the end (one bump per successful write).
    """

    clients: int
    writes: int
    succeeded: int
    gave_up: int
    retries: int
    completion_ms: float
    finish_ms: tuple[float, ...]
    max_wait_over_nominal: float
    final_version: int

    def within(self, budget_ms: float) -> int:
        """Clients whose write succeeded no later than ``budget_ms`` after the start."""
        return sum(1 for t in self.finish_ms if t <= budget_ms)


def simulate(
    mode: str,
    clients: int,
    *,
    seed: int | str,
    params: SimParams | None = None,
    give_up_after_ms: float | None = None,
) -> RunResult:
    """Run the experiment once: ``clients`` clients, one row, until every client is done.

    Args:
        mode: the backoff mode (one of :data:`ALL_MODES`).
        clients: number of clients, all starting at time 0.
        seed: seeds the run's ``random.Random`` (network delays and jitter draws).
        params: delays; the post's by default.
        give_up_after_ms: when set, a client gives up instead of retrying when its clock
            (time since the start) plus the wait plus its longest attempt so far would pass
            this budget, as ``policy.stop()`` does; ``None``: retry until success.
    """
    if clients < 1:
        raise ValueError(f"clients must be >= 1, got {clients!r}")
    p = params or SimParams()
    rng = random.Random(seed)
    normal = rng.normalvariate
    mean, sd = p.net_mean_ms, p.net_sd_ms

    def net() -> float:
        return abs(normal(mean, sd))

    backoffs = [Backoff(mode, p, rng) for _ in range(clients)]
    failures = [0] * clients
    seen = [0] * clients  # the version each client's latest read returned
    started = [0.0] * clients  # when each client's current attempt began (read sent)
    longest = [0.0] * clients
    finish = [math.inf] * clients
    version = writes = succeeded = gave_up = retries = 0
    completion = 0.0
    worst_ratio = 0.0
    budget = math.inf if give_up_after_ms is None else give_up_after_ms

    queue: list[tuple[float, int, int, int]] = []
    seq = 0
    for c in range(clients):
        queue.append((net(), seq, _READ, c))  # the read reaches the row
        seq += 1
    heapq.heapify(queue)
    now = 0.0
    while queue:
        t, _, kind, c = heapq.heappop(queue)
        if t < now:
            raise AssertionError("simulated time went backwards")
        now = t
        if kind == _READ:
            seen[c] = version
            # read response back to the client, then its write request to the row
            heapq.heappush(queue, (t + net() + net(), seq, _WRITE, c))
            seq += 1
            continue
        writes += 1
        answered = t + net()  # the write response reaches the client
        if seen[c] == version:
            version += 1
            succeeded += 1
            finish[c] = answered
            completion = max(completion, answered)
            continue
        failures[c] += 1
        backoff = backoffs[c]
        wait = backoff.wait(failures[c])
        if wait > 0.0:
            worst_ratio = max(worst_ratio, wait / backoff.nominal(failures[c]))
        took = answered - started[c]
        if took > longest[c]:
            longest[c] = took
        if answered + wait + longest[c] > budget:
            gave_up += 1
            completion = max(completion, answered)
            continue
        retries += 1
        started[c] = answered + wait
        heapq.heappush(queue, (answered + wait + net(), seq, _READ, c))
        seq += 1
    return RunResult(
        clients=clients,
        writes=writes,
        succeeded=succeeded,
        gave_up=gave_up,
        retries=retries,
        completion_ms=completion,
        finish_ms=tuple(finish),
        max_wait_over_nominal=worst_ratio,
        final_version=version,
    )


@dataclass(frozen=True, slots=True)
class Point:
    """The averages of ``runs`` runs of one mode at one client count.

    Attributes:
        mode, clients, runs: the point.
        writes_mean: writes attempted per run, mean over the runs.
        completion_ms_mean: completion time per run, mean over the runs.
        within_budget_share: share of clients (never giving up) done within the budget.
        budgeted_within_share: share of clients done within the budget when they give up
            as ``policy.stop()`` does.
        budgeted_gave_up_share: share of clients that gave up under that rule.
        budgeted_writes_mean: writes attempted per run under that rule.
    """

    mode: str
    clients: int
    runs: int
    writes_mean: float
    completion_ms_mean: float
    within_budget_share: float
    budgeted_within_share: float
    budgeted_gave_up_share: float
    budgeted_writes_mean: float

    def as_dict(self) -> dict[str, Any]:
        """Plain, rounded values for the JSON result file."""
        return {
            "mode": self.mode,
            "clients": self.clients,
            "runs": self.runs,
            "writes_mean": round(self.writes_mean, 2),
            "completion_ms_mean": round(self.completion_ms_mean, 1),
            "within_budget_share": round(self.within_budget_share, 4),
            "budgeted_within_share": round(self.budgeted_within_share, 4),
            "budgeted_gave_up_share": round(self.budgeted_gave_up_share, 4),
            "budgeted_writes_mean": round(self.budgeted_writes_mean, 2),
        }


def run_point(
    mode: str,
    clients: int,
    runs: int,
    *,
    seed: int = 2015,
    params: SimParams | None = None,
    budgeted: bool = True,
) -> Point:
    """Average ``runs`` seeded runs of one mode at one client count (and the budget rule)."""
    p = params or SimParams()
    plain: list[RunResult] = []
    limited: list[RunResult] = []
    for run in range(runs):
        key = f"{seed}/{mode}/{clients}/{run}"
        plain.append(simulate(mode, clients, seed=key, params=p))
        if budgeted:
            limited.append(
                simulate(mode, clients, seed=key, params=p, give_up_after_ms=p.budget_ms)
            )
    total = clients * runs
    return Point(
        mode=mode,
        clients=clients,
        runs=runs,
        writes_mean=statistics.fmean(r.writes for r in plain),
        completion_ms_mean=statistics.fmean(r.completion_ms for r in plain),
        within_budget_share=sum(r.within(p.budget_ms) for r in plain) / total,
        budgeted_within_share=(
            sum(r.within(p.budget_ms) for r in limited) / total if limited else math.nan
        ),
        budgeted_gave_up_share=sum(r.gave_up for r in limited) / total if limited else math.nan,
        budgeted_writes_mean=(statistics.fmean(r.writes for r in limited) if limited else math.nan),
    )


def sweep(
    clients: Sequence[int],
    runs: int,
    *,
    modes: Sequence[str] = ALL_MODES,
    seed: int = 2015,
    params: SimParams | None = None,
    progress: Callable[[Point], None] | None = None,
) -> list[Point]:
    """Every (client count, mode) point, in that order."""
    points: list[Point] = []
    for n in clients:
        for mode in modes:
            point = run_point(mode, n, runs, seed=seed, params=params)
            points.append(point)
            if progress is not None:
                progress(point)
    return points


def reference_ratio(points: Sequence[Point], clients: int = 100) -> float | None:
    """Writes of full jitter over writes of plain exponential at ``clients`` (the post's
    reference point: less than one half), or ``None`` if the sweep lacks that point."""
    by = {(p.mode, p.clients): p for p in points}
    full, expo = by.get(("full", clients)), by.get(("exponential", clients))
    if full is None or expo is None:
        return None
    return full.writes_mean / expo.writes_mean


def _print_point(point: Point) -> None:
    print(
        f"{point.clients:>4} {point.mode:<21} writes {point.writes_mean:>9.1f}  "
        f"time {point.completion_ms_mean:>9.1f} ms  within budget {point.within_budget_share:>6.1%}"
        f"  | giving up: within {point.budgeted_within_share:>6.1%}, "
        f"writes {point.budgeted_writes_mean:>8.1f}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--clients", type=int, nargs="+", default=list(FULL_CLIENTS))
    parser.add_argument("--runs", type=int, default=100, help="runs per point")
    parser.add_argument("--modes", nargs="+", default=list(ALL_MODES), choices=ALL_MODES)
    parser.add_argument("--seed", type=int, default=2015)
    parser.add_argument("--budget-ms", type=float, default=SimParams().budget_ms)
    parser.add_argument(
        "--quick", action="store_true", help="10, 50 and 100 clients, 20 runs, no result file"
    )
    args = parser.parse_args(argv)
    clients = [10, 50, 100] if args.quick else args.clients
    runs = 20 if args.quick else args.runs
    params = SimParams(budget_ms=args.budget_ms)
    started = time.perf_counter()
    points = sweep(
        clients, runs, modes=args.modes, seed=args.seed, params=params, progress=_print_point
    )
    seconds = time.perf_counter() - started
    ratio = reference_ratio(points)
    if ratio is not None:
        verdict = "less than half: reproduced" if ratio < 0.5 else "NOT less than half"
        print(f"\nat 100 clients, full jitter / exponential writes = {ratio:.3f} ({verdict})")
    print(f"{len(points)} points in {seconds:.0f} s")
    if not args.quick:
        path = write_results(
            "contention",
            command_line("benchmarks.contention"),
            {
                "params": {
                    "base_ms": params.base_ms,
                    "cap_ms": params.cap_ms,
                    "net_mean_ms": params.net_mean_ms,
                    "net_sd_ms": params.net_sd_ms,
                    "budget_ms": params.budget_ms,
                    "runs": runs,
                    "seed": args.seed,
                },
                "modes": list(args.modes),
                "clients": list(clients),
                "reference": {
                    "clients": 100,
                    "full_over_exponential_writes": None if ratio is None else round(ratio, 4),
                    "published": "full jitter needs less than half the writes of exponential",
                },
                "seconds": round(seconds, 1),
                "points": [point.as_dict() for point in points],
            },
        )
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
