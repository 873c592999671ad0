"""pytest plugin of tenacity-budget: the ``virtual_clock`` fixture.

Registered through the ``pytest11`` entry point, so installing the package makes the fixture
available to every test suite::

    def test_budget(virtual_clock):
        ...  # code under test retries; no real waiting
        assert virtual_clock.sleeps == [1.0, 2.0]

The module imports nothing beyond pytest until the fixture is used, so loading the plugin
costs nothing in suites that do not use it, and freezegun (the ``testing`` extra) is only
needed by tests that request the fixture.
"""

from __future__ import annotations

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
