"""Instrumentation: the observer protocols, the in-process counters and the metrics exporters.

``RetryObserver`` is what ``policy.retry(stats=...)`` calls, ``BudgetObserver`` what a
retry budget's ``observers=`` calls; ``RetryStats`` counts in process, and
``PrometheusObserver`` / ``OpenTelemetryObserver`` (imported on first use, each with its
extra) export metrics. See docs/observability.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._protocols import BudgetObserver as BudgetObserver
from ._protocols import RetryObserver
from ._stats import RetryStats as RetryStats
from ._stats import RetryStatsSnapshot as RetryStatsSnapshot

if TYPE_CHECKING:
    from ._otel import OpenTelemetryObserver as OpenTelemetryObserver
    from ._prometheus import PrometheusObserver as PrometheusObserver

__all__ = ["RetryObserver"]  # RetryStats is the package's (tenacity_budget)

_LAZY = {  # each needs its extra, so it is imported only when asked for
    "OpenTelemetryObserver": "tenacity_budget.instrumentation._otel",
    "PrometheusObserver": "tenacity_budget.instrumentation._prometheus",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
