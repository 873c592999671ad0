"""The old path of ``RetryStats``, whose home is now :mod:`tenacity_budget.instrumentation`.

This path keeps working: it re-exports ``RetryStats``, ``RetryStatsSnapshot`` and
``SLEEP_BUCKETS``. See docs/observability.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .instrumentation._stats import RetryStats as RetryStats
from .instrumentation._stats import RetryStatsSnapshot as RetryStatsSnapshot

if TYPE_CHECKING:
    from .instrumentation._metrics import SLEEP_BUCKETS as SLEEP_BUCKETS


def __getattr__(name: str) -> Any:
    if name != "SLEEP_BUCKETS":  # the metrics table is imported only when asked for
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .instrumentation._metrics import SLEEP_BUCKETS

    return SLEEP_BUCKETS
