"""Shared fixtures: a frozen clock for tests that drive time by hand."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory


@pytest.fixture
def frozen() -> Iterator[FrozenDateTimeFactory]:
    """Wall-clock and monotonic time frozen at 2024-03-01 12:00 UTC; move it with ``tick``."""
    with freeze_time("2024-03-01 12:00:00", tick=False) as clock:
        assert isinstance(clock, FrozenDateTimeFactory)
        yield clock
