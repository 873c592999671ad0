"""The package's import graph stays free of cycles (issue 16), imports of every kind counted."""

from __future__ import annotations

from benchmarks.shape import _cycles, import_graph


def test_the_package_has_no_import_cycle() -> None:
    # Module-level, function-level and TYPE_CHECKING imports all count, and a submodule
    # importing its package's __init__ (``from . import x``) closes a cycle through it.
    assert _cycles(import_graph()) == []


def test_the_graph_sees_the_imports_that_make_cycles() -> None:
    graph = import_graph()
    assert "tenacity_budget.decision" in graph["tenacity_budget.strategies"]
    assert "tenacity_budget.context" in graph["tenacity_budget.state"]
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
