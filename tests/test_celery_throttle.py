"""CeleryBudget(throttle=...): the adaptive throttle as one more input to the plan's decision.

The plan is pure and tested on numbers with a scripted throttle (our own logic) and
Hypothesis; the glue's order of calls runs eagerly (``task.apply``) with recording
stand-ins. The real throttle in real worker processes is tested in ``test_celery.py``
(``test_a_throttle_that_rejects_...`` and ``test_a_throttle_that_admits_...``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget import AdaptiveThrottle, BackoffPolicy, RetryBudget, StopReason
from tenacity_budget.celery import (
    THROTTLED_HEADER,
    CeleryBudget,
    DeadLetter,
    TaskBudgetExhausted,
    admit_attempt,
    plan_retry,
    seed_for,
)
from tenacity_budget.celery._plan import _plan_retry
from tenacity_budget.exhaustion import Throttled
from tenacity_budget.redis import RedisAdaptiveThrottle
from tests._helpers import policies as shared_policies

T0 = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
POLICY = BackoffPolicy(base=1, cap=4, max_elapsed=20, jitter="none")  # 6 retries: 1+2+4+4+4+4


class Script:
    """A scripted throttle: answers ``admit()`` from ``answers`` (the last one repeats),
    logs every call to ``log`` (shared with a :class:`Ledger` to see the order)."""

    name = "script"
    probability = 0.75

    def __init__(self, answers: Iterable[bool], log: list[str] | None = None) -> None:
        self.answers = list(answers)
        self.log: list[str] = [] if log is None else log

    def admit(self) -> bool:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        self.log.append("admitted" if answer else "rejected")
        return answer

    def record(self, outcome: object) -> None:
        self.log.append(f"recorded:{type(outcome).__name__}")


class Ledger:
    """A retry budget that grants every withdrawal and logs every call to ``log``."""

    name = "ledger"
    is_async = False

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def deposit(self) -> None:
        self.log.append("deposit")

    def try_withdraw(self) -> bool:
        self.log.append("granted")
        return True


def policies() -> st.SearchStrategy[BackoffPolicy]:
    return shared_policies(
        base=(0.01, 5.0),
        factor=st.floats(1.1, 4.0),
        cap_ratio=(1.0, 20.0),
        budget_ratio=(1.0, 30.0),
        most_retries=200,
    )


# ------------------------------------------------------------------ the plan (pure)


def test_the_throttle_is_asked_only_once_the_time_budget_admits_the_attempt() -> None:
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=20, attempt_duration=1)
    admits, rejects = Script([True]), Script([False])
    assert admit_attempt(policy, started=T0, now=T0, throttle=admits) is None
    assert admit_attempt(policy, started=T0, now=T0, throttle=rejects) is StopReason.THROTTLED
    assert (admits.log, rejects.log) == (["admitted"], ["rejected"])

    late, past = Script([False]), Script([False])
    almost_spent = T0 + timedelta(seconds=19.5)  # one more 1 s attempt would end past 20 s
    reason = admit_attempt(policy, started=T0, now=almost_spent, throttle=late)
    assert reason is StopReason.WALL_CLOCK
    deadline = T0 + timedelta(seconds=0.5)
    reason = admit_attempt(policy, started=T0, now=T0, deadline=deadline, throttle=past)
    assert reason is StopReason.DEADLINE
    assert late.log == past.log == []  # the time budget refused first: the throttle is not asked

    # The throttle's admission itself (a callable) is taken too, as decide() takes it.
    assert admit_attempt(policy, started=T0, now=T0, throttle=lambda: False) is not None
    with pytest.raises(TypeError, match="throttle must be an adaptive throttle"):
        admit_attempt(policy, started=T0, now=T0, throttle=object())  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(
    policy=policies(),
    elapsed=st.floats(0.0, 2.0),
    longest=st.floats(0.0, 1.0),
    until=st.none() | st.floats(-1.0, 2.0),
    answer=st.booleans(),
)
def test_admission_is_the_time_budget_then_the_throttle(
    policy: BackoffPolicy, elapsed: float, longest: float, until: float | None, answer: bool
) -> None:
    """Whatever the run: a time refusal is the reason and the throttle is never asked;
    otherwise the throttle is asked exactly once and decides alone."""
    now = T0 + timedelta(seconds=elapsed * policy.max_elapsed)
    deadline = None if until is None else now + timedelta(seconds=until * policy.max_elapsed)
    times: dict[str, Any] = {
        "started": T0,
        "now": now,
        "deadline": deadline,
        "longest": longest * policy.max_elapsed,
    }
    script = Script([answer])
    without = admit_attempt(policy, **times)
    reason = admit_attempt(policy, **times, throttle=script)
    if without is not None:
        assert (reason, script.log) == (without, [])
    else:
        assert reason is (None if answer else StopReason.THROTTLED)
        assert len(script.log) == 1


@settings(max_examples=150, deadline=None)
@given(
    policy=policies(),
    task_id=st.text(min_size=1, max_size=20),
    retries=st.integers(0, 12),
    elapsed=st.floats(0.0, 1.5),
)
def test_a_throttled_attempt_is_planned_like_a_failed_one_without_the_retry_budget(
    policy: BackoffPolicy, task_id: str, retries: int, elapsed: float
) -> None:
    """Same countdown on the same schedule; a refusal says ``throttled``; no withdrawal."""
    now = T0 + timedelta(seconds=elapsed * policy.max_elapsed)
    times: dict[str, Any] = {"task_id": task_id, "retries": retries, "started": T0, "now": now}
    failed = plan_retry(policy, **times)
    throttled = plan_retry(policy, **times, throttled=True)
    assert throttled.countdown == failed.countdown
    assert (throttled.attempts, throttled.slept, throttled.elapsed, throttled.deadline) == (
        failed.attempts,
        failed.slept,
        failed.elapsed,
        failed.deadline,
    )
    assert throttled.reason is (None if failed.reason is None else StopReason.THROTTLED)
    if failed.countdown is not None:
        assert failed.countdown == policy.schedule(seed_for(task_id))[retries]

    asked: list[str] = []

    def grant() -> bool:
        asked.append("granted")
        return True

    plain: dict[str, Any] = dict(times, deadline=None, longest=0.0, grant=grant)
    _plan_retry(policy, **plain, throttled=True)
    assert asked == []  # nothing was sent: the retry budget is not asked
    _plan_retry(policy, **plain)
    assert asked == ([] if failed.reason is not None else ["granted"])


# ------------------------------------------------------------------ construction


def test_a_throttle_is_checked_at_construction() -> None:
    with pytest.raises(TypeError, match=r"throttle must be an adaptive throttle.*got object"):
        CeleryBudget(POLICY, throttle=object())  # type: ignore[arg-type]
    retry_budget = RetryBudget()
    with pytest.raises(TypeError, match=r"throttle must be an adaptive throttle.*got RetryBudget"):
        CeleryBudget(POLICY, throttle=retry_budget)  # type: ignore[arg-type]
    throttle = AdaptiveThrottle(name="api")
    budget = CeleryBudget(POLICY, dead_letter="dlq", throttle=throttle)
    assert budget.throttle is throttle
    assert repr(budget).endswith(f", throttle={throttle!r})")
    assert CeleryBudget(POLICY).throttle is None
    fleet = RedisAdaptiveThrottle(redis.Redis(port=1), "api")  # no connection is made
    try:
        assert CeleryBudget(POLICY, throttle=fleet).throttle is fleet
    finally:
        fleet.close()


# ------------------------------------------------------------------ the glue, eagerly


def _eager(budget: CeleryBudget, name: str, body: Any) -> Any:
    from celery import Celery

    eager = Celery(f"tb_eager_throttle_{name}", set_as_current=False)
    return eager.task(bind=True, name=f"tb.eager.throttle.{name}")(budget(body))


def _failing(log: list[str]) -> Any:
    def failing(self: Any) -> None:
        log.append("ran")
        raise ConnectionError("down")

    return failing


def test_a_throttle_that_always_rejects_runs_nothing_touches_no_budget_and_dead_letters() -> None:
    log: list[str] = []
    letters: list[DeadLetter] = []
    budget = CeleryBudget(
        POLICY, dead_letter=letters.append, budget=Ledger(log), throttle=Script([False], log)
    )
    result = _eager(budget, "rejects", _failing(log)).apply()
    error = result.result
    assert isinstance(error, TaskBudgetExhausted)
    calls = POLICY.max_attempts() + 1
    # Every attempt the time budget allowed was asked for, and rejected; nothing ran, so
    # nothing was deposited, withdrawn or recorded.
    assert log == ["rejected"] * calls
    (letter,) = letters
    assert letter.report.reason is StopReason.THROTTLED
    assert letter.report.attempts == calls
    assert isinstance(letter.report.last_exception, Throttled)
    assert letter.report.last_exception.throttle == "script"
    assert letter.report.last_exception.probability == 0.75
    assert error.letter["report"]["reason"] == "throttled"
    assert "time budget exhausted after the throttle rejected its attempt (throttled)" in str(error)
    assert f"after {calls} attempts" in str(error)


def test_each_attempt_asks_the_throttle_first_and_records_what_ran() -> None:
    """The order, attempt by attempt: the throttle, then the retry budget (the deposit of
    a run's first attempt sent, the withdrawal of a retry), the body and its outcome
    recorded. A rejected attempt deposits and withdraws nothing."""
    log: list[str] = []
    letters: list[DeadLetter] = []
    answers = [False, True, True, False, True, True, False]  # 7 calls: 6 retries
    budget = CeleryBudget(
        POLICY, dead_letter=letters.append, budget=Ledger(log), throttle=Script(answers, log)
    )
    error = _eager(budget, "mixed", _failing(log)).apply().result
    assert isinstance(error, TaskBudgetExhausted)
    retried = ["admitted", "granted", "ran", "recorded:ConnectionError"]
    assert log == [
        "rejected",
        # the run's first attempt sent deposits its call
        "admitted",
        "deposit",
        "ran",
        "recorded:ConnectionError",
        *retried,
        "rejected",  # withdraws nothing: nothing was sent
        *retried,
        *retried,
        "rejected",  # the last attempt: rejected, and the time budget is spent (count)
    ]
    (letter,) = letters
    assert letter.report.reason is StopReason.THROTTLED
    assert isinstance(letter.report.last_exception, Throttled)


def test_a_run_whose_last_attempt_ran_is_given_up_for_the_time_budget() -> None:
    log: list[str] = []
    letters: list[DeadLetter] = []
    answers = [False, True]
    budget = CeleryBudget(POLICY, dead_letter=letters.append, throttle=Script(answers, log))
    _eager(budget, "last_ran", _failing(log)).apply()
    (letter,) = letters
    assert letter.report.reason is StopReason.COUNT
    assert isinstance(letter.report.last_exception, ConnectionError)


def test_an_admitted_attempt_records_its_result_and_celery_control_flow_is_no_outcome() -> None:
    from celery.exceptions import Ignore

    log: list[str] = []
    budget = CeleryBudget(POLICY, throttle=Script([True], log))

    def succeeds(self: Any) -> dict[str, int]:
        return {"ok": 1}

    assert _eager(budget, "succeeds", succeeds).apply().result == {"ok": 1}
    assert log == ["admitted", "recorded:dict"]

    log.clear()

    def ignored(self: Any) -> None:
        raise Ignore()

    _eager(budget, "ignored", ignored).apply()
    assert log == ["admitted"]  # Celery's own Ignore is not the dependency's answer

    log.clear()

    def broken(self: Any) -> None:
        raise ValueError("not retryable")

    strict = CeleryBudget(POLICY, retry_on=ConnectionError, throttle=Script([True], log))
    assert isinstance(_eager(strict, "broken", broken).apply().result, ValueError)
    assert log == ["admitted", "recorded:ValueError"]  # recorded, then raised untouched


def test_the_throttled_header_counts_rejections_in_a_row() -> None:
    """Each retry's message says how many attempts were rejected in a row before it."""
    seen: list[object] = []
    log: list[str] = []

    def failing(self: Any) -> None:
        seen.append((self.request.headers or {}).get(THROTTLED_HEADER))  # eagerly, kept there
        raise ConnectionError("down")

    answers = [False, False, True, False, True]
    budget = CeleryBudget(POLICY, dead_letter=lambda letter: None, throttle=Script(answers, log))
    _eager(budget, "header", failing).apply()
    assert seen[:3] == [2, 1, None]  # after 2 rejections, after 1, after an attempt that ran


@pytest.mark.parametrize(("answer", "reason"), [(False, "throttled"), (True, "wall_clock")])
def test_a_retry_arriving_too_late_after_a_rejection_is_given_up_throttled(
    answer: bool, reason: str
) -> None:
    """Each retry is delivered 5 s after its countdown (a backlog), on the virtual clock:
    the third arrives past the budget and is given up unasked. After a rejection, the
    throttle ended the run; after an attempt that ran, the time budget did."""
    from celery import Celery, Task

    from tenacity_budget.testing import virtual_clock

    policy = BackoffPolicy(base=1, cap=4, max_elapsed=20, jitter="none", attempt_duration=1)
    log: list[str] = []
    letters: list[DeadLetter] = []
    budget = CeleryBudget(policy, dead_letter=letters.append, throttle=Script([answer], log))

    with virtual_clock() as clock:

        class Late(Task):  # type: ignore[misc]
            def retry(self, *args: Any, **kwargs: Any) -> Any:
                clock.advance(kwargs["countdown"] + 5.0)
                return super().retry(*args, **kwargs)

        eager = Celery(f"tb_eager_late_{answer}", set_as_current=False)
        task = eager.task(bind=True, base=Late, name="tb.eager.late")(budget(_failing(log)))
        task.apply()
    # t = 0, 6 (1 + 5), 13 (2 + 5): asked; t = 22 (4 + 5): past the 20 s budget.
    assert log.count("rejected" if not answer else "admitted") == 3
    (letter,) = letters
    assert letter.report.reason.value == reason
    assert letter.report.attempts == 3
    assert letter.report.last_exception is None  # the late retry never ran


# ------------------------------------------------------------------ the retry budget's turn


class Counting:
    """A retry budget answering ``try_withdraw()`` from ``answers`` (the last one repeats),
    logging every call to ``log`` (shared with a :class:`Script` to see the order)."""

    name = "counting"
    is_async = False

    def __init__(self, answers: Iterable[bool], log: list[str]) -> None:
        self.answers = list(answers)
        self.log = log

    def deposit(self) -> None:
        self.log.append("deposit")

    def try_withdraw(self) -> bool:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        self.log.append("granted" if answer else "refused")
        return answer


def test_admission_asks_the_retry_budget_last_and_only_once_the_throttle_admits() -> None:
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=20, attempt_duration=1)
    log: list[str] = []
    reason = admit_attempt(
        policy,
        started=T0,
        now=T0,
        throttle=Script([False], log),
        grant=Counting([True], log).try_withdraw,
    )
    assert (reason, log) == (StopReason.THROTTLED, ["rejected"])  # the budget is not asked

    for granted, expected in ((True, None), (False, StopReason.RETRY_BUDGET)):
        log = []
        budget = Counting([granted], log)
        reason = admit_attempt(
            policy, started=T0, now=T0, throttle=Script([True], log), grant=budget.try_withdraw
        )
        assert reason is expected
        assert log == ["admitted", "granted" if granted else "refused"]

    log = []
    almost_spent = T0 + timedelta(seconds=19.5)  # one more 1 s attempt would end past 20 s
    reason = admit_attempt(
        policy,
        started=T0,
        now=almost_spent,
        throttle=Script([True], log),
        grant=Counting([True], log).try_withdraw,
    )
    assert (reason, log) == (StopReason.WALL_CLOCK, [])  # the time budget first: none asked


