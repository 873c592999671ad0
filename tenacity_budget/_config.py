"""Process-wide configuration: the switch of the zero-wait testing mode, and nothing else.

Private on purpose (stamina's ``_config.py`` is the model): its public face is
:func:`tenacity_budget.testing.set_testing` / :func:`~tenacity_budget.testing.testing_mode`.
The names that lived here before (``earliest``, ``check_aware``, ``utc_instant``, the seed
checks) are re-exported from their homes for existing imports.
"""

from __future__ import annotations

from ._validate import attempts as _attempts
from ._validate import one_generator as one_generator
from ._validate import seed as _seed
from .context import check_aware as check_aware
from .context import earliest as earliest
from .context import utc_instant as utc_instant

check_seed = _seed  # the old name of the seed converter


class _Testing:
    """The testing mode's bound (``attempts``; ``None``: off), read on the per-retry path.

    Process-wide on purpose: a test suite switches it once for every thread and task.
    """

    __slots__ = ("attempts",)

    def __init__(self) -> None:
        self.attempts: int | None = None


TESTING = _Testing()


def set_testing_attempts(attempts: int | None) -> None:
    """Switch every budgeted strategy to zero-wait mode with ``attempts`` calls (``None``: off).

    The public switch is :func:`tenacity_budget.testing.set_testing`, which documents it.
    """
    TESTING.attempts = None if attempts is None else _attempts(attempts, "testing mode attempts")


def testing_attempts() -> int | None:
    """The attempt bound of the testing mode, or ``None`` when it is off."""
    return TESTING.attempts


testing_attempts.__test__ = False  # type: ignore[attr-defined]  # not a pytest test
