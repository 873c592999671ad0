"""Randomness: jitter that spreads retries without ever exceeding the nominal delay.

Each function takes the nominal (capped) delay of a retry and returns the wait actually
slept. Every one of them stays within ``[0, delay]``, so the budget solver's bound, computed
from nominal delays, holds whatever the random draws are. Each call draws exactly one number
from ``rng`` (a :class:`random.Random`; ``None`` means the ``random`` module's generator),
so a seeded generator replays the same waits.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Literal, TypeAlias

__all__: list[str] = []  # its names are importable here and (lazily) from tenacity_budget

JitterMode: TypeAlias = Literal["none", "full", "equal", "decorrelated"]
"""The jitter modes a :class:`~tenacity_budget.BackoffPolicy` accepts."""


def _uniform(low: float, high: float, rng: random.Random | None) -> float:
    draw = (rng or random).random()  # one draw in [0, 1)
    # Clamp: low + (high - low) * draw can round one ulp past high.
    return min(high, low + (high - low) * draw)


def full_jitter(delay: float, rng: random.Random | None = None) -> float:
    """A uniform wait in ``[0, delay]``: clients spread the most, lowest expected wait."""
    return _full(delay, 0.0, 0.0, rng)


def equal_jitter(delay: float, rng: random.Random | None = None) -> float:
    """Half fixed, half random: a uniform wait in ``[delay / 2, delay]``.

    Keeps a minimum spacing between attempts while still de-synchronising clients.
    """
    return _equal(delay, 0.0, 0.0, rng)


def decorrelated_jitter(
    delay: float,
    previous: float,
    base: float,
    rng: random.Random | None = None,
) -> float:
    """Decorrelated jitter, bounded by the nominal delay of its retry.

    The AWS formulation draws ``uniform(base, 3 * previous)``, growing from the previous
    wait rather than from the attempt number, and caps it at a global maximum. That maximum
    is not the nominal delay of the retry, so the sum of waits can outrun a budget computed
    from nominal delays. Here the draw is capped at ``delay`` (the nominal delay of this
    retry) instead, which keeps the budget bound::

        min(delay, uniform(base, max(base, 3 * previous)))

    Args:
        delay: the nominal (capped) delay of this retry; the result never exceeds it.
        previous: the wait slept before the previous retry (0 before the first retry).
        base: the policy's first delay, the lower end of every draw.
        rng: the generator to draw from; ``None`` uses the ``random`` module.
    """
    high = max(base, 3.0 * previous)
    return min(delay, _uniform(base, high, rng))


Jitter: TypeAlias = Callable[[float, float, float, "random.Random | None"], float]
"""One mode's jitter as ``jitter(delay, previous, base, rng) -> wait`` (see :func:`jitter_for`)."""


# The mode functions below are the implementations (the public functions above call them),
# written out flat because the wait calls one of them before every retry.


def _full(delay: float, previous: float, base: float, rng: random.Random | None) -> float:
    # _uniform(0, delay): never above delay, as rounding is monotone and the draw is < 1.
    return delay * (rng or random).random()


def _equal(delay: float, previous: float, base: float, rng: random.Random | None) -> float:
    # _uniform(delay / 2, delay), clamped: half + (delay - half) * draw can round past delay.
    half = delay / 2
    wait = half + (delay - half) * (rng or random).random()
    return wait if wait < delay else delay


def _none(delay: float, previous: float, base: float, rng: random.Random | None) -> float:
    return delay


_JITTERS: dict[str, Jitter] = {
    "none": _none,
    "full": _full,
    "equal": _equal,
    "decorrelated": decorrelated_jitter,
}


def jitter_for(mode: JitterMode) -> Jitter:
    """The jitter of ``mode`` as one function, ``jitter(delay, previous, base, rng)``.

    The wait strategy binds it once, when it is built, so that choosing the mode costs
    nothing per retry. ``previous`` (the wait before the previous retry) and ``base``
    matter only to the decorrelated mode; ``"none"`` draws nothing and returns ``delay``.

    Raises:
        ValueError: for an unknown mode.
    """
    try:
        return _JITTERS[mode]
    except KeyError:
        raise ValueError(
            f"unknown jitter mode {mode!r}; expected one of {', '.join(map(repr, _JITTERS))}"
        ) from None


def apply_jitter(
    mode: JitterMode,
    delay: float,
    previous: float,
    base: float,
    rng: random.Random | None,
) -> float:
    """The wait for one retry in ``mode``, given its nominal ``delay``.

    ``previous`` (the wait before the previous retry) and ``base`` matter only for the
    decorrelated mode. ``"none"`` draws nothing and returns ``delay``.
    """
    return jitter_for(mode)(delay, previous, base, rng)


def jitter_bounds(mode: JitterMode, delay: float, base: float) -> tuple[float, float]:
    """The range ``mode`` draws the wait of a retry with nominal ``delay`` from."""
    if mode == "full":
        return 0.0, delay
    if mode == "equal":
        return delay / 2, delay
    if mode == "decorrelated":
        return min(base, delay), delay
    return delay, delay
