"""The old home of ``policy.retry()`` and the ambient deadline, kept for existing imports.

``BudgetedRetry`` and the hard deadline now live in :mod:`tenacity_budget.retrying`, the
ambient deadline (``remaining``, ``deadline_scope``, ``Horizon``, ...) in
:mod:`tenacity_budget.context`; every name importable from here before still is.
"""

from __future__ import annotations

from .context import _HORIZON as _HORIZON
from .context import Horizon as Horizon
from .context import ambient_deadline, deadline_scope, remaining, remaining_until
from .context import current_horizon as current_horizon
from .retrying import AttemptTimedOut as AttemptTimedOut
from .retrying import BudgetedRetry, RetryObserver

__all__ = [
    "BudgetedRetry",
    "RetryObserver",
    "ambient_deadline",
    "deadline_scope",
    "remaining",
    "remaining_until",
]
