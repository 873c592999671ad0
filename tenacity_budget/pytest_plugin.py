"""pytest plugin of tenacity-budget: the ``virtual_clock`` and ``virtual_event_loop`` fixtures.

Registered through the ``pytest11`` entry point, so installing the package makes the fixtures
available to every test suite::

    def test_budget(virtual_clock):
        ...  # code under test retries; no real waiting
        assert virtual_clock.sleeps == [1.0, 2.0]

The module imports nothing beyond pytest until a fixture is used, so loading the plugin
costs nothing in suites that do not use it, and freezegun (the ``testing`` extra) is only
needed by tests that request one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .testing import VirtualClock


@pytest.fixture
def virtual_clock() -> Iterator[VirtualClock]:
    """A running :class:`~tenacity_budget.testing.VirtualClock`, stopped after the test.

    Time is frozen for the whole test (fixtures set up after it included) and every
    ``time.sleep`` / ``asyncio.sleep`` moves it forward at once and is recorded in
    ``virtual_clock.sleeps``; ``virtual_clock.advance(s)`` simulates work taking ``s``
    seconds. See :func:`tenacity_budget.testing.virtual_clock`.
    """
    from .testing import virtual_clock as start_virtual_clock

    with start_virtual_clock() as clock:
        yield clock


@pytest.fixture
def virtual_event_loop(virtual_clock: VirtualClock) -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop on the ``virtual_clock`` fixture's clock, closed after the test.

    Its tasks' sleeps overlap in virtual time: when nothing is ready, the loop moves the
    clock to its next timer at once. Run coroutines on it from a plain test with
    ``virtual_event_loop.run_until_complete(main())``. See
    :meth:`tenacity_budget.testing.VirtualClock.event_loop`.
    """
    with virtual_clock.event_loop() as loop:
        yield loop
