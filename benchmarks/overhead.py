"""Benchmark 2: per-retry overhead against tenacity, stamina and backoff, sleeps as no-ops.

A function fails ``k`` times, then succeeds. Each library retries it with its sleeps
replaced by no-ops, so what is timed is the retry machinery alone:

* ``tenacity floor``: ``wait_none()`` + ``stop_never`` (tenacity's own minimum);
* ``tenacity wait_random_exponential + stop_after_attempt``: the reference pair;
* ``tenacity wait_exponential + stop_before_delay``;
* ``stamina``: ``stamina.retry`` in testing mode (``stamina.set_testing(True, ...)``), its
  logging and Prometheus retry hooks switched off so only its retry machinery is timed;
* ``backoff``: ``backoff.on_exception(backoff.expo, ..., max_tries=...)``, ``time.sleep``
  patched to a no-op for the run (backoff calls it directly);
* ``ours wait()+stop()``: ``tenacity.retry(wait=policy.wait(), stop=policy.stop())`` with the
  budget, wall-clock and deadline checks all on (the policy carries a deadline);
* ``ours policy.retry()``: the decorator, adding ``remaining()``, observers and the report.

Per-retry time is a call's time divided by ``k``; the marginal per-retry time is
``(T(k) - T(0)) / k``. A candidate's ratio to the reference is, in each round, the median
over interleaved batches of the two batch times' ratio (batches timed back to back); the
headline is the median over rounds. Separately, one call of each wait and stop strategy is timed in
isolation on a prepared retry state. Target (issue 5): ours within 5% of tenacity's own
``wait_random_exponential + stop_after_attempt`` end to end. Run::

    python -m benchmarks.overhead [--k 5] [--repeat 40] [--rounds 5] [--quick] [--profile]
                                  [--instructions]

``--profile`` adds a cProfile breakdown of where our per-retry time goes, by function;
``--instructions`` the instructions per call of the pair, its reference and two ablations
of our stop, counted by valgrind (a figure the machine's load does not move).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar
from unittest import mock

import tenacity
from tenacity import RetryCallState, Retrying

from tenacity_budget import BackoffPolicy
from tenacity_budget.decision import decide
from tenacity_budget.exhaustion import RECORD_ATTR
from tenacity_budget.solver import add_compensated
from tenacity_budget.state import RunState
from tenacity_budget.strategies import stop_budget

from ._common import (
    Timing,
    callgrind_per_unit,
    command_line,
    fmt_ns,
    interleaved,
    noop_sleep,
    paired_ratio,
    write_results,
)

__all__ = [
    "ABLATIONS",
    "KINDS",
    "OURS",
    "REFERENCE",
    "Flaky",
    "build_end_to_end",
    "build_strategies",
    "count_calls",
    "instructions",
    "main",
    "no_sleep",
    "profile_ours",
    "retry_state",
    "run",
]

REFERENCE = "tenacity wait_random_exponential + stop_after_attempt"
"""The candidate every ratio is taken against."""

OURS = ("ours wait()+stop()", "ours policy.retry()", "ours policy.retry(budget=RetryBudget())")

ASYNC_REFERENCE = "tenacity AsyncRetrying(wait_random_exponential + stop_after_attempt)"
"""The reference of the async candidates (awaited on one event loop, as ours are)."""

ASYNC_OURS = ("ours async policy.retry(hard_deadline=True)",)

TARGETS = {
    "ours wait()+stop()": 1.00,
    "ours policy.retry()": 1.05,
    "ours policy.retry(budget=RetryBudget())": 1.10,
    "ours async policy.retry(hard_deadline=True)": 1.15,
}
"""Issue 16's per-call targets with ``k`` retries, as ratios to the reference."""

FIRST_TRY_TARGETS = {
    "ours policy.retry()": 1.10,
    "ours async policy.retry(hard_deadline=True)": 1.30,
}
"""Issue 16's first-try targets (a call that succeeds at once), as ratios to the reference."""

ABLATIONS = (
    "ablation: ours wait() + tenacity stop_after_attempt",
    "ablation: tenacity wait_random_exponential + ours stop()",
    "ablation: ours wait()+stop(), no deadline",
    "ablation: reference pair, its stop reading retry_state.__dict__",
)
"""Half-and-half pairs that tell which of our two strategies costs what, end to end."""