def test_with_a_throttle_the_plan_asks_the_time_budget_alone() -> None:
    """The glue plans a throttled task's retry without its retry budget: a failure is
    followed by no withdrawal; the retry's own admission makes it."""
    log: list[str] = []
    budget = CeleryBudget(
        POLICY,
        dead_letter=lambda letter: None,
        budget=Counting([True], log),
        throttle=Script([True, False], log),
    )
    _eager(budget, "plan_alone", _failing(log)).apply()
    # The first attempt deposits and fails; its retry is rejected: nothing withdrawn.
    assert log[:5] == ["admitted", "deposit", "ran", "recorded:ConnectionError", "rejected"]
    assert "granted" not in log


def test_a_retry_the_retry_budget_refuses_when_it_runs_is_dead_lettered_unrun() -> None:
    log: list[str] = []
    letters: list[DeadLetter] = []
    budget = CeleryBudget(
        POLICY,
        dead_letter=letters.append,
        budget=Counting([True, False], log),
        throttle=Script([True], log),
    )
    error = _eager(budget, "refused", _failing(log)).apply().result
    assert isinstance(error, TaskBudgetExhausted)
    assert log == [
        "admitted",
        "deposit",
        "ran",
        "recorded:ConnectionError",
        "admitted",
        "granted",
        "ran",
        "recorded:ConnectionError",
        "admitted",
        "refused",  # not run, not recorded: nothing was sent
    ]
    (letter,) = letters
    assert letter.report.reason is StopReason.RETRY_BUDGET
    assert letter.report.attempts == 2  # the two attempts that ran
    assert letter.report.last_exception is None  # the refused retry never ran
    assert error.letter["report"]["reason"] == "retry_budget"
    assert "retry budget refused the retry (retry_budget)" in str(error)


