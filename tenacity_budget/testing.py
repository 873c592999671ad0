"""Testing toolkit: a virtual clock for budgeted retries, and a zero-wait testing mode.

:func:`virtual_clock` (also a pytest fixture, registered by ``tenacity_budget.pytest_plugin``)
freezes the wall and monotonic clocks with freezegun (the ``testing`` extra) and turns every
sleep into an instant jump, so budgets, deadlines and :func:`~tenacity_budget.remaining`
behave as in production and a test that "waits" an hour runs in microseconds; its
:meth:`VirtualClock.event_loop` runs concurrent tasks whose sleeps overlap in virtual time.
:func:`set_testing` and :func:`testing_mode` switch every budgeted strategy to zero-wait,
bounded-attempt mode, like stamina's ``set_testing``. See docs/testing.md.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
import math
import numbers
import selectors
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, TypeVarTuple, Unpack
from unittest import mock

from ._config import set_testing_attempts, testing_attempts
from ._validate import attempts as _attempts
from ._validate import aware
from ._validate import seconds as _seconds

if TYPE_CHECKING:
    from freezegun.api import FrozenDateTimeFactory

__all__ = ["VirtualClock", "set_testing", "testing_mode", "virtual_clock"]

_Ts = TypeVarTuple("_Ts")

_INSTALL_HINT = (
    "tenacity_budget.testing.virtual_clock needs freezegun: pip install 'tenacity-budget[testing]'"
)


def _freezegun() -> ModuleType:
    """The ``freezegun`` package (its ``api`` loaded), or the extra's ``ImportError``."""
    try:
        import freezegun
        import freezegun.api
    except ImportError as exc:
        raise ImportError(_INSTALL_HINT) from exc
    return freezegun


# freezegun hands real time to any caller within a few frames of a module on its ignore list.
# "threading" is on it (so that threading's own timeouts keep working), which would give a
# function run as a Thread target the real monotonic clock at the start of its run and the
# virtual one later. threading reads its clock through its own binding, which freezegun
# leaves unpatched anyway, so only the frame inspection is relaxed for it.
_THREAD_FRAMES_GET_VIRTUAL_TIME = ("threading",)

# One virtual clock at a time: sleeps can only advance one clock.
_active_lock = threading.Lock()
_active: VirtualClock | None = None


