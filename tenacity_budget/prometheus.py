"""Prometheus metrics for budgeted retries (extra ``tenacity-budget[prometheus]``).

:class:`PrometheusObserver` is a :class:`~tenacity_budget.RetryObserver`: pass it to
``policy.retry(stats=...)`` and it counts calls, retries and outcomes on a
``prometheus_client`` registry::

    from tenacity_budget.prometheus import PrometheusObserver

    METRICS = PrometheusObserver()  # once per process: it registers its metrics

    @policy.retry(stats=METRICS)
    def fetch(): ...

Metrics, with the default namespace ``tenacity_budget`` (every one labelled ``function``):

==================================================== ==========================================
``tenacity_budget_calls_total``                      calls begun
``tenacity_budget_retries_total``                    retries made (sleeps taken)
``tenacity_budget_first_try_successes_total``        calls that returned on their first attempt
``tenacity_budget_successes_after_retry_total``      calls that returned after a retry
``tenacity_budget_exhausted_total`` (+ ``reason``)   calls that gave up, by
                                                     :class:`~tenacity_budget.StopReason` value
``tenacity_budget_sleep_seconds`` (histogram)        the sleeps taken before retries
==================================================== ==========================================

Importing this module needs ``prometheus-client``; ``import tenacity_budget`` does not.
"""

from __future__ import annotations

from collections.abc import Sequence

try:
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
except ImportError as exc:
    raise ImportError(
        "tenacity_budget.prometheus needs prometheus-client; install it with "
        "`pip install 'tenacity-budget[prometheus]'`"
    ) from exc

from .exhaustion import ExhaustionReport
from .stats import SLEEP_BUCKETS

__all__ = ["DEFAULT_SLEEP_BUCKETS", "PrometheusObserver"]

DEFAULT_SLEEP_BUCKETS: tuple[float, ...] = (*SLEEP_BUCKETS, float("inf"))
"""Histogram buckets (seconds) for retry sleeps: from jittered sub-second waits to the caps."""


class PrometheusObserver:
    """A :class:`~tenacity_budget.RetryObserver` recording retries as Prometheus metrics.

    Creating one registers its six metrics on ``registry``; a second observer with the same
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
