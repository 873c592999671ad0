"""The hedged run: attempts sent ``delay`` apart without cancelling, the first good one wins.

:func:`run_hedged` runs one hedged run from plain inputs (an attempt factory, the run's
frame, the retry budget and throttle, if any) and returns a :class:`HedgedOutcome`; every
attempt after the first is allowed by the one decision
(:func:`~tenacity_budget.decision.decide`: time, then throttle, then retry budget). Losers
are cancelled and their results released, and the run's end cuts every attempt. The
semantics are stated in docs/hedging.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import time
import types
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, Generic, Protocol, TypeVar

from ..context import Horizon
from ..decision import admit, awithdraw, cut_reason, decide
from ..exhaustion import StopReason, Throttled
from ._sketch import LatencySketch

__all__: list[str] = []

T = TypeVar("T")
_INF = math.inf

# Turns of the event loop a due hedge waits before it is sent, so that an answer due at the
# same instant (its timer fired in the same turn) is seen first: "no answer after delay".
_TIE_TURNS = 2

# Releases of losers' results still running, kept referenced until they end.
_BACKGROUND: set[asyncio.Future[Any]] = set()


class _Terms(Protocol):
    """What the engine reads of a :class:`~tenacity_budget.Hedge`."""

    max_attempts: int
    sketch: LatencySketch | None

    def non_fatal(self, outcome: object, /) -> bool: ...

    def delay_now(self) -> float: ...


class HedgedOutcome(Generic[T]):
    """How a hedged run ended: its outcome, why it gave up (if it did) and its figures.

    Attributes:
        value: the result the run ended with (the winner's, or the last non-fatal one).
        exception: the exception it ended with (a fatal one, the last non-fatal one, a
            ``TimeoutError`` when the run's end cut its attempts, a
            :class:`~tenacity_budget.exhaustion.Throttled` first attempt), else ``None``.
        reason: ``None`` when a good or a fatal outcome ended the run; else why it gave up
            (``count``, ``deadline``, ``wall_clock``, ``throttled``, ``retry_budget``).
        attempts: attempts sent, the first included.
        hedges: attempts sent after the first.
        hedges_won: 1 when the run returned a hedge's good outcome (a hedge won), else 0: a
            run that gave up, or ended on a fatal exception, has no winning hedge.
        winner: the index of the attempt it came from (0: the first), ``None`` without one.
        elapsed: seconds from the run's start to its end.
    """

    __slots__ = ("attempts", "elapsed", "exception", "hedges_won", "reason", "value", "winner")

    def __init__(
        self,
        value: T | None,
        exception: BaseException | None,
        reason: StopReason | None,
        attempts: int,
        winner: int | None,
        elapsed: float,
    ) -> None:
        self.value = value
        self.exception = exception
        self.reason = reason
        self.attempts = attempts
        self.winner = winner
        self.hedges_won = 1 if winner and reason is None and exception is None else 0
        self.elapsed = elapsed

    def __repr__(self) -> str:
        reason = self.reason.value if self.reason is not None else None
        return (
            f"<HedgedOutcome attempts={self.attempts} winner={self.winner} reason={reason} "
            f"value={self.value!r} exception={self.exception!r}>"
        )

    @property
    def hedges(self) -> int:
        """Attempts sent after the first."""
        return max(0, self.attempts - 1)

    @property
    def exhausted(self) -> bool:
        """Whether the run gave up (``reason`` is set) rather than ending on an outcome."""
        return self.reason is not None

    def result(self) -> T | None:
        """The value the run ended with, or raise the exception it ended with."""
        if self.exception is not None:
            raise self.exception
        return self.value


@types.coroutine
def _next_turn() -> Generator[None, None, None]:
    """Let the event loop run one turn (``asyncio.sleep(0)``, which a virtual clock records)."""
    yield


def _outcome(task: asyncio.Task[T]) -> tuple[T | None, BaseException | None]:
    if task.cancelled():
        return None, asyncio.CancelledError()
    exc = task.exception()
    return (None, exc) if exc is not None else (task.result(), None)


async def _release(release: Callable[[Any], Any] | None, value: Any) -> None:
    """Release a result no one will read (a losing response); a failure to do so is dropped:
    no call fails because of its losers' clean-up."""
    if release is None:
        return
    with contextlib.suppress(Exception):
        done = release(value)
        if inspect.isawaitable(done):
            await done


def _release_later(release: Callable[[Any], Any] | None) -> Callable[[asyncio.Task[Any]], None]:
    """A done-callback releasing the result of a loser that ended after it was cancelled."""

    def dispose(task: asyncio.Task[Any]) -> None:
        value, exc = _outcome(task)  # retrieved, so no "exception never retrieved" is logged
        if exc is None and release is not None:
            future = asyncio.ensure_future(_release(release, value))
            _BACKGROUND.add(future)
            future.add_done_callback(_BACKGROUND.discard)

    return dispose


class _Run(Generic[T]):
    """One hedged run's state (see :func:`run_hedged`)."""

    __slots__ = (
        "admit",
        "agrant",
        "attempt",
        "budget",
        "budget_end",
        "estimate",
        "grant",
        "hedge",
        "horizon",
        "last",
        "longest",
        "max_elapsed",
        "name",
        "next_at",
        "observers",
        "refused",
        "release",
        "sent",
        "started",
        "tasks",
        "throttle",
    )

    def __init__(
        self,
        hedge: _Terms,
        attempt: Callable[[], Awaitable[T]],
        horizon: Horizon,
        estimate: float,
        max_elapsed: float,
        started: float,
        budget: Any,
        throttle: Any,
        release: Callable[[T], Any] | None,
        observers: Sequence[object],
        name: str,
    ) -> None:
        self.hedge = hedge
        self.attempt = attempt
        self.horizon = horizon
        self.estimate = estimate
        self.max_elapsed = max_elapsed
        self.started = started
        self.budget_end = started + max_elapsed
        self.budget = budget
        self.throttle = throttle
        self.release = release
        self.observers = observers
        self.name = name
        self.tasks: dict[asyncio.Task[T], tuple[int, float]] = {}
        self.sent = 0
        self.next_at = _INF
        self.refused: StopReason | None = None
        self.last: tuple[int, T | None, BaseException | None] | None = None
        self.longest = 0.0
        is_async = budget is not None and bool(getattr(budget, "is_async", False))
        self.grant = None if budget is None or is_async else budget.try_withdraw
        self.agrant = budget.try_withdraw if is_async else None
        self.admit = None if throttle is None else self._throttle_admits

    # -- the decision ---------------------------------------------------------------------

    def _throttle_admits(self) -> bool:
        """Hedging pauses while the throttle rejects anything; else it admits (and counts)."""
        throttle = self.throttle
        return bool(throttle.probability <= 0.0 and throttle.admit())

    async def _ask(self) -> StopReason | None:
        """Why no further attempt may be sent now (``None``: send it). A refusal is final for
        the run: the throttle and the retry budget are not asked again and again."""
        if self.refused is not None:
            return self.refused
        reason = decide(
            self.sent,
            self.hedge.max_attempts - 1,
            0.0,
            0.0,
            time.monotonic() - self.started,
            self.estimate if self.estimate > self.longest else self.longest,
            self.max_elapsed,
            self.horizon.left(),
            None,
            None,
            self.grant,
            self.admit,
        )
        if reason is None and self.agrant is not None:
            reason = await awithdraw(self.agrant)
        self.refused = reason
        return reason

    # -- sending and settling -------------------------------------------------------------

    async def _one(self) -> T:
        return await self.attempt()

    def _send(self) -> None:
        self.sent += 1
        now = time.monotonic()
        self.tasks[asyncio.ensure_future(self._one())] = (self.sent - 1, now)
        self.next_at = now + self.hedge.delay_now() if self.sent < self.hedge.max_attempts else _INF

    async def _try_send(self) -> None:
        self.next_at = _INF
        if await self._ask() is None:
            self._send()

    def _measure(self, began: float, now: float) -> None:
        took = now - began
        if took > self.longest:
            self.longest = took
        if self.hedge.sketch is not None:
            self.hedge.sketch.add(took)

    async def _settle(self, done: list[asyncio.Task[T]]) -> HedgedOutcome[T] | None:
        """Read the attempts that ended: the first good or fatal one ends the run; each
        non-fatal one sends the next attempt at once."""
        now = time.monotonic()
        for task in done:
            index, began = self.tasks.pop(task)
            self._measure(began, now)
            value, exc = _outcome(task)
            outcome: object = exc if exc is not None else value
            if self.throttle is not None:
                self.throttle.record(outcome)
            if not self.hedge.non_fatal(outcome):
                await self._dispose()
                return self._ended(None, index, value, exc)
            await self._release_last()
            self.last = (index, value, exc)
            await self._try_send()
        return None

    async def _release_last(self) -> None:
        """Release the last non-fatal result: a newer outcome supersedes it."""
        last = self.last
        if last is not None and last[2] is None:
            await _release(self.release, last[1])

    async def _dispose(self) -> None:
        """Cancel every attempt still running, release every result no one will read."""
        losers, self.tasks = self.tasks, {}
        now = time.monotonic()
        for task, (_, began) in losers.items():
            if not task.done() and task.cancel():
                if self.hedge.sketch is not None:  # cut: at least this long
                    self.hedge.sketch.add(now - began, censored=True)
            else:  # it ended at the winner's instant: an outcome like any other
                self._measure(began, now)
                if self.throttle is not None:
                    value, exc = _outcome(task)
                    self.throttle.record(exc if exc is not None else value)
        await self._release_last()
        if losers:
            await asyncio.wait(losers, timeout=0)  # one turn to let the cancelled ones end
        for task in losers:
            if task.done():
                value, exc = _outcome(task)
                if exc is None:
                    await _release(self.release, value)
            else:
                task.add_done_callback(_release_later(self.release))

    # -- ending ---------------------------------------------------------------------------

    def _ended(
        self,
        reason: StopReason | None,
        winner: int | None,
        value: T | None,
        exc: BaseException | None,
    ) -> HedgedOutcome[T]:
        outcome = HedgedOutcome(
            value, exc, reason, self.sent, winner, time.monotonic() - self.started
        )
        won = winner if outcome.hedges_won else None
        for observer in self.observers:
            hook = getattr(observer, "on_hedge", None)
            if hook is not None:
                for index in range(1, self.sent):
                    hook(self.name, index == won)
        return outcome

    def _cut_reason(self) -> StopReason:
        """Which end ran out (the run's budget or a deadline): :func:`decision.cut_reason`."""
        horizon, now = self.horizon, time.monotonic()
        wall_left = _INF if horizon.wall_end == _INF else horizon.wall_end - time.time()
        mono_left = horizon.mono_end - now if horizon.mono_end < self.budget_end else _INF
        budget_left = self.budget_end - now
        first = min(budget_left, wall_left, mono_left)
        if 0 < first < _INF:  # its timer fired a hair early (two clocks' rounding): the
            # end that ran out is the earliest one
            budget_left, wall_left, mono_left = (
                budget_left - first,
                wall_left - first,
                mono_left - first,
            )
        return cut_reason(budget_left, wall_left, mono_left)

    async def _cut(self) -> HedgedOutcome[T]:
        reason = self._cut_reason()
        await self._dispose()
        late = TimeoutError(f"the run's time was up: its attempts were cut ({reason.value})")
        return self._ended(reason, None, None, late)

    def _gave_up(self) -> HedgedOutcome[T]:
        """No attempt runs and none may be sent: the run ends with its last outcome."""
        assert self.last is not None
        assert self.refused is not None
        index, value, exc = self.last
        return self._ended(self.refused, index, value, exc)

    # -- the run --------------------------------------------------------------------------

    def _start(self) -> HedgedOutcome[T] | None:
        """Send the first attempt, unless the run's time is already up or the throttle
        rejects it; a sent first attempt is the call's one deposit in the retry budget."""
        if self.horizon.left() < 0:
            late = TimeoutError("the run's time was up before its first attempt")
            return self._ended(self._cut_reason(), None, None, late)
        throttle = self.throttle
        if throttle is not None and admit(throttle.admit) is not None:
            rejected = Throttled(str(throttle.name), float(throttle.probability))
            return self._ended(StopReason.THROTTLED, None, None, rejected)
        if self.budget is not None:
            self.budget.deposit()
        self._send()
        return None

    async def _wait(self) -> tuple[list[asyncio.Task[T]], bool]:
        """The attempts that ended, in the order sent (none when a timer fired first), and
        whether the run's end has come (its timer fired, or no time is left)."""
        tasks = self.tasks
        left = self.horizon.left()
        if not any(task.done() for task in tasks):
            until_hedge = self.next_at - time.monotonic()
            if until_hedge == _INF and left == _INF:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            else:
                timeout = max(0.0, min(until_hedge, left))
                await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                left = left if until_hedge < left else 0.0  # its own timer: the end has come
        done = sorted((task for task in tasks if task.done()), key=lambda task: tasks[task][0])
        return done, left <= 0 or self.horizon.left() <= 0

    async def _hedge_due(self) -> None:
        """The delay passed without an answer: send the next attempt if the decision allows.
        An answer due at this very instant is read first (it was not late)."""
        for _ in range(_TIE_TURNS):
            await _next_turn()
        if not any(task.done() for task in self.tasks):
            await self._try_send()

    async def go(self) -> HedgedOutcome[T]:
        ended = self._start()
        if ended is not None:
            return ended
        try:
            while True:
                done, over = await self._wait()
                if done:
                    ended = await self._settle(done)
                    if ended is not None:
                        return ended
                elif over:
                    return await self._cut()
                elif time.monotonic() >= self.next_at:
                    await self._hedge_due()
                if not self.tasks:
                    return self._gave_up()
        finally:
            for task in self.tasks:  # the caller was cancelled, or a predicate raised
                task.cancel()
                task.add_done_callback(_release_later(self.release))


async def run_hedged(
    hedge: _Terms,
    attempt: Callable[[], Awaitable[T]],
    *,
    horizon: Horizon | None = None,
    estimate: float = 0.0,
    max_elapsed: float = _INF,
    started: float | None = None,
    budget: Any = None,
    throttle: Any = None,
    release: Callable[[T], Any] | None = None,
    observers: Sequence[object] = (),
    name: str = "",
) -> HedgedOutcome[T]:
    """Run one hedged run of ``attempt``; see :meth:`tenacity_budget.Hedge.run`."""
    run = _Run(
        hedge,
        attempt,
        horizon if horizon is not None else Horizon(None),
        estimate,
        max_elapsed,
        time.monotonic() if started is None else started,
        budget,
        throttle,
        release,
        observers,
        name,
    )
    return await run.go()
