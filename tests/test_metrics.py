"""Tests for the Prometheus and OpenTelemetry observers, against the real libraries.

Prometheus values are read from a real ``CollectorRegistry``; OpenTelemetry values from the
SDK's ``InMemoryMetricReader`` behind a ``MeterProvider`` made here (never the global one).
Runs go through ``policy.retry(stats=...)``, sync and async, on a frozen clock.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from freezegun.api import FrozenDateTimeFactory
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
)
from prometheus_client import REGISTRY, CollectorRegistry

from tenacity_budget import (
    BackoffPolicy,
    BudgetExhausted,
    ExhaustionReport,
    RetryObserver,
    RetryStats,
    StopReason,
)
from tenacity_budget.otel import DEFAULT_SLEEP_BOUNDARIES, OpenTelemetryObserver
from tenacity_budget.prometheus import DEFAULT_SLEEP_BUCKETS, PrometheusObserver
from tests._helpers import async_sleeper, sleeper

# Instant attempts: the run stops on the count, after sleeping 1, 2, 4, 8, 8.
POLICY = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=30, jitter="none")
FULL_SLEEPS = [1.0, 2.0, 4.0, 8.0, 8.0]


def report(reason: StopReason = StopReason.COUNT, attempts: int = 3) -> ExhaustionReport:
    return ExhaustionReport(
        attempts=attempts,
        affordable=5,
        slept=3.0,
        elapsed=3.0,
        budget=30.0,
        deadline=None,
        reason=reason,
        last_exception=OSError("down"),
    )


def feed_each_hook(observer: RetryObserver, reason: StopReason) -> None:
    """Call every hook: ``a`` twice (a first-try success, then one after two retries), ``b``
    once, giving up for ``reason``.
    """
    observer.on_call("a")
    observer.on_call("a")
    observer.on_call("b")
    observer.on_retry("a", 1, 0.3)
    observer.on_retry("a", 2, 7.0)
    observer.on_success("a", 1)
    observer.on_success("a", 3)
    observer.on_exhausted("b", report(reason))


# -- running decorated functions -----------------------------------------------------------


def run_workload_sync(clock: FrozenDateTimeFactory, stats: Any) -> list[float]:
    """One first-try success, one success after two retries, one exhausted call."""
    sleeps: list[float] = []
    failures = {"ok": 0, "flaky": 2, "down": 10**6}
    calls: dict[str, int] = {}

    @POLICY.retry(stats=stats, sleep=sleeper(clock, sleeps))
    def work(kind: str) -> str:
        calls[kind] = calls.get(kind, 0) + 1
        if calls[kind] <= failures[kind]:
            raise ConnectionError(kind)
        return kind

    assert work("ok") == "ok"
    assert work("flaky") == "flaky"
    with pytest.raises(BudgetExhausted) as info:
        work("down")
    assert info.value.report.reason is StopReason.COUNT
    return sleeps


async def run_workload_async(clock: FrozenDateTimeFactory, stats: Any) -> list[float]:
    """The async twin of :func:`run_workload_sync`."""
    sleeps: list[float] = []
    failures = {"ok": 0, "flaky": 2, "down": 10**6}
    calls: dict[str, int] = {}

    @POLICY.retry(stats=stats, sleep=async_sleeper(clock, sleeps))
    async def work(kind: str) -> str:
        calls[kind] = calls.get(kind, 0) + 1
        if calls[kind] <= failures[kind]:
            raise ConnectionError(kind)
        return kind

    assert await work("ok") == "ok"
    assert await work("flaky") == "flaky"
    with pytest.raises(BudgetExhausted) as info:
        await work("down")
    assert info.value.report.reason is StopReason.COUNT
    return sleeps


# -- Prometheus ----------------------------------------------------------------------------


def prom_total(registry: CollectorRegistry, sample: str, **labels: str) -> float:
    """Sum of ``sample`` over every label set matching ``labels``."""
    return sum(
        s.value
        for metric in registry.collect()
        for s in metric.samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


def prom_functions(registry: CollectorRegistry, namespace: str = "tenacity_budget") -> set[str]:
    return {
        s.labels["function"]
        for metric in registry.collect()
        if metric.name.startswith(namespace)
        for s in metric.samples
        if "function" in s.labels
    }


def test_prometheus_observer_is_a_retry_observer() -> None:
    assert isinstance(PrometheusObserver(CollectorRegistry()), RetryObserver)


def test_prometheus_counts_each_hook_by_function() -> None:
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry)
    feed_each_hook(observer, StopReason.DEADLINE)

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(f"tenacity_budget_{name}", labels)

    assert value("calls_total", function="a") == 2
    assert value("calls_total", function="b") == 1
    assert value("retries_total", function="a") == 2
    assert value("retries_total", function="b") is None
    assert value("first_try_successes_total", function="a") == 1
    assert value("successes_after_retry_total", function="a") == 1
    assert value("exhausted_total", function="b", reason="deadline") == 1
    assert value("exhausted_total", function="b", reason="count") is None
    assert value("sleep_seconds_count", function="a") == 2
    assert value("sleep_seconds_sum", function="a") == pytest.approx(7.3)
    assert value("sleep_seconds_bucket", function="a", le="0.5") == 1
    assert value("sleep_seconds_bucket", function="a", le="5.0") == 1
    assert value("sleep_seconds_bucket", function="a", le="10.0") == 2
    assert value("sleep_seconds_bucket", function="a", le="+Inf") == 2


@settings(max_examples=20, deadline=None)
@given(reasons=st.lists(st.sampled_from(list(StopReason)), max_size=12))
def test_prometheus_exhausted_is_labelled_by_reason(reasons: list[StopReason]) -> None:
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry)
    for reason in reasons:
        observer.on_exhausted("f", report(reason))
    for reason in StopReason:
        got = registry.get_sample_value(
            "tenacity_budget_exhausted_total", {"function": "f", "reason": reason.value}
        )
        expected = reasons.count(reason)
        assert (got or 0.0) == expected
        assert (got is None) == (expected == 0)


def test_prometheus_namespace_and_buckets() -> None:
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry, namespace="billing", buckets=(1.0, 2.0))
    observer.on_call("f")
    observer.on_retry("f", 1, 1.5)
    assert registry.get_sample_value("billing_calls_total", {"function": "f"}) == 1
    assert registry.get_sample_value("tenacity_budget_calls_total", {"function": "f"}) is None
    buckets = {
        s.labels["le"]
        for metric in registry.collect()
        for s in metric.samples
        if s.name == "billing_sleep_seconds_bucket"
    }
    assert buckets == {"1.0", "2.0", "+Inf"}
    assert registry.get_sample_value("billing_sleep_seconds_bucket", {"function": "f", "le": "2.0"})


def test_prometheus_empty_namespace_has_no_prefix() -> None:
    registry = CollectorRegistry()
    PrometheusObserver(registry, namespace="").on_call("f")
    assert registry.get_sample_value("calls_total", {"function": "f"}) == 1


def test_prometheus_default_buckets_span_subsecond_to_caps() -> None:
    registry = CollectorRegistry()
    observer = PrometheusObserver(registry)
    observer.on_retry("f", 1, 0.0)
    les = sorted(
        float(s.labels["le"])
        for metric in registry.collect()
        for s in metric.samples
        if s.name == "tenacity_budget_sleep_seconds_bucket"
    )
    assert les == sorted(DEFAULT_SLEEP_BUCKETS)


def test_prometheus_defaults_to_the_global_registry() -> None:
    observer = PrometheusObserver(namespace="tenacity_budget_test_global")
    try:
        observer.on_call("f")
        assert REGISTRY.get_sample_value(
            "tenacity_budget_test_global_calls_total", {"function": "f"}
        ) == (1)
        assert observer.registry is REGISTRY
    finally:
        for collector in (
            observer.calls,
            observer.retries,
            observer.first_try_successes,
            observer.successes_after_retry,
            observer.exhausted,
            observer.sleep,
        ):
            REGISTRY.unregister(collector)


def test_prometheus_refuses_a_second_observer_on_one_registry() -> None:
    registry = CollectorRegistry()
    PrometheusObserver(registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        PrometheusObserver(registry)
    PrometheusObserver(registry, namespace="other")  # another namespace is fine


def check_prometheus_workload(registry: CollectorRegistry, sleeps: list[float]) -> None:
    retries = 2 + len(FULL_SLEEPS)
    assert sleeps == [1.0, 2.0, *FULL_SLEEPS]
    assert prom_total(registry, "tenacity_budget_calls_total") == 3
    assert prom_total(registry, "tenacity_budget_first_try_successes_total") == 1
    assert prom_total(registry, "tenacity_budget_successes_after_retry_total") == 1
    assert prom_total(registry, "tenacity_budget_retries_total") == retries
    assert prom_total(registry, "tenacity_budget_exhausted_total", reason="count") == 1
    assert prom_total(registry, "tenacity_budget_exhausted_total") == 1
    assert prom_total(registry, "tenacity_budget_sleep_seconds_count") == retries
    assert prom_total(registry, "tenacity_budget_sleep_seconds_sum") == sum(sleeps)
    # cumulative buckets over the sleeps 1, 2, 1, 2, 4, 8, 8
    assert prom_total(registry, "tenacity_budget_sleep_seconds_bucket", le="1.0") == 2
    assert prom_total(registry, "tenacity_budget_sleep_seconds_bucket", le="5.0") == 5


def test_prometheus_through_policy_retry_sync(frozen: FrozenDateTimeFactory) -> None:
    registry = CollectorRegistry()
    sleeps = run_workload_sync(frozen, PrometheusObserver(registry))
    check_prometheus_workload(registry, sleeps)


async def test_prometheus_through_policy_retry_async(frozen: FrozenDateTimeFactory) -> None:
    registry = CollectorRegistry()
    sleeps = await run_workload_async(frozen, PrometheusObserver(registry))
    check_prometheus_workload(registry, sleeps)


def test_prometheus_one_function_one_label(frozen: FrozenDateTimeFactory) -> None:
    registry = CollectorRegistry()
    run_workload_sync(frozen, PrometheusObserver(registry))
    assert len(prom_functions(registry)) == 1


# -- OpenTelemetry -------------------------------------------------------------------------


class OTel:
    """An SDK meter provider with an in-memory reader, and readers of its points."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])
        self.meter = self.provider.get_meter("tests")

    def points(self) -> dict[str, list[Any]]:
        data = self.reader.get_metrics_data()
        out: dict[str, list[Any]] = {}
        if data is None:
            return out
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    out.setdefault(metric.name, []).extend(metric.data.data_points)
        return out

    def units(self) -> dict[str, str]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return {
            metric.name: metric.unit or ""
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }


