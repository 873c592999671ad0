"""The validated model: :class:`BackoffPolicy`, a budget-bounded exponential backoff.

A policy is a frozen pydantic model. Every configuration that could not respect its
budget is refused at construction with a :class:`pydantic.ValidationError` that says what
to change, so an unsafe policy fails at start-up, never mid-incident. The policy derives how
many retries its budget affords and hands out tenacity strategies that enforce it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Self

from pydantic import (
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from ._terms import Terms, terms
from ._validate import aware as check_aware
from ._validate import one_generator
from ._validate import seed as check_seed
from .decision import decide
from .jitter import JitterMode, jitter_for
from .retrying import BudgetedRetry
from .solver import add_compensated, backoff_delays, capped_index, compute_max_attempts, total_delay
from .strategies import DeadlineSource, RetryAfter, stop_budget, wait_budget

__all__: list[str] = []  # every public name here is the package's (tenacity_budget)


def _a_number(value: Any, info: ValidationInfo) -> Any:
    # pydantic's lax mode reads True as 1.0 and "1.5" (or b"1.5") as 1.5; neither a bool nor
    # text is meant as a number of seconds: a configuration read as text is parsed by its
    # reader, where a typo is caught. Numbers (int, float, Decimal, Fraction) pass on.
    if isinstance(value, bool):
        raise ValueError(f"{info.field_name} must be a number, got the bool {value!r}")
    if isinstance(value, str | bytes | bytearray):
        raise ValueError(
            f"{info.field_name} must be a number, got the {type(value).__name__} {value!r}; "
            "pass a number (float(...)), not text"
        )
    return value


Seconds = Annotated[float, BeforeValidator(_a_number), Field(allow_inf_nan=False)]


def _refused(exc: ValidationError, given: dict[str, Any]) -> ValidationError:
    """``exc`` again, its errors located on and showing only the arguments ``given``."""
    errors: list[InitErrorDetails] = []
    for error in exc.errors():
        loc = error["loc"]
        if loc == ("max_elapsed",):
            loc = ("deadline",)
        errors.append(
            {
                "type": PydanticCustomError("value_error", "{message}", {"message": error["msg"]}),
                "loc": loc,
                # A whole-input error (a missing field, the model's own check) shows
                # what the caller passed, not the derived max_elapsed.
                "input": given
                if not loc or loc == ("deadline",) or isinstance(error["input"], dict)
                else error["input"],
            }
        )
    return ValidationError.from_exception_data(exc.title, errors)


# How the validator names the budget: for_deadline derives max_elapsed from the deadline
# and the reserve, and its callers can only change those, so its messages say so.
_BUDGET_NAMES = {
    False: ("max_elapsed", "raise max_elapsed"),
    True: (
        "the window until the deadline less the reserve",
        "move the deadline later or lower reserve",
    ),
}

# waits() builds a list; beyond this many retries, walk iter_waits() instead.
_MAX_LISTED_WAITS = 10_000_000


class BackoffPolicy(BaseModel):
    """A budget-bounded exponential backoff configuration.

    The nominal delay before retry ``n`` (``n = 0, 1, ...``) is
    ``min(cap, base * factor**n)``; jitter draws each actual wait within that nominal
    delay. The policy affords :meth:`max_attempts` retries: the largest count whose nominal
    delays, plus one ``attempt_duration`` per call, fit in ``max_elapsed``.

    Example:
        >>> policy = BackoffPolicy(base=1, factor=2, cap=60, max_elapsed=300, jitter="none")
        >>> policy.max_attempts()
        9
        >>> policy.waits()
        [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    """

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,
        str_strip_whitespace=True,
        validate_default=True,
    )

    base: Seconds = Field(gt=0, description="First delay, in seconds (> 0).")
    factor: Seconds = Field(default=2.0, gt=1, description="Growth per retry (> 1).")
    cap: Seconds = Field(gt=0, description="Ceiling of any one delay, in seconds (> 0).")
    max_elapsed: Seconds = Field(gt=0, description="Total retry budget, in seconds (> 0).")
    jitter: JitterMode = Field(default="full", description="none, full, equal or decorrelated.")
    attempt_duration: Seconds = Field(
        default=0.0,
        ge=0,
        description="Seconds one attempt takes at most (>= 0); counted in the budget.",
    )
    deadline: AwareDatetime | None = Field(
        default=None,
        description="Absolute deadline (timezone-aware) that every run also respects.",
    )

    _max_attempts: int = PrivateAttr(default=0)
    _capped_index: int = PrivateAttr(default=0)
    _terms: Terms | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _budget_admits_a_retry(self, info: ValidationInfo) -> Self:
        budget, raise_it = _BUDGET_NAMES[bool(info.context and info.context.get("for_deadline"))]
        if self.base > self.max_elapsed:
            raise ValueError(
                f"base ({self.base:g} s) exceeds {budget} ({self.max_elapsed:g} s): the "
                f"budget affords no retry; lower base or {raise_it}"
            )
        if self.cap < self.base:
            raise ValueError(
                f"cap ({self.cap:g} s) is below base ({self.base:g} s): every delay would be "
                "cap and base would be ignored; raise cap to at least base, or lower base"
            )
        if self.cap > self.max_elapsed:
            raise ValueError(
                f"cap ({self.cap:g} s) exceeds {budget} ({self.max_elapsed:g} s): a single "
                f"wait could breach the budget; lower cap or {raise_it}"
            )
        affordable = compute_max_attempts(
            self.max_elapsed, self.base, self.factor, self.cap, self.attempt_duration
        )
        if affordable == 0:
            raise ValueError(
                f"{budget} ({self.max_elapsed:g} s) affords no retry: one retry needs base "
                f"({self.base:g} s) plus two attempts of attempt_duration "
                f"({self.attempt_duration:g} s); {raise_it}, or lower base or attempt_duration"
            )
        self._max_attempts = affordable
        self._capped_index = capped_index(self.base, self.factor, self.cap)
        self._terms = terms(
            self.base,
            self.factor,
            self.cap,
            self.max_elapsed,
            self.attempt_duration,
            self.jitter,
            self.deadline,
            affordable,
            self._capped_index,
        )
        return self

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy, re-validated when ``update`` changes fields.

        pydantic's ``model_copy(update=...)`` skips validation, which here would keep the
        old ``max_attempts()`` for a new budget: a silently wrong schedule. Updates are
        therefore validated like a new policy.
        """
        if not update:
            return super().model_copy(deep=deep)
        return self.model_validate({**self.model_dump(), **update})

    # -- derived figures ------------------------------------------------------------------

    @property
    def terms(self) -> Terms:
        """The policy's figures as one frozen record of plain numbers (what the adapters
        read), computed once at construction."""
        assert self._terms is not None  # set by the validator
        return self._terms

    def max_attempts(self) -> int:
        """Retries the budget affords (computed once, in constant time).

        The first call is free: a run makes at most ``max_attempts() + 1`` calls.
        """
        return self._max_attempts

    def capped_index(self) -> int:
        """Index of the first retry whose nominal delay is exactly ``cap``."""
        return self._capped_index

    def total_nominal(self) -> float:
        """Sum of the nominal delays of every affordable retry (at most ``max_elapsed``)."""
        return total_delay(self._max_attempts, self.base, self.factor, self.cap)

    def nominal_delays(self) -> Iterator[float]:
        """The nominal delay of each affordable retry, lazily (constant memory)."""
        return backoff_delays(self.base, self.factor, self.cap, self._max_attempts)

    def iter_waits(self, rng: random.Random | None = None) -> Iterator[float]:
        """The concrete (jittered) waits of one run, lazily, drawing from ``rng``.

        Exactly the sleeps a run of an always-failing function makes under
        ``wait=self.wait(rng=rng), stop=self.stop()`` when its attempts take no time (or
        ``attempt_duration`` each, up to float rounding at an exact tie): one wait per
        affordable retry, stopping early only if float rounding would carry the
        (compensated) running total of the sleeps past ``max_elapsed``.
        """
        total = error = previous = 0.0
        limit, affordable, base = self.max_elapsed, self._max_attempts, self.base
        jitter = jitter_for(self.jitter)
        inf = math.inf
        for attempt, delay in enumerate(self.nominal_delays(), 1):
            wait = jitter(delay, previous, base, rng)
            # The stop's decision, with the stop's compensated arithmetic, for attempts that
            # take no time (their own time is already in the count, decided by the solver).
            next_total, next_error = add_compensated(total, error, wait)
            if decide(attempt, affordable, wait, next_total + next_error, 0.0, 0.0, limit, inf):
                return
            total, error = next_total, next_error
            previous = wait
            yield wait

    def waits(self, rng: random.Random | None = None) -> list[float]:
        """The concrete (jittered) waits for each affordable retry, as a list.

        Raises:
            ValueError: when the budget affords more than ten million retries; walk
                :meth:`iter_waits` instead of building such a list.
        """
        if self._max_attempts > _MAX_LISTED_WAITS:
            raise ValueError(
                f"this policy affords {self._max_attempts} retries, too many to list; "
                "walk policy.iter_waits() instead"
            )
        return list(self.iter_waits(rng))

    def schedule(self, seed: int | None = None, *, rng: random.Random | None = None) -> list[float]:
        """The exact sleeps a run under ``self.wait(seed=seed)`` makes, for tests to assert.

        With ``seed`` every run replays ``random.Random(seed)``; with ``rng`` the next run of
        a strategy sharing that generator (which this call advances, as a run would).
        """
        one_generator(seed, rng)
        check_seed(seed)
        return self.waits(random.Random(seed) if seed is not None else rng)

    # -- tenacity strategies --------------------------------------------------------------

    def wait(
        self,
        *,
        rng: random.Random | None = None,
        seed: int | None = None,
        retry_after: RetryAfter | None = None,
    ) -> wait_budget:
        """A tenacity wait strategy drawing this policy's jittered delays.

        Args:
            rng: one generator shared by every run; its stream continues across runs.
            seed: every run draws from its own ``random.Random(seed)``, so each run sleeps
                exactly ``self.waits(random.Random(seed))``.
            retry_after: ``fn(exception) -> seconds | None``; a number replaces the backoff
                delay of that retry (e.g. an HTTP ``Retry-After``). Pair with
                :meth:`stop`, which ends the run instead of sleeping past the budget.
        """
        return wait_budget(self, rng=rng, seed=seed, retry_after=retry_after)

    def stop(self, *, deadline: DeadlineSource | None = None) -> stop_budget:
        """A tenacity stop strategy that stops before any retry the budget cannot afford.

        Args:
            deadline: an absolute, timezone-aware deadline, or a callable taking tenacity's
                ``RetryCallState`` and returning one (to read each call's deadline from its
                arguments). The policy's own ``deadline`` field, if set, holds too: the run
                respects the earlier of the two.
        """
        return stop_budget(self, deadline=deadline)

    def retry(
        self,
        *,
        deadline: DeadlineSource | None = None,
        rng: random.Random | None = None,
        seed: int | None = None,
        retry_after: RetryAfter | None = None,
        on_exhausted: Callable[..., Any] | None = None,
        stats: Any = None,
        budget: Any = None,
        hard_deadline: bool = False,
        throttle: Any = None,
        **tenacity_kwargs: Any,
    ) -> BudgetedRetry:
        """A decorator factory like ``tenacity.retry``, wired with this policy.

        Wires ``wait=self.wait(...)`` and ``stop=self.stop(deadline=...)``, raises
        :class:`~tenacity_budget.BudgetExhausted` when the budget is spent, and makes
        :func:`~tenacity_budget.remaining` work inside every attempt. Works on sync and
        async functions. ``budget=`` draws every retry from a shared retry budget
        (:class:`~tenacity_budget.RetryBudget`); ``hard_deadline=True`` (coroutine functions
        only) cancels an attempt still running when the run's time is up; ``throttle=``
        asks an :class:`~tenacity_budget.AdaptiveThrottle` before every attempt. See
        :class:`tenacity_budget.retrying.BudgetedRetry` for the options.
        """
        wait = None
        if "wait" not in tenacity_kwargs:
            wait = wait_budget(self, rng=rng, seed=seed, retry_after=retry_after)
        return BudgetedRetry(
            self,
            deadline=deadline,
            rng=rng,
            seed=seed,
            retry_after=retry_after,
            on_exhausted=on_exhausted,
            stats=stats,
            budget=budget,
            hard_deadline=hard_deadline,
            tenacity_kwargs=tenacity_kwargs,
            wait=wait,
            stop=stop_budget(self, deadline=deadline),
            throttle=throttle,
        )

    # -- construction helpers -------------------------------------------------------------

    @classmethod
    def for_deadline(
        cls,
        deadline: datetime,
        *,
        reserve: float = 0.5,
        now: datetime | None = None,
        **fields: Any,
    ) -> Self:
        """A policy whose budget is the window until ``deadline`` less a reserve.

        ``max_elapsed`` becomes ``(deadline - now) * (1 - reserve)`` seconds, keeping the
        ``reserve`` fraction of the window as headroom for the successful call and for
        escalation (the design notes suggest half). The deadline itself is kept on the
        policy, so every run also stops before a retry that would end after it.

        Args:
            deadline: the absolute, timezone-aware deadline.
            reserve: fraction of the remaining window kept back, in ``[0, 1)``.
            now: the current time (timezone-aware); defaults to the clock.
            **fields: the other fields (``base``, ``cap``, ``jitter``, ...).

        Raises:
            ValueError: for a naive datetime, a reserve outside ``[0, 1)`` or a deadline
                already past.
            pydantic.ValidationError: when the remaining budget affords no retry.
        """
        check_aware(deadline)
        if now is None:
            now = datetime.now(UTC)
        check_aware(now, "now")
        if isinstance(reserve, bool) or not isinstance(reserve, int | float):
            raise TypeError(f"reserve must be a fraction in [0, 1), got {type(reserve).__name__}")
        if not 0.0 <= reserve < 1.0:
            raise ValueError(f"reserve must be a fraction in [0, 1), got {reserve!r}")
        if "max_elapsed" in fields or "deadline" in fields:
            raise TypeError("for_deadline derives max_elapsed and deadline; do not pass them")
        # Epoch seconds, not `deadline - now`: two datetimes sharing one tzinfo object
        # subtract as wall-clock times, an hour off across a DST change.
        window = deadline.timestamp() - now.timestamp()
        if window <= 0:
            raise ValueError(
                f"deadline {deadline.isoformat()} is already past (now {now.isoformat()}); "
                "there is no budget left to retry in"
            )
        try:
            return cls.model_validate(
                {**fields, "max_elapsed": window * (1.0 - reserve), "deadline": deadline},
                context={"for_deadline": True},
            )
        except ValidationError as exc:
            # Speak of what the caller passed: max_elapsed is derived, not theirs to change.
            given = {**fields, "deadline": deadline, "reserve": reserve}
            raise _refused(exc, given) from None
