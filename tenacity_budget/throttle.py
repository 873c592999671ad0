"""Adaptive client-side throttling (Google SRE, "Handling Overload"), in one process.

Over the last ``window`` seconds an :class:`AdaptiveThrottle` counts the attempts the
application wanted to send (``requests``) and those the backend accepted (``accepts``), and
rejects an attempt locally, without sending it, with probability
``max(0, (requests - k * accepts) / (requests + 1))``. It is one more input to the one
decision (decision.py: after the time budget, before the retry budget). The rule, the
window and the Redis variant are explained in docs/overload.md.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, SupportsFloat

from ._validate import seconds
from .retry_budget import CountRing, _check_name, slicing

__all__ = ["default_rejected"]  # AdaptiveThrottle is the package's (tenacity_budget)

_OVERLOAD = (429, 503)
# The largest float below 1: the rule's value is always below it, whatever the rounding.
_BELOW_ONE = math.nextafter(1.0, 0.0)


def _status(value: object) -> int | None:
    """``value``'s HTTP status: ``status_code`` (httpx, requests) or ``status`` (aiohttp)."""
    for attribute in ("status_code", "status"):
        try:
            status = getattr(value, attribute, None)
        except Exception:  # a property that cannot answer (an unset request, say)
            status = None
        if isinstance(status, int) and not isinstance(status, bool):
            return status
    return None


def default_rejected(outcome: object) -> bool:
    """Whether ``outcome`` is an overload signal: an HTTP 429 or 503.

    ``outcome`` is an attempt's result or the exception it raised; its status is read on
    it (an httpx or requests response, aiohttp's ``ClientResponse`` or
    ``ClientResponseError``) or on its ``.response`` (``httpx.HTTPStatusError``,
    ``requests.HTTPError``). Anything else (a success, a 404, a connection error, a
    timeout) is an accept: a transport error is not an overload signal.
    """
    status = _status(outcome)
    if status is None:
        try:
            response = getattr(outcome, "response", None)
        except Exception:  # httpx's errors raise when no request or response was set
            response = None
        if response is None:
            return False
        status = _status(response)
    return status in _OVERLOAD


def _check_k(k: object) -> float:
    if isinstance(k, bool | str | bytes) or not isinstance(k, SupportsFloat):
        raise TypeError(f"k must be a number > 1, got {type(k).__name__}")
    value = float(k)
    if not 1.0 < value < math.inf:
        raise ValueError(
            f"k must be a finite number > 1 (accepts count k times against requests), got {k!r}"
        )
    return value


def _check_rng(rng: object) -> random.Random:
    if rng is None:
        return random.Random()
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random or None, got {type(rng).__name__}")
    return rng


def _hooks(observers: object) -> tuple[Callable[[str, bool, float], Any], ...]:
    """The ``on_throttle`` hooks of ``observers`` (an optional hook: others are skipped)."""
    if isinstance(observers, str | bytes) or not isinstance(observers, Sequence):
        raise TypeError(
            f"observers must be a sequence of observers, got {type(observers).__name__}"
        )
    found = (getattr(observer, "on_throttle", None) for observer in observers)
    return tuple(hook for hook in found if callable(hook))


def probability_of(requests: int, accepts: int, k: float) -> float:
    """The rule: ``max(0, (requests - k * accepts) / (requests + 1))``, always in [0, 1)."""
    excess = requests - k * accepts
    if excess <= 0.0:
        return 0.0
    return min(excess / (requests + 1), _BELOW_ONE)


