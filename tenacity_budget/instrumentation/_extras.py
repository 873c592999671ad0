"""The one message for a missing optional dependency (an extra), naming what to install."""

from __future__ import annotations

import importlib


def missing(what: str, distribution: str, extra: str) -> ImportError:
    """The error saying that ``what`` needs ``distribution`` and which extra brings it."""
    return ImportError(f"{what} needs {distribution}: pip install 'tenacity-budget[{extra}]'")


def require(what: str, package: str, distribution: str, extra: str) -> None:
    """Import ``package`` or raise :func:`missing`'s error, chained to the import's."""
    try:
        importlib.import_module(package)
    except ImportError as exc:
        raise missing(what, distribution, extra) from exc