def test_a_refusal_right_after_a_rejection_is_still_the_retry_budgets() -> None:
    log: list[str] = []
    letters: list[DeadLetter] = []
    budget = CeleryBudget(
        POLICY,
        dead_letter=letters.append,
        budget=Counting([False], log),
        throttle=Script([True, False, True], log),
    )
    _eager(budget, "refused_after_rejection", _failing(log)).apply()
    assert log == [
        "admitted",
        "deposit",
        "ran",
        "recorded:ConnectionError",
        "rejected",
        "admitted",
        "refused",
    ]
    (letter,) = letters
    assert letter.report.reason is StopReason.RETRY_BUDGET
    assert letter.report.attempts == 2


_SCRIPTED_LOG: list[str] = []
_SCRIPTED_LETTERS: list[DeadLetter] = []
_SCRIPTED_THROTTLE = Script([True], _SCRIPTED_LOG)
_SCRIPTED_BUDGET = Counting([True], _SCRIPTED_LOG)
_SCRIPTED: Any = None


def _scripted_task() -> Any:
    """One eager task for every example (its throttle and budget are rescripted each)."""
    global _SCRIPTED
    if _SCRIPTED is None:
        budget = CeleryBudget(
            POLICY,
            dead_letter=_SCRIPTED_LETTERS.append,
            budget=_SCRIPTED_BUDGET,
            throttle=_SCRIPTED_THROTTLE,
        )
        _SCRIPTED = _eager(budget, "scripted", _failing(_SCRIPTED_LOG))
    return _SCRIPTED


