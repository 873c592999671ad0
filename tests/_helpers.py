"""Plain helpers shared by the test modules (fixtures live in ``tests/conftest.py``).

Nothing here sleeps for real: every sleep handed to tenacity records its duration and moves
a frozen clock over it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from freezegun.api import FrozenDateTimeFactory

# -- sleeping on a frozen clock -----------------------------------------------------------


def sleeper(clock: FrozenDateTimeFactory, sleeps: list[float]) -> Callable[[float], None]:
    """A tenacity ``sleep=`` that records each sleep in ``sleeps`` and ticks ``clock`` by it."""

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.tick(seconds)

    return sleep


def async_sleeper(
    clock: FrozenDateTimeFactory, sleeps: list[float]
) -> Callable[[float], Awaitable[None]]:
    """The async twin of :func:`sleeper`."""

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.tick(seconds)

    return sleep
