"""Message headers of a budgeted Celery task, and the publish hook that stamps them.

The run's start, an explicit deadline, the longest attempt and the throttle's rejections
in a row travel in the task message's headers, so every worker computes the same run.
Stamping reads Celery's private app registry in one place, :func:`_registered_budget`.
See ``docs/celery.md``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, MutableMapping
from datetime import UTC, datetime
from typing import Any

from .._validate import seconds
from ..context import ambient_deadline, check_aware, earliest
from ._lazy import _import
from ._plan import _EARLIEST, _LATEST

STARTED_HEADER = "tenacity_budget_started"
"""Message header: when the run started (ISO 8601, UTC): its publication, or its ``eta``."""
DEADLINE_HEADER = "tenacity_budget_deadline"
"""Message header: an explicit absolute deadline for the run (ISO 8601, UTC)."""
LONGEST_HEADER = "tenacity_budget_longest"
"""Message header: the longest attempt of the run so far, in seconds."""
SCHEDULE_HEADER = "tenacity_budget_schedule"
"""Message header: where the run stands in its seeded schedule (the sums of its countdowns
and the generator's state), so a retry continues it in O(1) rather than replaying it."""
THROTTLED_HEADER = "tenacity_budget_throttled"
"""Message header: how many attempts in a row, just before this one, the task's throttle
rejected (absent: the last attempt ran, or none was made)."""


def _utc(instant: datetime) -> datetime:
    """``instant`` in UTC, held within ``datetime``'s range (comparing never overflows)."""
    if instant >= _LATEST:
        return _LATEST
    if instant <= _EARLIEST:
        return _EARLIEST
    return instant.astimezone(UTC)


def _iso(instant: datetime) -> str:
    return _utc(instant).isoformat()


def deadline_headers(deadline: datetime) -> dict[str, str]:
    """Message headers that give one task run an explicit absolute deadline.

    Stamped at publish time, so it travels with the message from the first attempt on::

        sync_account.apply_async(
            (account_id,), headers=deadline_headers(gdpr_response_deadline(received_at))
        )

    Publishing inside a :func:`~tenacity_budget.deadline_scope` (or an attempt of another
    budgeted run) does the same without this: the earlier of both deadlines is stamped.
    """
    return {DEADLINE_HEADER: _iso(check_aware(deadline))}


def current_deadline() -> datetime | None:
    """The absolute deadline of the budgeted task run in progress, or ``None`` outside one.

    Inside a task decorated with a :class:`CeleryBudget`, this is the run's deadline (UTC),
    the same on every worker (or an earlier one that encloses the attempt); pass it
    downstream. It is the attempt's ambient deadline: :func:`tenacity_budget.remaining`
    gives the seconds left until it, and a budgeted task published from inside the attempt
    inherits it.
    """
    return ambient_deadline()


def _parse_time(value: object, key: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"header {key!r} must be an ISO 8601 string, got {value!r}")
    return check_aware(datetime.fromisoformat(value), f"header {key!r}")


def _header(request: Any, key: str) -> object:
    """Header ``key`` of the request's message, or ``None``: a worker sets it on the request
    itself; an eager run (``task.apply``, and its retries) keeps it in ``request.headers``."""
    value = request.get(key)
    if value is None:
        value = (request.headers or {}).get(key)
    return value


def _read_time(request: Any, key: str) -> datetime | None:
    return _parse_time(_header(request, key), key)


def _read_seconds(request: Any, key: str) -> float:
    """A header of seconds (``0.0`` when absent); a malformed one is a ``ValueError``."""
    value = _header(request, key)
    if value is None:
        return 0.0
    try:
        return seconds(float(value) if isinstance(value, str) else value, f"header {key!r}")
    except (TypeError, ValueError) as exc:
        raise ValueError(f"header {key!r} must be a non-negative number, got {value!r}") from exc


def _read_count(request: Any, key: str) -> int:
    """A header counting attempts (``0`` when absent); a malformed one is a ``ValueError``."""
    value = _header(request, key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"header {key!r} must be an int >= 0, got {value!r}")
    return value


def _eta(headers: Mapping[str, Any]) -> datetime | None:
    """The message's ``eta`` (Celery's own header), if it has a readable one.

    Celery writes it aware; a naive one (an ``eta=`` datetime given naive) is read as UTC,
    Celery's default timezone.
    """
    value = headers.get("eta")
    if not isinstance(value, str):
        return None
    try:
        eta = datetime.fromisoformat(value)
    except ValueError:
        return None
    return eta if eta.tzinfo is not None else eta.replace(tzinfo=UTC)


def _stamp(headers: MutableMapping[str, Any], now: datetime, enclosing: datetime | None) -> None:
    """Stamp a budgeted task's message as it is published (see :func:`_on_publish`).

    * :data:`STARTED_HEADER`, unless already there (a retry carries its run's start): the
      run starts now, or at the message's ``eta`` if that is later, since no attempt can
      run before it.
    * :data:`DEADLINE_HEADER`: the earliest of the explicit deadline already there and the
      ``enclosing`` one (the publisher's :func:`~tenacity_budget.runtime.ambient_deadline`).
      An explicit header that does not parse is left for the worker to refuse, loudly.
    """
    if headers.get(STARTED_HEADER) is None:
        eta = _eta(headers)
        headers[STARTED_HEADER] = _iso(now if eta is None or eta < now else eta)
    if enclosing is not None:
        try:
            explicit = _parse_time(headers.get(DEADLINE_HEADER), DEADLINE_HEADER)
        except (TypeError, ValueError):
            return
        merged = earliest(explicit, enclosing)
        assert merged is not None
        headers[DEADLINE_HEADER] = _iso(merged)


# -- finding a task's CeleryBudget at publish time ----------------------------------------

# The attribute of a decorated function that names its CeleryBudget (set by the decorator
# alone: this private name marks it).
_BUDGET_ATTR = "__tenacity_budget__"


def _budget_of_task(task: object) -> object | None:
    """The CeleryBudget the task's function is decorated with, or ``None``."""
    for fn in (getattr(type(task), "run", None), getattr(task, "__wrapped__", None)):
        found: object = getattr(fn, _BUDGET_ATTR, None)
        if found is not None:
            return found
    return None


def _registered_budget(name: str) -> object | None:
    """The CeleryBudget of the task registered as ``name`` in a Celery app of this process.

    Celery's ``before_task_publish`` signal names the task but not its app. Celery keeps
    every app of a process in ``celery._state`` (it has no public accessor for them); each
    app's registry is read as ``app._tasks``, which does not finalize the app (Celery's own
    ``send_task`` reads it so for the same reason). Both are private: this is the one
    place that touches them.
    """
    _state = _import("celery._state")
    for app in tuple(_state._get_active_apps()):
        get = getattr(getattr(app, "_tasks", None), "get", None)
        task = get(name) if get is not None else None
        if task is not None:
            found = _budget_of_task(task)
            if found is not None:
                return found
    return None


def _on_publish(sender: object = None, headers: Any = None, **_: Any) -> None:
    """``before_task_publish`` receiver: stamp the messages of budgeted tasks only."""
    if type(sender) is not str or not isinstance(headers, dict):
        return
    if _registered_budget(sender) is None:
        return
    now = datetime.now(UTC)
    _stamp(headers, now, None)  # the run's start first: it is stamped whatever follows
    # Inside an attempt of a budgeted task, the ambient deadline is its run's end (exact: a
    # wall-clock end), merged with any enclosing scope.
    _stamp(headers, now, ambient_deadline())


_hook_lock = threading.Lock()
_hook_connected = False


def _connect_publish_hook() -> None:
    """Connect :func:`_on_publish` to Celery's ``before_task_publish``, once per process."""
    global _hook_connected
    with _hook_lock:
        if _hook_connected:
            return
        signals = _import("celery.signals")
        signals.before_task_publish.connect(
            _on_publish, weak=False, dispatch_uid="tenacity_budget.celery.stamp"
        )
        _hook_connected = True


def _redelivered(request: Any) -> bool:
    """Whether the broker delivered this message before (kombu's ``redelivered`` flag)."""
    info = request.delivery_info or {}
    return bool(info.get("redelivered"))
