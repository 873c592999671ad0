"""Tests for tenacity_budget.redis: the fleet-wide retry budget, against a real redis-server.

Every test talks to a real ``redis-server`` started on a free loopback port by
``tests/_redis.py``; the fleet test runs 4 real processes; the fault tests stop the server
in the middle of a run and start it again on the same port. No test sleeps to let a
window expire: the script's clock is moved with ``advance_clock`` (the documented test
hook), and the client side runs on the virtual clock where time matters. Waiting for what
a helper thread or timer does goes through Redis keyspace notifications, with a timeout.
What every budget promises (the rule's figures, expiry, observers) is checked once, over
every kind, in ``tests/test_budget_contract.py``.
"""

from __future__ import annotations

import inspect
import logging
import multiprocessing
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
import tenacity
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.retry import Retry
from tenacity import retry, retry_if_exception_type

from tenacity_budget import BackoffPolicy, BudgetExhausted, StopReason
from tenacity_budget.redis import (
    SCRIPT,
    AsyncRedisRetryBudget,
    RedisRetryBudget,
)
from tenacity_budget.retry_budget import (
    ALWAYS,
    NEVER,
    AsyncBudget,
    Budget,
    Number,
    RetryBudget,
    async_stop_retry_budget,
)
from tenacity_budget.testing import VirtualClock
from tests._redis import (  # the redis_server and own_redis_server fixtures
    Recorder,
    RedisServer,
    free_port,
    own_redis_server_fixture,  # noqa: F401
    redis_server_fixture,  # noqa: F401
    unique_name,
)

REPO = Path(__file__).resolve().parent.parent
POLICY = BackoffPolicy(base=0.01, factor=2, cap=0.1, max_elapsed=5, jitter="none")
WAIT = 30.0  # the longest any test waits for a helper thread, a timer or a process


@pytest.fixture
def client(redis_server: RedisServer) -> Iterator[Any]:
    connection: Any = redis.Redis.from_url(redis_server.url, socket_timeout=10)
    yield connection
    connection.close()


def one_shot_client(server: RedisServer, **kwargs: Any) -> redis.Redis:
    """A client making one attempt per command (no redis-py retries): failures are immediate."""
    return redis.Redis.from_url(server.url, socket_timeout=5, retry=Retry(NoBackoff(), 0), **kwargs)


def window(connection: Any, budget: RedisRetryBudget) -> tuple[int, int]:
    """Deposits and withdrawals stored in the budget's hash (every slot, stale ones too)."""
    fields = {k.decode(): int(v) for k, v in connection.hgetall(budget.key).items()}
    deposits = sum(v for k, v in fields.items() if k.startswith("d"))
    withdrawals = sum(v for k, v in fields.items() if k.startswith("w"))
    return deposits, withdrawals


def deposit(budget: RedisRetryBudget, n: int) -> None:
    for _ in range(n):
        budget.deposit()


def grants(budget: RedisRetryBudget, attempts: int) -> int:
    return sum(budget.try_withdraw() for _ in range(attempts))


def script_calls(connection: Any) -> int:
    stats = connection.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
        for name in ("evalsha", "eval", "evalsha_ro", "eval_ro")
    )


def flaky(budget: RedisRetryBudget, failures: int = 1) -> Any:
    """A plain-tenacity function that fails ``failures`` times per call, then returns."""
    state = {"left": 0}

    @retry(
        wait=POLICY.wait(),
        stop=POLICY.stop() | budget.stop(),
        before=budget.before,
        retry=retry_if_exception_type(ConnectionError),
        retry_error_cls=BudgetExhausted,
    )
    def work() -> str:
        if state["left"] > 0:
            state["left"] -= 1
            raise ConnectionError("flaky")
        return "ok"

    def call() -> str:
        state["left"] = failures
        return work()

    return call


# -- the interface -------------------------------------------------------------------------