class VirtualClock:
    """A frozen clock that every sleep moves forward at once; build it with :func:`virtual_clock`.

    While the clock runs, ``time.time()``, ``time.monotonic()``, ``time.perf_counter()``,
    ``datetime.now()`` and ``datetime.now(UTC)`` are frozen (through freezegun), and:

    * ``time.sleep(s)`` (what tenacity's default ``sleep`` calls) records ``s`` in
      :attr:`sleeps` and moves the clock ``s`` seconds forward, without waiting;
    * ``asyncio.sleep(s)`` (what ``AsyncRetrying``'s default sleep awaits under asyncio) does
      the same, then still yields to the event loop once (it awaits the real
      ``asyncio.sleep(0)``), so other tasks keep running. A negative delay counts as 0, as
      in asyncio; ``asyncio.sleep(math.inf)`` parks on the real sleep (until cancelled)
      without moving the clock (on :meth:`event_loop`, an event loop on this clock, it is
      a timer instead, so concurrent sleeps overlap);
    * :meth:`advance` moves the clock without recording a sleep: it simulates an attempt
      (or anything else) taking time.

    After the ``with`` block, :attr:`sleeps`, :attr:`elapsed`, :meth:`now` and
    :meth:`monotonic` keep their final values; :meth:`advance` refuses to run.

    Every sleep is recorded, zero-length ones included (tenacity sleeps ``0.0`` in testing
    mode), in the order made, from any thread or task.

    Exactness: the clock keeps the exact (rational) sum of every sleep and advance;
    :attr:`elapsed` is that sum as the nearest float, so ten ``advance(0.1)`` give exactly
    ``1.0`` and no rounding ever accumulates. ``time.monotonic()`` and
    ``time.perf_counter()`` read :attr:`elapsed` itself (the virtual monotonic clock starts
    at ``0.0``) and ``time.time()`` the start's timestamp plus it, so a schedule that fills
    its budget to the last microsecond gets exactly the retries the solver affords.
    ``datetime.now()`` (freezegun's) shows the same instant at datetime's microsecond
    resolution. pytest's own timing (``--durations``) keeps the real clock.

    Not intercepted: a ``sleep=`` passed to tenacity explicitly, a ``sleep`` imported with
    ``from time import sleep`` before the clock started, and trio's sleep. Time is frozen
    for the whole process, every thread included. Clocks do not nest.

    Attributes:
        sleeps: every sleep made while the clock ran, in seconds, in order. A plain list:
            ``clock.sleeps.clear()`` starts a new tally.
    """

    def __init__(self, start: datetime | None = None) -> None:
        _freezegun()  # the first use: without the extra, say which one to install
        if start is not None:
            aware(start, "start")
        self.sleeps: list[float] = []
        self._requested_start = start
        self._start: datetime | None = None
        self._elapsed = 0.0
        self._exact = Fraction(0)  # the exact sum of every sleep and advance
        self._epoch = 0.0  # time.time() at the start
        self._factory: FrozenDateTimeFactory | None = None
        self._stack: ExitStack | None = None
        self._used = False
        self._final: tuple[datetime, float] | None = None
        self._lock = threading.Lock()
        self._real_sleep: Callable[[float], None] = time.sleep

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<VirtualClock {state} elapsed={self._elapsed!r} sleeps={len(self.sleeps)}>"

    # -- figures --------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the clock is frozen and intercepting sleeps (inside its ``with`` block)."""
        return self._factory is not None

    @property
    def start(self) -> datetime:
        """The instant the clock started at (timezone-aware, UTC)."""
        if self._start is None:
            raise RuntimeError("the virtual clock has not started; use it in a with block")
        return self._start

    @property
    def elapsed(self) -> float:
        """Virtual seconds since the clock started: every sleep plus every :meth:`advance`."""
        return self._elapsed

    @property
    def slept(self) -> float:
        """The sum of :attr:`sleeps`, in seconds."""
        return math.fsum(self.sleeps)

    def now(self) -> datetime:
        """The current virtual instant, timezone-aware in UTC (``datetime.now(UTC)``).

        After the ``with`` block, the instant the clock stopped at, so a test can assert on
        it once the block (and a ``pytest.raises`` sharing its ``with``) has ended.
        """
        if self.running:
            return datetime.now(UTC)
        if self._final is None:
            raise RuntimeError("the virtual clock has not started; use it in a with block")
        return self._final[0]

    def monotonic(self) -> float:
        """The current virtual ``time.monotonic()``: :attr:`elapsed` (it starts at ``0.0``).

        After the ``with`` block, its value when the clock stopped.
        """
        if self.running:
            return time.monotonic()
        if self._final is None:
            raise RuntimeError("the virtual clock has not started; use it in a with block")
        return self._final[1]

    # -- moving the clock -----------------------------------------------------------------

    def advance(self, seconds: float | timedelta) -> None:
        """Move the clock ``seconds`` forward without recording a sleep.

        Call it inside the function under test to simulate an attempt that takes time: the
        budget's wall-clock guard and deadline see that time pass, as in production.

        Raises:
            ValueError: for a negative, NaN or infinite duration (time never goes back).
            RuntimeError: outside the clock's ``with`` block.
        """
        if isinstance(seconds, timedelta):
            seconds = seconds.total_seconds()
        self._move(self._duration(seconds, "advance"), record=False)

    def _duration(self, seconds: object, what: str) -> float:
        return _seconds(seconds, f"the {what} length")

    def _move(self, seconds: float, *, record: bool) -> None:
        with self._lock:
            factory = self._require_running()
            self._exact += Fraction(seconds)
            self._elapsed = float(self._exact)
            if record:
                self.sleeps.append(seconds)
            # Place the clock from the exact total, so microsecond rounding never piles up.
            factory.move_to(self.start + timedelta(seconds=self._elapsed))

    def _move_to(self, instant: float) -> None:
        """Move the monotonic clock to exactly ``instant`` (a timer's time); never back."""
        with self._lock:
            factory = self._require_running()
            target = Fraction(instant)
            if target > self._exact:
                self._exact = target
                self._elapsed = instant
                factory.move_to(self.start + timedelta(seconds=instant))

    def _record(self, seconds: float) -> None:
        """Record a sleep the clock does not make itself (a timer of its event loop)."""
        with self._lock:
            self._require_running()
            self.sleeps.append(seconds)

    def _require_running(self) -> FrozenDateTimeFactory:
        factory = self._factory
        if factory is None:
            raise RuntimeError("the virtual clock is not running; use it in a with block")
        return factory

    # -- the fakes ------------------------------------------------------------------------

    def _exact_clocks(self) -> dict[str, Callable[[], float | int]]:
        """``time`` functions reading the exact sum, not freezegun's microseconds."""

        def monotonic() -> float:
            return self._elapsed

        def monotonic_ns() -> int:
            return int(self._exact * 1_000_000_000)

        def wall() -> float:
            return self._epoch + self._elapsed

        def wall_ns() -> int:
            return int((Fraction(self._epoch) + self._exact) * 1_000_000_000)

        return {
            "monotonic": monotonic,
            "monotonic_ns": monotonic_ns,
            "perf_counter": monotonic,
            "perf_counter_ns": monotonic_ns,
            "time": wall,
            "time_ns": wall_ns,
        }

    def _fake_sleep(self, seconds: float) -> None:
        if not self.running:  # a reference kept past the with block: behave as time.sleep
            self._real_sleep(seconds)
            return
        self._move(self._duration(seconds, "sleep"), record=True)

    def _fake_async_sleep(
        self, real_sleep: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        async def sleep(delay: float, result: Any = None) -> Any:
            """``asyncio.sleep`` on the virtual clock: jump, record, yield to the loop once."""
            if not self.running or delay == math.inf:
                return await real_sleep(delay, result)
            if isinstance(delay, numbers.Real) and not isinstance(delay, bool) and delay < 0:
                delay = 0.0
            self._move(self._duration(delay, "sleep"), record=True)
            await real_sleep(0)
            return result

        return sleep

    # -- the event loop -------------------------------------------------------------------

    @contextmanager
    def event_loop(self) -> Iterator[asyncio.AbstractEventLoop]:
        """An asyncio event loop on this clock, whose tasks' sleeps overlap in virtual time.

        Whenever no callback is ready and no real I/O is ready, the loop moves the clock to
        its next timer at once instead of waiting for it, so concurrent tasks run as they
        would in production, with every instant exact: a timer fires with ``loop.time()``
        and ``time.monotonic()`` equal to its ``when``, ``asyncio.gather(sleep(1),
        sleep(2))`` takes 2 virtual seconds, not 3. On this loop ``asyncio.sleep(s)`` is
        asyncio's own timer (recorded in :attr:`sleeps`, which may then sum to more than
        :attr:`elapsed`); elsewhere it keeps the clock's behaviour. With no timer pending
        (``asyncio.sleep(math.inf)`` is none), the loop waits for real I/O as any loop
        does, the clock standing still; but real I/O never holds the clock back from a
        pending timer, so a read with a timeout times out at once when its data is not
        already there. A blocking ``time.sleep`` or :meth:`advance` in a task moves the
        clock as a blocking call would: timers due meanwhile fire late.

        Example::

            async def both() -> None:
                await asyncio.gather(asyncio.sleep(1), asyncio.sleep(2))

            with virtual_clock() as clock, clock.event_loop() as loop:
                loop.run_until_complete(both())
            assert clock.elapsed == 2.0 and clock.sleeps == [1.0, 2.0]

        On exit, tasks still pending are cancelled (and run to their end), async
        generators and the default executor are shut down, and the loop is closed, as
        :func:`asyncio.run` does.

        Raises:
            RuntimeError: outside the clock's ``with`` block.
        """
        self._require_running()
        loop = _VirtualLoop(self)
        with mock.patch.object(asyncio, "sleep", self._loop_sleep(loop, asyncio.sleep)):
            try:
                yield loop
            finally:
                _shut_down(loop)

    def _loop_sleep(
        self, loop: asyncio.AbstractEventLoop, elsewhere: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        async def sleep(delay: float, result: Any = None) -> Any:
            """``asyncio.sleep``: a timer on the virtual loop, as before on any other."""
            if _running_loop() is not loop:
                return await elsewhere(delay, result)
            if delay != math.inf:
                if isinstance(delay, numbers.Real) and not isinstance(delay, bool) and delay < 0:
                    delay = 0.0
                self._record(self._duration(delay, "sleep"))
            return await asyncio.tasks.sleep(delay, result)

        return sleep

    # -- context management ---------------------------------------------------------------

    def __enter__(self) -> VirtualClock:
        global _active
        freezegun = _freezegun()
        if self._used:
            raise RuntimeError("a VirtualClock runs once; create a new one with virtual_clock()")
        with _active_lock:
            if _active is not None:
                raise RuntimeError("a virtual clock is already running; virtual clocks do not nest")
            _active = self
        self._used = True
        start = self._requested_start
        if start is None:
            start = datetime.now(UTC).replace(microsecond=0)
        start = start.astimezone(UTC)
        stack = ExitStack()
        try:
            # pytest's own timing (--durations) reads through _pytest.timing: keep it real.
            factory = stack.enter_context(
                freezegun.freeze_time(start, ignore=["_pytest.timing"], real_asyncio=True)
            )
            if not isinstance(factory, freezegun.api.FrozenDateTimeFactory):  # pragma: no cover
                raise TypeError(f"freezegun returned an unexpected {type(factory).__name__}")
            _relax_frame_inspection(freezegun.api)
            self._real_sleep = time.sleep
            stack.enter_context(mock.patch.object(time, "sleep", self._fake_sleep))
            self._epoch = start.timestamp()
            for name, clock in self._exact_clocks().items():
                stack.enter_context(mock.patch.object(time, name, clock))
            fake = self._fake_async_sleep(asyncio.sleep)
            stack.enter_context(mock.patch.object(asyncio, "sleep", fake))
        except BaseException:
            stack.close()
            with _active_lock:
                _active = None
            raise
        self._start = start
        self._factory = factory
        self._stack = stack
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _active
        stack, self._stack = self._stack, None
        with self._lock:
            if self._factory is not None:
                self._final = (datetime.now(UTC), time.monotonic())
            self._factory = None
        try:
            if stack is not None:
                stack.close()
        finally:
            with _active_lock:
                if _active is self:
                    _active = None


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _VirtualSelector(selectors.DefaultSelector):
    """A selector that, asked to wait for a timer, moves the virtual clock to it instead."""

    def __init__(self, clock: VirtualClock, next_timer: Callable[[], float]) -> None:
        super().__init__()
        self._clock = clock
        self._next_timer = next_timer

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        when = self._next_timer()
        if when == math.inf:  # no timer: only real I/O (or another thread) can wake the loop
            return super().select(None)
        self._clock._move_to(when)
        return []


class _VirtualLoop(asyncio.SelectorEventLoop):
    """An event loop on the virtual clock: its time is the clock's monotonic time, and it
    keeps its own heap of timers, so its selector moves the clock to exactly the next one."""

    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock
        self._timers: list[tuple[float, int, asyncio.TimerHandle]] = []
        self._order = itertools.count()
        super().__init__(_VirtualSelector(clock, self._next_timer))

    def time(self) -> float:
        return self._clock._elapsed

    def call_at(
        self,
        when: float,
        callback: Callable[[Unpack[_Ts]], object],
        *args: *_Ts,
        context: contextvars.Context | None = None,
    ) -> asyncio.TimerHandle:
        handle = super().call_at(when, callback, *args, context=context)
        heapq.heappush(self._timers, (handle.when(), next(self._order), handle))
        return handle

    def _next_timer(self) -> float:
        """The time of the earliest timer still pending (``inf``: none); fired and
        cancelled ones are dropped."""
        timers, now = self._timers, self._clock._elapsed
        while timers and (timers[0][2].cancelled() or timers[0][0] <= now):
            heapq.heappop(timers)
        return timers[0][0] if timers else math.inf


def _shut_down(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks still pending, shut async generators and the executor down, close:
    as :func:`asyncio.run` ends (the executor awaited without a timeout, which would be a
    timer of this loop and fire at once)."""
    if loop.is_closed():
        return
    try:
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


def _relax_frame_inspection(api: Any) -> None:
    """Let code running in a Thread target see the virtual clock, not the real one.

    freezegun keeps one tuple of ignored module prefixes per active freeze in
    ``freezegun.api.ignore_lists``; this removes ``threading`` from the tuple of the freeze
    just started (popped again when it stops). Left alone if freezegun changes that shape.
    """
    lists = getattr(api, "ignore_lists", None)
    if isinstance(lists, list) and lists and isinstance(lists[-1], tuple):
        lists[-1] = tuple(m for m in lists[-1] if m not in _THREAD_FRAMES_GET_VIRTUAL_TIME)


def virtual_clock(start: datetime | None = None) -> VirtualClock:
    """A virtual clock for budgeted retries; use it as a context manager.

    Inside the ``with`` block time is frozen at ``start`` (default: now, truncated to the
    second) and every ``time.sleep`` / ``asyncio.sleep`` (tenacity's default sleeps) moves
    it forward at once and is recorded in ``clock.sleeps``. ``clock.advance(s)`` simulates
    an attempt taking ``s`` seconds. Budgets (monotonic clock), deadlines
    (``datetime.now(UTC)``) and :func:`~tenacity_budget.remaining` see virtual time, so a
    run behaves as in production without any real waiting. Everything is restored on exit,
    also when the block raises. Details and limits: :class:`VirtualClock`.

    Example::

        policy = BackoffPolicy(base=1, factor=2, cap=8, max_elapsed=30, jitter="none")

        @policy.retry()
        def slow() -> None:
            clock.advance(7)  # every attempt takes 7 s
            raise OSError("down")

        with virtual_clock() as clock, pytest.raises(BudgetExhausted) as info:
            slow()
        assert info.value.report.reason is StopReason.WALL_CLOCK
        assert clock.sleeps == [1.0, 2.0]

    With pytest, the ``virtual_clock`` fixture (installed with the package) yields a running
    clock instead.

    Args:
        start: the timezone-aware instant to start at.

    Raises:
        ImportError: when freezegun is not installed
            (``pip install 'tenacity-budget[testing]'``).
    """
    return VirtualClock(start)


# -- zero-wait testing mode ---------------------------------------------------------------


def _check_attempts(attempts: object) -> int:
    return _attempts(attempts, "testing mode attempts")


def set_testing(on: bool, *, attempts: int = 3) -> None:
    """Switch every budgeted retry to zero-wait, bounded-attempt mode (``on=False``: back).

    In testing mode every :class:`~tenacity_budget.strategies.wait_budget` waits ``0``
    seconds and every :class:`~tenacity_budget.strategies.stop_budget` stops after
    ``attempts`` calls (the first one included; reason ``count``), whatever the policy's
    budget and deadline. That covers ``policy.retry()`` and plain
    ``@retry(wait=policy.wait(), stop=policy.stop())``; a ``wait=`` of your own (say
    ``wait_fixed(5)``) still waits. The switch is process-wide (every thread and task).

    To enable it for every test without touching the code under test, add to the suite's
    ``conftest.py`` either a fixture that restores the previous setting after each test::

        import pytest
        from tenacity_budget.testing import testing_mode

        @pytest.fixture(autouse=True)
        def _budgeted_retries_do_not_wait():
            with testing_mode(attempts=3):
                yield

    or a session-wide switch::

        from tenacity_budget.testing import set_testing

        def pytest_configure(config):
            set_testing(True, attempts=3)

    A test that wants the real schedule then uses ``with testing_mode(...)`` for a
    different bound, or ``set_testing(False)`` (and the :func:`virtual_clock` to keep it
    instant).

    Args:
        on: ``True`` to enable, ``False`` to disable.
        attempts: calls each run makes at most while enabled (``>= 1``); ignored when off.
    """
    if not isinstance(on, bool):
        raise TypeError(f"on must be a bool, got {type(on).__name__}")
    set_testing_attempts(_check_attempts(attempts) if on else None)


@contextmanager
def testing_mode(*, attempts: int = 3) -> Iterator[None]:  # noqa: PT028 (not a test)
    """Zero-wait, bounded-attempt mode inside a ``with`` block; restores the previous setting.

    The previous setting (off, or another bound) comes back on exit, also when the block
    raises, so blocks nest. See :func:`set_testing` for what the mode does and for the
    ``conftest.py`` recipe that enables it for a whole suite.
    """
    bound = _check_attempts(attempts)
    previous = testing_attempts()
    set_testing_attempts(bound)
    try:
        yield
    finally:
        set_testing_attempts(previous)


# The name starts with "test": without this, pytest would collect it as a test function in
# every test module that imports it.
testing_mode.__test__ = False  # type: ignore[attr-defined]
