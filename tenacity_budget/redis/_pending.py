"""Deposit batching: deposits counted in memory, by local slice, until the next send.

A call that succeeds at its first attempt costs no round trip. Each batch goes to Redis
with the age of its first deposit, so the script counts it in the slice it was made in;
a batch older than the window is dropped (see docs/retry-budgets.md).
"""

from __future__ import annotations

import threading

from ..retry_budget import SLICES

# A batch: [local slice index, deposits, monotonic time of the first of them].
Batch = list[int | float]


class Pending:
    """This process's deposits not yet sent to Redis, oldest batch first (thread-safe)."""

    __slots__ = ("_batches", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches: list[Batch] = []

    def __bool__(self) -> bool:
        return bool(self._batches)

    @property
    def count(self) -> int:
        """Deposits waiting to be sent."""
        with self._lock:
            return sum(int(batch[1]) for batch in self._batches)

    def add(self, index: int, now: float) -> bool:
        """Count one deposit made at ``now`` in slice ``index``; ``True`` if it starts a wait.

        Batches too old to count (``SLICES`` slices before ``index``) are dropped.
        """
        with self._lock:
            batches = self._batches
            if batches and batches[-1][0] == index:
                batches[-1][1] += 1
                return False
            while batches and batches[0][0] <= index - SLICES:
                del batches[0]
            batches.append([index, 1, now])
            return len(batches) == 1

    def take(self, index: int) -> list[Batch]:
        """Remove every batch, and return those that still count at slice ``index``."""
        oldest = index - SLICES
        with self._lock:
            taken, self._batches = self._batches, []
        return [batch for batch in taken if batch[0] > oldest]

    def restore(self, batches: list[Batch]) -> None:
        """Put back batches that could not be sent, before any made since."""
        if batches:
            with self._lock:
                self._batches[:0] = batches

    @staticmethod
    def ages(batches: list[Batch], now: float) -> list[int]:
        """Pairs of (age in microseconds at ``now``, deposits), flat: the script's arguments."""
        args: list[int] = []
        for _, count, made in batches:
            args += (max(0, round((now - made) * 1_000_000)), int(count))
        return args