BASE, CAP, BUDGET = 0.1, 5.0, 3600.0
"""Backoff parameters shared by every library (seconds): first wait, cap, total budget."""

MANY = 1_000
"""An attempt limit no run reaches (``k`` stays far below it)."""

T = TypeVar("T")


class Flaky:
    """Failures still to raise, and :attr:`fn`: a function raising ``ValueError`` until none are
    left, then returning ``1`` (a real function, as every decorator expects one)."""

    __slots__ = ("fn", "left")

    def __init__(self) -> None:
        self.left = 0

        def flaky() -> int:
            if self.left:
                self.left -= 1
                raise ValueError("transient")
            return 1

        self.fn: Callable[[], int] = flaky


class _DictReadingStop(tenacity.stop_after_attempt):
    """``stop_after_attempt`` that also reads ``retry_state.__dict__``, as a store of per-run
    state there does. On CPython 3.11+ that materialises the instance dict and de-optimises
    every later attribute access on the retry state, in tenacity's own code too."""

    def __call__(self, retry_state: RetryCallState) -> bool:
        if retry_state.__dict__ is None:  # never true; the read is the point
            return True
        return super().__call__(retry_state)


def _policy(jitter: Any = "full", deadline: bool = True) -> BackoffPolicy:
    return BackoffPolicy(
        base=BASE,
        factor=2.0,
        cap=CAP,
        max_elapsed=BUDGET,
        jitter=jitter,
        deadline=datetime.now(UTC) + timedelta(days=30) if deadline else None,
    )


@contextlib.contextmanager
def no_sleep() -> Iterator[None]:
    """Patch ``time.sleep`` to a no-op (backoff and stamina's tenacity call it directly)."""
    with mock.patch.object(time, "sleep", noop_sleep):
        yield


@contextlib.contextmanager
def stamina_testing() -> Iterator[None]:
    """Stamina in testing mode (no backoff, ``MANY`` attempts), its retry hooks off."""
    import stamina
    import stamina.instrumentation

    hooks = stamina.instrumentation.get_on_retry_hooks()
    stamina.instrumentation.set_on_retry_hooks([])
    try:
        with stamina.set_testing(True, attempts=MANY):
            yield
    finally:
        stamina.instrumentation.set_on_retry_hooks(hooks)


def _decorated(kind: str, fn: Callable[[], int]) -> Callable[[], int]:
    """``fn`` retried by the library ``kind`` names, with no-op sleeps."""
    tr = tenacity
    if kind == "tenacity floor":
        return tr.retry(wait=tr.wait_none(), stop=tr.stop_never, sleep=noop_sleep)(fn)
    if kind == REFERENCE:
        return tr.retry(
            wait=tr.wait_random_exponential(multiplier=BASE, max=CAP),
            stop=tr.stop_after_attempt(MANY),
            sleep=noop_sleep,
        )(fn)
    if kind == "tenacity wait_exponential + stop_before_delay":
        return tr.retry(
            wait=tr.wait_exponential(multiplier=BASE, max=CAP),
            stop=tr.stop_before_delay(BUDGET),
            sleep=noop_sleep,
        )(fn)
    if kind == "stamina (testing mode)":
        import stamina

        return stamina.retry(on=ValueError, attempts=MANY, wait_initial=BASE, wait_max=CAP)(fn)
    if kind == "backoff (on_exception, expo)":
        import backoff

        decorator = backoff.on_exception(
            backoff.expo, ValueError, max_tries=MANY, factor=BASE, max_value=CAP
        )
        return decorator(fn)
    policy = _policy()
    if kind == "ours wait()+stop()":
        return tr.retry(wait=policy.wait(), stop=policy.stop(), sleep=noop_sleep)(fn)
    if kind == "ours policy.retry()":
        return policy.retry(sleep=noop_sleep)(fn)
    if kind == "ours policy.retry(budget=RetryBudget())":
        from tenacity_budget import RetryBudget

        budget = RetryBudget(ratio=0, min_per_second=10**8, ttl=10)  # grants every retry
        return policy.retry(sleep=noop_sleep, budget=budget)(fn)
    if kind == ABLATIONS[0]:
        return tr.retry(wait=policy.wait(), stop=tr.stop_after_attempt(MANY), sleep=noop_sleep)(fn)
    if kind == ABLATIONS[1]:
        wait = tr.wait_random_exponential(multiplier=BASE, max=CAP)
        return tr.retry(wait=wait, stop=policy.stop(), sleep=noop_sleep)(fn)
    if kind == ABLATIONS[2]:
        plain = _policy(deadline=False)
        return tr.retry(wait=plain.wait(), stop=plain.stop(), sleep=noop_sleep)(fn)
    if kind == ABLATIONS[3]:
        wait = tr.wait_random_exponential(multiplier=BASE, max=CAP)
        return tr.retry(wait=wait, stop=_DictReadingStop(MANY), sleep=noop_sleep)(fn)
    raise ValueError(f"unknown candidate {kind!r}")


