"""``Hedge``: what a hedged run is given (gRPC gRFC A6's hedging policy), validated once.

A :class:`Hedge` holds the delay (fixed seconds, or ``"pNN"``: a quantile learned from its
own recent latencies), the attempt bound (at most 5, gRPC's limit), the non-fatal
predicate and ``min_samples``; :meth:`Hedge.run` runs one hedged run with the engine
(:mod:`~tenacity_budget.hedge._engine`). One object serves any number of concurrent runs.
See docs/hedging.md.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Sequence
from fractions import Fraction
from typing import Any, TypeVar

from .._validate import attempts as _attempts
from .._validate import seconds as _seconds
from ..context import Horizon
from ._engine import HedgedOutcome, run_hedged
from ._non_fatal import non_fatal as default_non_fatal
from ._sketch import LatencySketch, window_for

__all__: list[str] = []

T = TypeVar("T")

MAX_ATTEMPTS = 5
"""gRPC's limit on a hedging policy's ``maxAttempts`` (larger values are refused there too)."""

_QUANTILE = re.compile(r"p(\d+(?:\.\d+)?)")


def _quantile(text: str) -> Fraction:
    """``"p95"`` as ``95/100``: ``pNN`` with ``0 < NN < 100``, decimals allowed."""
    found = _QUANTILE.fullmatch(text)
    share = Fraction(found.group(1)) / 100 if found is not None else Fraction(-1)
    if not 0 < share < 1:
        raise ValueError(
            "Hedge(delay=...) must be a number of seconds or a quantile 'pNN' with "
            f"0 < NN < 100 ('p95', 'p99.9'), got {text!r}"
        )
    return share


class Hedge:
    """Hedged requests: send the same idempotent request again after ``delay`` without an answer.

    As in gRPC, hedging replaces retrying for the run it is given to: the first attempt is
    sent at once; after ``delay`` seconds without an answer the next is sent, without
    cancelling the first; the first good outcome wins and every other attempt is cancelled
    (its result released); a non-fatal failure sends the next attempt at once and a fatal
    one ends the run with it. Every attempt after the first is allowed by the one decision
    (time left against the attempt estimate, then the throttle, then the retry budget), and
    the run's end cuts every attempt still running. For coroutine functions
    (``policy.retry(hedge=...)``) and the async HTTP clients.

    Args:
        delay: seconds (a finite number >= 0), or ``"pNN"`` (``0 < NN < 100``, e.g. ``"p95"``,
            ``"p99.9"``): the quantile of this hedge's recent attempt latencies, learned online
            (a cancelled attempt counts as censored: at least as long as it ran). Until
            ``min_samples`` latencies are seen, a learned delay sends no hedge on a timer.
        max_attempts: attempts per run, the first included: 1 to 5 (gRPC's limit).
        non_fatal: ``non_fatal(outcome) -> bool`` over an attempt's result or exception: a
            non-fatal failure sends the next attempt at once. The default: a transport
            error a new attempt may cure (``OSError``, ``httpx.TransportError``, aiohttp's
            connection errors; not a TLS failure) or a status 429, 502, 503 or 504.
        min_samples: latencies a learned delay needs before it hedges (an int >= 1).

    Raises:
        TypeError: for a ``delay`` neither a number nor text, a ``max_attempts`` or
            ``min_samples`` not an int (a bool included), a ``non_fatal`` not callable.
        ValueError: for a negative, NaN or infinite ``delay``, a quantile outside
            ``(0, 100)``, ``max_attempts`` below 1 or above 5, ``min_samples`` below 1.

    Attributes:
        delay: the delay as given. quantile: its share (``0.95`` for ``"p95"``), ``None``
        for a fixed delay. sketch: the learned latencies (``None`` for a fixed delay).
    """

    __slots__ = (
        "_fixed",
        "_share",
        "delay",
        "max_attempts",
        "min_samples",
        "non_fatal",
        "quantile",
        "sketch",
    )

    def __init__(
        self,
        delay: float | str,
        max_attempts: int = 2,
        *,
        non_fatal: Callable[[object], bool] | None = None,
        min_samples: int = 20,
    ) -> None:
        if isinstance(delay, str):
            share = _quantile(delay)
            self._share: tuple[int, int] | None = (share.numerator, share.denominator)
            self._fixed = math.inf
            self.quantile: float | None = float(share)
            self.sketch: LatencySketch | None = LatencySketch(window_for(*self._share))
        else:
            self._fixed = _seconds(delay, "Hedge(delay=...)")
            self._share = self.quantile = self.sketch = None
        count = _attempts(max_attempts, "Hedge(max_attempts=...)")
        if count > MAX_ATTEMPTS:
            raise ValueError(
                f"Hedge(max_attempts=...) must be at most {MAX_ATTEMPTS}, gRPC's limit on "
                f"hedged attempts (the first included), got {count}"
            )
        if non_fatal is not None and not callable(non_fatal):
            raise TypeError(
                "Hedge(non_fatal=...) must be a callable of an outcome (a result or an "
                f"exception) returning a bool, got {type(non_fatal).__name__}"
            )
        self.delay = delay
        self.max_attempts = count
        self.non_fatal: Callable[[object], bool] = non_fatal or default_non_fatal
        self.min_samples = _attempts(min_samples, "Hedge(min_samples=...)")

    def __repr__(self) -> str:
        return (
            f"Hedge(delay={self.delay!r}, max_attempts={self.max_attempts}, "
            f"min_samples={self.min_samples})"
        )

    def delay_now(self) -> float:
        """The seconds a run waits for an answer before its next attempt, as of now.

        The fixed delay; or the learned quantile, ``inf`` (no hedging on a timer) until
        ``min_samples`` latencies were seen or while the quantile is a censored latency.
        """
        sketch, share = self.sketch, self._share
        if sketch is None or share is None:
            return self._fixed
        if sketch.seen < self.min_samples:
            return math.inf
        return sketch.quantile(*share)

    async def run(
        self,
        attempt: Callable[[], Awaitable[T]],
        *,
        horizon: Horizon | None = None,
        estimate: float = 0.0,
        max_elapsed: float = math.inf,
        started: float | None = None,
        budget: Any = None,
        throttle: Any = None,
        release: Callable[[T], Any] | None = None,
        observers: Sequence[object] = (),
        name: str = "",
    ) -> HedgedOutcome[T]:
        """One hedged run of ``attempt`` (a factory of one attempt's awaitable).

        The first attempt is sent at once (unless the run's time is already up, or the
        throttle's ``admit()`` rejects it: then none is sent), then ``budget.deposit()``
        is called once. Each further attempt is sent when the delay passed without an
        answer or an attempt failed non-fatally, if the one decision allows it: the count
        (``max_attempts``), the time (``estimate``, or the longest attempt of the run if
        longer, must fit in ``horizon.left()``; ``elapsed`` plus it in ``max_elapsed``),
        the throttle (its ``probability`` must be 0 and ``admit()`` true), then the retry
        budget's withdrawal (awaited for an asyncio budget). A refusal is final for the run.

        Args:
            attempt: makes one attempt; called once per attempt, in a task that copies the
                caller's context (:func:`~tenacity_budget.remaining` works in it when the
                caller entered ``horizon``).
            horizon: the run's frame: its end cuts every attempt (``None``: no end).
            estimate: the expected duration of one attempt (``attempt_duration``).
            max_elapsed: the run's own budget, from ``started`` (the monotonic clock's
                reading at the run's start, default now); within ``horizon``'s end.
            budget: a retry budget (``deposit()``, ``try_withdraw()``), or ``None``.
            throttle: an adaptive throttle (``admit()``, ``record(outcome)``,
                ``probability``, ``name``), or ``None``; every outcome is recorded in it.
            release: called (and awaited if it returns an awaitable) with every result no
                one will read: a loser's, a superseded non-fatal one's.
            observers: objects whose optional ``on_hedge(name, won)`` is called once per
                attempt after the first when the run ends.
            name: the name observers are told.

        Returns:
            the :class:`~tenacity_budget.hedge.HedgedOutcome`; the run never raises an
            attempt's exception itself (read ``outcome.result()``).
        """
        return await run_hedged(
            self,
            attempt,
            horizon=horizon,
            estimate=estimate,
            max_elapsed=max_elapsed,
            started=started,
            budget=budget,
            throttle=throttle,
            release=release,
            observers=observers,
            name=name,
        )
