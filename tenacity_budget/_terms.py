"""A policy's terms as plain numbers, computed once: what the strategies and decorator read.

:class:`BackoffPolicy` validates its fields and derives these figures in its validator;
:class:`~tenacity_budget.strategies.wait_budget`, :class:`~tenacity_budget.strategies.stop_budget`
and ``policy.retry()`` read only this frozen record on their per-retry path (tenacity's
strategies store plain numbers the same way). See docs/concepts.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from .jitter import JitterMode
from .solver import nominal_delay

# How many of the first nominal delays the record keeps in a table (a few hundred bytes).
_TABLED = 64


@dataclass(frozen=True, slots=True)
class Terms:
    """The figures of one policy, for the adapters (see :class:`BackoffPolicy` for each).

    Attributes:
        base, factor, cap: the nominal delay ``min(cap, base * factor**n)``.
        budget: ``max_elapsed``.
        attempt_duration: the estimate of one attempt's duration.
        jitter: the jitter mode.
        deadline: the policy's own absolute deadline, if any.
        deadline_ts: that deadline in epoch seconds (``inf`` without one).
        affordable: retries the budget affords (``max_attempts()``).
        capped_index: the first retry whose nominal delay is exactly ``cap``.
        delays: the first nominal delays (up to 64 and the affordable count).
    """

    base: float
    factor: float
    cap: float
    budget: float
    attempt_duration: float
    jitter: JitterMode
    deadline: datetime | None
    affordable: int
    capped_index: int
    delays: tuple[float, ...]
    deadline_ts: float

    def delay(self, index: int) -> float:
        """The nominal delay before retry ``index`` (0: after the first attempt)."""
        if index < len(self.delays):
            return self.delays[index]
        if index >= self.capped_index:
            return self.cap
        return nominal_delay(index, self.base, self.factor, self.cap)


def terms(
    base: float,
    factor: float,
    cap: float,
    budget: float,
    attempt_duration: float,
    jitter: JitterMode,
    deadline: datetime | None,
    affordable: int,
    capped_index: int,
) -> Terms:
    """The record of these figures, its table of first delays computed from the one formula."""
    delays = tuple(
        nominal_delay(i, base, factor, cap) for i in range(min(capped_index, affordable, _TABLED))
    )
    return Terms(
        base,
        factor,
        cap,
        budget,
        attempt_duration,
        jitter,
        deadline,
        affordable,
        capped_index,
        delays,
        math.inf if deadline is None else deadline.timestamp(),
    )


class HasTerms(Protocol):
    """Anything that carries a policy's :class:`Terms` (a :class:`BackoffPolicy`)."""

    @property
    def terms(self) -> Terms:
        """The policy's terms."""
        ...


def terms_of(source: Terms | HasTerms) -> Terms:
    """``source`` itself when it is a :class:`Terms`, else its ``terms`` (a policy's)."""
    if isinstance(source, Terms):
        return source
    found = getattr(source, "terms", None)
    if not isinstance(found, Terms):
        raise TypeError(f"expected a BackoffPolicy, got {type(source).__name__}")
    return found
