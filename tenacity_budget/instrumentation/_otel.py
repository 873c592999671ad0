"""OpenTelemetry metrics for budgeted retries (extra ``tenacity-budget[otel]``).

:class:`OpenTelemetryObserver` is a :class:`~tenacity_budget.RetryObserver` and a
:class:`~tenacity_budget.instrumentation.BudgetObserver` recording on an OpenTelemetry
``Meter`` (by default ``metrics.get_meter("tenacity_budget")``, the global provider's).
Only ``opentelemetry-api`` (1.30 or later) is needed; exporting is the application's SDK
set-up. The instruments are listed in docs/observability.md, "OpenTelemetry".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._extras import missing

try:
    from opentelemetry import metrics
except ImportError as exc:
    raise missing(
        "tenacity_budget.instrumentation.OpenTelemetryObserver", "opentelemetry-api", "otel"
    ) from exc

from ..exhaustion import ExhaustionReport
from ._metrics import (
    APP,
    BUDGET,
    FUNCTION,
    HEDGE,
    METRICS,
    REASON,
    SLEEP_BUCKETS,
    THROTTLE,
    Metric,
)

__all__ = [
    "BUDGET_ATTRIBUTE",
    "DEFAULT_SLEEP_BOUNDARIES",
    "FUNCTION_ATTRIBUTE",
    "METER_NAME",
    "REASON_ATTRIBUTE",
    "OpenTelemetryObserver",
]

METER_NAME = "tenacity_budget"
"""The instrumentation scope of the default meter."""

FUNCTION_ATTRIBUTE = FUNCTION
"""The attribute carrying the decorated function's name on every data point."""

BUDGET_ATTRIBUTE = BUDGET
"""The attribute carrying the retry budget's name on the retry-budget instruments."""

REASON_ATTRIBUTE = REASON
"""The attribute carrying the stop reason (a ``StopReason`` value) on ``exhausted``."""

DEFAULT_SLEEP_BOUNDARIES: tuple[float, ...] = SLEEP_BUCKETS
"""Advised bucket boundaries (seconds) for the sleep histogram."""


class OpenTelemetryObserver:
    """A :class:`~tenacity_budget.RetryObserver` recording retries as OpenTelemetry metrics.

    Also a :class:`~tenacity_budget.instrumentation.BudgetObserver` for retry budgets.

    Args:
        meter: the ``Meter`` to create the instruments on; defaults to
            ``metrics.get_meter("tenacity_budget")`` from the global provider (instruments
            made before the application installs its provider follow it once installed).
        prefix: the instrument-name prefix (``"<prefix>.calls"``, ...).
        sleep_boundaries: bucket boundaries advised for the sleep histogram (the SDK's
            defaults are meant for milliseconds); ``None`` leaves the SDK's choice. Views
            configured in the SDK take precedence.

    Instruments are thread-safe; share one observer between decorated functions. Each is a
    row of the metrics table, held in the attribute of the same name as the Prometheus
    observer's.
    """

    calls: metrics.Counter
    retries: metrics.Counter
    first_try_successes: metrics.Counter
    successes_after_retry: metrics.Counter
    exhausted: metrics.Counter
    sleep: metrics.Histogram
    budget_grants: metrics.Counter
    budget_refusals: metrics.Counter
    budget_fallbacks: metrics.Counter
    budget_balance: metrics._Gauge
    shed: metrics.Counter
    throttle_attempts: metrics.Counter
    throttle_rejections: metrics.Counter
    throttle_probability: metrics._Gauge
    hedges: metrics.Counter
    hedges_won: metrics.Counter

    def __init__(
        self,
        meter: metrics.Meter | None = None,
        *,
        prefix: str = METER_NAME,
        sleep_boundaries: Sequence[float] | None = DEFAULT_SLEEP_BOUNDARIES,
    ) -> None:
        self.meter = metrics.get_meter(METER_NAME) if meter is None else meter
        self.prefix = prefix
        self._boundaries = None if sleep_boundaries is None else list(sleep_boundaries)
        for metric in METRICS:
            setattr(self, metric.attr, self._create(metric))

    def _create(self, metric: Metric) -> metrics.Counter | metrics.Histogram | metrics._Gauge:
        """The instrument of one row of the table, created on the meter."""
        name = f"{self.prefix}.{metric.name}"
        options: dict[str, Any] = {"unit": metric.unit, "description": metric.otel_description}
        if metric.kind == "counter":
            return self.meter.create_counter(name, **options)
        if metric.kind == "gauge":
            return self.meter.create_gauge(name, **options)
        if self._boundaries is not None:
            options["explicit_bucket_boundaries_advisory"] = self._boundaries
        return self.meter.create_histogram(name, **options)

    def __repr__(self) -> str:
        return f"OpenTelemetryObserver(prefix={self.prefix!r})"

    # RetryObserver ----------------------------------------------------------------------

    def on_call(self, name: str) -> None:
        """Count a call begun."""
        self.calls.add(1, {FUNCTION_ATTRIBUTE: name})

    def on_retry(self, name: str, attempt: int, sleep: float) -> None:
        """Count a retry and record its sleep."""
        attributes = {FUNCTION_ATTRIBUTE: name}
        self.retries.add(1, attributes)
        self.sleep.record(sleep, attributes)

    def on_success(self, name: str, attempts: int) -> None:
        """Count a success, first-try or after retries."""
        counter = self.first_try_successes if attempts <= 1 else self.successes_after_retry
        counter.add(1, {FUNCTION_ATTRIBUTE: name})

    def on_exhausted(self, name: str, report: ExhaustionReport) -> None:
        """Count a run that gave up, with its stop reason."""
        self.exhausted.add(1, {FUNCTION_ATTRIBUTE: name, REASON_ATTRIBUTE: report.reason.value})

    # BudgetObserver ---------------------------------------------------------------------

    def on_budget_decision(self, name: str, granted: bool, balance: int | None) -> None:
        """Count a grant or a refusal of budget ``name``; record its balance when known."""
        attributes = {BUDGET_ATTRIBUTE: name}
        (self.budget_grants if granted else self.budget_refusals).add(1, attributes)
        if balance is not None:
            self.budget_balance.set(balance, attributes)

    def on_budget_fallback(self, name: str, error: BaseException) -> None:
        """Count a decision of budget ``name`` made on its fallback."""
        self.budget_fallbacks.add(1, {BUDGET_ATTRIBUTE: name})

    # DeadlineMiddleware (an optional hook) ------------------------------------------------

    def on_shed(self, name: str, left: float) -> None:
        """Count a request ``DeadlineMiddleware`` shed (answered 504 without the app)."""
        self.shed.add(1, {APP: name})

    # AdaptiveThrottle and hedging (optional hooks) -----------------------------------------

    def on_throttle(self, name: str, admitted: bool, probability: float) -> None:
        """Count an attempt throttle ``name`` was asked to admit (a rejection too)."""
        attributes = {THROTTLE: name}
        self.throttle_attempts.add(1, attributes)
        if not admitted:
            self.throttle_rejections.add(1, attributes)
        self.throttle_probability.set(probability, attributes)

    def on_hedge(self, name: str, won: bool) -> None:
        """Count a hedged request of hedge ``name`` sent (and won, when it answered first)."""
        attributes = {HEDGE: name}
        self.hedges.add(1, attributes)
        if won:
            self.hedges_won.add(1, attributes)