async def _async_noop_sleep(seconds: float) -> None:
    """An awaited no-op sleep (the async candidates' ``sleep=``)."""


def _async_decorated(kind: str, left: list[int]) -> Callable[[], Any]:
    """A coroutine function failing while ``left[0]`` is positive, retried by ``kind``."""

    async def flaky() -> int:
        if left[0]:
            left[0] -= 1
            raise ValueError("transient")
        return 1

    tr = tenacity
    if kind == ASYNC_REFERENCE:
        retrying = tr.AsyncRetrying(
            wait=tr.wait_random_exponential(multiplier=BASE, max=CAP),
            stop=tr.stop_after_attempt(MANY),
            sleep=_async_noop_sleep,
        )
        return lambda: retrying(flaky)
    if kind == ASYNC_OURS[0]:
        decorated = _policy().retry(hard_deadline=True, sleep=_async_noop_sleep)(flaky)
        return decorated
    raise ValueError(f"unknown candidate {kind!r}")


def build_async(k: int, loop: Any) -> dict[str, Callable[[], object]]:
    """The async candidates as zero-argument calls, each run to completion on ``loop``."""
    candidates: dict[str, Callable[[], object]] = {}
    for kind in (ASYNC_REFERENCE, *ASYNC_OURS):
        left = [0]
        start = _async_decorated(kind, left)

        def call(left: list[int] = left, start: Callable[[], Any] = start) -> object:
            left[0] = k
            return loop.run_until_complete(start())

        if call() != 1 or left[0] != 0:
            raise RuntimeError(f"{kind} did not retry {k} times")
        candidates[kind] = call
    return candidates


def _ratios(
    rounds: list[dict[str, Timing]], names: tuple[str, ...], reference: str
) -> dict[str, dict[str, Any]]:
    """Each candidate's median paired ratio to ``reference`` over the rounds, and the spread."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        ratios = [paired_ratio(r[name], r[reference]) for r in rounds]
        out[name] = {
            "ratio": round(statistics.median(ratios), 3),
            "spread": round(max(ratios) - min(ratios), 3),
            "ratio_rounds": [round(r, 3) for r in ratios],
        }
    return out


def run_targets(*, k: int, repeat: int, rounds: int) -> dict[str, Any]:
    """Issue 16's targets: per call with ``k`` retries and on a first try, sync and async."""
    import asyncio

    loop = asyncio.new_event_loop()
    try:
        with no_sleep(), stamina_testing():
            sync_k, sync_0 = build_end_to_end(k), build_end_to_end(0)
            async_k, async_0 = build_async(k, loop), build_async(0, loop)
            picked = (REFERENCE, *OURS)
            per_call = [interleaved({n: sync_k[n] for n in picked}, repeat=repeat)]
            per_call_async = [interleaved(async_k, repeat=repeat)]
            first = [interleaved({n: sync_0[n] for n in picked}, repeat=repeat)]
            first_async = [interleaved(async_0, repeat=repeat)]
            for _ in range(rounds - 1):
                per_call.append(interleaved({n: sync_k[n] for n in picked}, repeat=repeat))
                per_call_async.append(interleaved(async_k, repeat=repeat))
                first.append(interleaved({n: sync_0[n] for n in picked}, repeat=repeat))
                first_async.append(interleaved(async_0, repeat=repeat))
    finally:
        loop.close()
    return {
        "per_call": {
            **_ratios(per_call, OURS, REFERENCE),
            **_ratios(per_call_async, ASYNC_OURS, ASYNC_REFERENCE),
        },
        "first_try": {
            **_ratios(first, ("ours policy.retry()",), REFERENCE),
            **_ratios(first_async, ASYNC_OURS, ASYNC_REFERENCE),
        },
    }


