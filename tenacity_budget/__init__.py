"""tenacity-budget: retries that respect a deadline.

A :class:`BackoffPolicy` derives how many retries a time budget affords and hands out
tenacity strategies that never sleep past it::

    policy = BackoffPolicy(base=1, factor=2, cap=60, max_elapsed=300, jitter="full")

    @retry(wait=policy.wait(), stop=policy.stop(), retry=retry_if_exception_type(IOError))
    def fetch(): ...

Where a delay is computed: :mod:`~tenacity_budget.solver` (nominal delays and the budget
solver), :mod:`~tenacity_budget.jitter` (randomness), :mod:`~tenacity_budget.policy` (the
validated model), :mod:`~tenacity_budget.strategies` (the tenacity adapters).
"""

from .exhaustion import BudgetExhausted, ExhaustionReport, StopReason
from .jitter import JitterMode, apply_jitter, decorrelated_jitter, equal_jitter, full_jitter
from .logs import log_retry
from .policy import BackoffPolicy
from .runtime import BudgetedRetry, RetryObserver, remaining
from .solver import backoff_delays, capped_index, compute_max_attempts, nominal_delay, total_delay
from .stats import RetryStats, RetryStatsSnapshot
from .strategies import BudgetState, budget_state, stop_budget, wait_budget

__version__ = "0.1.0"

__all__ = [
    "BackoffPolicy",
    "BudgetExhausted",
    "BudgetState",
    "BudgetedRetry",
    "ExhaustionReport",
    "JitterMode",
    "RetryObserver",
    "RetryStats",
    "RetryStatsSnapshot",
    "StopReason",
    "__version__",
    "apply_jitter",
    "backoff_delays",
    "budget_state",
    "capped_index",
    "compute_max_attempts",
    "decorrelated_jitter",
    "equal_jitter",
    "full_jitter",
    "log_retry",
    "nominal_delay",
    "remaining",
    "stop_budget",
    "total_delay",
    "wait_budget",
]