class AdaptiveThrottle:
    """Reject attempts locally while the backend rejects more than ``1 / k`` of them.

    Per process, thread- and task-safe (a lock, never held across an await). Call
    :meth:`admit` before every attempt, the first included (``False``: do not send it), and
    :meth:`record` with the outcome of each attempt it admitted. ``policy.retry``, the HTTP
    clients and ``CeleryBudget`` do both for you.

    Args:
        k: how many times the accepts count against the requests (> 1; 2 is the SRE
            book's; lower throttles sooner).
        window: seconds of history counted (> 0), in ``SLICES`` slices on the monotonic
            clock, like a :class:`~tenacity_budget.RetryBudget`'s ``ttl``.
        name: labels its metrics.
        rejected: the overload predicate over an attempt's outcome (its result or the
            exception it raised); ``None`` for :func:`default_rejected` (HTTP 429, 503).
        observers: objects whose optional ``on_throttle(name, admitted, probability)``
            hook is told every admission (the Prometheus and OpenTelemetry observers).
        rng: the ``random.Random`` drawing the rejections (seeded, for tests).
    """

    __slots__ = (
        "_accepts",
        "_end",
        "_hooks",
        "_lock",
        "_random",
        "_rejected",
        "_requests",
        "_ring",
        "_slicing",
        "_start",
        "k",
        "name",
        "observers",
        "window",
    )

    def __init__(
        self,
        k: float = 2.0,
        window: float = 120.0,
        *,
        name: str = "default",
        rejected: Callable[[object], bool] | None = None,
        observers: Sequence[object] = (),
        rng: random.Random | None = None,
    ) -> None:
        self.k = _check_k(k)
        self.window = seconds(window, "window", positive=True)
        self._slicing = slicing(window, "window")
        self.name = _check_name(name)
        if rejected is not None and not callable(rejected):
            raise TypeError(f"rejected must be a callable or None, got {type(rejected).__name__}")
        self._rejected = default_rejected if rejected is None else rejected
        self._hooks = _hooks(observers)
        self.observers = tuple(observers)
        self._random = _check_rng(rng).random
        self._lock = threading.Lock()
        self._ring = CountRing(self._slicing)  # expires the counts older than the window
        self._requests = 0  # totals over the window, the current slice included
        self._accepts = 0
        self._start, self._end = math.inf, -math.inf  # the current slice's instants (none yet)

    def __repr__(self) -> str:
        return f"AdaptiveThrottle(k={self.k!r}, window={self.window!r}, name={self.name!r})"

    # -- the window -------------------------------------------------------------------------

    def _roll(self, seconds: float) -> None:
        """Bring the window to the instant ``seconds``, outside the current slice (locked)."""
        self._requests, self._accepts, self._start, self._end = self._ring.roll(
            seconds, self._requests, self._accepts
        )

    def _counts(self) -> tuple[int, int]:
        """``(requests, accepts)`` over the window as of now (locked)."""
        now = time.monotonic()
        if not self._start <= now < self._end:
            self._roll(now)
        return self._requests, self._accepts

    # -- the interface ----------------------------------------------------------------------

    @property
    def probability(self) -> float:
        """The probability the next attempt is rejected locally, in ``[0, 1)``."""
        with self._lock:
            requests, accepts = self._counts()
        return probability_of(requests, accepts, self.k)

    def admit(self) -> bool:
        """Count one request and decide it: ``False`` rejects it locally (do not send it).

        The probability is computed from the counts before this request.
        """
        admitted, p = self._admit(None)
        for hook in self._hooks:
            hook(self.name, admitted, p)
        return admitted

    def _admit(self, counts: tuple[int, int] | None) -> tuple[bool, float]:
        """Count one request, decided on ``counts`` (a fleet's) or else this window's."""
        with self._lock:
            requests, accepts = self._counts()
            self._requests = requests + 1
            if counts is not None:
                requests, accepts = counts
            p = probability_of(requests, accepts, self.k)
            return p == 0.0 or self._random() >= p, p

    def record(self, outcome: object) -> None:
        """The outcome of an admitted attempt: an accept unless :meth:`rejected` says so."""
        if not self._rejected(outcome):
            self._accept()

    def _accept(self) -> None:
        with self._lock:
            self._counts()
            self._accepts += 1

    def rejected(self, outcome: object) -> bool:
        """The overload predicate in use: whether ``outcome`` is an overload signal."""
        return bool(self._rejected(outcome))

    def _reset_lock(self) -> None:
        # For a child process forked while another thread may have held the lock.
        self._lock = threading.Lock()
