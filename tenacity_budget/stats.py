"""The old path of ``RetryStats``, whose home is now :mod:`tenacity_budget.instrumentation`.

This path keeps working: it re-exports ``RetryStats``, ``RetryStatsSnapshot`` and
``SLEEP_BUCKETS``. See docs/observability.md.
"""

from .instrumentation._metrics import SLEEP_BUCKETS as SLEEP_BUCKETS
from .instrumentation._stats import RetryStats as RetryStats
from .instrumentation._stats import RetryStatsSnapshot as RetryStatsSnapshot
