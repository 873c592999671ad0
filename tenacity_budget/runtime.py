"""The old home of ``policy.retry()`` and the ambient deadline, kept for existing imports.

``BudgetedRetry`` and the hard deadline now live in :mod:`tenacity_budget.retrying`, the
ambient deadline (``remaining``, ``deadline_scope``, ``Horizon``, ...) in
:mod:`tenacity_budget.context`; every name importable from here before still is.
"""

from __future__ import annotations

from .context import _HORIZON as _HORIZON
from .context import Horizon as Horizon
from .context import ambient_deadline as ambient_deadline
from .context import current_horizon as current_horizon
from .context import deadline_scope as deadline_scope
from .context import remaining as remaining
from .context import remaining_until as remaining_until
from .retrying import AttemptTimedOut as AttemptTimedOut
from .retrying import BudgetedRetry as BudgetedRetry
from .retrying import RetryObserver as RetryObserver

__all__: list[str] = []  # old import paths: the names live in context and retrying
