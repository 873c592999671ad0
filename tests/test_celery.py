"""Tests for tenacity_budget.celery: budgeted Celery retries.

The planner is pure and tested with a fake clock (explicit ``now``) and Hypothesis. The
integration tests run against real parts: a throwaway ``redis-server`` as broker and result
backend, and real ``celery worker`` processes (solo pool) running ``tests/celery_app/app.py``;
nothing runs eagerly. They wait for what the workers do (results, dead letters, Redis
keyspace events) with timeouts, never by sleeping, and assert no timing beyond "before the
deadline".
"""

from __future__ import annotations

import base64
import json
import math
import os
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import IO, Any

import pytest
from celery_app import app as tb
from hypothesis import given, settings
from hypothesis import strategies as st

import tenacity_budget
from tenacity_budget import BackoffPolicy, ExhaustionReport, RetryBudget, StopReason
from tenacity_budget.celery import (
    _LATEST,
    DEADLINE_HEADER,
    STARTED_HEADER,
    CeleryBudget,
    DeadLetter,
    DeadLetterQueue,
    TaskBudgetExhausted,
    _on_publish,
    _stamp,
    admit_attempt,
    current_deadline,
    deadline_headers,
    plan_retry,
    run_deadline,
    seed_for,
)
from tenacity_budget.celery._plan import (
    _decode_cursor,
    _encode_cursor,
    _replay_schedule,
    _schedule_position,
    _SchedulePosition,
)
from tenacity_budget.testing import virtual_clock
from tests._helpers import policies as shared_policies
from tests._redis import RedisServer

REPO = Path(__file__).resolve().parent.parent
TESTS = REPO / "tests"
T0 = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
LATEST = _LATEST  # datetime.max in UTC: where an instant past it is held
ZONES = [UTC, timezone(timedelta(hours=-12)), timezone(timedelta(hours=14))]
PYTHONPATH = os.pathsep.join([str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")])
WAIT = 60.0  # upper bound on any one wait for a worker; never reached when things work


# ------------------------------------------------------------------ pure parts (no broker)


def policies() -> st.SearchStrategy[BackoffPolicy]:
    """The shared builder (``tests/_helpers.py``), over the space of Celery-sized policies.

    One budget in three is an exact partial sum of the nominal delays, where a countdown
    that fits its budget exactly must still be planned.
    """
    return shared_policies(
        base=(0.01, 5.0),
        factor=st.floats(1.1, 4.0),
        cap_ratio=(1.0, 20.0),
        budget_ratio=(1.0, 30.0),
        most_retries=400,
    )


task_ids = st.text(min_size=1, max_size=40)


def test_seed_for_is_stable_across_processes() -> None:
    code = "from tenacity_budget.celery import seed_for; print(seed_for('task-42'))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert int(out.stdout) == seed_for("task-42")
    assert seed_for("task-42") != seed_for("task-43")
    assert 0 <= seed_for("task-42") < 2**64


@settings(max_examples=300, deadline=None)
@given(
    policy=policies(),
    task_id=task_ids,
    retries=st.integers(0, 40),
    offset=st.floats(0.0, 700.0),
    explicit=st.none() | st.floats(0.0, 700.0),
    longest=st.floats(0.0, 5.0),
)
def test_plan_retry_follows_the_seeded_schedule_and_never_crosses_the_deadline(
    policy: BackoffPolicy,
    task_id: str,
    retries: int,
    offset: float,
    explicit: float | None,
    longest: float,
) -> None:
    now = T0 + timedelta(seconds=offset)
    deadline = None if explicit is None else T0 + timedelta(seconds=explicit)
    plan = plan_retry(
        policy,
        task_id=task_id,
        retries=retries,
        started=T0,
        now=now,
        deadline=deadline,
        longest=longest,
    )
    schedule = policy.schedule(seed_for(task_id))
    need = max(policy.attempt_duration, longest)
    assert plan.attempts == retries + 1
    assert plan.slept == math.fsum(schedule[:retries])
    assert plan.elapsed == (now - T0).total_seconds()
    assert plan.deadline == run_deadline(policy, T0, deadline)
    assert plan.exhausted == (plan.countdown is None) == (plan.reason is not None)
    if plan.countdown is not None:
        assert retries < policy.max_attempts()
        assert plan.countdown == schedule[retries]
        ends = now + timedelta(seconds=plan.countdown + need)
        assert ends <= plan.deadline + timedelta(microseconds=2)
    elif plan.reason is StopReason.COUNT:
        assert retries >= policy.max_attempts()
    elif plan.reason is StopReason.SLEEP_BUDGET:
        assert len(schedule) <= retries < policy.max_attempts()
    else:
        ends = now + timedelta(seconds=schedule[retries] + need)
        limit = T0 + timedelta(seconds=policy.max_elapsed)
        if plan.reason is StopReason.WALL_CLOCK:
            assert ends > limit - timedelta(microseconds=2)
        else:
            assert plan.reason is StopReason.DEADLINE
            assert deadline is not None
            assert ends > deadline - timedelta(microseconds=2)


@settings(max_examples=200, deadline=None)
@given(policy=policies(), task_id=task_ids, explicit=st.none() | st.floats(0.0, 700.0))
def test_a_run_of_failures_spends_exactly_the_schedule_it_fits(
    policy: BackoffPolicy, task_id: str, explicit: float | None
) -> None:
    """Simulate a task failing every attempt, each taking ``attempt_duration`` seconds."""
    deadline = None if explicit is None else T0 + timedelta(seconds=explicit)
    schedule = policy.schedule(seed_for(task_id))
    end = run_deadline(policy, T0, deadline)
    countdowns: list[float] = []
    d = policy.attempt_duration
    while True:
        now = T0 + timedelta(seconds=math.fsum(countdowns) + (len(countdowns) + 1) * d)
        plan = plan_retry(
            policy, task_id=task_id, retries=len(countdowns), started=T0, now=now, deadline=deadline
        )
        if plan.countdown is None:
            break
        countdowns.append(plan.countdown)
        assert now + timedelta(seconds=plan.countdown + d) <= end + timedelta(microseconds=2)
    assert countdowns == schedule[: len(countdowns)]
    if deadline is None or deadline >= T0 + timedelta(seconds=policy.max_elapsed):
        # Without a tighter deadline, the whole budget is spent: every wait of the schedule.
        assert countdowns == schedule
        assert plan.reason in (StopReason.COUNT, StopReason.SLEEP_BUDGET)
    else:
        assert plan.reason in (StopReason.COUNT, StopReason.SLEEP_BUDGET, StopReason.DEADLINE)


def _walk_by_header(
    policy: BackoffPolicy, task_id: str, retries: int
) -> Iterator[tuple[int, _SchedulePosition, _SchedulePosition]]:
    """Each retry's position as a run of messages reaches it (each continuing the cursor
    the previous one published), beside the replay from retry 0 (an old message's path)."""
    header: str | None = None  # the first message carries no cursor
    for n in range(retries + 1):
        position, fingerprint = _schedule_position(policy, task_id, n, header)
        yield n, position, _replay_schedule(policy, task_id, n, cursor=True)
        if position.after is None:
            return
        header = _encode_cursor(position.after, fingerprint)
        # The cursor path itself, not the replay it falls back to, reaches retry n + 1.
        assert _decode_cursor(header, fingerprint, n + 1) == position.after


@settings(max_examples=300, deadline=None)
@given(
    policy=shared_policies(most_retries=2_000),
    task_id=task_ids,
    retries=st.integers(0, 120),
)
def test_the_schedule_header_continues_the_seeded_schedule_exactly(
    policy: BackoffPolicy, task_id: str, retries: int
) -> None:
    """The O(1) path (the cursor in SCHEDULE_HEADER) and the replay agree bit for bit."""
    schedule = policy.schedule(seed_for(task_id))
    for n, position, replayed in _walk_by_header(policy, task_id, retries):
        assert position == replayed  # countdown, both sums and the next cursor, exactly
        assert position.slept == math.fsum(schedule[:n])
        if n < len(schedule):
            assert position.countdown == schedule[n]
            assert position.after is not None
            assert position.after.retries == n + 1
        else:
            assert position.countdown is None
            assert position.after is None


@pytest.mark.parametrize("jitter", ["none", "full", "equal", "decorrelated"])
def test_a_week_of_retries_walked_by_header_alone_is_the_seeded_schedule(jitter: str) -> None:
    """Ten thousand retries, each continuing the previous message's cursor (no replay)."""
    policy = BackoffPolicy(base=1, cap=60, max_elapsed=7 * 86_400, jitter=jitter)
    schedule = policy.schedule(seed_for("weekly"))
    assert len(schedule) > 10_000
    countdowns: list[float | None] = []
    header: str | None = None
    for n in range(len(schedule) + 1):
        position, fingerprint = _schedule_position(policy, "weekly", n, header)
        countdowns.append(position.countdown)
        if position.after is not None:
            header = _encode_cursor(position.after, fingerprint)
            assert _decode_cursor(header, fingerprint, n + 1) == position.after
    assert countdowns == [*schedule, None]
    assert position.slept == math.fsum(schedule)


def test_a_schedule_header_of_another_run_or_malformed_is_replayed_instead() -> None:
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=60, jitter="decorrelated")
    walked = list(_walk_by_header(policy, "t", 8))
    assert [p.countdown for _, p, _ in walked] == policy.schedule(seed_for("t"))[:9]
    position = walked[3][1]
    assert position.after is not None
    fingerprint = _schedule_position(policy, "t", 0)[1]
    header = _encode_cursor(position.after, fingerprint)
    replayed = _replay_schedule(policy, "t", 4, cursor=True)
    assert _schedule_position(policy, "t", 4, header)[0] == replayed
    other = policy.model_copy(update={"jitter": "full"})
    longer = BackoffPolicy(base=1, cap=4, max_elapsed=61, jitter="decorrelated")
    fields = header.split(" ")
    state = list(struct.unpack("<625I", base64.b64decode(fields[7])))
    state[-1] = 625  # random.Random.setstate accepts an index up to 624
    out_of_range = base64.b64encode(struct.pack("<625I", *state)).decode("ascii")
    for name, (p, task_id, retries, value) in {
        "another task": (policy, "u", 4, header),
        "another retry": (policy, "t", 5, header),
        "another jitter": (other, "t", 4, header),
        "another budget": (longer, "t", 4, header),
        "a number": (policy, "t", 4, 42),
        "truncated": (policy, "t", 4, header[:-10]),
        "a bad float": (policy, "t", 4, " ".join([*fields[:3], "0x1.zp+0", *fields[4:]])),
        "a nan": (policy, "t", 4, " ".join([*fields[:3], "nan", *fields[4:]])),
        "no generator": (policy, "t", 4, " ".join([*fields[:7], "-"])),
        "an index out of range": (policy, "t", 4, " ".join([*fields[:7], out_of_range])),
        "not base64": (policy, "t", 4, " ".join([*fields[:7], "*" * len(fields[7])])),
        "another version": (policy, "t", 4, " ".join(["0", *fields[1:]])),
    }.items():
        got, _ = _schedule_position(p, task_id, retries, value)
        assert got == _replay_schedule(p, task_id, retries, cursor=True), name


def test_plan_retry_reasons_with_a_fake_clock() -> None:
    policy = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=20, jitter="none")
    assert policy.waits() == [1.0, 2.0, 4.0, 4.0, 4.0, 4.0]  # 19 s of the 20

    def plan(retries: int, at: float, **kw: Any) -> tuple[float | None, StopReason | None]:
        now = T0 + timedelta(seconds=at)
        p = plan_retry(policy, task_id="t", retries=retries, started=T0, now=now, **kw)
        return p.countdown, p.reason

    assert plan(0, 0.5) == (1.0, None)
    assert plan(2, 10.0) == (4.0, None)
    assert plan(6, 19.0) == (None, StopReason.COUNT)
    assert plan(5, 16.0) == (4.0, None)  # ends at exactly 20 s: allowed
    assert plan(5, 16.5) == (None, StopReason.WALL_CLOCK)
    assert plan(5, 15.0, longest=1.5) == (None, StopReason.WALL_CLOCK)  # slow attempts
    soon = T0 + timedelta(seconds=5)
    assert plan(1, 3.0, deadline=soon) == (2.0, None)  # ends at 5 s: allowed
    assert plan(1, 3.5, deadline=soon) == (None, StopReason.DEADLINE)
    with_field = policy.model_copy(update={"deadline": soon})
    p = plan_retry(with_field, task_id="t", retries=1, started=T0, now=T0 + timedelta(seconds=4))
    assert (p.countdown, p.reason, p.deadline) == (None, StopReason.DEADLINE, soon)
    with pytest.raises(ValueError, match="retries"):
        plan(-1, 0.0)
    with pytest.raises(ValueError, match="longest"):
        plan(0, 0.0, longest=-1.0)
    with pytest.raises(ValueError, match="timezone-aware"):
        plan_retry(policy, task_id="t", retries=0, started=T0, now=datetime(2026, 3, 2))


