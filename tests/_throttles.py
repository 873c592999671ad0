"""Seeded adaptive throttles and a counting retry budget for the HTTP clients' throttle tests.

The throttles and the budget are the real ones, which also keep what they were asked and
told. A throttle's decisions are known in advance from its :func:`twin`: the same seed and
history, so the same draws. Build and read them inside the virtual clock, where their
windows' counts are made.
"""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

from tenacity_budget import AdaptiveThrottle
from tenacity_budget.retry_budget import RetryBudget

TOO_MANY = SimpleNamespace(status_code=429)
"""An overload signal, as any client's 429 response is to the throttle."""


class Counting(AdaptiveThrottle):
    """A real adaptive throttle (k=2, a 60 s window, seeded) that keeps its decisions and
    the outcomes it is told."""

    def __init__(self, seed: int = 1, **kwargs: Any) -> None:
        super().__init__(k=2.0, window=60.0, name="items", rng=random.Random(seed), **kwargs)
        self.decisions: list[bool] = []
        self.recorded: list[object] = []

    def admit(self) -> bool:
        admitted = super().admit()
        self.decisions.append(admitted)
        return admitted

    def record(self, outcome: object) -> None:
        self.recorded.append(outcome)
        super().record(outcome)


class Ledger(RetryBudget):
    """A real retry budget that counts its deposits and the withdrawals asked of it."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.deposits = self.withdrawals = 0

    def deposit(self) -> None:
        self.deposits += 1
        super().deposit()

    def try_withdraw(self) -> bool:
        self.withdrawals += 1
        return super().try_withdraw()


def fed(throttle: AdaptiveThrottle, overloads: int) -> AdaptiveThrottle:
    """``throttle`` after ``overloads`` attempts answered 429 (each asked, each told)."""
    for _ in range(overloads):
        throttle.admit()  # whatever it decides, the request counts
        throttle.record(TOO_MANY)
    return throttle


def twin(seed: int, overloads: int = 0) -> AdaptiveThrottle:
    """A throttle in the state a test's throttle starts in: what it will decide, in advance."""
    return fed(AdaptiveThrottle(k=2.0, window=60.0, rng=random.Random(seed)), overloads)
