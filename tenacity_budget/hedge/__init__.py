"""Hedged requests inside the budget (gRPC gRFC A6; Dean and Barroso, "The Tail at Scale").

:class:`Hedge` is what a run is given (``policy.retry(hedge=Hedge("p95"))``); its
:meth:`~Hedge.run` is the engine every call site uses (:class:`HedgedOutcome` is what it
returns), :func:`hedged_call` is ``policy.retry(hedge=...)``'s call of a coroutine function.
Modules: ``_hedge`` (the validated options), ``_engine`` (one run), ``_sketch`` (the learned
delay), ``_non_fatal`` (the default predicate), ``_call``. See docs/hedging.md.
"""

from __future__ import annotations

from ._call import check_target as check_target
from ._call import hedged_call as hedged_call
from ._engine import HedgedOutcome as HedgedOutcome
from ._hedge import Hedge as Hedge
from ._non_fatal import non_fatal as non_fatal

__all__: list[str] = []  # Hedge is the package's (tenacity_budget.Hedge); the rest internal