def test_admit_attempt_refuses_an_attempt_that_would_end_late() -> None:
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=20, attempt_duration=2)
    at = T0 + timedelta(seconds=18)
    assert admit_attempt(policy, started=T0, now=at) is None  # ends at 20 s exactly
    assert admit_attempt(policy, started=T0, now=at + timedelta(seconds=0.1)) is (
        StopReason.WALL_CLOCK
    )
    assert admit_attempt(policy, started=T0, now=T0, longest=21) is StopReason.WALL_CLOCK
    soon = T0 + timedelta(seconds=3)
    assert admit_attempt(policy, started=T0, now=T0, deadline=soon) is None
    assert admit_attempt(policy, started=T0, now=T0 + timedelta(seconds=2), deadline=soon) is (
        StopReason.DEADLINE
    )


def test_run_deadline_is_the_earliest_bound() -> None:
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=20)
    assert run_deadline(policy, T0) == T0 + timedelta(seconds=20)
    later, sooner = T0 + timedelta(hours=1), T0 + timedelta(seconds=7)
    assert run_deadline(policy, T0, later) == T0 + timedelta(seconds=20)
    assert run_deadline(policy, T0, sooner) == sooner
    bounded = policy.model_copy(update={"deadline": T0 + timedelta(seconds=9)})
    assert run_deadline(bounded, T0) == T0 + timedelta(seconds=9)
    assert run_deadline(bounded, T0, sooner) == sooner


def test_deadline_headers_are_utc_and_refuse_naive_times() -> None:
    plus_two = timezone(timedelta(hours=2))
    headers = deadline_headers(datetime(2026, 4, 15, 23, 59, 59, tzinfo=plus_two))
    assert headers == {DEADLINE_HEADER: "2026-04-15T21:59:59+00:00"}
    with pytest.raises(ValueError, match="timezone-aware"):
        deadline_headers(datetime(2026, 4, 15))


