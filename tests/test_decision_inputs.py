"""The throttle as one more input to the one decision: asked after the time budget, before
the retry budget, and alone before a run's first attempt."""

from __future__ import annotations

import pickle

from tenacity_budget.decision import admit, decide
from tenacity_budget.exhaustion import ExhaustionReport, StopReason, Throttled
from tenacity_budget.state import RunState


def _decide(**inputs: object) -> StopReason | None:
    figures: dict[str, object] = {
        "attempts": 1,
        "affordable": 3,
        "sleep": 1.0,
        "slept_through": 1.0,
        "elapsed": 0.5,
        "next_attempt": 0.1,
        "budget": 10.0,
        "until_deadline": float("inf"),
    }
    return decide(**{**figures, **inputs})  # type: ignore[arg-type]


def test_a_rejecting_throttle_ends_the_run_as_throttled_and_the_budget_is_not_asked() -> None:
    asked: list[str] = []

    def throttle() -> bool:
        asked.append("throttle")
        return False

    def grant() -> bool:
        asked.append("grant")
        return True

    assert _decide(throttle=throttle, grant=grant) is StopReason.THROTTLED
    assert asked == ["throttle"]


def test_the_throttle_is_asked_after_the_time_budget_and_before_the_retry_budget() -> None:
    asked: list[str] = []

    def throttle() -> bool:
        asked.append("throttle")
        return True

    def grant() -> bool:
        asked.append("grant")
        return False

    # The time budget refuses first: the throttle counts no attempt that is not made.
    assert _decide(elapsed=9.5, throttle=throttle, grant=grant) is StopReason.WALL_CLOCK
    assert asked == []
    assert _decide(throttle=throttle, grant=grant) is StopReason.RETRY_BUDGET
    assert asked == ["throttle", "grant"]


def test_admit_asks_only_the_throttle() -> None:
    assert admit(None) is None
    assert admit(lambda: True) is None
    assert admit(lambda: False) is StopReason.THROTTLED


def test_a_report_carries_hedges_and_a_throttled_reason() -> None:
    record = RunState(10.0, 3)
    record.attempts = 1
    record.reason = StopReason.THROTTLED
    report = ExhaustionReport.of_run(record, Throttled("api", 0.25))
    assert (report.reason, report.hedges, report.hedges_won) == (StopReason.THROTTLED, 0, 0)
    record.hedges, record.hedges_won = 2, 1
    assert ExhaustionReport.of_run(record, None).as_dict()["hedges"] == 2
    assert ExhaustionReport.of_run(record, None).hedges_won == 1


def test_throttled_pickles_with_its_fields() -> None:
    error = pickle.loads(pickle.dumps(Throttled("api", 0.5)))
    assert (error.throttle, error.probability) == ("api", 0.5)
    assert "api" in str(error)
