"""The old path of :mod:`tenacity_budget.gdpr`, named for what it computes (GDPR deadlines).

``from tenacity_budget.deadlines import gdpr_response_deadline`` (or ``add_months``) keeps
working and warns (``DeprecationWarning``): import them from ``tenacity_budget.gdpr``.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from . import gdpr

if TYPE_CHECKING:
    from .gdpr import add_months as add_months
    from .gdpr import gdpr_response_deadline as gdpr_response_deadline

_MOVED = ("add_months", "gdpr_response_deadline")


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"tenacity_budget.deadlines is deprecated: import {name} from tenacity_budget.gdpr",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(gdpr, name)
