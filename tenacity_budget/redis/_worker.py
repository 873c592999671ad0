"""The helper thread of a sync Redis budget: calls with a timeout, and the "stuck" state.

A sync client's call cannot be interrupted, so the budget hands each one to this thread and
stops waiting at its bound; a call given up on keeps running here, and until it returns
the next calls fail at once instead of queueing behind it (see docs/retry-budgets.md).
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, Protocol

_WAKE = "wake"  # a job that only makes the thread look at its owner's pending deposits


class NotRun(Exception):
    """A call to Redis that was never made (its deposits are still to be sent)."""


class Owner(Protocol):
    """What the thread flushes while it has no job: the budget's pending deposits."""

    def _has_pending(self) -> bool:
        """Whether deposits wait to be sent."""

    def _flush_here(self) -> None:
        """Send them from the calling thread; never raises."""


class Job:
    """One call handed to a :class:`Worker`, and whether its caller stopped waiting."""

    __slots__ = ("abandoned", "finished", "fn", "future")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.abandoned = False  # the caller gave up on it while it ran
        self.finished = False  # it has returned (or raised) on the thread


class Worker:
    """One daemon thread making a sync budget's Redis calls, so that a caller can stop waiting.

    Whether a call given up on is still out is decided under one lock by both sides (the
    caller giving up, the thread finishing), so a call that returns as its caller gives up
    never leaves the worker marked as stuck. While deposits are pending and nothing else
    happens, the thread flushes them every ``interval`` seconds (real time).
    """

    def __init__(self, owner: Owner, name: str, interval: float) -> None:
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._abandoned = 0  # calls given up on by their caller and still running
        self._interval = interval
        self._thread = threading.Thread(
            target=self._loop,
            args=(weakref.ref(owner),),
            name=f"tenacity-budget-redis:{name}",
            daemon=True,
        )
        self._thread.start()
        # Stop the thread once its owner is gone (not at exit: the exit flush needs it).
        weakref.finalize(owner, self._jobs.put, None).atexit = False

    @property
    def alive(self) -> bool:
        """Whether the thread runs (it does not survive a fork)."""
        return self._thread.is_alive()

    @property
    def stuck(self) -> bool:
        """Whether a call its caller gave up on is still running."""
        return self._abandoned > 0

    def _loop(self, ref: weakref.ref[Owner]) -> None:
        while True:
            job = self._next(ref)
            if job is None:
                return
            if isinstance(job, Job):
                self._run(job)
            del job  # hold nothing of the owner's while waiting for the next job

    def _next(self, ref: weakref.ref[Owner]) -> Any:
        """The next job, flushing the owner's pending deposits while there is none."""
        while True:
            owner = ref()
            pending = owner is not None and owner._has_pending()
            del owner
            try:
                return self._jobs.get(timeout=self._interval if pending else None)
            except queue.Empty:
                owner = ref()
                if owner is not None:
                    owner._flush_here()
                del owner

    def _run(self, job: Job) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            job.future.set_result(job.fn())
        except BaseException as error:
            job.future.set_exception(error)
        finally:
            with self._lock:
                job.finished = True
                if job.abandoned:
                    self._abandoned -= 1

    def wake(self) -> None:
        """Have the thread notice new pending deposits (and start their flush timer)."""
        self._jobs.put(_WAKE)

    def call(self, fn: Callable[[], Any], timeout: float | None) -> Any:
        """``fn()`` on the thread; raise ``TimeoutError`` if it takes more than ``timeout``.

        Raises :class:`NotRun` when ``fn`` was never run: an earlier call given up on is
        still out, or ``fn`` was still queued at the timeout.
        """
        if self._abandoned:
            raise NotRun("an earlier call to Redis has not returned yet")
        job = Job(fn)
        self._jobs.put(job)
        try:
            return job.future.result(timeout)
        except TimeoutError:
            pass
        if job.future.cancel():
            raise NotRun(f"Redis did not answer within {timeout:.3g} s")
        with self._lock:
            finished = job.finished
            if not finished:
                job.abandoned = True
                self._abandoned += 1
        if finished:  # it returned as the wait ended: its outcome stands
            return job.future.result()
        raise TimeoutError(f"Redis did not answer within {timeout:.3g} s")

    def stop(self) -> None:
        """End the thread once the jobs queued before are done."""
        self._jobs.put(None)
