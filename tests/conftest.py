"""Shared fixtures (plain helpers live in ``tests/_helpers.py``), and the package's plugin.

The ``virtual_clock`` fixture comes from ``tenacity_budget.pytest_plugin``. An installed
package registers that module through its ``pytest11`` entry point; a plain checkout (or a
run with ``-p no:tenacity_budget``, or with ``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` set) has not
registered it, so this conftest names it. It must not name it twice: pytest registers an
entry-point plugin under the entry point's name (``tenacity_budget``) and a ``pytest_plugins``
one under its module name, and one module under two names is an error ("Plugin already
registered under a different name").

The guard: pytest loads entry-point plugins (and ``-p`` ones) before it imports any
conftest, and loading a plugin imports its module; nothing else imports that module before
this point. So the module is already imported here exactly when it is registered.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from freezegun import freeze_time
from freezegun.api import FrozenDateTimeFactory

if TYPE_CHECKING:
    from tests._helpers import Clock

# Decided before anything here imports the package (the fixtures import it lazily).
PLUGIN = "tenacity_budget.pytest_plugin"
pytest_plugins = [] if PLUGIN in sys.modules else [PLUGIN]


@pytest.fixture
def frozen() -> Iterator[FrozenDateTimeFactory]:
    """Wall-clock and monotonic time frozen at 2024-03-01 12:00 UTC; move it with ``tick``."""
    with freeze_time("2024-03-01 12:00:00", tick=False) as clock:
        assert isinstance(clock, FrozenDateTimeFactory)
        yield clock


@pytest.fixture
def clock(frozen: FrozenDateTimeFactory) -> Clock:
    """The frozen clock (at :data:`tests._helpers.START`) that records the sleeps it is given."""
    from tests._helpers import Clock

    return Clock(frozen)


@pytest.fixture
def module_random() -> Iterator[None]:
    """Restore the ``random`` module's generator after a test that seeds it."""
    state = random.getstate()
    yield
    random.setstate(state)