KINDS: tuple[str, ...] = (
    "tenacity floor",
    REFERENCE,
    "tenacity wait_exponential + stop_before_delay",
    "stamina (testing mode)",
    "backoff (on_exception, expo)",
    *OURS,
    *ABLATIONS,
)
"""Every end-to-end candidate, in the order printed."""


def build_end_to_end(k: int) -> dict[str, Callable[[], object]]:
    """One zero-argument callable per candidate: a call that fails ``k`` times, then succeeds."""
    candidates: dict[str, Callable[[], object]] = {}
    for kind in KINDS:
        flaky = Flaky()
        decorated = _decorated(kind, flaky.fn)

        def call(flaky: Flaky = flaky, decorated: Callable[[], int] = decorated) -> int:
            flaky.left = k
            return decorated()

        if call() != 1 or flaky.left != 0:  # each candidate really retries k times
            raise RuntimeError(f"{kind} did not retry {k} times")
        candidates[kind] = call
    return candidates


def retry_state(attempt: int = 5, upcoming_sleep: float = 1.0, stop: Any = None) -> RetryCallState:
    """A retry state as a stop strategy sees it: attempt ``attempt`` just failed, in a run
    whose controller has ``stop`` (tenacity's ``stop_never`` by default)."""
    controller = Retrying(sleep=noop_sleep, stop=tenacity.stop_never if stop is None else stop)
    state = RetryCallState(controller, fn=None, args=(), kwargs={})
    state.attempt_number = attempt
    try:
        raise ValueError("transient")
    except ValueError as exc:
        state.set_exception((ValueError, exc, exc.__traceback__))
    state.idle_for = 3.0
    state.upcoming_sleep = upcoming_sleep
    return state


def build_strategies() -> dict[str, Callable[[], object]]:
    """One call of each wait and stop strategy, on a prepared retry state."""
    tr = tenacity
    rng = random.Random(7)
    waits: dict[str, Any] = {
        "wait: tenacity wait_none": tr.wait_none(),
        "wait: tenacity wait_fixed": tr.wait_fixed(1),
        "wait: tenacity wait_exponential": tr.wait_exponential(multiplier=BASE, max=CAP),
        "wait: tenacity wait_random_exponential": tr.wait_random_exponential(
            multiplier=BASE, max=CAP
        ),
        "wait: tenacity wait_exponential_jitter": tr.wait_exponential_jitter(
            multiplier=BASE, max=CAP
        ),
        'wait: ours jitter="none"': _policy("none").wait(),
        'wait: ours jitter="full"': _policy("full").wait(),
        'wait: ours jitter="full", rng=': _policy("full").wait(rng=rng),
        'wait: ours jitter="full", seed=': _policy("full").wait(seed=7),
        'wait: ours jitter="equal"': _policy("equal").wait(),
        'wait: ours jitter="decorrelated"': _policy("decorrelated").wait(),
        'wait: ours jitter="full", beside another stop': _policy("full").wait(),
    }
    stops: dict[str, Any] = {
        "stop: tenacity stop_never": tr.stop_never,
        "stop: tenacity stop_after_attempt": tr.stop_after_attempt(MANY),
        "stop: tenacity stop_after_delay": tr.stop_after_delay(BUDGET),
        "stop: tenacity stop_before_delay": tr.stop_before_delay(BUDGET),
        "stop: ours (budget, wall clock)": _policy(deadline=False).stop(),
        "stop: ours (budget, wall clock, deadline)": _policy().stop(),
    }
    candidates: dict[str, Callable[[], object]] = {}
    for name, strategy in {**waits, **stops}.items():
        # Each of our strategies runs as it is built to: a stop as the run's stop, a wait
        # under its policy's stop (which measures the attempts); the "beside another stop"
        # row under tenacity's stop_never, where the wait measures each attempt itself.
        if name.startswith("stop: ours"):
            state = retry_state(stop=strategy)
        elif name.startswith("wait: ours") and not name.endswith("another stop"):
            state = retry_state(stop=strategy.policy.stop())
        else:
            state = retry_state()
        strategy(state)  # the first call creates per-run state; time the steady state

        def call(strategy: Any = strategy, state: RetryCallState = state) -> object:
            return strategy(state)

        candidates[name] = call
    return candidates


