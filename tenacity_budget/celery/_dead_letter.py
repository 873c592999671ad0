"""Dead letters: what a budgeted Celery task hands over when it is given up.

A :class:`DeadLetter` goes to a :class:`DeadLetterQueue` (or a callable), then the task
fails with :class:`TaskBudgetExhausted`, which survives a JSON result backend. See
``docs/celery.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias

from ..exhaustion import ExhaustionReport
from ._lazy import _import


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A task given up (its time budget spent, or a retry refused by its retry budget), as
    handed to its dead-letter destination.

    Attributes:
        task: the task's registered name.
        task_id: the Celery task id.
        args: the task's positional arguments.
        kwargs: the task's keyword arguments.
        report: how the budget was spent; ``report.attempts`` counts the calls made,
            ``report.last_exception`` is ``None`` when the last retry arrived too late to run.
        deadline: the run's absolute deadline.
        dead_lettered_at: when the task was handed over (UTC).
    """

    task: str
    task_id: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    report: ExhaustionReport
    deadline: datetime
    dead_lettered_at: datetime

    def as_dict(self) -> dict[str, Any]:
        """Plain, JSON-friendly values: the body of a dead-letter queue message.

        ``task``, ``args`` and ``kwargs`` are what ``app.send_task`` needs to replay it.
        """
        return {
            "task": self.task,
            "task_id": self.task_id,
            "args": list(self.args),
            "kwargs": dict(self.kwargs),
            "report": self.report.as_dict(),
            "deadline": self.deadline.isoformat(),
            "dead_lettered_at": self.dead_lettered_at.isoformat(),
        }


class DeadLetterQueue:
    """A broker queue that receives one message per dead-lettered task.

    The body is :meth:`DeadLetter.as_dict`, published on the task's own Celery app (same
    broker, producer pool and connection retry) to a direct exchange and queue both named
    ``name``, as ``kombu.simple.SimpleQueue(channel, name)`` consumes them. No worker
    consumes it: it holds the letters for an operator, an alert or a replay job.

    Args:
        name: the queue (and exchange, and routing key) name.
        serializer: the body's serializer; defaults to ``"json"``. Use the app's
            ``task_serializer`` if task arguments are not JSON-friendly.
    """

    def __init__(self, name: str, *, serializer: str = "json") -> None:
        if not name:
            raise ValueError("a dead-letter queue needs a name")
        self.name = name
        self.serializer = serializer

    def __repr__(self) -> str:
        return f"DeadLetterQueue({self.name!r})"

    def queue(self) -> Any:
        """The ``kombu.Queue`` letters are published to (declared on every publish)."""
        kombu: Any = _import("kombu", "DeadLetterQueue")  # lazy; kombu's hints are partial
        exchange = kombu.Exchange(self.name, type="direct")
        return kombu.Queue(self.name, exchange, routing_key=self.name)

    def publish(self, app: Any, letter: DeadLetter) -> None:
        """Publish ``letter`` through ``app``'s producer pool (raises when the broker refuses)."""
        queue = self.queue()
        with app.producer_or_acquire() as producer:
            producer.publish(
                letter.as_dict(),
                exchange=queue.exchange,
                routing_key=self.name,
                declare=[queue],
                serializer=self.serializer,
                headers={"task": letter.task, "id": letter.task_id},
                retry=True,
            )


DeadLetterDestination: TypeAlias = DeadLetterQueue | str | Callable[[DeadLetter], object]
"""A :class:`DeadLetterQueue`, a queue name, or a callable taking the :class:`DeadLetter`."""


class TaskBudgetExhausted(Exception):
    """The task was given up (see :class:`DeadLetter`) and handed to its dead-letter
    destination, if it has one.

    The task's final state is ``FAILURE`` with this exception. Its arguments are plain
    values (a message and :meth:`DeadLetter.as_dict`), so it survives a JSON result backend
    and is rebuilt by ``AsyncResult.result`` in the client.

    Attributes:
        letter: the dead letter, as :meth:`DeadLetter.as_dict`.
    """

    def __init__(self, message: str, letter: Mapping[str, Any] | None = None) -> None:
        super().__init__(message, dict(letter) if letter is not None else {})
        self.letter: dict[str, Any] = dict(letter) if letter is not None else {}

    def __str__(self) -> str:
        return str(self.args[0])
