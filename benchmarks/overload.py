"""Benchmark: an overloaded server, with and without adaptive client-side throttling.

100 clients call a server open loop (calls arrive on schedule whatever happened to the
earlier ones) at 100 calls per second in all, for 60 s. The server can serve half of that:
it has 50 units of work per second (a token bucket, 0.1 s deep); a served request costs one
unit, and past its capacity it answers 429, which costs it a tenth of a unit. Each call is
retried by one of:

* ``tenacity``: ``stop_after_attempt(5)`` + ``wait_random_exponential(multiplier=0.1, max=2)``;
* ``stamina``: ``stamina.retry(on=Overloaded)`` with its defaults (10 attempts, 45 s);
* ``policy``: ``policy.retry()`` alone (``BackoffPolicy(base=0.1, cap=2, max_elapsed=10,
  jitter="full")``, the storm benchmark's);
* ``policy+budget``: ``policy.retry(budget=RetryBudget())``;
* ``policy+throttle k=2`` and ``k=1.5``: ``policy.retry(throttle=AdaptiveThrottle(k))``;
* ``policy+throttle+budget``: both, ``AdaptiveThrottle(k=2)`` and ``RetryBudget()``.

Measured: attempts the server rejected (429s), goodput (calls that succeeded, per second)
and attempts sent per call, with the ratios against tenacity's in the same run. Goals
(issue 18): with the throttle at k=2, at least 80% fewer rejected attempts than tenacity's
at a goodput of at least 0.98x tenacity's; at least 90% fewer with throttle and budget.

**Simulated**, with the real decorators, in simulated time: the storm benchmark's event
loop, whose selector moves a frozen clock to the next timer (so every clock, the throttle's
and the budget's windows included, reads simulated time), seeded. **Real**
(:mod:`benchmarks.overload_real`): the same server on the real clock, an aiohttp server in
its own process, called by 4 client processes at the same rates for 15 s; the candidates
but stamina and k=1.5, plus a ``RedisAdaptiveThrottle`` shared by the 4 processes. Run::

    python -m benchmarks.overload                   # both parts, writes results/overload.json
    python -m benchmarks.overload --part real       # one part; the other kept from the file
    python -m benchmarks.overload --quick           # 20 s simulated, no real part, no file
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import tenacity

from tenacity_budget import AdaptiveThrottle, RetryBudget

from ._common import RESULTS_DIR, command_line, write_results
from .storm import POLICY, SIM_ORIGIN, SIM_START, CallRecord, Decorate, run_traffic

__all__ = ["CANDIDATES", "OverloadParams", "main", "simulate", "summarise"]


@dataclass(frozen=True)
class OverloadParams:
    """The scenario."""

    calls_per_second: float = 100.0
    duration: float = 60.0
    capacity: float = 50.0  # units of work per second: half the offered calls
    depth: float = 5.0  # the token bucket's depth (0.1 s of capacity)
    rejection_cost: float = 0.1  # units a 429 costs the server
    seed: int = 2026


class Overloaded(Exception):
    """The server's 429: past its capacity."""

    status_code = 429


class Server:
    """A token bucket of ``capacity`` units a second: serve for 1 unit, else 429 for 0.1."""

    def __init__(self, p: OverloadParams) -> None:
        self.p = p
        self.tokens = p.depth
        self.last: float | None = None
        self.served = 0
        self.rejected = 0

    def attempt(self, now: float) -> bool:
        p = self.p
        if self.last is not None:
            self.tokens = min(p.depth, self.tokens + (now - self.last) * p.capacity)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            self.served += 1
            return True
        # Rejecting costs work too; the deficit is bounded by a second of capacity.
        self.tokens = max(-p.capacity, self.tokens - p.rejection_cost)
        self.rejected += 1
        return False


# -- the candidates ----------------------------------------------------------------------------

_RETRY = tenacity.retry_if_exception_type(Overloaded)


def _tenacity(_: OverloadParams) -> Decorate:
    return tenacity.retry(
        stop=tenacity.stop_after_attempt(5),
        wait=tenacity.wait_random_exponential(multiplier=0.1, max=2),
        retry=_RETRY,
    )


def _stamina(_: OverloadParams) -> Decorate:
    import stamina
    import stamina.instrumentation

    stamina.instrumentation.set_on_retry_hooks([])  # no log line per retry
    decorate: Decorate = stamina.retry(on=Overloaded)
    return decorate


def _policy(_: OverloadParams) -> Decorate:
    return POLICY.retry(retry=_RETRY)


def _policy_budget(p: OverloadParams) -> Decorate:
    return POLICY.retry(budget=RetryBudget(name="overload"), retry=_RETRY)


def _throttled(k: float, budget: bool) -> Callable[[OverloadParams], Decorate]:
    def factory(p: OverloadParams) -> Decorate:
        throttle = AdaptiveThrottle(k, name="overload", rng=random.Random(p.seed))
        retry_budget = RetryBudget(name="overload") if budget else None
        return POLICY.retry(throttle=throttle, budget=retry_budget, retry=_RETRY)  # type: ignore[call-arg]

    return factory


CANDIDATES: dict[str, tuple[str, Callable[[OverloadParams], Decorate]]] = {
    "tenacity": ("tenacity stop_after_attempt(5) + wait_random_exponential", _tenacity),
    "stamina": ("stamina defaults (10 attempts, 45 s)", _stamina),
    "policy": ("policy.retry() alone", _policy),
    "policy+budget": ("policy.retry(budget=RetryBudget())", _policy_budget),
    "policy+throttle k=2": ("policy.retry(throttle=AdaptiveThrottle(k=2))", _throttled(2.0, False)),
    "policy+throttle k=1.5": (
        "policy.retry(throttle=AdaptiveThrottle(k=1.5))",
        _throttled(1.5, False),
    ),
    "policy+throttle+budget": (
        "policy.retry(throttle=AdaptiveThrottle(k=2), budget=RetryBudget())",
        _throttled(2.0, True),
    ),
}
"""Name: (label, factory of the decorator, given the scenario)."""