def profile_ours(k: int, calls: int = 3_000) -> dict[str, Any]:
    """cProfile the reference pair and ours; time per retry by function (cProfile inflates).

    Returns, per candidate, the profiled time per retry and the functions of
    ``tenacity_budget`` (and the largest others) with their own time per retry.
    """
    out: dict[str, Any] = {}
    root = str(Path(__file__).resolve().parent.parent / "tenacity_budget")
    for kind in (REFERENCE, *OURS):
        flaky = Flaky()
        decorated = _decorated(kind, flaky.fn)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(calls):
            flaky.left = k
            decorated()
        profiler.disable()
        stats = pstats.Stats(profiler)
        retries = calls * k
        rows: list[tuple[float, str]] = []
        total = 0.0
        for (filename, line, func), entry in stats.stats.items():  # type: ignore[attr-defined]
            tottime = entry[2]
            total += tottime
            path = Path(filename)
            where = f"tenacity_budget/{path.name}" if filename.startswith(root) else path.name
            rows.append((tottime, f"{where}:{line}({func})"))
        rows.sort(reverse=True)
        ours = sum(t for t, name in rows if name.startswith("tenacity_budget"))
        out[kind] = {
            "profiled_ns_per_retry": round(total / retries * 1e9, 1),
            "tenacity_budget_ns_per_retry": round(ours / retries * 1e9, 1),
            "top": [
                {"function": name, "ns_per_retry": round(t / retries * 1e9, 1)}
                for t, name in rows[:12]
            ],
            "tenacity_budget_functions": [
                {"function": name, "ns_per_retry": round(t / retries * 1e9, 1)}
                for t, name in rows
                if name.startswith("tenacity_budget") and t > 0
            ],
        }
    return out


def _best(rounds: list[dict[str, Timing]], name: str) -> Timing:
    """One candidate's figures over several rounds: the fastest minimum, the median median."""
    timings = [r[name] for r in rounds]
    return Timing(
        number=timings[0].number,
        repeat=sum(t.repeat for t in timings),
        min_ns=min(t.min_ns for t in timings),
        median_ns=statistics.median(t.median_ns for t in timings),
    )


def run(
    *, k: int, repeat: int, rounds: int = 5, profile: bool = False, count: bool = False
) -> dict[str, Any]:
    """Time every candidate end to end (``k`` and 0 failures) and every strategy alone.

    The end-to-end comparison is repeated ``rounds`` times; each round gives every
    candidate's paired ratio to the reference (see the module docstring); the headline is
    the median over rounds. ``count`` adds :func:`instructions`.
    """
    if k < 1:
        raise ValueError("k must be >= 1")
    with no_sleep(), stamina_testing():
        calls_k, calls_0 = build_end_to_end(k), build_end_to_end(0)
        per_round = [interleaved(calls_k, repeat=repeat) for _ in range(rounds)]
        at_0 = interleaved(calls_0, repeat=repeat)
        strategies = interleaved(build_strategies(), repeat=repeat)
        profiled = profile_ours(k) if profile else None
    end_to_end: dict[str, Any] = {}
    for kind in KINDS:
        best = _best(per_round, kind)
        ratios = [paired_ratio(r[kind], r[REFERENCE]) for r in per_round]
        marginal = (best.min_ns - at_0[kind].min_ns) / k
        end_to_end[kind] = {
            "call_k": best.as_dict(),
            "call_0": at_0[kind].as_dict(),
            "per_retry_min_ns": round(best.min_ns / k, 1),
            "per_retry_median_ns": round(best.median_ns / k, 1),
            "marginal_per_retry_min_ns": round(marginal, 1),
            "ratio": round(statistics.median(ratios), 3),
            "ratio_rounds": [round(r, 3) for r in ratios],
        }
    ref_marginal = end_to_end[REFERENCE]["marginal_per_retry_min_ns"]
    for kind in KINDS:
        end_to_end[kind]["marginal_ratio"] = round(
            end_to_end[kind]["marginal_per_retry_min_ns"] / ref_marginal, 3
        )
    ours_pair = (
        strategies['wait: ours jitter="full"'].min_ns
        + strategies["stop: ours (budget, wall clock, deadline)"].min_ns
    )
    ref_pair = (
        strategies["wait: tenacity wait_random_exponential"].min_ns
        + strategies["stop: tenacity stop_after_attempt"].min_ns
    )
    result: dict[str, Any] = {
        "k": k,
        "rounds": rounds,
        "params": {"base": BASE, "cap": CAP, "budget": BUDGET, "attempt_limit": MANY},
        "reference": REFERENCE,
        "end_to_end": end_to_end,
        "strategies": {name: t.as_dict() for name, t in strategies.items()},
        "strategy_pair_ns": {
            "ours full + stop(deadline)": round(ours_pair, 1),
            "tenacity wait_random_exponential + stop_after_attempt": round(ref_pair, 1),
            "difference": round(ours_pair - ref_pair, 1),
        },
        "target": "ours within 5% of the reference pair, end to end (median of the rounds' "
        "paired ratios)",
        "target_met": {name: bool(end_to_end[name]["ratio"] <= 1.05) for name in OURS},
    }
    if profiled is not None:
        result["profile"] = profiled
    result["targets"] = run_targets(k=k, repeat=repeat, rounds=rounds)
    if count:
        result["instructions"] = instructions(k)
    return result


