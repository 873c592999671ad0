"""The retry-budget contract, run over every budget: in-process, Redis sync, Redis asyncio.

Each test is written once against :class:`Kind`, which builds a budget of the kind under
test and awaits its decisions where they are awaited. A local budget runs on the virtual
clock; a Redis budget on a real server (``tests/_redis.py``) and its script's clock. What
only one kind can show (a Redis hash written nothing by a refusal, a window edge at an
exact instant of the virtual clock) stays in that kind's own test file.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis
import redis.asyncio

from tenacity_budget.redis import CLOCK_SUFFIX, AsyncRedisRetryBudget, RedisRetryBudget
from tenacity_budget.retry_budget import AsyncBudget, Budget, BudgetObserver, RetryBudget
from tenacity_budget.testing import VirtualClock, virtual_clock
from tests._redis import (  # the redis_server fixture
    Recorder,
    RedisServer,
    redis_server_fixture,  # noqa: F401
    unique_name,
)

WAIT = 30.0  # a Redis decision's timeout: generous, so a slow moment is no outage


class Kind:
    """One kind of budget, and how a test drives it."""

    def __init__(
        self,
        name: str,
        make: Callable[..., Any],
        expire: Callable[[Any, float], Any],
        stored: Callable[[Any], tuple[int, int]],
        protocol: type,
    ) -> None:
        self.name = name
        self._make = make
        self._expire = expire
        self.stored = stored
        """Deposits and withdrawals the budget's store holds now (its window's counts)."""
        self.protocol = protocol
        self.built: list[Any] = []

    def make(self, **kwargs: Any) -> Any:
        budget = self._make(**kwargs)
        self.built.append(budget)
        return budget

    @staticmethod
    async def _value(value: Any) -> Any:
        return await value if inspect.isawaitable(value) else value

    def deposit(self, budget: Any, n: int) -> None:
        for _ in range(n):
            budget.deposit()  # a plain call for every kind

    async def withdraw(self, budget: Any) -> bool:
        granted = await self._value(budget.try_withdraw())
        assert type(granted) is bool
        return granted

    async def grants(self, budget: Any, attempts: int) -> int:
        return sum([await self.withdraw(budget) for _ in range(attempts)])

    async def balance(self, budget: Any) -> int:
        value = await self._value(budget.balance)
        assert type(value) is int
        return value

    async def expire(self, budget: Any, seconds: float) -> None:
        """Move the budget's clock ``seconds`` forward (never a real sleep)."""
        await self._value(self._expire(budget, seconds))


def _local(clock: VirtualClock) -> Kind:
    def stored(budget: RetryBudget) -> tuple[int, int]:
        return budget._deposits, budget._withdrawals

    return Kind(
        "local",
        lambda **kwargs: RetryBudget(**kwargs),
        lambda budget, seconds: clock.advance(seconds),
        stored,
        Budget,
    )


def _redis(server: RedisServer, cls: type[Any], client: Any) -> Kind:
    reader: Any = redis.Redis.from_url(server.url, socket_timeout=10)

    def stored(budget: Any) -> tuple[int, int]:
        """The window's counts in the budget's hash (every slot, stale ones too)."""
        fields = {k.decode(): int(v) for k, v in reader.hgetall(budget.key).items()}
        deposits = sum(v for k, v in fields.items() if k.startswith("d"))
        withdrawals = sum(v for k, v in fields.items() if k.startswith("w"))
        return deposits, withdrawals

    def make(**kwargs: Any) -> Any:
        name = kwargs.pop("name", unique_name())
        return cls(client, name, timeout=WAIT, **kwargs)

    async def expire(budget: Any, seconds: float) -> None:
        await Kind._value(budget.advance_clock(seconds))
        assert reader.exists(budget.key + CLOCK_SUFFIX) == 1  # the script's clock moved

    kind = Kind(
        "redis" if cls is RedisRetryBudget else "async-redis",
        make,
        expire,
        stored,
        Budget if cls is RedisRetryBudget else AsyncBudget,
    )
    kind.reader = reader  # type: ignore[attr-defined]
    return kind