def test_dead_letter_payload_and_exception_survive_json() -> None:
    report = ExhaustionReport(
        attempts=3,
        affordable=5,
        slept=1.5,
        elapsed=2.0,
        budget=10.0,
        deadline=None,
        reason=StopReason.WALL_CLOCK,
        last_exception=ConnectionError("down"),
    )
    letter = DeadLetter(
        task="proj.sync",
        task_id="abc",
        args=(1, "x"),
        kwargs={"k": True},
        report=report,
        deadline=T0,
        dead_lettered_at=T0,
    )
    body = json.loads(json.dumps(letter.as_dict()))
    assert body["task"] == "proj.sync"
    assert body["args"] == [1, "x"]
    assert body["kwargs"] == {"k": True}
    assert body["report"] == report.as_dict()
    assert body["report"]["last_exception"] == "ConnectionError('down')"
    assert datetime.fromisoformat(body["deadline"]) == T0
    # Celery's JSON result backend stores exc.args and rebuilds cls(*args) in the client.
    exc = TaskBudgetExhausted("spent", body)
    rebuilt = TaskBudgetExhausted(*json.loads(json.dumps(exc.args)))
    assert rebuilt.letter == body
    assert str(rebuilt) == "spent"


def test_budget_rejects_bad_configuration_and_unbound_tasks() -> None:
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=20)
    with pytest.raises(TypeError, match="dead_letter"):
        CeleryBudget(policy, dead_letter=42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="retry_on"):
        CeleryBudget(policy, dead_letter="dlq", retry_on=(ValueError, "x"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="BackoffPolicy"):
        CeleryBudget({"base": 1}, dead_letter="dlq")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name"):
        DeadLetterQueue("")
    budget = CeleryBudget(policy, dead_letter="dlq")
    assert isinstance(budget.dead_letter, DeadLetterQueue)
    assert budget.dead_letter.name == "dlq"
    assert budget.schedule("id-1") == policy.schedule(seed_for("id-1"))

    @budget
    def unbound(x: int) -> int:
        return x

    assert unbound.__name__ == "unbound"
    with pytest.raises(TypeError, match="bind=True"):
        unbound(1)
    assert current_deadline() is None
    assert tenacity_budget.remaining() is None


def test_a_direct_call_is_a_plain_call() -> None:
    """Calling the task as a function runs it once: no message, so no budget and no retry."""
    from celery import Celery

    direct = Celery("tb_direct", set_as_current=False)
    budget = CeleryBudget(BackoffPolicy(base=1, cap=4, max_elapsed=20), dead_letter="dlq")
    seen: list[tuple[float | None, datetime | None]] = []

    def flaky(self: Any, fail: bool) -> str:
        seen.append((tenacity_budget.remaining(), current_deadline()))
        if fail:
            raise ConnectionError("down")
        return "ok"

    task = direct.task(bind=True, name="tb.direct")(budget(flaky))
    assert task(False) == "ok"
    with pytest.raises(ConnectionError, match="down"):
        task(True)
    assert seen == [(None, None), (None, None)]


# Publish-time stamps, on plain header dicts (the before_task_publish receiver's work).


def test_the_publish_stamp_starts_the_run_once_and_never_before_its_eta() -> None:
    headers: dict[str, Any] = {}
    _stamp(headers, T0, None)
    assert headers == {STARTED_HEADER: T0.isoformat()}
    _stamp(headers, T0 + timedelta(seconds=5), None)  # a retry carries its run's start on
    assert headers == {STARTED_HEADER: T0.isoformat()}
    plus_two = timezone(timedelta(hours=2))
    for eta, started in [
        ((T0 + timedelta(minutes=5)).astimezone(plus_two).isoformat(), T0 + timedelta(minutes=5)),
        ((T0 - timedelta(seconds=5)).isoformat(), T0),  # an eta already passed: now
        ("2026-03-02T09:35:00", T0 + timedelta(minutes=5)),  # naive: UTC, Celery's default
        ("not a date", T0),
        (None, T0),
    ]:
        headers = {"eta": eta}
        _stamp(headers, T0, None)
        assert headers[STARTED_HEADER] == started.isoformat(), eta


offsets = st.floats(-100.0, 1000.0).map(lambda s: T0 + timedelta(seconds=s))


@given(explicit=st.none() | offsets, enclosing=st.none() | offsets)
def test_the_publish_stamp_keeps_the_earliest_deadline(
    explicit: datetime | None, enclosing: datetime | None
) -> None:
    headers: dict[str, Any] = {} if explicit is None else deadline_headers(explicit)
    _stamp(headers, T0, enclosing)
    stamped = headers.get(DEADLINE_HEADER)
    if explicit is None and enclosing is None:
        assert stamped is None
    else:
        assert stamped is not None
        deadlines = [d for d in (explicit, enclosing) if d is not None]
        assert datetime.fromisoformat(stamped) == min(deadlines)
        assert all(datetime.fromisoformat(stamped) <= d for d in deadlines)


def test_the_publish_stamp_leaves_a_malformed_deadline_for_the_worker_to_refuse() -> None:
    headers: dict[str, Any] = {DEADLINE_HEADER: "soon"}
    _stamp(headers, T0, T0 + timedelta(seconds=1))
    assert headers == {DEADLINE_HEADER: "soon", STARTED_HEADER: T0.isoformat()}


def test_without_a_dead_letter_destination_the_task_still_fails_with_its_letter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from celery import Celery

    eager = Celery("tb_eager_nodlq", set_as_current=False)
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=20, jitter="none")
    budget = CeleryBudget(policy, budget=Ledger(grants=0))
    assert budget.dead_letter is None

    def failing(self: Any) -> None:
        raise ConnectionError("down")

    task = eager.task(bind=True, name="tb.eager.nodlq")(budget(failing))
    with caplog.at_level("WARNING", logger="tenacity_budget.celery"):
        result = task.apply()
    assert isinstance(result.result, TaskBudgetExhausted)
    assert result.result.letter["report"]["reason"] == "retry_budget"
    assert "no dead-letter destination" in caplog.text


# The retry budget's wiring, run eagerly (task.apply) with a recording stand-in budget: a
# unit test of the order of our calls. The real budgets run in the worker tests below.


class Ledger:
    """Grants its first ``grants`` withdrawals and refuses the rest; records every call."""

    name = "ledger"
    is_async = False

    def __init__(self, grants: int) -> None:
        self.grants = grants
        self.calls: list[str] = []

    def deposit(self) -> None:
        self.calls.append("deposit")

    def try_withdraw(self) -> bool:
        granted = self.grants > 0
        self.grants -= granted
        self.calls.append("granted" if granted else "refused")
        return granted


def test_the_retry_budget_is_asked_only_once_the_policy_allows_the_retry() -> None:
    from celery import Celery

    eager = Celery("tb_eager", set_as_current=False)
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=20, jitter="none")
    ledger = Ledger(grants=1)
    letters: list[DeadLetter] = []
    budget = CeleryBudget(policy, dead_letter=letters.append, budget=ledger)
    assert "budget=" in repr(budget)

    def failing(self: Any) -> None:
        raise ConnectionError("down")

    task = eager.task(bind=True, name="tb.eager")(budget(failing))
    # Eagerly, task.apply() runs each retry at once, in place: the whole run in one call.
    refused = task.apply()
    assert isinstance(refused.result, TaskBudgetExhausted)
    # One deposit at the first execution; the retry is drawn; the next one is refused.
    assert ledger.calls == ["deposit", "granted", "refused"]
    assert letters[-1].report.attempts == 2
    assert "retry_budget" in str(refused.result)

    ledger.calls.clear()
    ledger.grants = 100
    spent = task.apply()
    assert isinstance(spent.result, TaskBudgetExhausted)
    assert [letter.report.reason for letter in letters] == [
        StopReason.RETRY_BUDGET,
        StopReason.COUNT,
    ]
    # Every retry the policy allowed was drawn; the one it refused was never asked for.
    assert ledger.calls == ["deposit"] + ["granted"] * policy.max_attempts()