# -- instructions per call (valgrind) -----------------------------------------------------

STOP_ANSWERS = "ablation: ours wait() + a budget stop that only answers"
"""``wait=policy.wait(), stop=policy.stop()`` with the stop allowing every retry at once:
what our wait and a stop's call cost, the stop's own work left out."""

STOP_CHECKS = "ablation: ours wait() + a budget stop making decide()'s four checks alone"
"""The same with a stop reduced to what the four checks need for this benchmark's policy
(the attempt measured, the sleeps summed compensated, the policy's deadline read,
:func:`~tenacity_budget.decision.decide`), written out in one function. It leaves out the
rest of ``policy.stop()``'s work: the record's other facts (``attempts``, ``elapsed``,
``observed``, ``reason``), the stop's per-run object, the enclosing deadlines and a
deadline callable, the testing bound, another stop, a throttle and a retry budget, the
report's tag and the statistics repair."""

COUNTED = ("tenacity floor", REFERENCE, "ours wait()+stop()", STOP_ANSWERS, STOP_CHECKS)
"""The candidates :func:`instructions` counts, in the order printed."""


def _answers(self: stop_budget, retry_state: RetryCallState) -> bool:
    """:data:`STOP_ANSWERS`' stop: every retry allowed, nothing measured."""
    return False


def _checks_alone(self: stop_budget, retry_state: RetryCallState) -> bool:
    """:data:`STOP_CHECKS`' stop: the attempt measured, the four checks asked (see there)."""
    record: RunState | None = getattr(retry_state, RECORD_ATTR, None)
    if record is None:
        record = RunState(self._budget, self._affordable)
        setattr(retry_state, RECORD_ATTR, record)
    end = retry_state.outcome_timestamp
    if end is None:  # as state.observe() reads it
        end = time.monotonic()
    start = retry_state.start_time
    last = record.last_end
    took = end - start if last is None else end - last - record.upcoming_sleep
    longest = record.longest
    if took > longest:
        longest = record.longest = took
    record.last_end = end
    sleep = record.upcoming_sleep = retry_state.upcoming_sleep
    total, error = record.slept, record.slept_error = add_compensated(
        record.slept, record.slept_error, sleep
    )
    duration = self._duration
    reason = decide(
        retry_state.attempt_number,
        self._affordable,
        sleep,
        total + error,
        end - start,
        duration if duration > longest else longest,
        self._budget,
        self._deadline_ts - time.time(),
    )
    return reason is not None


def count_calls(kind: str, k: int, calls: int) -> None:
    """Make ``calls`` calls of candidate ``kind``, each failing ``k`` times (the process
    :func:`instructions` runs under valgrind; an ablation's stop is patched in here only)."""
    stop_call = {STOP_ANSWERS: _answers, STOP_CHECKS: _checks_alone}.get(kind)
    if stop_call is not None:
        setattr(stop_budget, "__call__", stop_call)  # noqa: B010 (this process only)
        kind = "ours wait()+stop()"
    flaky = Flaky()
    decorated = _decorated(kind, flaky.fn)
    for _ in range(calls):
        flaky.left = k
        decorated()