def test_signature_defaults_and_kind(client: Any) -> None:
    params = list(inspect.signature(RedisRetryBudget.__init__).parameters.values())[1:]
    assert [(p.name, p.default) for p in params[:5]] == [
        ("client", inspect.Parameter.empty),
        ("name", inspect.Parameter.empty),
        ("ratio", 0.2),
        ("min_per_second", 10.0),
        ("ttl", 10.0),
    ]
    keyword_only = {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}
    assert keyword_only["on_error"] == "local"
    assert keyword_only["timeout"] == 0.05  # not the client's socket_timeout (10 s here)
    budget = RedisRetryBudget(client, unique_name())
    assert budget.timeout == 0.05
    assert budget.is_async is False
    assert type(budget) is RedisRetryBudget
    assert isinstance(budget.stop(), tenacity.stop.stop_base)
    assert (budget.ratio, budget.min_per_second, budget.ttl) == (0.2, 10.0, 10.0)
    async_budget = AsyncRedisRetryBudget(redis.asyncio.Redis(), unique_name())
    assert type(async_budget) is AsyncRedisRetryBudget
    assert not isinstance(async_budget, RedisRetryBudget)  # siblings, not a subclass
    # The spelling of one class for both clients keeps building the async sibling, deprecated.
    with pytest.warns(DeprecationWarning, match="build AsyncRedisRetryBudget"):
        old_spelling: Any = RedisRetryBudget(redis.asyncio.Redis(), unique_name())  # type: ignore[arg-type]
    assert type(old_spelling) is AsyncRedisRetryBudget
    assert old_spelling.is_async is True
    assert isinstance(old_spelling.stop(), async_stop_retry_budget)
    assert isinstance(async_budget, AsyncRedisRetryBudget)
    assert async_budget.is_async is True
    assert isinstance(async_budget.stop(), async_stop_retry_budget)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"on_error": "ignore"}, ValueError, "on_error must be"),
        ({"ttl": 0.000009}, ValueError, "at least 10 microseconds"),
        ({"ttl": 0}, ValueError, "ttl must be > 0"),
        ({"ratio": -1}, ValueError, "ratio must be >= 0"),
        ({"ratio": 0.123456789123}, ValueError, "Lua's doubles"),
        ({"min_per_second": 1e300}, ValueError, "Lua's doubles"),
        ({"timeout": -1}, ValueError, "timeout must be"),
        ({"retry_interval": "1"}, TypeError, "retry_interval must be a number"),
        ({"name": ""}, ValueError, "name must not be empty"),
        ({"key_prefix": 3}, TypeError, "key_prefix must be a str"),
    ],
)
def test_bad_parameters_are_refused_at_construction(
    client: Any, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    kwargs = {"name": "x", **kwargs}
    name = kwargs.pop("name")
    with pytest.raises(error, match=message):
        RedisRetryBudget(client, name, **kwargs)


def test_a_client_that_is_not_redis_py_is_refused() -> None:
    with pytest.raises(TypeError, match=r"needs a redis\.Redis"):
        RedisRetryBudget(object(), "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"needs a redis\.asyncio\.Redis"):
        AsyncRedisRetryBudget(redis.Redis(), "x")  # type: ignore[arg-type]


# -- the rule, in Redis --------------------------------------------------------------------

GRID_RATIOS: list[Number] = [0, 0.1, 0.2, Fraction(1, 3), 0.5, 1, 2.5]
GRID_FLOORS: list[Number] = [0, 0.3, 1, 10]
GRID_TTLS: list[Number] = [0.5, 1, 10, 60]
GRID_DEPOSITS = [0, 1, 4, 5, 99, 100, 1000]


def test_the_scripts_rule_is_budget_terms_grants_on_a_grid(client: Any) -> None:
    """The Lua script grants exactly when ``BudgetTerms.grants`` does, and reports its
    ``affordable`` as the balance, over a grid of (deposits, withdrawals, ratio,
    min_per_second, ttl): withdrawals on both sides of each point's boundary.

    The window is written straight into the budget's hash, in a slice far in the future
    (the script adopts a stored slice later than its clock's), so no clock moves under it;
    then one script call with the budget's own arguments asks for one more withdrawal.
    """
    checked = 0
    for ratio in GRID_RATIOS:
        for floor in GRID_FLOORS:
            for ttl in GRID_TTLS:
                budget = RedisRetryBudget(client, unique_name("grid"), ratio, floor, ttl)
                terms, state = budget.terms, budget._state
                width = state.static_args[0]
                far = client.time()[0] * 1_000_000 // width + 10**6
                for deposits in GRID_DEPOSITS:
                    edge = terms.affordable(deposits, 0)
                    for withdrawals in sorted({0, edge - 1, edge, edge + 1} - {-1}):
                        client.delete(budget.key)
                        client.hset(
                            budget.key,
                            mapping={
                                "last": far,
                                f"s{far % 10}": far,
                                f"d{far % 10}": deposits,
                                f"w{far % 10}": withdrawals,
                            },
                        )
                        granted, balance = state.script(
                            keys=state.keys, args=state.args([], withdraw=True)
                        )
                        expected = terms.grants(deposits, withdrawals + 1)
                        assert bool(granted) is expected, (ratio, floor, ttl, deposits, withdrawals)
                        after = withdrawals + int(expected)
                        assert balance == terms.affordable(deposits, after)
                        checked += 1
                client.delete(budget.key)
                budget.close()
    assert checked > 2000


def test_a_refusal_writes_nothing(client: Any) -> None:
    budget = RedisRetryBudget(client, unique_name(), ratio=0.2, min_per_second=0, timeout=WAIT)
    deposit(budget, 5)
    assert grants(budget, 1) == 1
    before = client.hgetall(budget.key)
    assert grants(budget, 10) == 0
    assert client.hgetall(budget.key) == before


def test_the_window_is_redis_time_not_the_client_clock(
    client: Any, virtual_clock: VirtualClock
) -> None:
    # The client's clock jumps an hour: an in-process budget's window would be empty; the
    # shared one, on the server's TIME, still holds everything.
    budget = RedisRetryBudget(
        client, unique_name(), ratio=0.2, min_per_second=0, ttl=10, timeout=WAIT
    )
    local = RetryBudget(ratio=0.2, min_per_second=0, ttl=10)
    for _ in range(100):
        budget.deposit()
        local.deposit()
    assert grants(budget, 10) == 10
    virtual_clock.advance(3600)
    assert local.balance == 0
    assert budget.balance == 10
    assert grants(budget, 20) == 10


def test_keys_share_one_hash_tag_expire_and_stay_small(client: Any) -> None:
    name = unique_name("tagged")
    budget = RedisRetryBudget(client, name, ratio=0.2, min_per_second=1, ttl=10, timeout=WAIT)
    assert budget.key == f"tenacity_budget:{{{name}}}"
    assert key_slot(budget.key.encode()) == key_slot(budget.clock_key.encode())
    sizes = []
    for step in range(150):  # 150 slices, 15 windows
        deposit(budget, 7)
        grants(budget, 3)
        budget.advance_clock(1.0)
        assert client.hlen(budget.key) <= 31
        assert 0 < client.pttl(budget.key) <= 11_000
        if step in (20, 149):
            sizes.append(client.memory_usage(budget.key))
    assert sizes[1] <= sizes[0] + 16  # constant memory, whatever the traffic
    assert sorted(k.decode() for k in client.keys(f"*{name}*")) == sorted(
        [budget.key, budget.clock_key]
    )


def test_the_script_is_a_lua_file_shipped_in_the_package() -> None:
    import tomllib
    from importlib.resources import files

    script = files("tenacity_budget.redis").joinpath("script.lua")
    assert script.read_text(encoding="utf-8") == SCRIPT
    assert SCRIPT.startswith("-- One decision of a tenacity-budget retry budget")
    # hatchling puts every file of a listed package in the wheel, .lua included, unless a
    # pattern excludes it (checked by hand on a built wheel: tenacity_budget/redis/script.lua)
    build = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    assert build["targets"]["wheel"]["packages"] == ["tenacity_budget"]
    excluded = [*build.get("exclude", []), *build["targets"]["wheel"].get("exclude", [])]
    assert not any("lua" in pattern for pattern in excluded)


def test_noscript_reloads_the_script(client: Any) -> None:
    budget = RedisRetryBudget(client, unique_name(), ratio=1, min_per_second=0, timeout=WAIT)
    deposit(budget, 3)
    assert grants(budget, 1) == 1
    client.script_flush()
    assert grants(budget, 5) == 2
    assert not budget.degraded
    assert client.script_exists(budget._state.script.sha) == [True]
    assert "redis.call('TIME')" in SCRIPT


def test_first_try_successes_make_no_round_trip(own_redis_server: RedisServer) -> None:
    connection: Any = redis.Redis.from_url(own_redis_server.url)
    budget = RedisRetryBudget(connection, unique_name(), ttl=60, timeout=WAIT)
    call = flaky(budget, failures=0)
    connection.config_resetstat()
    for _ in range(1000):
        assert call() == "ok"
    assert script_calls(connection) <= 20
    assert budget.pending + window(connection, budget)[0] == 1000
    # The next decision sends them all.
    failing = flaky(budget, failures=1)
    assert failing() == "ok"
    assert window(connection, budget) == (1001, 1)
    assert budget.pending == 0
    connection.close()


def test_16_threads_never_get_more_than_the_shared_budget(client: Any) -> None:
    budget = RedisRetryBudget(
        client, unique_name(), ratio=0.2, min_per_second=1, ttl=60, timeout=WAIT
    )
    granted = [0] * 16
    start = threading.Barrier(16)

    def work(i: int) -> None:
        start.wait()
        for _ in range(25):
            budget.deposit()
            granted[i] += budget.try_withdraw() + budget.try_withdraw()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # 400 calls: 80 + 60 retries; what was not granted is still in the window.
    assert sum(granted) + budget.balance == 140
    assert window(client, budget) == (400, sum(granted))


# -- the fleet -----------------------------------------------------------------------------


def fleet_member(url: str, name: str, start: Any, results: Any) -> None:
    """One process of the fleet: 100 calls deposited, then 50 withdrawals attempted."""
    budget = RedisRetryBudget(
        redis.Redis.from_url(url), name, ratio=0.2, min_per_second=0, ttl=60, timeout=WAIT
    )
    start.wait()
    for _ in range(100):
        budget.deposit()
    results.put(sum(budget.try_withdraw() for _ in range(50)))


def test_four_processes_share_one_window_exactly(redis_server: RedisServer) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(4)
    results = context.Queue()
    name = unique_name("fleet")
    members = [
        context.Process(target=fleet_member, args=(redis_server.url, name, start, results))
        for _ in range(4)
    ]
    for member in members:
        member.start()
    try:
        got = [results.get(timeout=WAIT * 4) for _ in members]
    finally:
        for member in members:
            member.join(timeout=WAIT)
            if member.is_alive():
                member.kill()
    assert [member.exitcode for member in members] == [0, 0, 0, 0]
    assert sum(got) == 80  # 0.2 x 400 fleet calls, however the four interleave
    connection: Any = redis.Redis.from_url(redis_server.url)
    assert window(connection, RedisRetryBudget(connection, name)) == (400, 80)
    connection.close()


# -- batching: the flush timer and the exit flush --------------------------------------------


def keyspace_events(connection: Any, key: str) -> Any:
    connection.config_set("notify-keyspace-events", "Kh")
    pubsub = connection.pubsub()
    pubsub.subscribe(f"__keyspace@0__:{key}")
    assert pubsub.get_message(timeout=WAIT)["type"] == "subscribe"
    return pubsub


def test_pending_deposits_are_flushed_within_ttl_over_10_without_a_decision(
    own_redis_server: RedisServer,
) -> None:
    connection: Any = redis.Redis.from_url(own_redis_server.url)
    budget = RedisRetryBudget(connection, unique_name(), ttl=0.5, timeout=WAIT)  # flushed in 50 ms
    events = keyspace_events(connection, budget.key)
    deposit(budget, 3)
    message = events.get_message(timeout=WAIT)
    assert message is not None
    assert message["data"] == b"hset"
    assert window(connection, budget)[0] == 3
    assert budget.pending == 0
    budget.close()
    events.close()
    connection.close()


async def test_an_asyncio_budget_flushes_on_a_loop_timer(own_redis_server: RedisServer) -> None:
    watcher: Any = redis.asyncio.Redis.from_url(own_redis_server.url)
    connection: Any = redis.asyncio.Redis.from_url(own_redis_server.url)
    budget = AsyncRedisRetryBudget(connection, unique_name(), ttl=0.5, timeout=WAIT)
    await watcher.config_set("notify-keyspace-events", "Kh")
    pubsub = watcher.pubsub()
    await pubsub.subscribe(f"__keyspace@0__:{budget.key}")
    assert (await pubsub.get_message(timeout=WAIT))["type"] == "subscribe"
    for _ in range(3):
        budget.deposit()
    message = await pubsub.get_message(timeout=WAIT)
    assert message is not None
    assert message["data"] == b"hset"
    assert (
        sum(int(v) for k, v in (await connection.hgetall(budget.key)).items() if k.startswith(b"d"))
        == 3
    )
    assert budget.pending == 0
    await budget.close()
    await pubsub.aclose()
    await watcher.aclose()
    await connection.aclose()


def test_pending_deposits_are_flushed_at_exit(redis_server: RedisServer) -> None:
    name = unique_name("atexit")
    code = textwrap.dedent(
        f"""
        import redis
        from tenacity_budget.redis import RedisRetryBudget

        budget = RedisRetryBudget(redis.Redis.from_url({redis_server.url!r}), {name!r}, ttl=60)
        for _ in range(5):
            budget.deposit()
        assert budget.pending == 5
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=WAIT)
    connection: Any = redis.Redis.from_url(redis_server.url)
    assert window(connection, RedisRetryBudget(connection, name)) == (5, 0)
    connection.close()


# -- faults --------------------------------------------------------------------------------


def test_a_stopped_server_falls_back_and_a_restarted_one_takes_over_again(
    own_redis_server: RedisServer, virtual_clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tenacity_budget.redis")
    recorder = Recorder()
    connection = one_shot_client(own_redis_server)
    budget = RedisRetryBudget(
        connection,
        unique_name(),
        ratio=0.5,
        min_per_second=1,
        ttl=60,
        observers=recorder,
        timeout=WAIT,
    )
    call = flaky(budget, failures=1)  # every call needs one retry
    for _ in range(10):
        assert call() == "ok"
    assert window(connection, budget) == (10, 10)
    assert recorder.fallbacks == []

    own_redis_server.stop()
    for _ in range(10):
        assert call() == "ok"  # decided by the local fallback; nothing raises
    assert budget.degraded
    assert len(recorder.fallbacks) == 10
    assert all(isinstance(error, redis.ConnectionError) for _, error in recorder.fallbacks)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings
    assert "deciding on the 'local' fallback" in warnings[0].getMessage()
    assert len([r for r in caplog.records if r.levelno == logging.DEBUG]) == 10
    # The fallback started from this process's traffic: 20 calls, 10 retries from Redis.
    assert recorder.decisions[-1] == (budget.name, True, 60 + 10 - 20)

    own_redis_server.start()  # same port, empty: nothing was persisted
    virtual_clock.advance(budget.retry_interval)
    for _ in range(5):
        assert call() == "ok"
    assert not budget.degraded
    assert len(recorder.fallbacks) == 10
    # Back on the shared window, with the deposits made while Redis was away.
    assert window(connection, budget) == (15, 5)
    assert recorder.decisions[-1] == (budget.name, True, 60 + 7 - 5)
    assert any("Redis answers again" in r.getMessage() for r in caplog.records)
    connection.close()


def test_deposits_kept_while_redis_is_away_are_dropped_once_older_than_ttl(
    own_redis_server: RedisServer, virtual_clock: VirtualClock
) -> None:
    connection = one_shot_client(own_redis_server)
    budget = RedisRetryBudget(
        connection, unique_name(), ratio=1, min_per_second=0, ttl=10, timeout=WAIT
    )
    own_redis_server.stop()
    for _ in range(30):  # a call a second for 30 s, Redis away
        budget.deposit()
        virtual_clock.advance(1)
    assert budget.pending <= 10  # what is kept stays within one window
    assert budget.try_withdraw() is True  # decided locally: the local window has them too
    own_redis_server.start()
    virtual_clock.advance(budget.retry_interval)
    budget.flush()
    assert budget.pending == 0
    deposits, withdrawals = window(connection, budget)
    # The last window's calls (a helper-thread flush may have sent them a second earlier),
    # never the 30.
    assert 8 <= deposits <= 10
    assert withdrawals == 0
    connection.close()


@pytest.mark.parametrize(
    ("on_error", "granted", "balance"), [("allow", True, sys.maxsize), ("deny", False, 0)]
)
def test_allow_and_deny_decide_without_redis(
    on_error: Any, granted: bool, balance: int, caplog: pytest.LogCaptureFixture
) -> None:
    nothing = redis.Redis(port=free_port(), socket_timeout=5, retry=Retry(NoBackoff(), 0))
    recorder = Recorder()
    budget = RedisRetryBudget(
        nothing,
        unique_name(),
        on_error=on_error,
        retry_interval=0,
        observers=[recorder],
        timeout=WAIT,
    )
    deposit(budget, 3)
    assert [budget.try_withdraw() for _ in range(3)] == [granted] * 3
    assert budget.balance == balance
    assert len(recorder.fallbacks) == 3
    assert recorder.decisions == [(budget.name, granted, None)] * 3
    assert budget.pending == 3  # kept for when Redis answers
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) >= 3


@pytest.mark.parametrize(
    ("on_error", "fallback"), [("allow", ALWAYS), ("deny", NEVER), ("local", None)]
)
def test_on_error_names_a_fallback_budget(client: Any, on_error: Any, fallback: Any) -> None:
    budget = RedisRetryBudget(client, unique_name(), on_error=on_error)
    assert budget.on_error == on_error
    if fallback is None:
        assert type(budget.fallback) is RetryBudget
        assert budget.fallback.terms == budget.terms  # the same parameters, exactly
    else:
        assert budget.fallback is fallback
    assert budget.local is budget.fallback
    same = RedisRetryBudget(client, unique_name(), fallback=budget.fallback)
    assert (same.on_error, same.fallback) == (on_error, budget.fallback)


def test_a_fallback_budget_decides_without_redis_and_sees_every_deposit() -> None:
    nothing = redis.Redis(port=free_port(), socket_timeout=5, retry=Retry(NoBackoff(), 0))
    own = RetryBudget(ratio=1, min_per_second=0, ttl=10, name="own")
    recorder = Recorder()
    budget = RedisRetryBudget(
        nothing, unique_name(), ratio=0, min_per_second=0, fallback=own, observers=recorder
    )
    for _ in range(3):
        budget.deposit()
    assert own.balance == 3  # every deposit reached the fallback
    assert [budget.try_withdraw() for _ in range(4)] == [True, True, True, False]
    assert budget.balance == 0  # the fallback's
    assert len(recorder.fallbacks) == 4
    assert [granted for _, granted, _ in recorder.decisions] == [True, True, True, False]
    assert [balance for _, _, balance in recorder.decisions] == [2, 1, 0, 0]
    budget.close()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"on_error": "deny", "fallback": ALWAYS}, ValueError, "not both"),
        ({"fallback": "local"}, TypeError, "fallback must be a budget"),
        ({"fallback": object()}, TypeError, "fallback must be a budget"),
    ],
)
def test_bad_fallbacks_are_refused_at_construction(
    client: Any, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        RedisRetryBudget(client, "x", **kwargs)


async def test_an_asyncio_budget_is_no_fallback(client: Any) -> None:
    async_budget = AsyncRedisRetryBudget(redis.asyncio.Redis(), unique_name())
    with pytest.raises(TypeError, match="fallback must be a budget decided in this process"):
        RedisRetryBudget(client, "x", fallback=async_budget)  # type: ignore[arg-type]


def test_the_budgets_are_the_protocols_they_claim_without_a_round_trip(client: Any) -> None:
    # An isinstance check reads `balance` statically: a down server is never asked.
    nothing = redis.Redis(port=free_port(), socket_timeout=5, retry=Retry(NoBackoff(), 0))
    down = RedisRetryBudget(nothing, unique_name(), on_error="deny", observers=Recorder())
    assert isinstance(down, Budget)
    assert down.observers[0].decisions == []  # type: ignore[attr-defined]
    assert isinstance(AsyncRedisRetryBudget(redis.asyncio.Redis(), unique_name()), AsyncBudget)
    for budget in (RetryBudget(), ALWAYS, NEVER, RedisRetryBudget(client, unique_name())):
        assert isinstance(budget, Budget)
    assert not isinstance(object(), Budget)
    down.close()


def test_local_fallback_has_the_budgets_own_rule() -> None:
    nothing = redis.Redis(port=free_port(), socket_timeout=5, retry=Retry(NoBackoff(), 0))
    budget = RedisRetryBudget(nothing, unique_name(), ratio=0.2, min_per_second=0, ttl=10)
    deposit(budget, 100)
    assert grants(budget, 30) == 20
    assert budget.balance == 0
    assert budget.local.balance == 0


def test_a_slow_server_never_holds_a_decision_past_the_timeout(
    own_redis_server: RedisServer,
) -> None:
    # CLIENT PAUSE WRITE holds every write (our script included) for 30 s. If the decision waited
    # for Redis it would come back granted by Redis, not degraded; it comes back at the
    # timeout, decided by the fallback. A client with redis-py's default retries.
    admin: Any = redis.Redis.from_url(own_redis_server.url)
    connection: Any = redis.Redis.from_url(own_redis_server.url, socket_timeout=10)
    budget = RedisRetryBudget(connection, unique_name(), ratio=0, min_per_second=1, timeout=0.2)
    assert grants(budget, 1) == 1
    admin.execute_command("CLIENT", "PAUSE", 30_000, "WRITE")
    try:
        assert budget.try_withdraw() is True
        assert budget.degraded
        # While the first call is still held, the next ones do not queue behind it.
        assert budget.try_withdraw() is True
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")
    admin.close()


def test_a_down_server_with_default_client_retries_returns_at_the_timeout() -> None:
    nothing = redis.Redis(port=free_port(), socket_timeout=5)  # redis-py retries 10 times
    budget = RedisRetryBudget(nothing, unique_name(), on_error="deny", timeout=0.1)
    assert budget.try_withdraw() is False
    assert budget.degraded


# -- asyncio -------------------------------------------------------------------------------


@pytest.fixture
async def async_client(redis_server: RedisServer) -> Any:
    connection: Any = redis.asyncio.Redis.from_url(redis_server.url, socket_timeout=10)
    yield connection
    await connection.aclose()


async def test_asyncio_stop_is_the_top_level_stop_of_async_retrying(async_client: Any) -> None:
    budget = AsyncRedisRetryBudget(
        async_client, unique_name(), ratio=0, min_per_second=0.2, ttl=10, timeout=WAIT
    )
    attempts = 0

    async def down() -> None:
        nonlocal attempts
        attempts += 1
        raise ConnectionError("down")

    # tenacity's AsyncRetrying awaits an async top-level stop; its annotation says sync.
    retrying = tenacity.AsyncRetrying(stop=budget.stop(), before=budget.before)  # type: ignore[arg-type]
    with pytest.raises(tenacity.RetryError):
        await retrying(down)
    assert attempts == 3  # the 2 retries of the floor, then refused
    with pytest.raises(TypeError, match="cannot be composed"):
        budget.stop() | POLICY.stop()


async def test_asyncio_fault_falls_back_without_raising(
    own_redis_server: RedisServer, virtual_clock: VirtualClock
) -> None:
    connection: Any = redis.asyncio.Redis.from_url(
        own_redis_server.url, socket_timeout=5, retry=redis.asyncio.retry.Retry(NoBackoff(), 0)
    )
    recorder = Recorder()
    budget = AsyncRedisRetryBudget(
        connection,
        unique_name(),
        ratio=0,
        min_per_second=0.3,
        ttl=10,
        observers=recorder,
        timeout=WAIT,
    )
    assert await budget.try_withdraw() is True
    own_redis_server.stop()
    assert [await budget.try_withdraw() for _ in range(3)] == [True, True, False]
    assert budget.degraded
    assert len(recorder.fallbacks) == 3
    own_redis_server.start()
    virtual_clock.advance(budget.retry_interval)
    assert await budget.try_withdraw() is True  # a fresh server: the floor again
    assert not budget.degraded
    await connection.aclose()


async def test_asyncio_slow_server_is_cut_at_the_timeout(own_redis_server: RedisServer) -> None:
    admin: Any = redis.asyncio.Redis.from_url(own_redis_server.url)
    connection: Any = redis.asyncio.Redis.from_url(own_redis_server.url)
    budget = AsyncRedisRetryBudget(connection, unique_name(), on_error="deny", timeout=0.2)
    await admin.execute_command("CLIENT", "PAUSE", 30_000, "WRITE")
    try:
        assert await budget.try_withdraw() is False
        assert budget.degraded
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")
    await admin.aclose()
    await connection.aclose()


# -- observers -----------------------------------------------------------------------------


def test_a_budgeted_run_ends_with_reason_retry_budget(client: Any) -> None:
    budget = RedisRetryBudget(
        client, unique_name(), ratio=0, min_per_second=0.1, ttl=10, timeout=WAIT
    )
    call = flaky(budget, failures=100)
    with pytest.raises(BudgetExhausted) as info:
        call()
    assert info.value.report.reason is StopReason.RETRY_BUDGET
    assert info.value.report.attempts == 2
