"""Counting retries: :class:`RetryStats`, a thread-safe collector for ``policy.retry(stats=...)``.

The figures worth alerting on: how often calls need a retry at all, and how often a retry
rescues a call (docs/observability.md, "Counting").
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..exhaustion import ExhaustionReport

__all__ = ["RetryStats", "RetryStatsSnapshot"]


@dataclass(frozen=True, slots=True)
class RetryStatsSnapshot:
    """A consistent, immutable copy of the counters at one moment."""

    calls: int
    first_try_successes: int
    successes_after_retry: int
    retries: int
    exhausted: int

    @property
    def retry_rate(self) -> float:
        """Retries per call (0.0 before any call)."""
        return self.retries / self.calls if self.calls else 0.0

    @property
    def success_after_retry_rate(self) -> float:
        """Share of successful calls that needed at least one retry (0.0 before any)."""
        successes = self.first_try_successes + self.successes_after_retry
        return self.successes_after_retry / successes if successes else 0.0


class RetryStats:
    """Thread-safe counters of budgeted calls, fed by ``policy.retry(stats=stats)``.

    Attributes (read them, or take a consistent :meth:`snapshot`):
        calls: calls of decorated functions begun.
        first_try_successes: calls that returned on their first attempt.
        successes_after_retry: calls that returned after at least one retry.
        retries: retries made (sleeps taken) over all calls.
        exhausted: calls that gave up (budget spent or another stop).

    Example:
        >>> stats = RetryStats()
        >>> @BackoffPolicy(base=1, cap=5, max_elapsed=30).retry(stats=stats)  # doctest: +SKIP
        ... def fetch(): ...
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0
        self.first_try_successes = 0
        self.successes_after_retry = 0
        self.retries = 0
        self.exhausted = 0

    def __repr__(self) -> str:
        s = self.snapshot()
        return (
            f"RetryStats(calls={s.calls}, first_try_successes={s.first_try_successes}, "
            f"successes_after_retry={s.successes_after_retry}, retries={s.retries}, "
            f"exhausted={s.exhausted})"
        )

    # RetryObserver --------------------------------------------------------------------------

    def on_call(self, name: str) -> None:
        with self._lock:
            self.calls += 1

    def on_retry(self, name: str, attempt: int, sleep: float) -> None:
        with self._lock:
            self.retries += 1

    def on_success(self, name: str, attempts: int) -> None:
        with self._lock:
            if attempts <= 1:
                self.first_try_successes += 1
            else:
                self.successes_after_retry += 1

    def on_exhausted(self, name: str, report: ExhaustionReport) -> None:
        with self._lock:
            self.exhausted += 1

    # Figures --------------------------------------------------------------------------------

    @property
    def retry_rate(self) -> float:
        """Retries per call (0.0 before any call)."""
        return self.snapshot().retry_rate

    @property
    def success_after_retry_rate(self) -> float:
        """Share of successful calls that needed at least one retry (0.0 before any)."""
        return self.snapshot().success_after_retry_rate

    def snapshot(self) -> RetryStatsSnapshot:
        """All counters, read together under the lock."""
        with self._lock:
            return RetryStatsSnapshot(
                calls=self.calls,
                first_try_successes=self.first_try_successes,
                successes_after_retry=self.successes_after_retry,
                retries=self.retries,
                exhausted=self.exhausted,
            )

    def reset(self) -> None:
        """Set every counter back to zero."""
        with self._lock:
            self.calls = self.first_try_successes = self.successes_after_retry = 0
            self.retries = self.exhausted = 0
