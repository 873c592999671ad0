"""Hedged requests (issue 18): ``Hedge``'s options and the engine's exact semantics.

Every run is on the virtual clock driven by an event loop that jumps to its next timer
(``tests/_hedging.py``), so "a hedge is sent at exactly ``delay``" is an equality.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import threading
import time
from fractions import Fraction

import pytest

import tenacity_budget
from tenacity_budget import Hedge, StopReason
from tenacity_budget.context import Horizon
from tenacity_budget.exhaustion import Throttled
from tenacity_budget.hedge import HedgedOutcome, non_fatal
from tenacity_budget.hedge._sketch import WINDOW, LatencySketch, window_for
from tenacity_budget.retry_budget import NEVER
from tests._hedging import (
    AsyncCountingBudget,
    CountingBudget,
    FakeThrottle,
    HedgeObserver,
    Response,
    Script,
    simulate,
)

SLOW = 10.0  # an attempt that outlasts every delay here


def run(hedge: Hedge, script: Script, **options: object) -> HedgedOutcome[object]:
    async def main() -> HedgedOutcome[object]:
        return await hedge.run(script, **options)  # type: ignore[arg-type]

    return simulate(main)


# -- the options -----------------------------------------------------------------------------------


def test_hedge_is_the_packages_and_has_the_issues_defaults() -> None:
    assert tenacity_budget.Hedge is Hedge
    assert "Hedge" in tenacity_budget.__all__
    hedge = Hedge(0.05)
    assert (hedge.delay, hedge.max_attempts, hedge.min_samples) == (0.05, 2, 20)
    assert hedge.non_fatal is non_fatal
    assert hedge.quantile is None
    assert hedge.sketch is None
    assert hedge.delay_now() == 0.05


@pytest.mark.parametrize(
    ("text", "share"),
    [("p95", Fraction(95, 100)), ("p99.9", Fraction(999, 1000)), ("p50", Fraction(1, 2)),
     ("p0.1", Fraction(1, 1000)), ("p99.99", Fraction(9999, 10000))],
)  # fmt: skip
def test_a_quantile_delay_is_pnn_with_nn_in_0_100(text: str, share: Fraction) -> None:
    hedge = Hedge(text)
    assert hedge.delay == text
    assert hedge.quantile == float(share)
    assert hedge.sketch is not None
    assert hedge.delay_now() == math.inf  # nothing learned yet: no hedging


@pytest.mark.parametrize(
    "text", ["p0", "p100", "p100.0", "p", "95", "p-5", "P95", "p95%", "", "fast"]
)
def test_a_delay_text_that_is_not_a_quantile_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"Hedge\(delay=\.\.\.\).*'pNN'"):
        Hedge(text)


@pytest.mark.parametrize("delay", [-0.001, math.nan, math.inf, -math.inf])
def test_a_delay_must_be_finite_and_not_negative(delay: float) -> None:
    with pytest.raises(ValueError, match=r"Hedge\(delay=\.\.\.\)"):
        Hedge(delay)


@pytest.mark.parametrize("delay", [True, None, [0.1], b"p95"])
def test_a_delay_of_the_wrong_kind_is_a_type_error(delay: object) -> None:
    with pytest.raises(TypeError, match=r"Hedge\(delay=\.\.\.\)"):
        Hedge(delay)  # type: ignore[arg-type]


def test_max_attempts_is_one_to_five_as_in_grpc() -> None:
    assert Hedge(0, max_attempts=1).max_attempts == 1
    assert Hedge(0, max_attempts=5).max_attempts == 5
    with pytest.raises(ValueError, match=r"at most 5, gRPC's limit"):
        Hedge(0, max_attempts=6)
    with pytest.raises(ValueError, match=r"max_attempts"):
        Hedge(0, max_attempts=0)
    for wrong in (True, 2.0, "2"):
        with pytest.raises(TypeError, match=r"max_attempts"):
            Hedge(0, max_attempts=wrong)  # type: ignore[arg-type]


def test_non_fatal_and_min_samples_are_checked() -> None:
    with pytest.raises(TypeError, match=r"non_fatal"):
        Hedge(0, non_fatal=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"min_samples"):
        Hedge("p95", min_samples=0)
    with pytest.raises(TypeError, match=r"min_samples"):
        Hedge("p95", min_samples=False)
    with pytest.raises(TypeError):
        Hedge(0, 2, lambda outcome: True)  # type: ignore[misc]  # keyword-only


# -- the default non-fatal predicate ---------------------------------------------------------------


def _named(module: str, name: str, *bases: type[BaseException]) -> type[BaseException]:
    return type(name, bases or (Exception,), {"__module__": module})


def test_transport_errors_and_retryable_statuses_are_non_fatal() -> None:
    for error in (OSError(), ConnectionError(), ConnectionResetError(), TimeoutError()):
        assert non_fatal(error)
    transport = _named("httpx._exceptions", "TransportError")
    assert non_fatal(_named("httpx._exceptions", "ConnectError", transport)())
    client = _named("aiohttp.client_exceptions", "ClientConnectionError")
    assert non_fatal(client())
    assert non_fatal(_named("aiohttp.client_exceptions", "ServerTimeoutError")())
    for status in (429, 502, 503, 504):
        assert non_fatal(Response(status))
        assert non_fatal(type("R", (), {"status": status})())  # aiohttp's name


def test_the_real_clients_errors_are_recognised_without_importing_them_here() -> None:
    import aiohttp
    import httpx

    assert non_fatal(httpx.ConnectError("refused"))
    assert non_fatal(httpx.ReadTimeout("slow"))
    assert not non_fatal(httpx.LocalProtocolError("bad request"))
    assert not non_fatal(httpx.UnsupportedProtocol("ftp"))
    assert non_fatal(aiohttp.ServerDisconnectedError())
    assert non_fatal(aiohttp.ServerTimeoutError())


def test_fatal_outcomes() -> None:
    assert not non_fatal(ValueError("bad"))
    assert not non_fatal(ssl.SSLError())  # no new attempt cures a TLS failure
    tls = ConnectionError("handshake")
    tls.__cause__ = ssl.SSLCertVerificationError()
    assert not non_fatal(tls)
    assert not non_fatal(asyncio.CancelledError())
    for good in (Response(200), Response(404), Response(500), None, 503, "503"):
        assert not non_fatal(good)
    assert not non_fatal(type("R", (), {"status_code": True})())  # a bool is no status


# -- the learned quantile --------------------------------------------------------------------------


def test_the_quantile_is_the_nearest_rank_of_the_kept_latencies() -> None:
    sketch = LatencySketch()
    for ms in range(100, 0, -1):  # 1..100 ms, in any order
        sketch.add(ms / 1000)
    assert sketch.quantile(95, 100) == 0.095  # the 95th of 100
    assert sketch.quantile(1, 2) == 0.050
    assert sketch.quantile(999, 1000) == 0.100  # ceil(99.9) = the 100th
    assert sketch.quantile(1, 1000) == 0.001
    assert math.isnan(LatencySketch().quantile(95, 100))


def test_a_censored_latency_counts_as_longer_than_any() -> None:
    sketch = LatencySketch()
    for _ in range(94):
        sketch.add(0.010)
    for _ in range(6):
        sketch.add(0.002, censored=True)  # cancelled after 2 ms: its latency is unknown
    assert sketch.quantile(94, 100) == 0.010
    assert sketch.quantile(95, 100) == math.inf  # never below the true one
    assert sketch.seen == 100


def test_the_window_keeps_the_latest_latencies_only() -> None:
    sketch = LatencySketch(window=10)
    for _ in range(10):
        sketch.add(1.0)
    for _ in range(10):
        sketch.add(0.5)
    assert len(sketch) == 10
    assert sketch.seen == 20
    assert sketch.quantile(1, 1) == 0.5  # every 1.0 left the window
    sketch.add(2.0)
    assert sketch.quantile(1, 1) == 2.0
    assert sketch.quantile(9, 10) == 0.5


def test_the_window_leaves_ten_latencies_above_the_quantile() -> None:
    assert window_for(95, 100) == WINDOW == 1000
    assert window_for(99, 100) == 1000
    assert window_for(999, 1000) == 10_000
    assert window_for(99999, 100000) == 100_000  # at most
    assert Hedge("p99.9").sketch.window == 10_000  # type: ignore[union-attr]


def test_threads_share_one_sketch_safely() -> None:
    sketch = LatencySketch(window=500)
    barrier = threading.Barrier(4)

    def add(value: float) -> None:
        barrier.wait()
        for _ in range(2000):
            sketch.add(value)

    threads = [threading.Thread(target=add, args=(v,)) for v in (0.1, 0.2, 0.3, 0.4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sketch.seen == 8000
    assert len(sketch) == 500
    assert sorted(sketch._sorted) == sketch._sorted
    assert sorted(sketch._ring) == sketch._sorted  # the two views hold the same values


# -- when hedges are sent --------------------------------------------------------------------------


def test_hedges_are_sent_at_exactly_the_delay_without_cancelling() -> None:
    script = Script([(SLOW, "first"), (SLOW, "second"), (0.02, "third")])
    outcome = run(Hedge(0.25, max_attempts=3), script)
    assert script.starts == [0.0, 0.25, 0.5]
    assert outcome.value == "third"
    assert outcome.exception is None
    assert outcome.reason is None
    assert (outcome.attempts, outcome.hedges, outcome.hedges_won, outcome.winner) == (3, 2, 1, 2)
    assert outcome.elapsed == 0.52
    assert script.cancelled == [0, 1]  # the losers, once the third won


def test_no_hedge_when_the_answer_comes_in_time_even_at_the_delay_itself() -> None:
    for latency in (0.1, 0.25):  # 0.25: answered at exactly the delay, not late
        script = Script([(latency, "ok")])
        outcome = run(Hedge(0.25, max_attempts=3), script)
        assert script.starts == [0.0]
        assert (outcome.value, outcome.attempts, outcome.hedges) == ("ok", 1, 0)


def test_the_first_attempt_wins_when_it_answers_before_the_hedge() -> None:
    script = Script([(0.3, "first"), (SLOW, "hedge")])
    outcome = run(Hedge(0.1), script)
    assert script.starts == [0.0, 0.1]
    assert (outcome.value, outcome.winner, outcome.hedges, outcome.hedges_won) == ("first", 0, 1, 0)
    assert script.cancelled == [1]


def test_a_delay_of_zero_sends_every_attempt_at_once() -> None:
    script = Script([(0.5, "a"), (0.4, "b"), (0.3, "c")])
    outcome = run(Hedge(0, max_attempts=3), script)
    assert script.starts == [0.0, 0.0, 0.0]
    assert outcome.value == "c"
    assert outcome.elapsed == 0.3


def test_a_non_fatal_failure_sends_the_next_attempt_at_once_and_restarts_the_delay() -> None:
    script = Script([(0.1, ConnectionError("reset")), (0.5, Response(503)), (SLOW, "late")])
    outcome = run(Hedge(0.3, max_attempts=3), script)
    # 0.1: the first fails, the second goes at once; 0.4: no answer for 0.3 s, the third;
    # 0.6: the second answers 503 (non-fatal) with nothing left to send; the third wins.
    assert script.starts == [0.0, 0.1, 0.4]
    assert outcome.value == "late"
    assert outcome.winner == 2


def test_a_fatal_failure_ends_the_run_at_once_with_it() -> None:
    script = Script([(0.5, ValueError("bad input")), (SLOW, "hedge")])
    outcome = run(Hedge(0.1), script)
    assert isinstance(outcome.exception, ValueError)
    assert outcome.reason is None  # not exhausted: the attempt's own verdict
    assert outcome.elapsed == 0.5
    assert script.cancelled == [1]
    assert (outcome.winner, outcome.hedges_won) == (0, 0)
    with pytest.raises(ValueError, match="bad input"):
        outcome.result()


def test_a_result_that_is_not_non_fatal_wins_whatever_its_status() -> None:
    script = Script([(0.05, Response(404))])
    assert run(Hedge(0.1), script).value == Response(404)


def test_a_custom_non_fatal_predicate_decides() -> None:
    script = Script([(0.05, "retry me"), (0.05, "fine")])
    hedge = Hedge(1.0, non_fatal=lambda outcome: outcome == "retry me")
    outcome = run(hedge, script)
    assert script.starts == [0.0, 0.05]
    assert outcome.value == "fine"


# -- what bounds the hedges: count, time, throttle, retry budget -----------------------------------


def test_max_attempts_bounds_every_attempt_of_the_run() -> None:
    script = Script([(0.01, OSError("down"))])
    outcome = run(Hedge(0.5, max_attempts=4), script)
    assert len(script.starts) == 4 == outcome.attempts
    assert outcome.reason is StopReason.COUNT
    assert isinstance(outcome.exception, OSError)
    assert outcome.winner == 3  # the run ended with the last hedge's outcome
    assert outcome.hedges_won == 0  # which no hedge won: the run gave up on it

    single = Script([(SLOW, "only")])
    assert run(Hedge(0.1, max_attempts=1), single).attempts == 1


def test_exhausted_on_non_fatal_results_returns_the_last_and_releases_the_rest() -> None:
    released: list[object] = []
    script = Script([(0.01, Response(503, "a")), (0.01, Response(503, "b"))])
    outcome = run(Hedge(1.0), script, release=released.append)
    assert outcome.reason is StopReason.COUNT
    assert outcome.exception is None
    assert outcome.value == Response(503, "b")
    assert outcome.result() == Response(503, "b")
    assert released == [Response(503, "a")]  # the superseded one; the last is the caller's


def test_a_hedge_that_could_not_finish_before_the_deadline_is_not_sent() -> None:
    async def main() -> tuple[HedgedOutcome[object], Script]:
        script = Script([(0.55, "first")])
        horizon = Horizon(None, mono_end=time.monotonic() + 0.6)
        # at 0.2, 0.4 s are left and an attempt is expected to take 0.5 s
        outcome = await Hedge(0.2).run(script, horizon=horizon, estimate=0.5)
        return outcome, script

    outcome, script = simulate(main)
    assert script.starts == [0.0]
    assert (outcome.value, outcome.attempts) == ("first", 1)

    async def failing() -> HedgedOutcome[object]:
        script = Script([(0.3, OSError("down"))])
        horizon = Horizon(None, mono_end=time.monotonic() + 0.6)
        return await Hedge(0.5).run(script, horizon=horizon, estimate=0.5)

    refused = simulate(failing)  # at 0.3, 0.3 s left < 0.5: refused, reason deadline
    assert refused.reason is StopReason.DEADLINE
    assert refused.attempts == 1


def test_the_runs_own_budget_is_wall_clock() -> None:
    async def main() -> HedgedOutcome[object]:
        script = Script([(0.3, OSError("down"))])
        horizon = Horizon(None, mono_end=time.monotonic() + 1.0)
        return await Hedge(0.5).run(script, horizon=horizon, estimate=0.8, max_elapsed=1.0)

    assert simulate(main).reason is StopReason.WALL_CLOCK


def test_a_refused_retry_budget_withdrawal_means_no_hedge() -> None:
    budget = CountingBudget(grants=0)
    script = Script([(1.0, "first")])
    outcome = run(Hedge(0.1, max_attempts=5), script, budget=budget)
    assert script.starts == [0.0]
    assert outcome.value == "first"
    assert (budget.deposits, budget.asked) == (1, 1)  # asked once: a refusal is final

    failing = Script([(0.05, OSError("down"))])
    refused = run(Hedge(0.1, max_attempts=5), failing, budget=NEVER)
    assert refused.reason is StopReason.RETRY_BUDGET
    assert refused.attempts == 1


def test_each_hedge_withdraws_once_from_the_retry_budget() -> None:
    budget = CountingBudget(grants=2)
    script = Script([(SLOW, "never")])
    horizon_left = 1.0

    async def main() -> HedgedOutcome[object]:
        horizon = Horizon(None, mono_end=time.monotonic() + horizon_left)
        return await Hedge(0.1, max_attempts=5).run(script, horizon=horizon, budget=budget)

    outcome = simulate(main)
    assert script.starts == [0.0, 0.1, 0.2]  # two granted, the third refused
    assert (budget.deposits, budget.asked, budget.granted) == (1, 3, 2)
    assert outcome.reason is StopReason.DEADLINE  # then the frame's end (no own budget) cut them


def test_an_asyncio_budget_is_awaited() -> None:
    budget = AsyncCountingBudget(grants=1)
    script = Script([(SLOW, "slow"), (0.05, "hedge")])
    outcome = run(Hedge(0.1, max_attempts=3), script, budget=budget)
    assert script.starts == [0.0, 0.1]
    assert outcome.value == "hedge"
    assert (budget.deposits, budget.granted) == (1, 1)


def test_hedging_pauses_while_the_throttle_rejects_anything() -> None:
    throttle = FakeThrottle(probability=0.25)
    script = Script([(0.5, "first")])
    outcome = run(Hedge(0.1), script, throttle=throttle)
    assert script.starts == [0.0]
    assert outcome.value == "first"
    assert throttle.admitted == 1  # the first attempt's admission only
    assert throttle.recorded == ["first"]


def test_a_calm_throttle_admits_and_counts_each_hedge_and_records_every_outcome() -> None:
    throttle = FakeThrottle(probability=0.0)
    script = Script([(0.3, Response(503)), (0.05, "ok")])
    outcome = run(Hedge(0.1, max_attempts=3), script, throttle=throttle)
    assert script.starts == [0.0, 0.1]
    assert outcome.value == "ok"
    assert throttle.admitted == 2
    assert throttle.recorded == ["ok"]  # the first was cancelled: no outcome to record

    failing = FakeThrottle()
    script = Script([(0.05, OSError("down"))])
    outcome = run(Hedge(0.1, max_attempts=2), script, throttle=failing)
    assert [type(o) for o in failing.recorded] == [OSError, OSError]


def test_a_throttle_that_rejects_the_first_attempt_sends_nothing() -> None:
    throttle = FakeThrottle(probability=0.5, admits=False)
    budget = CountingBudget(grants=5)
    script = Script([(0.1, "never sent")])
    outcome = run(Hedge(0.1), script, throttle=throttle, budget=budget)
    assert script.starts == []
    assert outcome.attempts == 0
    assert outcome.reason is StopReason.THROTTLED
    assert isinstance(outcome.exception, Throttled)
    assert outcome.exception.probability == 0.5
    assert budget.deposits == 0  # admitted first, deposited after


def test_the_decision_asks_time_then_throttle_then_retry_budget() -> None:
    order: list[str] = []

    class Throttle(FakeThrottle):
        def admit(self) -> bool:
            order.append("throttle")
            return super().admit()

    class Budget(CountingBudget):
        def try_withdraw(self) -> bool:
            order.append("budget")
            return super().try_withdraw()

    script = Script([(SLOW, "slow"), (0.01, "hedge")])
    run(Hedge(0.1), script, throttle=Throttle(), budget=Budget(grants=1))
    assert order == ["throttle", "throttle", "budget"]  # first attempt; then the hedge's

    order.clear()

    async def late() -> HedgedOutcome[object]:
        horizon = Horizon(None, mono_end=time.monotonic() + 0.15)
        script = Script([(0.12, "first")])
        return await Hedge(0.1).run(
            script, horizon=horizon, estimate=0.1, throttle=Throttle(), budget=Budget(1)
        )

    simulate(late)
    assert order == ["throttle"]  # the time refused the hedge: neither was asked for it


# -- the run's end, losers, observers --------------------------------------------------------------


def test_the_runs_end_cuts_every_attempt() -> None:
    script = Script([(SLOW, "never")])

    async def main() -> tuple[HedgedOutcome[object], float]:
        horizon = Horizon(None, mono_end=time.monotonic() + 0.35)
        outcome = await Hedge(0.1, max_attempts=5).run(script, horizon=horizon, max_elapsed=0.35)
        return outcome, time.monotonic()

    outcome, ended = simulate(main)
    assert ended == pytest.approx(0.35, abs=1e-12)
    assert ended <= 0.35 + 1e-15
    assert script.starts == pytest.approx([0.0, 0.1, 0.2, 0.3])
    assert sorted(script.cancelled) == [0, 1, 2, 3]
    assert outcome.reason is StopReason.WALL_CLOCK
    assert isinstance(outcome.exception, TimeoutError)
    assert (outcome.attempts, outcome.winner, outcome.hedges_won) == (4, None, 0)


def test_an_enclosing_deadline_cut_is_reported_as_the_deadline() -> None:
    async def main() -> HedgedOutcome[object]:
        outer = Horizon(None, mono_end=time.monotonic() + 0.2)
        horizon = Horizon(outer, mono_end=time.monotonic() + 5.0)
        return await Hedge(0.1).run(Script([(SLOW, "x")]), horizon=horizon, max_elapsed=5.0)

    assert simulate(main).reason is StopReason.DEADLINE


def test_a_run_whose_time_is_already_up_sends_nothing() -> None:
    async def main() -> HedgedOutcome[object]:
        horizon = Horizon(None, mono_end=time.monotonic() - 1.0)
        return await Hedge(0.1).run(Script([(0.1, "x")]), horizon=horizon)

    outcome = simulate(main)
    assert outcome.attempts == 0
    assert outcome.reason is StopReason.DEADLINE
    assert isinstance(outcome.exception, TimeoutError)


def test_losers_are_cancelled_and_their_results_released() -> None:
    released: list[object] = []

    async def release(value: object) -> None:
        await asyncio.sleep(0)
        released.append(value)

    # the second and third end at the same instant as the winner: both are losers with results
    script = Script([(SLOW, "slow"), (0.2, "won"), (0.1, "also done"), (SLOW, "unsent")])
    outcome = run(Hedge(0.1, max_attempts=3), script, release=release)
    assert outcome.value == "won"
    assert outcome.winner == 1
    assert script.cancelled == [0]
    assert released == ["also done"]


def test_a_loser_that_ends_after_its_cancellation_is_released_later() -> None:
    released: list[object] = []

    async def stubborn() -> str:
        try:
            await asyncio.sleep(SLOW)
        except asyncio.CancelledError:
            await asyncio.sleep(0.5)  # cleans up, then answers anyway
        return "late"

    calls = iter([stubborn, lambda: asyncio.sleep(0.2, "won")])

    async def main() -> HedgedOutcome[object]:
        outcome = await Hedge(0.1).run(lambda: next(calls)(), release=released.append)
        await asyncio.sleep(1.0)
        return outcome

    outcome = simulate(main)
    assert outcome.value == "won"
    assert released == ["late"]


def test_a_failing_release_never_fails_the_call() -> None:
    tried: list[object] = []

    def release(value: object) -> None:
        tried.append(value)
        raise RuntimeError("close failed")

    script = Script([(0.2, "first"), (0.1, "second")])  # both end at 0.2: the first wins
    outcome = run(Hedge(0.1), script, release=release)
    assert outcome.value == "first"
    assert outcome.exception is None
    assert tried == ["second"]


def test_observers_hear_of_each_hedge_once_with_whether_it_won() -> None:
    observer = HedgeObserver()
    plain = object()  # an observer without on_hedge is skipped
    script = Script([(SLOW, "a"), (SLOW, "b"), (0.05, "c")])
    run(Hedge(0.1, max_attempts=3), script, observers=[observer, plain], name="fetch")
    assert observer.hedges == [("fetch", False), ("fetch", True)]


def test_cancelling_the_caller_cancels_every_attempt() -> None:
    script = Script([(SLOW, "a")])

    async def main() -> None:
        task = asyncio.ensure_future(Hedge(0.1, max_attempts=3).run(script))
        await asyncio.sleep(0.25)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)

    simulate(main)
    assert script.starts == [0.0, 0.1, 0.2]
    assert sorted(script.cancelled) == [0, 1, 2]


# -- the learned delay in runs ---------------------------------------------------------------------


def test_no_hedging_on_a_timer_before_min_samples_then_at_the_learned_quantile() -> None:
    hedge = Hedge("p50", min_samples=4)

    async def main() -> list[list[float]]:
        starts = []
        for latency in (0.1, 0.2, 0.3, 0.4):  # 4 runs, no hedge: fewer than 4 seen before each
            script = Script([(latency, "ok")])
            began = time.monotonic()
            await hedge.run(script)
            starts.append([s - began for s in script.starts])
        assert hedge.delay_now() == pytest.approx(0.2)  # the 2nd of 4
        script = Script([(SLOW, "slow"), (0.05, "hedge")])
        began = time.monotonic()
        await hedge.run(script)
        starts.append([round(s - began, 12) for s in script.starts])
        return starts

    starts = simulate(main)
    assert starts[:4] == [[0.0]] * 4
    assert starts[4] == [0.0, pytest.approx(0.2)]


def test_before_min_samples_a_non_fatal_failure_still_sends_the_next_attempt() -> None:
    script = Script([(0.01, OSError("reset")), (0.01, "ok")])
    outcome = run(Hedge("p95"), script)
    assert outcome.value == "ok"
    assert script.starts == [0.0, 0.01]


def test_cancelled_attempts_enter_the_sketch_as_censored() -> None:
    hedge = Hedge("p50", min_samples=1)
    assert hedge.sketch is not None
    hedge.sketch.add(0.1)
    run(hedge, Script([(SLOW, "slow"), (0.05, "hedge")]))
    # the hedge's 0.05 s, and the first attempt censored at 0.15 s: kept as inf
    assert hedge.sketch._sorted == pytest.approx([0.05, 0.1, math.inf])
    assert hedge.delay_now() == 0.1


def test_one_hedge_serves_a_thousand_concurrent_runs_with_exact_counts() -> None:
    hedge = Hedge(0.05, max_attempts=3)
    budget = CountingBudget(grants=150)
    observer = HedgeObserver()
    scripts = [
        Script([(1.0 if i % 10 == 0 else 0.01, f"first {i}"), (0.02, f"hedge {i}")])
        for i in range(1000)
    ]

    async def main() -> list[HedgedOutcome[object]]:
        runs = [
            hedge.run(script, budget=budget, observers=[observer], name="call")
            for script in scripts
        ]
        return list(await asyncio.gather(*runs))

    outcomes = simulate(main)
    slow = [i for i in range(1000) if i % 10 == 0]  # 100 slow first attempts
    assert budget.deposits == 1000
    assert budget.granted == 100
    assert sum(o.hedges for o in outcomes) == 100
    assert sum(o.hedges_won for o in outcomes) == 100
    for i, outcome in enumerate(outcomes):
        if i in slow:
            assert scripts[i].starts == [0.0, 0.05]
            assert outcome.value == f"hedge {i}"
            assert outcome.elapsed == pytest.approx(0.07)
        else:
            assert scripts[i].starts == [0.0]
            assert outcome.value == f"first {i}"
    assert observer.hedges == [("call", True)] * 100


def test_a_hedge_is_reported_by_name_on_the_report_fields() -> None:
    outcome = run(Hedge(0.1), Script([(SLOW, "a"), (0.05, "b")]))
    assert outcome.hedges == 1
    assert outcome.hedges_won == 1
    assert "winner=1" in repr(outcome)
    assert outcome.exhausted is False


def test_a_superseded_non_fatal_exception_is_not_released() -> None:
    released: list[object] = []
    script = Script([(0.01, ConnectionError("reset")), (0.01, Response(503)), (0.01, "ok")])
    outcome = run(Hedge(1.0, max_attempts=3), script, release=released.append)
    assert outcome.value == "ok"
    assert released == [Response(503)]  # the 503 only: an exception holds nothing to release


def test_a_loser_ending_at_the_winners_instant_is_recorded_in_the_throttle() -> None:
    throttle = FakeThrottle()
    script = Script([(0.2, "first"), (0.1, "second")])  # both end at 0.2
    run(Hedge(0.1), script, throttle=throttle)
    assert throttle.recorded == ["first", "second"]