def instructions(k: int) -> dict[str, Any]:
    """Instructions per call (failing ``k`` times) of each of :data:`COUNTED`, counted by
    callgrind (:func:`~benchmarks._common.callgrind_per_unit`); ``ratio`` is each
    candidate's count over the reference's."""
    per_call = {
        kind: callgrind_per_unit("benchmarks.overhead", "--count", kind, str(k)) for kind in COUNTED
    }
    reference = per_call[REFERENCE]
    return {
        kind: {"per_call": round(n), "ratio": round(n / reference, 4)}
        for kind, n in per_call.items()
    }


def _print(result: dict[str, Any]) -> None:
    k = result["k"]
    print(f"end to end: a call failing {k} times then succeeding; per retry = call / {k}")
    print(
        f"{'candidate':<58} {'per retry':>10} {'median':>10} {'ratio':>6} "
        f"{'marginal':>10} {'ratio':>6}"
    )
    for kind, row in result["end_to_end"].items():
        print(
            f"{kind:<58} {fmt_ns(row['per_retry_min_ns']):>10} "
            f"{fmt_ns(row['per_retry_median_ns']):>10} {row['ratio']:>6.3f} "
            f"{fmt_ns(row['marginal_per_retry_min_ns']):>10} {row['marginal_ratio']:>6.3f}"
        )
    print(f"\n(ratios to: {result['reference']}, same run)")
    print("\none call of each strategy, on a prepared retry state")
    for name, t in result["strategies"].items():
        print(f"{name:<58} {fmt_ns(t['min_ns']):>10} {fmt_ns(t['median_ns']):>10}")
    pair = result["strategy_pair_ns"]
    print(
        f"\nstrategy pair: ours {fmt_ns(pair['ours full + stop(deadline)'])} vs tenacity "
        f"{fmt_ns(pair['tenacity wait_random_exponential + stop_after_attempt'])} "
        f"(difference {fmt_ns(pair['difference'])} per retry)"
    )
    for name, met in result["target_met"].items():
        row = result["end_to_end"][name]
        spread = ", ".join(f"{r:.3f}" for r in row["ratio_rounds"])
        verdict = "MET" if met else "NOT MET"
        print(f"target (within 5%): {name}: {row['ratio']:.3f}x (rounds: {spread}) -> {verdict}")
    targets = result.get("targets")
    if targets is not None:
        print(f"\nissue 16 targets (median of {result['rounds']} interleaved rounds, spread):")
        for section, limits in (("per_call", TARGETS), ("first_try", FIRST_TRY_TARGETS)):
            for name, row in targets[section].items():
                limit = limits.get(name)
                verdict = "" if limit is None else ("MET" if row["ratio"] <= limit else "NOT MET")
                print(
                    f"  {section:<9} {name:<46} {row['ratio']:.3f}x (spread {row['spread']:.3f})"
                    f" target <= {limit} {verdict}"
                )
    counted = result.get("instructions")
    if counted is not None:
        print(f"\ninstructions per call (callgrind), {k} retries:")
        for name, row in counted.items():
            print(f"  {name:<72} {row['per_call']:>10,} {row['ratio']:.3f}x")
    for kind, prof in result.get("profile", {}).items():
        print(
            f"\nprofile of {kind}: {fmt_ns(prof['profiled_ns_per_retry'])} per retry under "
            f"cProfile, {fmt_ns(prof['tenacity_budget_ns_per_retry'])} in tenacity_budget"
        )
        for entry in prof["tenacity_budget_functions"]:
            print(f"   {fmt_ns(entry['ns_per_retry']):>10}  {entry['function']}")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--k", type=int, default=5, help="failures before the success")
    parser.add_argument("--repeat", type=int, default=40, help="batches per candidate")
    parser.add_argument("--rounds", type=int, default=5, help="end-to-end comparison rounds")
    parser.add_argument("--quick", action="store_true", help="5 repeats, no result file")
    parser.add_argument("--profile", action="store_true", help="add a cProfile breakdown")
    parser.add_argument(
        "--instructions", action="store_true", help="add instructions per call (valgrind)"
    )
    parser.add_argument("--count", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.count:
        kind, k, calls = args.count
        count_calls(kind, int(k), int(calls))
        return 0
    result = run(
        k=args.k,
        repeat=5 if args.quick else args.repeat,
        rounds=1 if args.quick else args.rounds,
        profile=args.profile,
        count=args.instructions,
    )
    _print(result)
    if not args.quick:
        path = write_results("overhead", command_line("benchmarks.overhead"), result)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
