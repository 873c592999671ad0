"""Celery and kombu, imported only when used: see :mod:`tenacity_budget.celery`."""

from __future__ import annotations

import importlib
from typing import Any

_EXTRA = "pip install 'tenacity-budget[celery]'"


def _import(module: str, what: str = "CeleryBudget") -> Any:
    """Import ``module`` (of celery or kombu), or say which extra ``what`` needs."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"tenacity_budget.celery's {what} needs celery: {_EXTRA}") from exc
