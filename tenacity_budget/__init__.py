"""tenacity-budget: retries that respect a deadline.

A :class:`BackoffPolicy` derives how many retries a time budget affords and hands out
tenacity strategies that never sleep past it::

    policy = BackoffPolicy(base=1, factor=2, cap=60, max_elapsed=300, jitter="full")

    @policy.retry(retry=retry_if_exception_type(IOError))
    def fetch(): ...

docs/concepts.md maps the modules, one concept each, and where each rule lives.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .context import deadline_scope, remaining
from .exhaustion import BudgetExhausted, ExhaustionReport, StopReason
from .logs import log_retry
from .retry_budget import RetryBudget
from .retrying import BudgetedRetry as BudgetedRetry  # importable, not in __all__
from .retrying import RetryObserver as RetryObserver
from .stats import RetryStats
from .stats import RetryStatsSnapshot as RetryStatsSnapshot
from .strategies import BudgetState, budget_state, stop_budget, wait_budget
from .throttle import AdaptiveThrottle

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from .jitter import JitterMode as JitterMode
    from .jitter import apply_jitter as apply_jitter
    from .jitter import decorrelated_jitter as decorrelated_jitter
    from .jitter import equal_jitter as equal_jitter
    from .jitter import full_jitter as full_jitter
    from .policy import BackoffPolicy
    from .solver import backoff_delays as backoff_delays
    from .solver import capped_index as capped_index
    from .solver import compute_max_attempts as compute_max_attempts
    from .solver import nominal_delay as nominal_delay
    from .solver import total_delay as total_delay

__version__ = "0.1.0"

__all__ = [
    "AdaptiveThrottle",
    "BackoffPolicy",
    "BudgetExhausted",
    "BudgetState",
    "ExhaustionReport",
    "RetryBudget",
    "RetryStats",
    "StopReason",
    "__version__",
    "budget_state",
    "deadline_scope",
    "log_retry",
    "remaining",
    "stop_budget",
    "wait_budget",
]

# Imported on first use, not with the package: the model needs pydantic, whose import is
# most of this package's start-up cost, and code that only catches BudgetExhausted or reads
# remaining() should not pay it. The rest stays importable here for existing code.
_LAZY = {
    "BackoffPolicy": "policy",
    "JitterMode": "jitter",
    "apply_jitter": "jitter",
    "decorrelated_jitter": "jitter",
    "equal_jitter": "jitter",
    "full_jitter": "jitter",
    "backoff_delays": "solver",
    "capped_index": "solver",
    "compute_max_attempts": "solver",
    "nominal_delay": "solver",
    "total_delay": "solver",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
