"""The old path of ``OpenTelemetryObserver``: its home is :mod:`tenacity_budget.instrumentation`.

This path keeps working (extra ``tenacity-budget[otel]``): it re-exports
``OpenTelemetryObserver`` and its constants. See docs/observability.md.
"""

from .instrumentation._extras import require

require(__name__, "opentelemetry", "opentelemetry-api", "otel")

from .instrumentation._otel import BUDGET_ATTRIBUTE as BUDGET_ATTRIBUTE  # noqa: E402
from .instrumentation._otel import DEFAULT_SLEEP_BOUNDARIES as DEFAULT_SLEEP_BOUNDARIES  # noqa: E402
from .instrumentation._otel import FUNCTION_ATTRIBUTE as FUNCTION_ATTRIBUTE  # noqa: E402
from .instrumentation._otel import METER_NAME as METER_NAME  # noqa: E402
from .instrumentation._otel import REASON_ATTRIBUTE as REASON_ATTRIBUTE  # noqa: E402
from .instrumentation._otel import OpenTelemetryObserver as OpenTelemetryObserver  # noqa: E402
