"""The overhead benchmark's ablations stop where the stop they stand in for stops."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import tenacity

from benchmarks.overhead import _answers, _checks_alone
from tenacity_budget import BackoffPolicy
from tenacity_budget.strategies import stop_budget
from tenacity_budget.testing import virtual_clock


def _attempts(policy: dict[str, Any], takes: float, **wait: Any) -> tuple[int, float]:
    """Attempts tenacity makes of a function that always fails, each taking ``takes``
    seconds of the virtual clock, under the pair of ``BackoffPolicy(**policy)`` (built
    inside the clock: a deadline is relative to its start; ``wait`` goes to its
    ``wait()``); and the seconds elapsed. The sleeps move the clock, except with
    ``retry_after``: then only the sleep budget can end the run."""
    made = 0
    with virtual_clock() as clock:
        if "deadline" in policy:
            policy = {**policy, "deadline": clock.now() + timedelta(seconds=policy["deadline"])}
        built = BackoffPolicy(**policy)

        sleep = (lambda _: None) if "retry_after" in wait else clock.advance

        @tenacity.retry(wait=built.wait(**wait), stop=built.stop(), sleep=sleep)
        def fails() -> None:
            nonlocal made
            made += 1
            clock.advance(takes)
            raise ValueError("transient")

        with pytest.raises(tenacity.RetryError):
            fails()
        return made, clock.elapsed


@pytest.mark.parametrize(
    ("policy", "takes", "wait"),
    [
        ({"base": 1, "cap": 1, "max_elapsed": 3, "jitter": "none"}, 0.0, {}),
        ({"base": 0.5, "cap": 4, "max_elapsed": 20}, 0.0, {"seed": 7}),
        ({"base": 0.5, "cap": 4, "max_elapsed": 20}, 0.0, {"retry_after": lambda _: 5.0}),
        ({"base": 0.5, "cap": 4, "max_elapsed": 20, "jitter": "none"}, 7.0, {}),
        ({"base": 1, "cap": 1, "max_elapsed": 600, "deadline": 7.0, "jitter": "none"}, 1.0, {}),
    ],
    ids=["count", "full jitter", "sleep budget", "wall clock", "deadline"],
)
def test_the_four_checks_alone_stop_where_the_budget_stop_does(
    policy: dict[str, Any], takes: float, wait: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = _attempts(policy, takes, **wait)
    monkeypatch.setattr(stop_budget, "__call__", _checks_alone)
    assert _attempts(policy, takes, **wait) == expected


def test_the_answering_stop_allows_every_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stop_budget, "__call__", _answers)
    calls: list[Any] = []
    policy = BackoffPolicy(base=1, cap=1, max_elapsed=3, jitter="none")

    @tenacity.retry(wait=policy.wait(), stop=policy.stop(), sleep=lambda _: None)
    def fails_five_times() -> int:
        calls.append(None)
        if len(calls) <= 5:
            raise ValueError("transient")
        return len(calls)

    assert fails_five_times() == 6  # past the 3 retries the policy affords
