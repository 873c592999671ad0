"""Tests for tenacity_budget.redis.RedisAdaptiveThrottle on a real redis-server.

Flushes are made explicitly (``flush()``) where a test needs the fleet's counts, so no test
waits for the helper thread's timer; the script's clock is moved with ``advance_clock``.
Four spawned processes share one throttle, with Redis up and then stopped mid-run.
"""

from __future__ import annotations

import multiprocessing
import random
from typing import Any

import pytest
import redis
import redis.asyncio

from tenacity_budget.redis import RedisAdaptiveThrottle
from tenacity_budget.testing import virtual_clock
from tenacity_budget.throttle import probability_of
from tests._redis import (  # the redis_server and own_redis_server fixtures
    RedisServer,
    free_port,
    own_redis_server_fixture,  # noqa: F401
    redis_server_fixture,  # noqa: F401
    unique_name,
)

WAIT = 10.0


class Status:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


OVERLOADED, OK = Status(429), Status(200)


def client_of(server: RedisServer) -> Any:
    return redis.Redis.from_url(server.url, socket_timeout=2, socket_connect_timeout=2)


def test_construction_is_checked(redis_server: RedisServer) -> None:
    client = client_of(redis_server)
    with pytest.raises(TypeError, match=r"sync redis\.Redis"):
        RedisAdaptiveThrottle(redis.asyncio.Redis.from_url(redis_server.url), "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="client"):
        RedisAdaptiveThrottle(object(), "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="on_error"):
        RedisAdaptiveThrottle(client, "x", on_error="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k"):
        RedisAdaptiveThrottle(client, "x", k=1)
    with pytest.raises(ValueError, match="window"):
        RedisAdaptiveThrottle(client, "x", window=0)
    with pytest.raises(ValueError, match="name"):
        RedisAdaptiveThrottle(client, "")
    throttle = RedisAdaptiveThrottle(client, "api")
    assert (throttle.k, throttle.window, throttle.name, throttle.timeout) == (
        2.0,
        120.0,
        "api",
        0.05,
    )
    assert throttle.key == "tenacity_budget:throttle:{api}"
    assert throttle.on_error == "local"
    throttle.close()


def test_admissions_make_no_round_trip_and_a_flush_makes_one(redis_server: RedisServer) -> None:
    throttle = RedisAdaptiveThrottle(client_of(redis_server), unique_name())
    calls = []
    script = throttle._script
    throttle._script = lambda **kw: calls.append(kw) or script(**kw)
    with virtual_clock():  # the helper thread's timer runs on real time: it stays idle
        for _ in range(1000):
            if throttle.admit():
                throttle.record(OVERLOADED)
        assert calls == []
        throttle.flush()
    assert len(calls) == 1
    throttle.close()


def test_processes_decide_on_the_fleets_counts(redis_server: RedisServer) -> None:
    name = unique_name()
    first = RedisAdaptiveThrottle(client_of(redis_server), name, rng=random.Random(1))
    second = RedisAdaptiveThrottle(client_of(redis_server), name, rng=random.Random(2))
    assert second.degraded  # nothing read yet: the local rule decides
    for _ in range(10):
        first.admit()
        first.record(OVERLOADED)
    first.flush()
    second.flush()
    assert not second.degraded
    assert second.probability == probability_of(10, 0, 2.0)  # the fleet's, not its own 0
    assert second.local.probability == 0.0
    for _ in range(3):
        second.admit()  # counted at once, before any flush
    second.record(OK)
    assert second.probability == probability_of(13, 1, 2.0)
    second.flush()
    first.flush()
    assert first.probability == probability_of(13, 1, 2.0)
    first.close()
    second.close()


def test_the_shared_window_expires_on_redis_time(redis_server: RedisServer) -> None:
    throttle = RedisAdaptiveThrottle(client_of(redis_server), unique_name(), window=10)
    for _ in range(4):
        throttle.admit()
    throttle.flush()
    assert throttle.probability == probability_of(4, 0, 2.0)
    throttle.advance_clock(9)  # slices of 1 s: the counts are still in the window
    throttle.flush()
    assert throttle.probability == probability_of(4, 0, 2.0)
    throttle.advance_clock(2)
    throttle.flush()
    assert throttle.probability == 0.0
    throttle.close()


def test_observers_hear_fleet_decisions(redis_server: RedisServer) -> None:
    seen: list[tuple[str, bool, float]] = []

    class Hook:
        def on_throttle(self, name: str, admitted: bool, probability: float) -> None:
            seen.append((name, admitted, probability))

    throttle = RedisAdaptiveThrottle(
        client_of(redis_server),
        "observed-" + unique_name(),
        observers=[Hook()],
        rng=random.Random(0),
    )
    throttle.admit()
    throttle.record(OVERLOADED)
    throttle.flush()
    throttle.admit()
    assert [p for _, _, p in seen] == [0.0, 0.5]
    throttle.close()


def test_an_unreachable_redis_falls_back_and_never_raises() -> None:
    client = redis.Redis(port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5)
    local = RedisAdaptiveThrottle(client, unique_name(), rng=random.Random(3))
    allow = RedisAdaptiveThrottle(client, unique_name(), on_error="allow")
    deny = RedisAdaptiveThrottle(client, unique_name(), on_error="deny")
    with virtual_clock():
        for _ in range(20):
            if local.admit():
                local.record(OVERLOADED)
            assert allow.admit()
            assert not deny.admit()
        local.flush()  # fails: logged, counts kept for the next flush
        assert local.degraded
        assert local.probability == local.local.probability > 0
        assert allow.probability == 0.0
    for throttle in (local, allow, deny):
        throttle.close()


# -- the fleet: four processes -------------------------------------------------------------------


def fleet_member(url: str, name: str, start: Any, stopped: Any, results: Any) -> None:
    """One process: 50 overloaded attempts with Redis up, then 50 with Redis stopped."""
    errors = 0
    client = redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)
    throttle = RedisAdaptiveThrottle(client, name, window=600, rng=random.Random())
    start.wait()
    for _ in range(50):
        if throttle.admit():
            throttle.record(OVERLOADED)
    throttle.flush()
    start.wait()  # every member has flushed its 50
    throttle.flush()
    seen = throttle.probability
    start.wait()
    stopped.wait()  # the parent stopped Redis
    for _ in range(50):
        try:
            if throttle.admit():
                throttle.record(OVERLOADED)
            throttle.flush()
        except Exception:
            errors += 1
    results.put((seen, errors, throttle.degraded))


def test_four_processes_share_the_counts_and_survive_redis_stopping(
    own_redis_server: RedisServer,
) -> None:
    context = multiprocessing.get_context("spawn")
    start, stopped = context.Barrier(5), context.Event()
    results = context.Queue()
    name = unique_name("fleet")
    members = [
        context.Process(
            target=fleet_member, args=(own_redis_server.url, name, start, stopped, results)
        )
        for _ in range(4)
    ]
    for member in members:
        member.start()
    try:
        for _ in range(3):
            start.wait(timeout=60)
        own_redis_server.stop()
        stopped.set()
        got = [results.get(timeout=60) for _ in members]
    finally:
        for member in members:
            member.join(timeout=WAIT)
            if member.is_alive():
                member.kill()
    assert [member.exitcode for member in members] == [0, 0, 0, 0]
    # Each saw the fleet's 200 requests and no accept, not its own 50.
    assert [seen for seen, _, _ in got] == [probability_of(200, 0, 2.0)] * 4
    assert [errors for _, errors, _ in got] == [0, 0, 0, 0]  # no call failed because of Redis
    assert all(degraded for _, _, degraded in got)