@settings(max_examples=60, deadline=None)
@given(
    throttle=st.lists(st.booleans(), min_size=1, max_size=8),
    grants=st.lists(st.booleans(), min_size=1, max_size=8),
)
def test_withdrawals_are_the_retries_actually_run(throttle: list[bool], grants: list[bool]) -> None:
    """Whatever the throttle and the retry budget answer, attempt by attempt: the budget
    is asked only right after the throttle admits an attempt, never for a rejected one;
    a run's first attempt sent deposits (once) and withdraws nothing; every other attempt
    run was withdrawn first, so withdrawals granted == retries run; a refusal ends the
    run there, unrun, with reason ``retry_budget``."""
    task = _scripted_task()
    _SCRIPTED_LOG.clear()
    _SCRIPTED_LETTERS.clear()
    _SCRIPTED_THROTTLE.answers = list(throttle)
    _SCRIPTED_BUDGET.answers = list(grants)
    task.apply()
    log = list(_SCRIPTED_LOG)
    (letter,) = _SCRIPTED_LETTERS  # it always fails: every run ends dead-lettered

    asked = [i for i, entry in enumerate(log) if entry in ("deposit", "granted", "refused")]
    assert all(log[i - 1] == "admitted" for i in asked)  # right after an admission
    ran = log.count("ran")
    assert log.count("deposit") == (1 if "admitted" in log else 0)
    if ran:
        assert log[log.index("ran") - 1] == "deposit"  # the first attempt sent deposits
    assert log.count("granted") == max(ran - 1, 0)  # every retry run, and nothing else
    for i, entry in enumerate(log):
        if entry == "ran":
            assert log[i - 1] in ("deposit", "granted")
    refusals = log.count("refused")
    assert refusals <= 1
    if refusals:
        assert log[-1] == "refused"  # not run: the run ends there
        assert letter.report.reason is StopReason.RETRY_BUDGET
    else:
        assert letter.report.reason in (StopReason.THROTTLED, StopReason.COUNT)
    assert letter.report.attempts == log.count("admitted") + log.count("rejected") - refusals
