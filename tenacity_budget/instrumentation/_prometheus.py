"""Prometheus metrics for budgeted retries (extra ``tenacity-budget[prometheus]``).

:class:`PrometheusObserver` is a :class:`~tenacity_budget.RetryObserver` (pass it to
``policy.retry(stats=...)``) and a :class:`~tenacity_budget.instrumentation.BudgetObserver`
(pass it to a retry budget's ``observers=``) counting on a ``prometheus_client`` registry.
The metrics it registers are listed in docs/observability.md, "Prometheus".
"""

from __future__ import annotations

from collections.abc import Sequence

from ._extras import missing

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
except ImportError as exc:
    raise missing(
        "tenacity_budget.instrumentation.PrometheusObserver", "prometheus-client", "prometheus"
    ) from exc

from ..exhaustion import ExhaustionReport
from ._stats import SLEEP_BUCKETS

__all__ = ["DEFAULT_SLEEP_BUCKETS", "PrometheusObserver"]

DEFAULT_SLEEP_BUCKETS: tuple[float, ...] = (*SLEEP_BUCKETS, float("inf"))
"""Histogram buckets (seconds) for retry sleeps: from jittered sub-second waits to the caps."""


class PrometheusObserver:
    """A :class:`~tenacity_budget.RetryObserver` recording retries as Prometheus metrics.

    Also a :class:`~tenacity_budget.instrumentation.BudgetObserver` for retry budgets.
    Creating one registers its ten metrics on ``registry``; a second observer with the same
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
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        namespace: str = "tenacity_budget",
        buckets: Sequence[float] = DEFAULT_SLEEP_BUCKETS,
    ) -> None:
        target = REGISTRY if registry is None else registry
        self.registry = target
        self.namespace = namespace
        labels = ("function",)
        self.calls = Counter(
            "calls",
            "Calls of retried functions begun.",
            labels,
            namespace=namespace,
            registry=target,
        )
        self.retries = Counter(
            "retries",
            "Retries made (sleeps taken before a new attempt).",
            labels,
            namespace=namespace,
            registry=target,
        )
        self.first_try_successes = Counter(
            "first_try_successes",
            "Calls that returned on their first attempt.",
            labels,
            namespace=namespace,
            registry=target,
        )
        self.successes_after_retry = Counter(
            "successes_after_retry",
            "Calls that returned after at least one retry.",
            labels,
            namespace=namespace,
            registry=target,
        )
        self.exhausted = Counter(
            "exhausted",
            "Calls that gave up, by the reason the run stopped.",
            ("function", "reason"),
            namespace=namespace,
            registry=target,
        )
        self.sleep = Histogram(
            "sleep_seconds",
            "Seconds slept before each retry.",
            labels,
            namespace=namespace,
            registry=target,
            buckets=tuple(buckets),
        )
        budget = ("budget",)
        self.budget_grants = Counter(
            "retry_budget_grants",
            "Retries a retry budget granted.",
            budget,
            namespace=namespace,
            registry=target,
        )
        self.budget_refusals = Counter(
            "retry_budget_refusals",
            "Retries a retry budget refused (the run ended at once).",
            budget,
            namespace=namespace,
            registry=target,
        )
        self.budget_fallbacks = Counter(
            "retry_budget_fallbacks",
            "Retry-budget decisions made without the shared store (Redis unreachable).",
            budget,
            namespace=namespace,
            registry=target,
        )
        self.budget_balance = Gauge(
            "retry_budget_balance",
            "Retries a retry budget would still grant, as of its latest decision.",
            budget,
            namespace=namespace,
            registry=target,
        )

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
