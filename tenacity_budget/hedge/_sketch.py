"""The learned hedging delay: a bounded window of recent attempt latencies and its quantile.

:class:`LatencySketch` keeps the last ``window`` latencies (a ring) beside the same values
kept sorted, so a quantile is one index. A cancelled attempt's latency is censored (its true
latency is at least the time it ran, and maybe far more): it is kept as ``inf``, so the
quantile is never below the one of the true latencies. docs/hedging.md explains the choice.
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left, insort

__all__: list[str] = []

WINDOW = 1000
"""The fewest latencies a window keeps: p95 then rests on the 50 slowest, p99 on 10."""
MAX_WINDOW = 100_000
"""The most a window keeps (800 KB of floats): a quantile closer to 100% than 1e-4 rests on
fewer than 10 latencies above it."""


def window_for(numerator: int, denominator: int) -> int:
    """The window for the quantile ``numerator / denominator``: at least 10 latencies above it.

    ``max(WINDOW, ceil(10 / (1 - q)))``, at most :data:`MAX_WINDOW`: ``p99.9`` keeps 10 000.
    """
    above = denominator - numerator  # (1 - q) * denominator, > 0
    return min(MAX_WINDOW, max(WINDOW, -(-10 * denominator // above)))


class LatencySketch:
    """The last ``window`` latencies of one hedge, shared by its runs (thread and task safe).

    Attributes:
        window: how many of the latest latencies are kept.
        seen: latencies recorded in all (censored ones included), never reset.
    """

    __slots__ = ("_lock", "_next", "_ring", "_sorted", "seen", "window")

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self.seen = 0
        self._ring: list[float] = []
        self._sorted: list[float] = []
        self._next = 0  # where the next latency goes once the ring is full
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ring)

    def __repr__(self) -> str:
        return f"<LatencySketch {len(self._ring)} of {self.window} kept, {self.seen} seen>"

    def add(self, seconds: float, *, censored: bool = False) -> None:
        """Record one attempt's latency; ``censored``: it was cancelled after ``seconds``."""
        value = math.inf if censored or not seconds >= 0.0 else seconds
        with self._lock:
            self.seen += 1
            ring, kept = self._ring, self._sorted
            if len(ring) < self.window:
                ring.append(value)
            else:
                old = ring[self._next]
                ring[self._next] = value
                self._next = (self._next + 1) % self.window
                del kept[bisect_left(kept, old)]
            insort(kept, value)

    def quantile(self, numerator: int, denominator: int) -> float:
        """The nearest-rank quantile ``numerator / denominator`` of the kept latencies.

        The smallest kept latency with at least that share of them at or below it: the
        ``ceil(q * n)``-th smallest of ``n``; ``inf`` when it is a censored one, ``nan``
        when nothing is kept.
        """
        with self._lock:
            kept = self._sorted
            if not kept:
                return math.nan
            rank = -(-numerator * len(kept) // denominator)  # ceil, in integers
            return kept[max(1, rank) - 1]