def test_a_retry_budget_must_be_a_synchronous_retry_budget() -> None:
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=20)
    with pytest.raises(TypeError, match="retry budget"):
        CeleryBudget(policy, dead_letter="dlq", budget=object())  # type: ignore[arg-type]

    class AsyncLedger(Ledger):
        is_async = True

    with pytest.raises(TypeError, match="asynchronous"):
        CeleryBudget(policy, dead_letter="dlq", budget=AsyncLedger(1))
    from redis.asyncio import Redis as AsyncRedis

    from tenacity_budget.redis import AsyncRedisRetryBudget

    async_budget = AsyncRedisRetryBudget(AsyncRedis(), "api")  # no connection is made
    with pytest.raises(TypeError, match="asynchronous"):
        CeleryBudget(policy, dead_letter="dlq", budget=async_budget)  # type: ignore[arg-type]
    budget = RetryBudget()
    assert CeleryBudget(policy, dead_letter="dlq", budget=budget).budget is budget


def test_importing_the_module_does_not_import_celery() -> None:
    code = (
        "import sys, tenacity_budget, tenacity_budget.celery\n"
        "assert 'celery' not in sys.modules and 'kombu' not in sys.modules, sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_without_celery_the_plans_import_and_a_celery_budget_names_the_extra() -> None:
    """celery and kombu missing (None in sys.modules, as Python treats an absent module)."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["celery"] = None
        sys.modules["kombu"] = None
        from datetime import UTC, datetime
        from tenacity_budget import BackoffPolicy
        from tenacity_budget.celery import (
            CeleryBudget, DeadLetterQueue, admit_attempt, current_deadline,
            deadline_headers, plan_retry, run_deadline, seed_for,
        )
        policy = BackoffPolicy(base=1, cap=4, max_elapsed=20)
        now = datetime(2026, 3, 2, tzinfo=UTC)
        plan = plan_retry(policy, task_id="t", retries=0, started=now, now=now)
        assert plan.countdown == policy.schedule(seed_for("t"))[0], plan
        assert admit_attempt(policy, started=now, now=now) is None
        assert run_deadline(policy, now) == plan.deadline
        assert current_deadline() is None and deadline_headers(now)
        queue = DeadLetterQueue("dlq")  # a name: no kombu needed until it is published to
        for use in (lambda: CeleryBudget(policy), queue.queue):
            try:
                use()
            except ImportError as exc:
                print(type(exc).__name__, type(exc.__cause__).__name__, exc, sep=" | ")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    extra = "needs celery: pip install 'tenacity-budget[celery]'"
    assert out.stdout.splitlines() == [
        f"ImportError | ModuleNotFoundError | tenacity_budget.celery's CeleryBudget {extra}",
        f"ImportError | ModuleNotFoundError | tenacity_budget.celery's DeadLetterQueue {extra}",
    ]


def _eager_failing(budget: CeleryBudget, name: str) -> Any:
    from celery import Celery

    eager = Celery(f"tb_eager_{name}", set_as_current=False)

    def failing(self: Any) -> None:
        raise ConnectionError("down")

    return eager.task(bind=True, name=f"tb.eager.{name}")(budget(failing))


def test_exhaustion_messages_name_the_time_budget_and_never_a_missing_destination(
    caplog: pytest.LogCaptureFixture,
) -> None:
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=20, jitter="none")
    letters: list[DeadLetter] = []

    def keep(letter: DeadLetter) -> None:
        letters.append(letter)

    nowhere = _eager_failing(CeleryBudget(policy), "nowhere")
    with caplog.at_level("WARNING", logger="tenacity_budget.celery"):
        error = nowhere.apply().result
    assert isinstance(error, TaskBudgetExhausted)
    message = str(error)
    assert "time budget exhausted (count) after 7 attempts" in message
    assert message.endswith("; no dead-letter destination (the letter is on this exception)")
    assert "None" not in message
    assert "retry budget" not in message
    assert "time budget exhausted (count), no dead-letter destination" in caplog.text

    kept = _eager_failing(CeleryBudget(policy, dead_letter=keep), "kept").apply().result
    assert str(kept).endswith(f"time budget exhausted (count) after 7 attempts; handed to {keep!r}")
    assert [letter.report.reason for letter in letters] == [StopReason.COUNT]

    capped = CeleryBudget(policy, dead_letter=keep, budget=Ledger(grants=0))
    refused = str(_eager_failing(capped, "refused").apply().result)
    assert "retry budget refused the retry (retry_budget) after 1 attempts" in refused
    assert "time budget" not in refused
    assert repr(CeleryBudget(policy, dead_letter="dlq").dead_letter) == "DeadLetterQueue('dlq')"


far_instants = st.datetimes(
    min_value=datetime(2026, 1, 1), max_value=datetime.max, timezones=st.sampled_from(ZONES)
)


@settings(max_examples=200, deadline=None)
@given(
    max_elapsed=st.sampled_from([20.0, 3e11, 1e300]) | st.floats(4.0, 1e300),
    deadline=st.none() | far_instants | st.just(datetime.max.replace(tzinfo=UTC)),
    retries=st.integers(0, 5),
    longest=st.floats(0.0, 1e300),
)
def test_plans_and_stamps_hold_for_deadlines_and_budgets_of_any_size(
    max_elapsed: float, deadline: datetime | None, retries: int, longest: float
) -> None:
    """Nothing overflows: an instant past datetime.max is held at it, beyond any run."""
    policy = BackoffPolicy(base=1, cap=4, max_elapsed=max_elapsed)
    now = T0 + timedelta(seconds=3)
    end = run_deadline(policy, T0, deadline)
    try:
        budget_end = T0 + timedelta(seconds=max_elapsed)
    except OverflowError:
        budget_end = LATEST
    assert end == min(budget_end, LATEST if deadline is None else deadline)
    plan = plan_retry(
        policy,
        task_id="t",
        retries=retries,
        started=T0,
        now=now,
        deadline=deadline,
        longest=longest,
    )
    assert plan.deadline == end
    assert admit_attempt(policy, started=T0, now=now, deadline=deadline, longest=longest) in (
        None,
        StopReason.WALL_CLOCK,
        StopReason.DEADLINE,
    )
    if deadline is None or (deadline - T0).total_seconds() >= max_elapsed:
        # A deadline past the run's own end plans exactly as no deadline.
        alone = plan_retry(
            policy, task_id="t", retries=retries, started=T0, now=now, longest=longest
        )
        assert (plan.countdown, plan.reason) == (alone.countdown, alone.reason)
    headers: dict[str, Any] = {}
    _stamp(headers, now, deadline)
    assert _when(headers[STARTED_HEADER]) == now
    if deadline is not None:
        stamped = _when(headers[DEADLINE_HEADER])
        assert stamped == min(deadline, LATEST)
        assert _when(deadline_headers(deadline)[DEADLINE_HEADER]) == stamped


HUGE_SCOPES = [
    pytest.param({"seconds": 3e11}, id="3e11s"),
    pytest.param({"seconds": 1e300}, id="1e300s"),
    pytest.param({"deadline": datetime(9999, 12, 31, tzinfo=UTC)}, id="9999-12-31"),
    pytest.param({"deadline": datetime.max.replace(tzinfo=UTC)}, id="datetime.max"),
]


@pytest.mark.parametrize("scope", HUGE_SCOPES)
def test_the_publish_hook_stamps_a_task_published_inside_a_scope_of_any_size(
    scope: dict[str, Any],
) -> None:
    """The before_task_publish receiver itself, on a budgeted task of the test app."""
    headers: dict[str, Any] = {}
    before = datetime.now(UTC)
    with tenacity_budget.deadline_scope(**scope):
        _on_publish(sender=tb.flaky.name, headers=headers)
    started = _when(headers[STARTED_HEADER])
    assert before <= started <= datetime.now(UTC)
    stamped = headers.get(DEADLINE_HEADER)
    # Beyond reach: no deadline at all, or one no run of the task comes near.
    assert stamped is None or _when(stamped) > started + timedelta(days=365)
    assert run_deadline(tb.QUICK, started, None if stamped is None else _when(stamped)) == (
        started + timedelta(seconds=tb.QUICK.max_elapsed)
    )


# ------------------------------------------------------------- real Redis, real workers


class Output:
    """Drains a child process's output in a thread; lets a test wait for a marker line."""

    def __init__(self, stream: IO[bytes], marker: str) -> None:
        self.lines: list[str] = []
        self.marker = marker
        self.seen = False
        self.done = threading.Event()  # set when the marker shows up or the output ends
        self._thread = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._thread.start()

    def _drain(self, stream: IO[bytes]) -> None:
        for raw in stream:
            line = raw.decode("utf-8", "replace")
            self.lines.append(line)
            if not self.seen and self.marker in line:
                self.seen = True
                self.done.set()
        self.done.set()
        stream.close()  # the process has exited: its pipe is at its end

    def join(self) -> None:
        """Once the process has exited: wait until its output is drained and closed."""
        self._thread.join(WAIT)

    def wait(self, what: str, timeout: float = WAIT) -> None:
        """Block until the marker line shows up; fail with the output if it never does."""
        self.done.wait(timeout)
        if not self.seen:
            tail = "".join(self.lines[-40:])
            pytest.fail(f"{what} never printed {self.marker!r}; its output:\n{tail}")


def _stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A throwaway Redis server on a free port (no persistence), stopped at the end."""
    # Hash keyspace events: the crash test watches the unacknowledged-message hash.
    with RedisServer(args=("--notify-keyspace-events", "Kh")) as server:
        yield server.url


@pytest.fixture(scope="session")
def app(redis_url: str) -> Any:
    """The test app of ``tests/celery_app``, pointed at the throwaway Redis."""
    tb.configure(redis_url)
    return tb.app


class Worker:
    """One ``celery worker --pool=solo`` process consuming one queue."""

    def __init__(self, proc: subprocess.Popen[bytes], name: str) -> None:
        self.proc = proc
        self.name = name
        self.output = Output(proc.stdout, f"{name} ready.")  # type: ignore[arg-type]

    def kill(self) -> None:
        """``kill -9``: no warm shutdown, no chance to hand anything back."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)


@pytest.fixture
def start_worker(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    """Start real worker processes (waiting until each is ready); stop them all afterwards."""
    workers: list[Worker] = []

    def start(
        queue: str,
        dead_letter: str,
        *,
        visibility_timeout: float | None = None,
        fail_retry_publish: bool = False,
    ) -> Worker:
        name = f"w{len(workers) + 1}-{uuid.uuid4().hex[:6]}@localhost"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                [str(TESTS), str(REPO), os.environ.get("PYTHONPATH", "")]
            ),
            "TB_CELERY_REDIS_URL": redis_url,
            "TB_DEAD_LETTER_QUEUE": dead_letter,
        }
        if visibility_timeout is not None:
            env["TB_VISIBILITY_TIMEOUT"] = str(visibility_timeout)
        if fail_retry_publish:
            env["TB_FAIL_RETRY_PUBLISH"] = "1"
        command = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "celery_app.app",
            "worker",
            "--pool=solo",
            "-Q",
            queue,
            "-n",
            name,
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel=INFO",
        ]
        proc = subprocess.Popen(
            command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        worker = Worker(proc, name)
        workers.append(worker)
        worker.output.wait(f"worker {name}")
        return worker

    try:
        yield start
    finally:
        for worker in workers:
            _stop(worker.proc)
            worker.output.join()


def _names() -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"tb.q.{suffix}", f"tb.dead.{suffix}"


def _store() -> Any:
    return tb.store()


def _countdowns(task_id: str) -> list[float]:
    return [json.loads(x) for x in _store().lrange(f"tb:countdowns:{task_id}", 0, -1)]


def _attempts(task_id: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in _store().lrange(f"tb:attempts:{task_id}", 0, -1)]


def _when(iso: str) -> datetime:
    return datetime.fromisoformat(iso)


def _dead_letters(app: Any, queue: str, count: int) -> tuple[list[dict[str, Any]], int]:
    """Consume ``count`` letters from the dead-letter queue; also say how many remain."""
    with app.connection_for_read() as conn, conn.SimpleQueue(queue) as dlq:
        letters = []
        for _ in range(count):
            message = dlq.get(block=True, timeout=WAIT)
            letters.append(message.payload)
            message.ack()
    # What is left: kombu keeps a Redis queue as a list under its name (and has no count
    # for an empty, hence undeclared, queue).
    left: int = _store().llen(queue)
    return letters, left


def _result(result: Any) -> Any:
    return result.get(timeout=WAIT, propagate=False)


def _check_run_log(task_id: str, calls: int) -> list[dict[str, Any]]:
    """The ``calls`` attempts of one run, each seeing the same started time and deadline."""
    attempts = _attempts(task_id)
    assert [a["retries"] for a in attempts] == list(range(calls))  # no duplicate, no gap
    started = {a["started"] for a in attempts}
    assert None not in started  # the run's start is stamped when the task is published...
    assert len(started) == 1  # ...and every retry carries it, unchanged
    assert len({a["deadline"] for a in attempts}) == 1
    # Each retry continues the schedule from the cursor its message carries (no replay).
    assert [a["cursor"] for a in attempts] == [False] + [True] * (calls - 1)
    return attempts


@pytest.mark.celery
def test_retries_follow_the_seeded_schedule_until_success(
    app: Any, start_worker: Callable[..., Worker]
) -> None:
    queue, dead = _names()
    start_worker(queue, dead)
    results = {
        fails: tb.flaky.apply_async(kwargs={"fails": fails}, queue=queue) for fails in (0, 3, 5)
    }
    assert tb.QUICK.max_attempts() == 5
    for fails, result in results.items():
        value = _result(result)
        assert result.state == "SUCCESS", value
        assert value["retries"] == fails
        assert _countdowns(result.id) == tb.quick.schedule(result.id)[:fails]
        attempts = _check_run_log(result.id, fails + 1)
        deadline = _when(attempts[0]["deadline"])
        if fails:
            started = _when(attempts[1]["started"])
            assert deadline == started + timedelta(seconds=tb.QUICK.max_elapsed)
        assert _when(value["finished_at"]) <= deadline
        left = [a["remaining"] for a in attempts]
        assert all(0 < x <= tb.QUICK.max_elapsed for x in left)
        assert left == sorted(left, reverse=True)
    assert _dead_letters(app, dead, 0)[1] == 0


@pytest.mark.celery
def test_a_task_published_inside_a_scope_of_any_size_keeps_its_run_start(
    app: Any, start_worker: Callable[..., Worker]
) -> None:
    """A deadline beyond reach (3e11 s, 1e300 s, year 9999, datetime.max): no deadline."""
    queue, dead = _names()
    start_worker(queue, dead)
    results = []
    for scope in HUGE_SCOPES:
        with tenacity_budget.deadline_scope(**scope.values[0]):
            results.append(tb.flaky.apply_async(kwargs={"fails": 1}, queue=queue))
    for result in results:
        value = _result(result)
        assert result.state == "SUCCESS", value
        attempts = _check_run_log(result.id, 2)  # the start stamped at publication, kept
        started = _when(attempts[0]["started"])
        assert started <= _when(attempts[0]["at"])
        # The run's own budget is its deadline: the scope, beyond reach, shortened nothing.
        assert {_when(a["deadline"]) for a in attempts} == {
            started + timedelta(seconds=tb.QUICK.max_elapsed)
        }
        assert _countdowns(result.id) == tb.quick.schedule(result.id)[:1]


@pytest.mark.celery
def test_a_spent_budget_goes_to_the_dead_letter_queue(
    app: Any, start_worker: Callable[..., Worker]
) -> None:
    queue, dead = _names()
    start_worker(queue, dead)
    result = tb.flaky.apply_async(args=(99,), queue=queue)
    error = _result(result)
    assert result.state == "FAILURE"
    assert isinstance(error, TaskBudgetExhausted)
    (letter,), left = _dead_letters(app, dead, 1)
    assert left == 0
    assert letter == error.letter
    assert letter["task"] == "tb.flaky"
    assert letter["task_id"] == result.id
    assert (letter["args"], letter["kwargs"]) == ([99], {})
    report = letter["report"]
    schedule = tb.quick.schedule(result.id)
    assert report["reason"] == "count"
    assert report["attempts"] == len(schedule) + 1 == tb.QUICK.max_attempts() + 1
    assert report["affordable"] == tb.QUICK.max_attempts()
    assert report["slept"] == pytest.approx(sum(schedule))
    assert report["budget"] == tb.QUICK.max_elapsed
    assert "UpstreamError" in report["last_exception"]
    assert _countdowns(result.id) == schedule
    attempts = _check_run_log(result.id, len(schedule) + 1)
    assert letter["deadline"] == attempts[0]["deadline"]
    assert _when(letter["dead_lettered_at"]) <= _when(letter["deadline"])


@pytest.mark.celery
def test_an_explicit_deadline_travels_with_the_message_and_is_never_crossed(
    app: Any, start_worker: Callable[..., Worker]
) -> None:
    queue, dead = _names()
    start_worker(queue, dead)
    # A task whose countdowns alone outlast 2 s: the deadline, not the count, must end it.
    task_id = next(
        f"deadline-{i}" for i in range(1000) if sum(tb.quick.schedule(f"deadline-{i}")) > 2.5
    )
    deadline = datetime.now(UTC) + timedelta(seconds=2)
    result = tb.flaky.apply_async(
        kwargs={"fails": 99}, queue=queue, task_id=task_id, headers=deadline_headers(deadline)
    )
    error = _result(result)
    assert isinstance(error, TaskBudgetExhausted)
    (letter,), left = _dead_letters(app, dead, 1)
    assert left == 0
    report = letter["report"]
    assert report["reason"] == "deadline"
    assert _when(report["deadline"]) == _when(letter["deadline"]) == deadline
    assert _when(letter["dead_lettered_at"]) <= deadline
    countdowns = _countdowns(task_id)
    schedule = tb.quick.schedule(task_id)
    assert countdowns == schedule[: len(countdowns)]
    assert len(countdowns) < len(schedule)
    attempts = _check_run_log(task_id, report["attempts"])
    assert {_when(a["deadline"]) for a in attempts} == {deadline}
    assert all(_when(a["at"]) <= deadline for a in attempts)


@pytest.mark.celery
def test_callback_dead_letters_and_errors_the_budget_does_not_retry(
    app: Any, start_worker: Callable[..., Worker]
) -> None:
    queue, dead = _names()
    start_worker(queue, dead)
    spent = tb.flaky_callback.apply_async(args=(99,), queue=queue)
    broken = tb.broken.apply_async(queue=queue)
    assert isinstance(_result(spent), TaskBudgetExhausted)
    (raw,) = _store().lrange(f"tb:letters:{spent.id}", 0, -1)
    letter = json.loads(raw)
    assert letter["report_type"] == "ExhaustionReport"
    assert letter["exception_type"] == "UpstreamError"  # the live exception, not a repr
    assert letter["report"]["reason"] == "count"
    assert _countdowns(spent.id) == tb.quick_to_callback.schedule(spent.id)
    error = _result(broken)
    assert broken.state == "FAILURE"
    assert isinstance(error, ValueError)
    assert _countdowns(broken.id) == []
    assert _store().llen(f"tb:letters:{broken.id}") == 0
    assert _dead_letters(app, dead, 0)[1] == 0  # the callback, not the queue, got the letter


def _unacked(app: Any) -> dict[str, tuple[int, str]]:
    """Messages held unacknowledged by some worker: task id -> (retries, routing key)."""
    held = {}
    for raw in _store().hvals("unacked"):
        message, _exchange, routing_key = json.loads(raw)
        headers = message["headers"]
        held[headers["id"]] = (headers["retries"], routing_key)
    return held


@pytest.mark.celery
def test_a_retry_pending_on_a_killed_worker_is_finished_by_a_fresh_one(
    app: Any, start_worker: Callable[..., Worker]
) -> None:
    """kill -9 a worker holding two countdown retries; a fresh worker completes both runs."""
    queue, dead = _names()
    first = start_worker(queue, dead)
    # Tasks whose first countdown is long enough for the kill to land inside it.
    ids = [f"fault-{i}" for i in range(1000) if tb.fault.schedule(f"fault-{i}")[0] >= 1.5][:2]
    pubsub = _store().pubsub()
    pubsub.subscribe("__keyspace@0__:unacked")
    ok = tb.fault_task.apply_async(args=(1,), queue=queue, task_id=ids[0])
    spent = tb.fault_task.apply_async(args=(99,), queue=queue, task_id=ids[1])

    # Wait (on Redis keyspace events, not a clock) until the worker holds both retries,
    # unacknowledged, with their countdowns pending, and has acknowledged both first attempts.
    wanted = {ok.id: (1, queue), spent.id: (1, queue)}
    give_up = time.monotonic() + WAIT
    while {k: v for k, v in _unacked(app).items() if k in wanted} != wanted:
        assert time.monotonic() < give_up, _unacked(app)
        pubsub.get_message(timeout=1.0)
    pubsub.close()
    first.kill()
    assert ok.state == spent.state == "RETRY"
    assert _store().llen(queue) == 0  # the retries now exist only as a dead worker's messages
    assert {k: v for k, v in _unacked(app).items() if k in wanted} == wanted

    second = start_worker(queue, dead)
    value = _result(ok)
    assert ok.state == "SUCCESS", value
    attempts = _check_run_log(ok.id, 2)
    assert [a["hostname"] for a in attempts] == [first.name, second.name]
    assert _when(value["finished_at"]) <= _when(attempts[0]["deadline"])
    assert _countdowns(ok.id) == tb.fault.schedule(ok.id)[:1]

    error = _result(spent)
    assert isinstance(error, TaskBudgetExhausted)
    (letter,), left = _dead_letters(app, dead, 1)
    assert left == 0
    assert letter["task_id"] == spent.id
    assert letter["report"]["reason"] in ("count", "wall_clock")
    countdowns = _countdowns(spent.id)
    assert countdowns == tb.fault.schedule(spent.id)[: len(countdowns)]  # one seeded schedule
    attempts = _check_run_log(spent.id, letter["report"]["attempts"])
    assert attempts[0]["hostname"] == first.name
    assert {a["hostname"] for a in attempts[1:]} == {second.name}
    assert letter["deadline"] == attempts[0]["deadline"]
    assert _when(letter["dead_lettered_at"]) <= _when(letter["deadline"])


LOAD_TASKS = 300


@pytest.mark.celery
def test_load_hundreds_of_tasks_against_a_flaky_upstream(
    app: Any, start_worker: Callable[..., Worker]
) -> None:
    """Every task succeeds or is dead-lettered exactly once, within its budget."""
    queue, dead = _names()
    for _ in range(2):
        start_worker(queue, dead, visibility_timeout=60)
    began = time.monotonic()
    # Fixed ids: the same upstream failures and countdowns on every run.
    results = [
        tb.load_task.apply_async(queue=queue, task_id=f"load-{i}") for i in range(LOAD_TASKS)
    ]
    outcomes = {r.id: _result(r) for r in results}
    wall = time.monotonic() - began
    states = {r.id: r.state for r in results}
    failed = [task_id for task_id, state in states.items() if state == "FAILURE"]
    letters, left = _dead_letters(app, dead, len(failed))
    assert left == 0
    by_id = {letter["task_id"]: letter for letter in letters}
    assert sorted(by_id) == sorted(failed)  # one letter per spent task, no duplicate

    slack: list[float] = []  # deadline minus the moment each run ended
    reasons: dict[str, int] = {}
    attempts_made = late = 0
    for r in results:
        fails = tb.failures_for(r.id)
        schedule = tb.load.schedule(r.id)
        countdowns = _countdowns(r.id)
        assert countdowns == schedule[: len(countdowns)]
        if states[r.id] == "SUCCESS":
            attempts = _check_run_log(r.id, len(countdowns) + 1)
            assert outcomes[r.id]["retries"] == len(countdowns) == fails
            ended = _when(outcomes[r.id]["finished_at"])
        else:
            assert states[r.id] == "FAILURE"
            assert isinstance(outcomes[r.id], TaskBudgetExhausted)
            report = by_id[r.id]["report"]
            attempts = _check_run_log(r.id, report["attempts"])
            reasons[report["reason"]] = reasons.get(report["reason"], 0) + 1
            if report["reason"] == "count":
                assert fails > tb.LOAD.max_attempts()
                assert countdowns == schedule
                assert report["attempts"] == len(countdowns) + 1
            else:  # out of time before the upstream recovered: only under a backlog
                assert report["reason"] == "wall_clock"
                assert fails >= report["attempts"]  # every call made had failed
                if report["last_exception"] is None:  # the last retry came too late to run
                    late += 1
                    assert report["attempts"] == len(countdowns)
                else:  # the next retry would not have ended in time
                    assert report["attempts"] == len(countdowns) + 1
            ended = _when(by_id[r.id]["dead_lettered_at"])
        attempts_made += len(attempts)
        deadline = _when(attempts[0]["deadline"])
        slack.append((deadline - ended).total_seconds())
    assert min(slack) >= 0  # nothing ended after its deadline
    expected_spent = sum(tb.failures_for(r.id) > tb.LOAD.max_attempts() for r in results)
    assert reasons.get("count", 0) == expected_spent
    print(
        f"\nload: {LOAD_TASKS} tasks, {attempts_made} attempts, "
        f"{LOAD_TASKS - len(failed)} succeeded, {len(failed)} dead-lettered {reasons} "
        f"({late} of them refused on arrival), "
        f"max lateness vs deadline {-min(slack):+.3f} s (min slack {min(slack):.3f} s), "
        f"wall time {wall:.1f} s"
    )


def _published(queue: str) -> list[dict[str, Any]]:
    """The headers of the messages waiting in ``queue`` (no worker consumes it), oldest first."""
    return [json.loads(raw)["headers"] for raw in reversed(_store().lrange(queue, 0, -1))]


def _budget_log(task_id: str) -> list[str]:
    return [x.decode() for x in _store().lrange(f"tb:budget:{task_id}", 0, -1)]


@pytest.mark.celery
def test_publishing_stamps_a_budgeted_task_with_its_start_and_the_enclosing_deadline(
    app: Any,
) -> None:
    """Real messages, published to a queue no worker reads, on the virtual clock."""
    queue, _ = _names()
    run_policy = BackoffPolicy(base=1, cap=1, max_elapsed=20)

    @run_policy.retry()
    def publish_inside_a_run() -> None:
        tb.flaky.apply_async(queue=queue)

    with virtual_clock() as clock:
        now = clock.now()
        tb.flaky.apply_async(queue=queue)
        tb.plain.apply_async(queue=queue)  # no CeleryBudget: left alone
        tb.flaky.apply_async(queue=queue, countdown=30)  # its run starts at its eta
        with tenacity_budget.deadline_scope(40):
            tb.flaky.apply_async(queue=queue)
            tb.flaky.apply_async(queue=queue, headers=deadline_headers(now + timedelta(seconds=10)))
            tb.flaky.apply_async(queue=queue, headers=deadline_headers(now + timedelta(seconds=60)))
            publish_inside_a_run()  # the run's own end (20 s) is the earliest

    def stamps(headers: dict[str, Any]) -> tuple[float | None, float | None]:
        def seconds(key: str) -> float | None:
            value = headers.get(key)
            return None if value is None else (_when(value) - now).total_seconds()

        return seconds(STARTED_HEADER), seconds(DEADLINE_HEADER)

    assert [stamps(h) for h in _published(queue)] == [
        (0.0, None),
        (None, None),
        (30.0, None),
        (0.0, 40.0),
        (0.0, 10.0),
        (0.0, 40.0),
        (0.0, 20.0),
    ]


@pytest.mark.celery
def test_a_retry_budget_caps_retries_and_a_child_task_inherits_its_parents_deadline(
    app: Any, start_worker: Callable[..., Worker]
) -> None:
    queue, dead = _names()
    children = f"{queue}.children"  # no worker reads it
    start_worker(queue, dead)
    spent = tb.capped_task.apply_async(args=(99,), queue=queue)
    parent = tb.parent.apply_async(args=(children,), queue=queue)

    # One run deposited one call, worth one retry: the second retry is refused.
    error = _result(spent)
    assert isinstance(error, TaskBudgetExhausted)
    (letter,), left = _dead_letters(app, dead, 1)
    assert left == 0
    assert letter["task_id"] == spent.id
    assert letter["report"]["reason"] == "retry_budget"
    assert letter["report"]["attempts"] == 2
    assert _budget_log(spent.id) == ["deposit", "granted", "refused"]
    assert _countdowns(spent.id) == tb.capped.schedule(spent.id)[:1]
    _check_run_log(spent.id, 2)

    # A budgeted task published inside an attempt of another: the parent's end is its deadline.
    value = _result(parent)
    assert parent.state == "SUCCESS", value
    (child,) = _published(children)
    assert child["id"] == value["child"]
    assert _when(child[DEADLINE_HEADER]) == _when(value["deadline"])
    assert _when(value["at"]) <= _when(child[STARTED_HEADER])  # published during the attempt


def _throttle_log(task_id: str) -> list[str]:
    return [x.decode() for x in _store().lrange(f"tb:throttle:{task_id}", 0, -1)]


@pytest.mark.celery
def test_a_throttle_that_rejects_retries_on_the_schedule_then_dead_letters_throttled(
    app: Any, start_worker: Callable[..., Worker]
) -> None:
    """A real AdaptiveThrottle fed overload signals rejects every attempt: none runs, the
    retry budget beside it is never touched, each rejection is retried on the task's
    schedule, and the run is dead-lettered 'throttled' once its time budget is spent."""
    queue, dead = _names()
    start_worker(queue, dead)
    result = tb.shed_task.apply_async(args=(0,), queue=queue)  # would succeed if it ran
    error = _result(result)
    assert isinstance(error, TaskBudgetExhausted)
    (letter,), left = _dead_letters(app, dead, 1)
    assert left == 0
    assert letter == error.letter
    report = letter["report"]
    assert report["reason"] == "throttled"
    assert "Throttled" in report["last_exception"]
    assert "'shed'" in report["last_exception"]
    countdowns = _countdowns(result.id)
    # Retried on its own schedule, for as long as the time budget allowed (all of it,
    # unless the machine ran the countdowns late enough for the wall clock to end it).
    assert countdowns
    assert countdowns == tb.shed.schedule(result.id)[: len(countdowns)]
    assert report["attempts"] == len(countdowns) + 1
    assert _throttle_log(result.id) == ["rejected"] * (len(countdowns) + 1)
    assert _attempts(result.id) == []  # the body never ran
    assert _budget_log(result.id) == []  # nothing sent: no deposit, no withdrawal
    assert _when(letter["dead_lettered_at"]) <= _when(letter["deadline"])


@pytest.mark.celery
def test_a_throttle_that_admits_runs_every_attempt_and_records_each_outcome(
    app: Any, start_worker: Callable[..., Worker]
) -> None:
    queue, dead = _names()
    start_worker(queue, dead)
    result = tb.admitted_task.apply_async(args=(2,), queue=queue)
    value = _result(result)
    assert result.state == "SUCCESS", value
    sent = ["admitted", "recorded:UpstreamError"]
    assert _throttle_log(result.id) == sent * 2 + ["admitted", "recorded:dict"]
    assert _countdowns(result.id) == tb.admitting.schedule(result.id)[:2]
    _check_run_log(result.id, 3)


@pytest.mark.celery
def test_a_throttled_tasks_retry_is_withdrawn_when_it_runs_after_the_throttle(
    app: Any, start_worker: Callable[..., Worker]
) -> None:
    """Issue 18's order, attempt by attempt, in a real worker: the time budget, the
    throttle, then the retry budget, then the body. The budget (one retry per run) grants
    the first retry when it runs and refuses the second there: it is not run, and the
    task is dead-lettered 'retry_budget' one countdown after the failure."""
    queue, dead = _names()
    start_worker(queue, dead)
    result = tb.ordered_task.apply_async(args=(99,), queue=queue)
    error = _result(result)
    assert isinstance(error, TaskBudgetExhausted)
    (letter,), left = _dead_letters(app, dead, 1)
    assert left == 0
    assert letter == error.letter
    assert letter["report"]["reason"] == "retry_budget"
    assert letter["report"]["attempts"] == 2
    order = [x.decode() for x in _store().lrange(f"tb:order:{result.id}", 0, -1)]
    ran = ["recorded:UpstreamError"]
    assert order == [
        "admitted",
        "deposit",
        *ran,
        "admitted",
        "granted",
        *ran,
        "admitted",
        "refused",
    ]
    _check_run_log(result.id, 2)  # the refused retry's body never ran
    assert _countdowns(result.id) == tb.ordered.schedule(result.id)[:2]


@pytest.mark.celery
def test_a_crash_during_the_first_attempt_keeps_the_runs_start_and_its_deposit(
    app: Any, start_worker: Callable[..., Worker]
) -> None:
    """kill -9 a worker in the middle of a first attempt; a fresh one runs it again."""
    queue, dead = _names()
    first = start_worker(queue, dead)
    result = tb.held.apply_async(args=(0,), queue=queue)
    # The attempt is under way once it says so (on Redis, no clock involved).
    assert _store().blpop([f"tb:holding:{result.id}"], timeout=WAIT) is not None
    first.kill()
    _store().rpush(f"tb:release:{result.id}", 1)  # the next execution will not hold
    second = start_worker(queue, dead)
    value = _result(result)
    assert result.state == "SUCCESS", value
    attempts = _attempts(result.id)
    assert [(a["retries"], a["redelivered"]) for a in attempts] == [(0, False), (0, True)]
    assert [a["hostname"] for a in attempts] == [first.name, second.name]
    # The same run: started when it was published, before its first attempt, on both.
    (started,) = {a["started"] for a in attempts}
    (deadline,) = {a["deadline"] for a in attempts}
    assert _when(started) <= _when(attempts[0]["at"])
    assert _when(deadline) == _when(started) + timedelta(seconds=tb.HOLD.max_elapsed)
    assert _budget_log(result.id) == ["deposit"]  # one call, deposited once


@pytest.mark.celery
def test_a_retry_the_broker_refuses_is_redelivered_or_dead_lettered(
    app: Any, start_worker: Callable[..., Worker]
) -> None:
    """The worker's retry publications fail as many times as each task's counter says."""
    queue, dead = _names()
    suffix = uuid.uuid4().hex[:8]
    once, always, early = (f"nopub-{kind}-{suffix}" for kind in ("once", "always", "early"))
    for task_id, refusals in ((once, 1), (always, 99), (early, 1)):
        _store().set(f"tb:fail-publish:{task_id}", refusals)
    start_worker(queue, dead, fail_retry_publish=True)
    recovered = tb.flaky.apply_async(kwargs={"fails": 2}, queue=queue, task_id=once)
    lost_twice = tb.flaky.apply_async(kwargs={"fails": 99}, queue=queue, task_id=always)
    acked_early = tb.early.apply_async(kwargs={"fails": 1}, queue=queue, task_id=early)

    # acks_late: the message is requeued, its attempt runs again and its retry goes out.
    value = _result(recovered)
    assert recovered.state == "SUCCESS", value
    attempts = _attempts(once)
    assert [(a["retries"], a["redelivered"]) for a in attempts] == [
        (0, False),
        (0, True),
        (1, False),
        (2, False),
    ]
    assert len({a["started"] for a in attempts}) == len({a["deadline"] for a in attempts}) == 1
    schedule = tb.quick.schedule(once)
    assert _countdowns(once) == [schedule[0], schedule[0], schedule[1]]

    # Requeued once; the redelivered message's retry is refused too: dead-lettered.
    # Acknowledged before its attempt (acks_late=False): nothing to requeue, dead-lettered.
    for result in (lost_twice, acked_early):
        error = _result(result)
        assert isinstance(error, TaskBudgetExhausted), error
        assert "could not be published" in str(error)
    letters, left = _dead_letters(app, dead, 2)
    assert left == 0
    by_id = {letter["task_id"]: letter for letter in letters}
    assert sorted(by_id) == sorted([always, early])
    assert {letter["report"]["reason"] for letter in letters} == {"other"}
    assert [(a["retries"], a["redelivered"]) for a in _attempts(always)] == [(0, False), (0, True)]
    assert [(a["retries"], a["redelivered"]) for a in _attempts(early)] == [(0, False)]
