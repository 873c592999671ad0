"""The shape figures of issue 16: import cycles, complexity, public names, module docstrings.

``python -m benchmarks.shape`` prints them for the ``tenacity_budget`` package; every
import counts (module level, inside functions and under ``TYPE_CHECKING``).
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tenacity_budget"


@dataclass
class Shape:
    modules: int
    cycles: list[list[str]]
    cc_max: int
    cc_max_where: str
    cc_over_10: list[str]
    public_all: int
    all_by_module: dict[str, int]
    docstring_mean: float
    docstring_max: int
    docstring_max_where: str


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """Every module of the package that ``name`` imports, wherever the import stands."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                drop = node.level - 1 if is_package else node.level
                base = base[: len(base) - drop] if drop else base
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            if target in known:
                yield target
            for alias in node.names:  # ``from . import x`` imports the module x
                if f"{target}.{alias.name}" in known:
                    yield f"{target}.{alias.name}"
    # importlib.import_module(".x", __name__) and the values of a _LAZY table are imports
    strings: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "import_module":
            strings += [a.value for a in node.args[:1] if isinstance(a, ast.Constant)]
        elif (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Dict)
            and any(isinstance(t, ast.Name) and t.id.startswith("_LAZY") for t in node.targets)
        ):
            strings += [v.value for v in node.value.values if isinstance(v, ast.Constant)]
    for text in strings:
        if isinstance(text, str):
            target = (
                f"tenacity_budget.{text.lstrip('.')}"
                if text.startswith(".") or (f"tenacity_budget.{text}" in known)
                else text
            )
            if target in known:
                yield target


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), and self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def import_graph() -> dict[str, set[str]]:
    """Each module to the package's modules it imports; a package's own submodules
    imported by its ``__init__`` count, a submodule importing its package's
    ``__init__`` counts too (that is how cycles through re-exports arise)."""
    modules = _modules()
    known = set(modules)
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        graph[name] = {t for t in _imports(name, path, known) if t != name}
    return graph


def measure() -> Shape:
    from radon.complexity import cc_visit

    modules = _modules()
    graph = import_graph()
    # A package's __init__ importing its own submodules is not a cycle by itself; a
    # submodule importing its parent package's __init__ (a re-export) closes one.
    cycles = _cycles(graph)
    worst, where, over = 0, "", []
    docs: list[tuple[int, str]] = []
    all_by: dict[str, int] = {}
    for name, path in modules.items():
        source = path.read_text()
        for block in cc_visit(source):
            for item in [block, *getattr(block, "methods", [])]:
                owner = getattr(item, "classname", None)
                label = f"{name}:{owner}.{item.name}" if owner else f"{name}:{item.name}"
                if item.complexity > worst:
                    worst, where = item.complexity, label
                if item.complexity > 10 and label not in over:
                    over.append(f"{label} {item.complexity}")
        tree = ast.parse(source)
        doc = ast.get_docstring(tree, clean=False)
        docs.append((len(doc.strip().splitlines()) if doc else 0, name))
        if not any(part.startswith("_") for part in name.split(".")):
            for node in tree.body:
                if isinstance(node, (ast.Assign, ast.AnnAssign)):
                    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                    if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
                        value = node.value
                        if isinstance(value, (ast.List, ast.Tuple)):
                            all_by[name] = len(value.elts)
    longest = max(docs)
    return Shape(
        modules=len(modules),
        cycles=cycles,
        cc_max=worst,
        cc_max_where=where,
        cc_over_10=sorted(set(over)),
        public_all=sum(all_by.values()),
        all_by_module=dict(sorted(all_by.items())),
        docstring_mean=round(sum(n for n, _ in docs) / len(docs), 1),
        docstring_max=longest[0],
        docstring_max_where=longest[1],
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    shape = measure()
    if args.json:
        print(json.dumps(asdict(shape), indent=2))
        return 0
    print(f"modules: {shape.modules}")
    print(f"import cycles: {len(shape.cycles)} {shape.cycles}")
    print(f"highest cyclomatic complexity: {shape.cc_max} ({shape.cc_max_where})")
    print(f"functions over 10: {len(shape.cc_over_10)} {shape.cc_over_10}")
    print(f"names in public __all__: {shape.public_all} {shape.all_by_module}")
    print(
        f"module docstrings: mean {shape.docstring_mean} lines, longest"
        f" {shape.docstring_max} ({shape.docstring_max_where})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