def otel_value(points: dict[str, list[Any]], name: str, **attributes: str) -> float:
    total = 0.0
    for point in points.get(name, []):
        assert isinstance(point, NumberDataPoint)
        found = point.attributes or {}
        if all(found.get(k) == v for k, v in attributes.items()):
            total += point.value
    return total


def otel_sleep(
    points: dict[str, list[Any]], name: str = "tenacity_budget.sleep"
) -> tuple[int, float, list[int], tuple[float, ...]]:
    """(count, sum, merged bucket counts, bounds) of the sleep histogram over attributes."""
    hist = points[name]
    assert all(isinstance(p, HistogramDataPoint) for p in hist)
    bounds = hist[0].explicit_bounds
    buckets = [sum(p.bucket_counts[i] for p in hist) for i in range(len(bounds) + 1)]
    return sum(p.count for p in hist), sum(p.sum for p in hist), buckets, tuple(bounds)


@pytest.fixture
def otel() -> Iterator[OTel]:
    sdk = OTel()
    yield sdk
    sdk.provider.shutdown()


def test_otel_observer_is_a_retry_observer(otel: OTel) -> None:
    assert isinstance(OpenTelemetryObserver(otel.meter), RetryObserver)


def test_otel_records_each_hook_with_attributes(otel: OTel) -> None:
    observer = OpenTelemetryObserver(otel.meter)
    feed_each_hook(observer, StopReason.WALL_CLOCK)

    points = otel.points()
    assert otel_value(points, "tenacity_budget.calls", function="a") == 2
    assert otel_value(points, "tenacity_budget.calls", function="b") == 1
    assert otel_value(points, "tenacity_budget.retries", function="a") == 2
    assert otel_value(points, "tenacity_budget.retries", function="b") == 0
    assert otel_value(points, "tenacity_budget.first_try_successes", function="a") == 1
    assert otel_value(points, "tenacity_budget.successes_after_retry", function="a") == 1
    (exhausted,) = points["tenacity_budget.exhausted"]
    assert dict(exhausted.attributes) == {"function": "b", "reason": "wall_clock"}
    assert exhausted.value == 1
    (sleep,) = points["tenacity_budget.sleep"]
    assert dict(sleep.attributes) == {"function": "a"}
    assert (sleep.count, sleep.sum, sleep.min, sleep.max) == (2, pytest.approx(7.3), 0.3, 7.0)
    assert tuple(sleep.explicit_bounds) == DEFAULT_SLEEP_BOUNDARIES
    assert otel.units()["tenacity_budget.sleep"] == "s"


