"""Prometheus metrics for budgeted retries (extra ``tenacity-budget[prometheus]``).

:class:`PrometheusObserver` is a :class:`~tenacity_budget.RetryObserver` (pass it to
``policy.retry(stats=...)``) and a :class:`~tenacity_budget.instrumentation.BudgetObserver`
(pass it to a retry budget's ``observers=``) counting on a ``prometheus_client`` registry.
The metrics it registers are listed in docs/observability.md, "Prometheus".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._extras import missing

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
except ImportError as exc:
    raise missing(
        "tenacity_budget.instrumentation.PrometheusObserver", "prometheus-client", "prometheus"
    ) from exc

from ..exhaustion import ExhaustionReport
from ._metrics import METRICS, SLEEP_BUCKETS, Metric

__all__ = ["DEFAULT_SLEEP_BUCKETS", "PrometheusObserver"]

DEFAULT_SLEEP_BUCKETS: tuple[float, ...] = (*SLEEP_BUCKETS, float("inf"))
"""Histogram buckets (seconds) for retry sleeps: from jittered sub-second waits to the caps."""

_KINDS: dict[str, type[Counter] | type[Histogram] | type[Gauge]] = {
    "counter": Counter,
    "histogram": Histogram,
    "gauge": Gauge,
}


class PrometheusObserver:
    """A :class:`~tenacity_budget.RetryObserver` recording retries as Prometheus metrics.

    Also a :class:`~tenacity_budget.instrumentation.BudgetObserver` for retry budgets.
    Creating one registers its metrics on ``registry``; a second observer with the same
    namespace on the same registry is refused by ``prometheus_client`` (``ValueError:
    Duplicated timeseries``), so create one per process (or per registry) and share it
    between decorated functions: the ``function`` label tells them apart. Thread-safe.

    Args:
        registry: where to register; defaults to ``prometheus_client.REGISTRY``.
        namespace: the metric-name prefix (``""`` for none).
        buckets: the sleep histogram's upper bounds in seconds.

    Attributes:
        calls, retries, first_try_successes, successes_after_retry, exhausted: the
            ``Counter`` metrics; ``sleep``: the ``Histogram`` of sleeps.
        budget_grants, budget_refusals, budget_fallbacks: the retry budgets' ``Counter``
            metrics; ``budget_balance``: their ``Gauge``.
        throttle_attempts, throttle_rejections, throttle_probability: the adaptive
            throttles' (``on_throttle``); hedges, hedges_won: the hedges' (``on_hedge``).
            Each is a row of the metrics table.
    """

    calls: Counter
    retries: Counter
    first_try_successes: Counter
    successes_after_retry: Counter
    exhausted: Counter
    sleep: Histogram
    budget_grants: Counter
    budget_refusals: Counter
    budget_fallbacks: Counter
    budget_balance: Gauge
    shed: Counter
    throttle_attempts: Counter
    throttle_rejections: Counter
    throttle_probability: Gauge
    hedges: Counter
    hedges_won: Counter

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        namespace: str = "tenacity_budget",
        buckets: Sequence[float] = DEFAULT_SLEEP_BUCKETS,
    ) -> None:
        self.registry = REGISTRY if registry is None else registry
        self.namespace = namespace
        self._buckets = tuple(buckets)
        for metric in METRICS:
            setattr(self, metric.attr, self._create(metric))

    def _create(self, metric: Metric) -> Counter | Histogram | Gauge:
        """The ``prometheus_client`` metric of one row of the table, registered."""
        common: dict[str, Any] = {"namespace": self.namespace, "registry": self.registry}
        if metric.kind == "histogram":
            common["buckets"] = self._buckets
        kind = _KINDS[metric.kind]
        return kind(metric.prometheus_name, metric.help, metric.labels, **common)

    def __repr__(self) -> str:
        return f"PrometheusObserver(namespace={self.namespace!r})"

    # RetryObserver ----------------------------------------------------------------------

    def on_call(self, name: str) -> None:
        """Count a call begun."""
        self.calls.labels(name).inc()

    def on_retry(self, name: str, attempt: int, sleep: float) -> None:
        """Count a retry and record its sleep."""
        self.retries.labels(name).inc()
        self.sleep.labels(name).observe(sleep)

    def on_success(self, name: str, attempts: int) -> None:
        """Count a success, first-try or after retries."""
        if attempts <= 1:
            self.first_try_successes.labels(name).inc()
        else:
            self.successes_after_retry.labels(name).inc()

    def on_exhausted(self, name: str, report: ExhaustionReport) -> None:
        """Count a run that gave up, labelled with its stop reason."""
        self.exhausted.labels(name, report.reason.value).inc()

    # BudgetObserver ---------------------------------------------------------------------

    def on_budget_decision(self, name: str, granted: bool, balance: int | None) -> None:
        """Count a grant or a refusal of budget ``name``; set its balance when known."""
        (self.budget_grants if granted else self.budget_refusals).labels(name).inc()
        if balance is not None:
            self.budget_balance.labels(name).set(balance)

    def on_budget_fallback(self, name: str, error: BaseException) -> None:
        """Count a decision of budget ``name`` made on its fallback."""
        self.budget_fallbacks.labels(name).inc()

    # DeadlineMiddleware (an optional hook) ------------------------------------------------

    def on_shed(self, name: str, left: float) -> None:
        """Count a request ``DeadlineMiddleware`` shed (answered 504 without the app)."""
        self.shed.labels(name).inc()

    # AdaptiveThrottle and hedging (optional hooks) -----------------------------------------

    def on_throttle(self, name: str, admitted: bool, probability: float) -> None:
        """Count an attempt throttle ``name`` was asked to admit (a rejection too)."""
        self.throttle_attempts.labels(name).inc()
        if not admitted:
            self.throttle_rejections.labels(name).inc()
        self.throttle_probability.labels(name).set(probability)

    def on_hedge(self, name: str, won: bool) -> None:
        """Count a hedged request of hedge ``name`` sent (and won, when it answered first)."""
        self.hedges.labels(name).inc()
        if won:
            self.hedges_won.labels(name).inc()
