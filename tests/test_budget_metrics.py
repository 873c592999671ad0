"""Retry-budget metrics of the Prometheus and OpenTelemetry observers, on the real libraries.

Prometheus values are read from a real ``CollectorRegistry``; OpenTelemetry values from the
SDK's ``InMemoryMetricReader`` behind a ``MeterProvider`` made here (never the global one).
The budgets are real: an in-process :class:`RetryBudget` on the virtual clock, and a
:class:`RedisRetryBudget` whose Redis is unreachable (nothing listens on its port), for
the fallbacks.
"""

from __future__ import annotations

from typing import Any

import pytest
import redis
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, NumberDataPoint
from prometheus_client import CollectorRegistry
from redis.backoff import NoBackoff
from redis.retry import Retry

from tenacity_budget import BackoffPolicy, BudgetExhausted, RetryBudget, StopReason
from tenacity_budget.otel import BUDGET_ATTRIBUTE, OpenTelemetryObserver
from tenacity_budget.prometheus import PrometheusObserver
from tenacity_budget.redis import RedisRetryBudget
from tenacity_budget.retry_budget import BudgetObserver
from tenacity_budget.testing import VirtualClock
from tests._redis import free_port, unique_name

POLICY = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=30, jitter="none")


class OTel:
    """An SDK meter provider of the test's own, read through an in-memory reader."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])
        self.observer = OpenTelemetryObserver(self.provider.get_meter("tests"))

    def points(self, name: str) -> dict[str, Any]:
        """The data points of instrument ``name``, by their ``budget`` attribute."""
        data = self.reader.get_metrics_data()
        out: dict[str, Any] = {}
        if data is None:
            return out
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            assert isinstance(point, NumberDataPoint)
                            assert point.attributes is not None
                            out[str(point.attributes[BUDGET_ATTRIBUTE])] = point.value
        return out


def prom(registry: CollectorRegistry, name: str, budget: str) -> float | None:
    return registry.get_sample_value(name, {"budget": budget})


def unreachable() -> redis.Redis:
    """A client of a port nothing listens on, making one attempt per command."""
    return redis.Redis(port=free_port(), socket_timeout=5, retry=Retry(NoBackoff(), 0))


def test_both_observers_are_budget_observers() -> None:
    assert isinstance(PrometheusObserver(CollectorRegistry()), BudgetObserver)
    assert isinstance(OTel().observer, BudgetObserver)


def test_grants_refusals_and_balance_by_budget_name(virtual_clock: VirtualClock) -> None:
    registry = CollectorRegistry()
    otel = OTel()
    observers: list[BudgetObserver] = [PrometheusObserver(registry), otel.observer]
    payments = RetryBudget(ratio=0.5, min_per_second=0, name="payments", observers=observers)
    search = RetryBudget(ratio=0, min_per_second=0.1, name="search", observers=observers)
    for _ in range(4):
        payments.deposit()
    assert [payments.try_withdraw() for _ in range(3)] == [True, True, False]
    assert [search.try_withdraw() for _ in range(2)] == [True, False]

    prefix = "tenacity_budget_retry_budget"
    assert prom(registry, f"{prefix}_grants_total", "payments") == 2
    assert prom(registry, f"{prefix}_refusals_total", "payments") == 1
    assert prom(registry, f"{prefix}_balance", "payments") == 0
    assert prom(registry, f"{prefix}_grants_total", "search") == 1
    assert prom(registry, f"{prefix}_refusals_total", "search") == 1
    assert prom(registry, f"{prefix}_fallbacks_total", "payments") is None

    assert otel.points("tenacity_budget.retry_budget.grants") == {"payments": 2, "search": 1}
    assert otel.points("tenacity_budget.retry_budget.refusals") == {"payments": 1, "search": 1}
    assert otel.points("tenacity_budget.retry_budget.balance") == {"payments": 0, "search": 0}
    assert otel.points("tenacity_budget.retry_budget.fallbacks") == {}


def test_the_balance_gauge_follows_the_latest_decision(virtual_clock: VirtualClock) -> None:
    registry = CollectorRegistry()
    otel = OTel()
    budget = RetryBudget(
        ratio=0,
        min_per_second=1,
        ttl=10,
        name="b",
        observers=[PrometheusObserver(registry), otel.observer],
    )
    budget.try_withdraw()
    assert prom(registry, "tenacity_budget_retry_budget_balance", "b") == 9
    assert otel.points("tenacity_budget.retry_budget.balance") == {"b": 9}
    virtual_clock.advance(10)
    budget.try_withdraw()
    assert prom(registry, "tenacity_budget_retry_budget_balance", "b") == 9
    for _ in range(9):
        budget.try_withdraw()
    assert prom(registry, "tenacity_budget_retry_budget_balance", "b") == 0
    assert otel.points("tenacity_budget.retry_budget.balance") == {"b": 0}


@pytest.mark.parametrize(("on_error", "balance"), [("local", 1.0), ("deny", None)])
def test_fallbacks_are_counted_and_the_balance_kept_when_known(
    on_error: Any, balance: float | None, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    otel = OTel()
    name = unique_name("fallback")
    budget = RedisRetryBudget(
        unreachable(),
        name,
        ratio=0,
        min_per_second=0.3,
        ttl=10,
        on_error=on_error,
        observers=[PrometheusObserver(registry), otel.observer],
    )
    granted = [budget.try_withdraw() for _ in range(2)]
    assert granted == ([True, True] if on_error == "local" else [False, False])
    prefix = "tenacity_budget_retry_budget"
    assert prom(registry, f"{prefix}_fallbacks_total", name) == 2
    assert otel.points("tenacity_budget.retry_budget.fallbacks") == {name: 2}
    assert prom(registry, f"{prefix}_balance", name) == balance
    kind = "grants" if on_error == "local" else "refusals"
    assert prom(registry, f"{prefix}_{kind}_total", name) == 2
    assert otel.points(f"tenacity_budget.retry_budget.{kind}") == {name: 2}


def test_a_run_the_budget_ends_is_counted_by_both_kinds_of_hook(
    virtual_clock: VirtualClock,
) -> None:
    registry = CollectorRegistry()
    metrics = PrometheusObserver(registry, namespace="svc")
    budget = RetryBudget(ratio=0, min_per_second=0.1, ttl=10, name="api", observers=metrics)

    @POLICY.retry(stats=metrics, budget=budget)
    def down() -> None:
        raise ConnectionError("down")

    with pytest.raises(BudgetExhausted) as info:
        down()
    assert info.value.report.reason is StopReason.RETRY_BUDGET
    assert prom(registry, "svc_retry_budget_grants_total", "api") == 1
    assert prom(registry, "svc_retry_budget_refusals_total", "api") == 1
    retries = [
        s.value for m in registry.collect() for s in m.samples if s.name == "svc_retries_total"
    ]
    assert retries == [1]  # the one retry the budget granted was made
    exhausted = [
        s
        for m in registry.collect()
        for s in m.samples
        if s.name == "svc_exhausted_total" and s.labels["reason"] == "retry_budget"
    ]
    assert [s.value for s in exhausted] == [1]