@settings(max_examples=20, deadline=None)
@given(reasons=st.lists(st.sampled_from(list(StopReason)), min_size=1, max_size=12))
def test_otel_exhausted_carries_the_reason(reasons: list[StopReason]) -> None:
    sdk = OTel()
    try:
        observer = OpenTelemetryObserver(sdk.meter)
        for reason in reasons:
            observer.on_exhausted("f", report(reason))
        points = sdk.points()
        for reason in StopReason:
            got = otel_value(points, "tenacity_budget.exhausted", function="f", reason=reason.value)
            assert got == reasons.count(reason)
    finally:
        sdk.provider.shutdown()


def test_otel_prefix_and_sdk_default_buckets(otel: OTel) -> None:
    observer = OpenTelemetryObserver(otel.meter, prefix="billing.retry", sleep_boundaries=None)
    observer.on_call("f")
    observer.on_retry("f", 1, 0.2)
    points = otel.points()
    assert otel_value(points, "billing.retry.calls", function="f") == 1
    assert "tenacity_budget.calls" not in points
    _, _, _, bounds = otel_sleep(points, "billing.retry.sleep")
    assert bounds != DEFAULT_SLEEP_BOUNDARIES  # the SDK's own (millisecond-sized) default
    assert bounds[0] == 0.0