@pytest.fixture(params=["local", "redis", "async-redis"])
async def kind(request: pytest.FixtureRequest) -> AsyncIterator[Kind]:
    if request.param == "local":
        with virtual_clock() as clock:
            yield _local(clock)
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    if request.param == "redis":
        client: Any = redis.Redis.from_url(server.url, socket_timeout=10)
        made = _redis(server, RedisRetryBudget, client)
        yield made
        for budget in made.built:
            budget.close()
        client.close()
    else:
        client = redis.asyncio.Redis.from_url(server.url, socket_timeout=10)
        made = _redis(server, AsyncRedisRetryBudget, client)
        yield made
        for budget in made.built:
            await budget.close()
        await client.aclose()
    made.reader.close()  # type: ignore[attr-defined]


async def test_it_is_the_protocol_of_its_kind(kind: Kind) -> None:
    budget = kind.make()
    assert budget.is_async is (kind.protocol is AsyncBudget)
    assert (budget.ratio, budget.min_per_second, budget.ttl) == (0.2, 10.0, 10.0)
    assert isinstance(budget, kind.protocol)


async def test_100_deposits_grant_exactly_20_then_10_more_grant_2(kind: Kind) -> None:
    budget = kind.make(ratio=0.2, min_per_second=0, ttl=10)
    kind.deposit(budget, 100)
    assert await kind.balance(budget) == 20
    assert [await kind.withdraw(budget) for _ in range(21)] == [True] * 20 + [False]
    assert await kind.balance(budget) == 0
    kind.deposit(budget, 10)
    assert await kind.balance(budget) == 2
    assert await kind.grants(budget, 5) == 2
    assert kind.stored(budget) == (110, 22)


async def test_the_floor_alone_grants_exactly_min_per_second_times_ttl(kind: Kind) -> None:
    budget = kind.make(min_per_second=10, ttl=10, ratio=0)
    assert await kind.balance(budget) == 100
    assert await kind.grants(budget, 250) == 100


async def test_a_refusal_changes_nothing(kind: Kind) -> None:
    budget = kind.make(ratio=0.2, min_per_second=0)
    kind.deposit(budget, 5)
    assert await kind.grants(budget, 1) == 1
    before = kind.stored(budget)
    assert await kind.grants(budget, 10) == 0
    assert kind.stored(budget) == before == (5, 1)
    assert await kind.balance(budget) == 0


async def test_the_window_expires_after_ttl_without_sleeping(kind: Kind) -> None:
    budget = kind.make(ratio=0.2, min_per_second=0, ttl=10)
    kind.deposit(budget, 100)
    assert await kind.grants(budget, 30) == 20
    await kind.expire(budget, 9.5)
    assert await kind.withdraw(budget) is False  # within ttl, the withdrawals still count
    await kind.expire(budget, 0.5)
    assert await kind.balance(budget) == 0  # a full ttl later everything has left the window
    kind.deposit(budget, 100)
    assert await kind.grants(budget, 30) == 20


async def test_observers_hear_every_decision_with_the_balance_after_it(kind: Kind) -> None:
    recorder = Recorder()
    assert isinstance(recorder, BudgetObserver)
    name = unique_name("observed")
    budget = kind.make(ratio=0.5, min_per_second=0, name=name, observers=recorder)
    kind.deposit(budget, 4)
    assert await kind.grants(budget, 3) == 2
    assert recorder.decisions == [(name, True, 1), (name, True, 0), (name, False, 0)]
    assert recorder.fallbacks == []


async def test_before_deposits_once_per_run_never_per_retry(kind: Kind) -> None:
    class State:
        def __init__(self, attempt_number: int) -> None:
            self.attempt_number = attempt_number

    budget = kind.make(ratio=1, min_per_second=0)
    for attempt in (1, 2, 3, 1, 2):
        budget.before(State(attempt))
    assert await kind.balance(budget) == 2