def simulate(name: str, params: OverloadParams) -> tuple[list[CallRecord], Server]:
    """Run the scenario for candidate ``name`` in simulated time."""
    from freezegun import freeze_time

    _, factory = CANDIDATES[name]
    records: list[CallRecord] = []
    random.seed(f"{params.seed}/{name}")
    server = Server(params)
    with freeze_time(SIM_START, tick=False) as clock:
        origin = time.monotonic()
        assert abs(origin - SIM_ORIGIN) < 1e-6

        async def call(record: CallRecord) -> None:
            now = time.monotonic() - origin
            record.attempts.append(now)
            if not server.attempt(now):
                raise Overloaded("429 Too Many Requests")

        decorated = factory(params)(call)
        run_traffic(clock, decorated, params.calls_per_second, params.duration, origin, records)
    return records, server


def summarise(
    records: list[CallRecord], served: int, rejected: int, duration: float
) -> dict[str, Any]:
    """The figures of one run: the calls' records and what the server served and rejected."""
    sent = sum(len(r.attempts) for r in records)
    return {
        "calls": len(records),
        "attempts_sent": sent,
        "rejected_attempts": rejected,
        "served": served,
        "succeeded": sum(r.ok for r in records),
        "goodput": sum(r.ok for r in records) / duration,
        "attempts_per_call": sent / len(records),
        "throttled_calls": sum(1 for r in records if not r.attempts),
    }


def _ratios(figures: dict[str, Any], reference: dict[str, Any]) -> dict[str, float]:
    return {
        "fewer_rejected": 1 - figures["rejected_attempts"] / reference["rejected_attempts"],
        "goodput_ratio": figures["goodput"] / reference["goodput"],
    }


def _k2_met(figures: dict[str, Any]) -> bool:
    return bool(figures["fewer_rejected"] >= 0.8 and figures["goodput_ratio"] >= 0.98)


def goals(candidates: dict[str, Any]) -> dict[str, bool]:
    """Issue 18's goals, met or not, from one run's figures (ratios added)."""
    met = {
        "throttle k=2: >= 80% fewer rejected at goodput >= 0.98x": _k2_met(
            candidates["policy+throttle k=2"]
        ),
        "throttle + budget: >= 90% fewer rejected": candidates["policy+throttle+budget"][
            "fewer_rejected"
        ]
        >= 0.9,
    }
    shared = candidates.get("policy+redis-throttle k=2")
    if shared is not None:
        met["shared throttle k=2 (Redis): >= 80% fewer rejected at goodput >= 0.98x"] = _k2_met(
            shared
        )
    return met


def _judge(candidates: dict[str, Any]) -> dict[str, bool]:
    """Add the ratios to tenacity's to every candidate, print them, and judge the goals."""
    reference = candidates["tenacity"]
    for name, figures in candidates.items():
        figures.update(_ratios(figures, reference))
        print(
            f"{name:26} rejected {figures['rejected_attempts']:6d} "
            f"({figures['fewer_rejected']:+.1%} fewer), goodput {figures['goodput']:6.2f}/s "
            f"(x{figures['goodput_ratio']:.3f}), attempts/call {figures['attempts_per_call']:.2f}",
            flush=True,
        )
    met = goals(candidates)
    for goal, ok in met.items():
        print(f"goal {goal}: {'met' if ok else 'NOT met'}", flush=True)
    return met


def _simulated(params: OverloadParams) -> dict[str, Any]:
    simulated: dict[str, Any] = {}
    for name, (label, _) in CANDIDATES.items():
        records, server = simulate(name, params)
        figures = summarise(records, server.served, server.rejected, params.duration)
        simulated[name] = {"label": label, **figures}
    print("simulated:")
    return {"params": asdict(params), "simulated": simulated, "goals": _judge(simulated)}


def _real(seed: int) -> dict[str, Any]:
    from .overload_real import RealParams, real_run

    params = RealParams(seed=seed)
    print(
        f"real: {params.processes} processes, {params.calls_per_second:g} calls/s in all for "
        f"{params.duration:g} s, capacity {params.capacity:g}/s, one candidate at a time",
        flush=True,
    )
    real = real_run(params)
    if "candidates" in real:
        real["goals"] = _judge(real["candidates"])
    else:
        print(f"real part skipped: {real['skipped']}")
    return real


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="20 s simulated only, no file")
    parser.add_argument(
        "--part",
        choices=("all", "simulated", "real"),
        default="all",
        help="run one part only; the other is kept from the stored results file",
    )
    parser.add_argument("--seed", type=int, default=OverloadParams().seed)
    args = parser.parse_args(argv)
    if args.quick:
        _simulated(OverloadParams(duration=20, seed=args.seed))
        return 0
    stored = RESULTS_DIR / "overload.json"
    data: dict[str, Any] = {}
    if args.part != "all" and stored.exists():
        kept = json.loads(stored.read_text(encoding="utf-8"))
        data = {key: kept[key] for key in ("params", "simulated", "goals", "real") if key in kept}
    if args.part in ("all", "simulated"):
        data.update(_simulated(OverloadParams(seed=args.seed)))
    if args.part in ("all", "real"):
        data["real"] = _real(args.seed)
    path = write_results("overload", command_line("benchmarks.overload"), data)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
