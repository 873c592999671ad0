"""The metrics table: every instrument the Prometheus and OpenTelemetry observers create.

Each row is written once, and both exporters are built from it; the names, help texts and
labels it holds are the published ones (docs/observability.md lists them).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

SLEEP_BUCKETS: tuple[float, ...] = (
    0.01,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)
"""Histogram bucket bounds (seconds) for retry sleeps, shared by the metrics adapters."""

FUNCTION = "function"
"""The label (attribute) carrying the decorated function's name."""

REASON = "reason"
"""The label (attribute) carrying the stop reason (a ``StopReason`` value)."""

BUDGET = "budget"
"""The label (attribute) carrying the retry budget's name."""

APP = "app"
"""The label (attribute) carrying the name of the ASGI app a request was shed from."""

THROTTLE = "throttle"
"""The label (attribute) carrying the adaptive throttle's name."""

HEDGE = "hedge"
"""The label (attribute) carrying the hedge's name."""

Kind = Literal["counter", "histogram", "gauge"]


class Metric(NamedTuple):  # a NamedTuple, not a dataclass: cheaper to define at import
    """One instrument, as both exporters create it."""

    attr: str
    """The observer attribute holding it."""
    name: str
    """Its name after the prefix: ``<prefix>.<name>`` in OpenTelemetry."""
    kind: Kind
    unit: str
    """Its UCUM unit (OpenTelemetry); ``s`` also suffixes the Prometheus name."""
    help: str
    """The Prometheus help text, and the OpenTelemetry description unless ``description``."""
    labels: tuple[str, ...]
    description: str | None = None

    @property
    def prometheus_name(self) -> str:
        """The Prometheus name after the namespace: dots become underscores, plus the unit."""
        return self.name.replace(".", "_") + ("_seconds" if self.unit == "s" else "")

    @property
    def otel_description(self) -> str:
        """The OpenTelemetry description."""
        return self.help if self.description is None else self.description


METRICS: tuple[Metric, ...] = (
    Metric("calls", "calls", "counter", "{call}", "Calls of retried functions begun.", (FUNCTION,)),
    Metric(
        "retries",
        "retries",
        "counter",
        "{retry}",
        "Retries made (sleeps taken before a new attempt).",
        (FUNCTION,),
    ),
    Metric(
        "first_try_successes",
        "first_try_successes",
        "counter",
        "{call}",
        "Calls that returned on their first attempt.",
        (FUNCTION,),
    ),
    Metric(
        "successes_after_retry",
        "successes_after_retry",
        "counter",
        "{call}",
        "Calls that returned after at least one retry.",
        (FUNCTION,),
    ),
    Metric(
        "exhausted",
        "exhausted",
        "counter",
        "{call}",
        "Calls that gave up, by the reason the run stopped.",
        (FUNCTION, REASON),
    ),
    Metric("sleep", "sleep", "histogram", "s", "Seconds slept before each retry.", (FUNCTION,)),
    Metric(
        "budget_grants",
        "retry_budget.grants",
        "counter",
        "{retry}",
        "Retries a retry budget granted.",
        (BUDGET,),
    ),
    Metric(
        "budget_refusals",
        "retry_budget.refusals",
        "counter",
        "{retry}",
        "Retries a retry budget refused (the run ended at once).",
        (BUDGET,),
    ),
    Metric(
        "budget_fallbacks",
        "retry_budget.fallbacks",
        "counter",
        "{decision}",
        "Retry-budget decisions made without the shared store (Redis unreachable).",
        (BUDGET,),
        description="Retry-budget decisions made without the shared store (Redis).",
    ),
    Metric(
        "budget_balance",
        "retry_budget.balance",
        "gauge",
        "{retry}",
        "Retries a retry budget would still grant, as of its latest decision.",
        (BUDGET,),
    ),
    Metric(
        "shed",
        "shed_requests",
        "counter",
        "{request}",
        "Requests DeadlineMiddleware answered 504 at once: the caller's time was up.",
        (APP,),
    ),
    Metric(
        "throttle_attempts",
        "throttle.attempts",
        "counter",
        "{attempt}",
        "Attempts an adaptive throttle was asked to admit (those it rejected included).",
        (THROTTLE,),
    ),
    Metric(
        "throttle_rejections",
        "throttle.rejections",
        "counter",
        "{attempt}",
        "Attempts an adaptive throttle rejected locally (never sent).",
        (THROTTLE,),
    ),
    Metric(
        "throttle_probability",
        "throttle.probability",
        "gauge",
        "1",
        "An adaptive throttle's rejection probability, as of its latest admission.",
        (THROTTLE,),
    ),
    Metric("hedges", "hedges", "counter", "{request}", "Hedged requests sent.", (HEDGE,)),
    Metric(
        "hedges_won",
        "hedges_won",
        "counter",
        "{request}",
        "Hedged requests that answered first (their result was used).",
        (HEDGE,),
    ),
)
"""Every instrument, in the order the exporters create them."""
