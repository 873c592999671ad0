"""The old path of ``PrometheusObserver``, whose home is now :mod:`tenacity_budget.instrumentation`.

This path keeps working (extra ``tenacity-budget[prometheus]``): it re-exports
``PrometheusObserver`` and ``DEFAULT_SLEEP_BUCKETS``. See docs/observability.md.
"""

from .instrumentation._extras import require

require(__name__, "prometheus_client", "prometheus-client", "prometheus")

from .instrumentation._prometheus import DEFAULT_SLEEP_BUCKETS as DEFAULT_SLEEP_BUCKETS  # noqa: E402
from .instrumentation._prometheus import PrometheusObserver as PrometheusObserver  # noqa: E402