def test_otel_default_meter_is_the_tenacity_budget_scope(
    otel: OTel, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry import metrics

    asked: list[str] = []

    def get_meter(name: str, *args: Any, **kwargs: Any) -> Any:
        asked.append(name)
        return otel.provider.get_meter(name)

    monkeypatch.setattr(metrics, "get_meter", get_meter)
    OpenTelemetryObserver().on_call("f")
    assert asked == ["tenacity_budget"]
    data = otel.reader.get_metrics_data()
    assert data is not None
    scopes = {s.scope.name for r in data.resource_metrics for s in r.scope_metrics}
    assert scopes == {"tenacity_budget"}


def check_otel_workload(otel: OTel, sleeps: list[float]) -> None:
    retries = 2 + len(FULL_SLEEPS)
    assert sleeps == [1.0, 2.0, *FULL_SLEEPS]
    points = otel.points()
    assert otel_value(points, "tenacity_budget.calls") == 3
    assert otel_value(points, "tenacity_budget.first_try_successes") == 1
    assert otel_value(points, "tenacity_budget.successes_after_retry") == 1
    assert otel_value(points, "tenacity_budget.retries") == retries
    assert otel_value(points, "tenacity_budget.exhausted", reason="count") == 1
    assert otel_value(points, "tenacity_budget.exhausted") == 1
    count, total, buckets, bounds = otel_sleep(points)
    assert (count, total) == (retries, sum(sleeps))
    assert bounds == DEFAULT_SLEEP_BOUNDARIES
    # per-bucket counts over the sleeps 1, 2, 1, 2, 4, 8, 8
    assert buckets[bounds.index(1.0)] == 2  # (0.5, 1.0]
    assert buckets[bounds.index(2.5)] == 2  # (1.0, 2.5]
    assert buckets[bounds.index(5.0)] == 1  # (2.5, 5.0]
    assert buckets[bounds.index(10.0)] == 2  # (5.0, 10.0]
    assert sum(buckets) == count


def test_otel_through_policy_retry_sync(otel: OTel, frozen: FrozenDateTimeFactory) -> None:
    sleeps = run_workload_sync(frozen, OpenTelemetryObserver(otel.meter))
    check_otel_workload(otel, sleeps)


async def test_otel_through_policy_retry_async(otel: OTel, frozen: FrozenDateTimeFactory) -> None:
    sleeps = await run_workload_async(frozen, OpenTelemetryObserver(otel.meter))
    check_otel_workload(otel, sleeps)


# -- together ------------------------------------------------------------------------------


def test_all_observers_see_the_same_run(otel: OTel, frozen: FrozenDateTimeFactory) -> None:
    registry = CollectorRegistry()
    stats = RetryStats()
    observers = [PrometheusObserver(registry), OpenTelemetryObserver(otel.meter), stats]
    sleeps = run_workload_sync(frozen, observers)
    check_prometheus_workload(registry, sleeps)
    check_otel_workload(otel, sleeps)
    snap = stats.snapshot()
    assert (snap.calls, snap.retries, snap.exhausted) == (3, len(sleeps), 1)


# -- what each exporter registers: names, kinds, help texts, labels, units -------------------

# (metric name, type, help text, labels, OpenTelemetry unit, OpenTelemetry description)
INSTRUMENTS = [
    ("calls", "counter", "Calls of retried functions begun.", ("function",), "{call}", None),
    (
        "retries",
        "counter",
        "Retries made (sleeps taken before a new attempt).",
        ("function",),
        "{retry}",
        None,
    ),
    (
        "first_try_successes",
        "counter",
        "Calls that returned on their first attempt.",
        ("function",),
        "{call}",
        None,
    ),
    (
        "successes_after_retry",
        "counter",
        "Calls that returned after at least one retry.",
        ("function",),
        "{call}",
        None,
    ),
    (
        "exhausted",
        "counter",
        "Calls that gave up, by the reason the run stopped.",
        ("function", "reason"),
        "{call}",
        None,
    ),
    ("sleep", "histogram", "Seconds slept before each retry.", ("function",), "s", None),
    (
        "retry_budget.grants",
        "counter",
        "Retries a retry budget granted.",
        ("budget",),
        "{retry}",
        None,
    ),
    (
        "retry_budget.refusals",
        "counter",
        "Retries a retry budget refused (the run ended at once).",
        ("budget",),
        "{retry}",
        None,
    ),
    (
        "retry_budget.fallbacks",
        "counter",
        "Retry-budget decisions made without the shared store (Redis unreachable).",
        ("budget",),
        "{decision}",
        "Retry-budget decisions made without the shared store (Redis).",
    ),
    (
        "retry_budget.balance",
        "gauge",
        "Retries a retry budget would still grant, as of its latest decision.",
        ("budget",),
        "{retry}",
        None,
    ),
    (
        "shed_requests",
        "counter",
        "Requests DeadlineMiddleware answered 504 at once: the caller's time was up.",
        ("app",),
        "{request}",
        None,
    ),
    (
        "throttle.attempts",
        "counter",
        "Attempts an adaptive throttle was asked to admit (those it rejected included).",
        ("throttle",),
        "{attempt}",
        None,
    ),
    (
        "throttle.rejections",
        "counter",
        "Attempts an adaptive throttle rejected locally (never sent).",
        ("throttle",),
        "{attempt}",
        None,
    ),
    (
        "throttle.probability",
        "gauge",
        "An adaptive throttle's rejection probability, as of its latest admission.",
        ("throttle",),
        "1",
        None,
    ),
    ("hedges", "counter", "Hedged requests sent.", ("hedge",), "{request}", None),
    (
        "hedges_won",
        "counter",
        "Hedged requests that answered first (their result was used).",
        ("hedge",),
        "{request}",
        None,
    ),
]


def feed_every_instrument(observer: Any) -> None:
    feed_each_hook(observer, StopReason.COUNT)
    observer.on_budget_fallback("payments", ConnectionError("down"))
    observer.on_budget_decision("payments", True, 3)
    observer.on_budget_decision("payments", False, 0)
    observer.on_shed("checkout", 0.0)
    observer.on_throttle("search", False, 0.25)
    observer.on_hedge("search", True)


def test_prometheus_registers_each_metric_as_before() -> None:
    registry = CollectorRegistry()
    feed_every_instrument(PrometheusObserver(registry, namespace="app"))
    found = [
        (
            m.name,
            m.type,
            m.documentation,
            tuple(sorted({k for s in m.samples for k in s.labels} - {"le"})),
        )
        for m in registry.collect()
    ]
    expected = [
        (
            "app_" + name.replace(".", "_") + ("_seconds" if unit == "s" else ""),
            kind,
            text,
            tuple(sorted(labels)),
        )
        for name, kind, text, labels, unit, _ in INSTRUMENTS
    ]
    assert found == expected
    assert found[0][0] == "app_calls"
    assert found[5][0] == "app_sleep_seconds"
    assert found[6][0] == "app_retry_budget_grants"


def test_otel_creates_each_instrument_as_before(otel: OTel) -> None:
    feed_every_instrument(OpenTelemetryObserver(otel.meter, prefix="app"))
    data = otel.reader.get_metrics_data()
    assert data is not None
    found = {
        metric.name: (metric.unit, metric.description, type(metric.data).__name__)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    kinds = {"counter": "Sum", "histogram": "Histogram", "gauge": "Gauge"}
    assert found == {
        f"app.{name}": (unit, otel_text or text, kinds[kind])
        for name, kind, text, _, unit, otel_text in INSTRUMENTS
    }
    attributes = {
        metric.name: {k for p in metric.data.data_points for k in (p.attributes or {})}
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }
    assert attributes == {f"app.{name}": set(labels) for name, _, _, labels, _, _ in INSTRUMENTS}


def test_each_observer_holds_its_instruments_as_attributes(otel: OTel) -> None:
    prometheus = PrometheusObserver(CollectorRegistry())
    telemetry = OpenTelemetryObserver(otel.meter)
    attrs = [
        "calls",
        "retries",
        "first_try_successes",
        "successes_after_retry",
        "exhausted",
        "sleep",
        "budget_grants",
        "budget_refusals",
        "budget_fallbacks",
        "budget_balance",
    ]
    prometheus_kinds = [type(getattr(prometheus, a)).__name__ for a in attrs]
    assert prometheus_kinds == [*["Counter"] * 5, "Histogram", *["Counter"] * 3, "Gauge"]
    for attr in attrs:
        assert getattr(telemetry, attr) is not None


def test_both_observers_are_built_from_the_one_table() -> None:
    from tenacity_budget.instrumentation._metrics import METRICS

    attrs = [metric.attr for metric in METRICS]
    assert attrs == list(PrometheusObserver.__annotations__)
    assert attrs == list(OpenTelemetryObserver.__annotations__)
    assert [(m.name, m.kind) for m in METRICS] == [(i[0], i[1]) for i in INSTRUMENTS]


# -- optional imports ----------------------------------------------------------------------


MISSING_EXTRAS = [
    # our module, the library it imports, its distribution, the extra that installs it
    ("tenacity_budget.prometheus", "prometheus_client", "prometheus-client", "prometheus"),
    ("tenacity_budget.otel", "opentelemetry", "opentelemetry-api", "otel"),
    ("tenacity_budget.breaker", "pybreaker", "pybreaker", "breaker"),
]


@pytest.mark.parametrize(("module", "package", "distribution", "extra"), MISSING_EXTRAS)
def test_missing_extra_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, module: str, package: str, distribution: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # makes `import package` fail
    monkeypatch.delitem(sys.modules, module, raising=False)  # restored after the test
    with pytest.raises(ImportError) as caught:
        importlib.import_module(module)
    assert str(caught.value) == (
        f"{module} needs {distribution}: pip install 'tenacity-budget[{extra}]'"
    )
    assert type(caught.value) is ImportError
    assert isinstance(caught.value.__cause__, ModuleNotFoundError)
    assert caught.value.__cause__.name == package


@pytest.mark.parametrize(("module", "package", "distribution", "extra"), MISSING_EXTRAS)
def test_missing_extra_in_a_fresh_interpreter(
    module: str, package: str, distribution: str, extra: str
) -> None:
    # As a user without the extra meets it: the first import of the module, in a new process.
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules[{package!r}] = None
        try:
            import {module}
        except ImportError as exc:
            print(type(exc).__name__, type(exc.__cause__).__name__)
            print(exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "ImportError ModuleNotFoundError",
        f"{module} needs {distribution}: pip install 'tenacity-budget[{extra}]'",
    ]


def test_the_wing_exports_the_metrics_observers_lazily() -> None:
    from tenacity_budget import instrumentation, otel, prometheus

    assert instrumentation.PrometheusObserver is prometheus.PrometheusObserver
    assert instrumentation.OpenTelemetryObserver is otel.OpenTelemetryObserver


@pytest.mark.parametrize(("module", "package", "distribution", "extra"), MISSING_EXTRAS[:2])
def test_missing_extra_through_the_wing_names_the_observer(
    module: str, package: str, distribution: str, extra: str
) -> None:
    name = "PrometheusObserver" if extra == "prometheus" else "OpenTelemetryObserver"
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules[{package!r}] = None
        import tenacity_budget.instrumentation as wing
        try:
            wing.{name}
        except ImportError as exc:
            print(type(exc).__name__, type(exc.__cause__).__name__)
            print(exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "ImportError ModuleNotFoundError",
        f"tenacity_budget.instrumentation.{name} needs {distribution}: "
        f"pip install 'tenacity-budget[{extra}]'",
    ]


def test_importing_the_package_needs_no_extra() -> None:
    code = textwrap.dedent(
        """
        import sys
        for name in ("prometheus_client", "opentelemetry", "pybreaker"):
            sys.modules[name] = None  # any import of them now fails
        import tenacity_budget
        import tenacity_budget.instrumentation
        import tenacity_budget.logs
        import tenacity_budget.stats
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# -- the adaptive throttle and hedges (optional hooks) -------------------------------------------


class _Status:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


def _throttled_run(observer: Any) -> tuple[int, int, float]:
    """A real AdaptiveThrottle against a backend answering 429 to everything."""
    import random

    from tenacity_budget import AdaptiveThrottle

    throttle = AdaptiveThrottle(name="search", observers=[observer], rng=random.Random(4))
    rejected = 0
    for _ in range(50):
        if throttle.admit():
            throttle.record(_Status(429))
        else:
            rejected += 1
    return 50, rejected, throttle.probability


def test_prometheus_counts_a_throttles_attempts_rejections_and_probability(
    frozen: FrozenDateTimeFactory,
) -> None:
    registry = CollectorRegistry()
    attempts, rejected, _ = _throttled_run(PrometheusObserver(registry))
    labels = {"throttle": "search"}
    assert registry.get_sample_value("tenacity_budget_throttle_attempts_total", labels) == attempts
    assert 0 < rejected < attempts
    assert (
        registry.get_sample_value("tenacity_budget_throttle_rejections_total", labels) == rejected
    )
    # The gauge holds the probability the latest admission was decided with: 49 requests,
    # none accepted.
    assert registry.get_sample_value("tenacity_budget_throttle_probability", labels) == 49 / 50


def test_otel_counts_a_throttles_attempts_rejections_and_probability(
    otel: OTel, frozen: FrozenDateTimeFactory
) -> None:
    attempts, rejected, _ = _throttled_run(OpenTelemetryObserver(otel.meter))
    points = otel.points()
    assert otel_value(points, "tenacity_budget.throttle.attempts", throttle="search") == attempts
    assert otel_value(points, "tenacity_budget.throttle.rejections", throttle="search") == rejected
    assert otel_value(points, "tenacity_budget.throttle.probability", throttle="search") == 49 / 50


def test_both_observers_count_hedges_sent_and_won(otel: OTel) -> None:
    registry = CollectorRegistry()
    observers = [PrometheusObserver(registry), OpenTelemetryObserver(otel.meter)]
    for observer in observers:
        for won in (True, False, False):
            observer.on_hedge("search", won)
    labels = {"hedge": "search"}
    assert registry.get_sample_value("tenacity_budget_hedges_total", labels) == 3
    assert registry.get_sample_value("tenacity_budget_hedges_won_total", labels) == 1
    points = otel.points()
    assert otel_value(points, "tenacity_budget.hedges", hedge="search") == 3
    assert otel_value(points, "tenacity_budget.hedges_won", hedge="search") == 1


def test_observers_without_the_new_hooks_still_pass_isinstance() -> None:
    from tenacity_budget.instrumentation import BudgetObserver

    class Old:
        def on_budget_decision(self, name: str, granted: bool, balance: int | None) -> None: ...

        def on_budget_fallback(self, name: str, error: BaseException) -> None: ...

    assert isinstance(Old(), BudgetObserver)
    assert not hasattr(Old(), "on_throttle")
