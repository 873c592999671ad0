"""What the requests adapter and the aiohttp middleware share: the first attempt's time left,
the vehicle of a retryable response, and errors of a client's own kind that are also a
:class:`~tenacity_budget.BudgetExhausted`. See docs/cookbook.md.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from .context import remaining
from .exhaustion import BudgetExhausted

if TYPE_CHECKING:
    from .policy import BackoffPolicy


class RetryableStatus(Exception):
    """A response with a retryable status, raised inside the run so the policy retries it.

    It carries the response as ``.response``: :func:`tenacity_budget.http.retry_after`
    reads the wait the server asked for from it, as from any HTTP error.
    """

    def __init__(self, response: Any, status: int) -> None:
        super().__init__(f"retryable status {status}")
        self.response = response


def first_time_left(policy: BackoffPolicy) -> float:
    """The time left of a run of ``policy`` starting now (what ``remaining()`` says in it).

    Its budget, or less: the ambient deadline (an enclosing scope or run) and the policy's
    own ``deadline``.
    """
    left: float = policy.max_elapsed
    ambient = remaining()
    if ambient is not None and ambient < left:
        left = ambient
    if policy.deadline is not None:
        left = min(left, (policy.deadline - datetime.now(UTC)).total_seconds())
    return left


_KINDS: dict[type[BaseException], type[Any]] = {}


def exhausted(last: BaseException, spent: BudgetExhausted) -> BaseException:
    """An error of ``last``'s own kind that is also a ``BudgetExhausted`` with ``.report``.

    ``except requests.ConnectionError`` (or ``aiohttp.ClientConnectionError``) and ``except
    BudgetExhausted`` both catch it; its attributes are ``last``'s, its ``str`` the report.
    """
    kind = type(last)
    combined = _KINDS.get(kind)
    if combined is None:
        namespace = {
            "__module__": kind.__module__,
            "__qualname__": kind.__qualname__,
            "__str__": BudgetExhausted.__str__,
            "__doc__": f"{kind.__qualname__} raised by a spent budget: also a BudgetExhausted.",
        }
        combined = _KINDS[kind] = type(kind.__name__, (kind, BudgetExhausted), namespace)
    error: Any = combined.__new__(combined, *last.args)
    error.__dict__.update(vars(last))
    error.last_attempt = spent.last_attempt
    error.report = spent.report
    return error  # type: ignore[no-any-return]
