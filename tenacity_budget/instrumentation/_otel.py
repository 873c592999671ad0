"""OpenTelemetry metrics for budgeted retries (extra ``tenacity-budget[otel]``).

:class:`OpenTelemetryObserver` is a :class:`~tenacity_budget.RetryObserver` and a
:class:`~tenacity_budget.instrumentation.BudgetObserver` recording on an OpenTelemetry
``Meter`` (by default ``metrics.get_meter("tenacity_budget")``, the global provider's).
Only ``opentelemetry-api`` (1.30 or later) is needed; exporting is the application's SDK
set-up. The instruments are listed in docs/observability.md, "OpenTelemetry".
"""

from __future__ import annotations

from collections.abc import Sequence

from ._extras import missing

try:
    from opentelemetry import metrics
except ImportError as exc:
    raise missing(
        "tenacity_budget.instrumentation.OpenTelemetryObserver", "opentelemetry-api", "otel"
    ) from exc

from ..exhaustion import ExhaustionReport
from ._stats import SLEEP_BUCKETS

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

FUNCTION_ATTRIBUTE = "function"
"""The attribute carrying the decorated function's name on every data point."""

BUDGET_ATTRIBUTE = "budget"
"""The attribute carrying the retry budget's name on the retry-budget instruments."""

REASON_ATTRIBUTE = "reason"
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

    Instruments are thread-safe; share one observer between decorated functions.
    """

    def __init__(
        self,
        meter: metrics.Meter | None = None,
        *,
        prefix: str = METER_NAME,
        sleep_boundaries: Sequence[float] | None = DEFAULT_SLEEP_BOUNDARIES,
    ) -> None:
        if meter is None:
            meter = metrics.get_meter(METER_NAME)
        self.meter = meter
        self.prefix = prefix
        self.calls = meter.create_counter(
            f"{prefix}.calls", unit="{call}", description="Calls of retried functions begun."
        )
        self.retries = meter.create_counter(
            f"{prefix}.retries",
            unit="{retry}",
            description="Retries made (sleeps taken before a new attempt).",
        )
        self.first_try_successes = meter.create_counter(
            f"{prefix}.first_try_successes",
            unit="{call}",
            description="Calls that returned on their first attempt.",
        )
        self.successes_after_retry = meter.create_counter(
            f"{prefix}.successes_after_retry",
            unit="{call}",
            description="Calls that returned after at least one retry.",
        )
        self.exhausted = meter.create_counter(
            f"{prefix}.exhausted",
            unit="{call}",
            description="Calls that gave up, by the reason the run stopped.",
        )
        self.sleep = self._histogram(
            meter, f"{prefix}.sleep", "Seconds slept before each retry.", sleep_boundaries
        )
        self.budget_grants = meter.create_counter(
            f"{prefix}.retry_budget.grants",
            unit="{retry}",
            description="Retries a retry budget granted.",
        )
        self.budget_refusals = meter.create_counter(
            f"{prefix}.retry_budget.refusals",
            unit="{retry}",
            description="Retries a retry budget refused (the run ended at once).",
        )
        self.budget_fallbacks = meter.create_counter(
            f"{prefix}.retry_budget.fallbacks",
            unit="{decision}",
            description="Retry-budget decisions made without the shared store (Redis).",
        )
        self.budget_balance = meter.create_gauge(
            f"{prefix}.retry_budget.balance",
            unit="{retry}",
            description="Retries a retry budget would still grant, as of its latest decision.",
        )

    @staticmethod
    def _histogram(
        meter: metrics.Meter, name: str, description: str, boundaries: Sequence[float] | None
    ) -> metrics.Histogram:
        if boundaries is None:
            return meter.create_histogram(name, unit="s", description=description)
        return meter.create_histogram(
            name,
            unit="s",
            description=description,
            explicit_bucket_boundaries_advisory=list(boundaries),
        )

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
