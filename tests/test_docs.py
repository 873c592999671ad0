"""The documentation cannot drift from the code.

* Every ``python`` code block of the pages runs, in order, one namespace per page (blocks
  after a ``<!-- docs-test: skip -->`` line excepted), with real sleeps forbidden: examples
  that retry run on the virtual clock.
* The recipes that need a remote service (the httpx client) are driven against a stand-in.
* The ``tenacity-budget plan`` output shown in the docs is what the command prints.
* The API reference documents every public name, and every module of the package.
* The figure script writes deterministic SVGs and its ``--check`` mode notices a stale one.
* The griffe extension that renders the docstrings turns their reST-isms into Markdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import io
import pkgutil
import re
import sys
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import tenacity_budget

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SKIP = "<!-- docs-test: skip -->"
OUTPUT = "<!-- docs-test: output of "

# Pages whose examples run, and what each needs beyond the package and its test extras.
PAGES: dict[str, tuple[str, ...]] = {
    "index.md": (),
    "getting-started.md": (),
    "concepts.md": (),
    "guarantee.md": ("freezegun",),
    "cookbook.md": ("freezegun", "httpx"),
    "deadline-propagation.md": ("freezegun", "httpx"),
    "retry-budgets.md": ("freezegun",),
    "testing.md": ("freezegun",),
    "observability.md": ("freezegun", "prometheus_client", "opentelemetry.sdk", "pybreaker"),
    "comparison.md": ("freezegun", "stamina", "backoff"),
}


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    line: int
    language: str
    code: str
    marker: str  # the HTML comment right above the fence, or ""


def blocks(page: str) -> list[Block]:
    """Every fenced code block of ``docs/<page>``, in order."""
    lines = (DOCS / page).read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = re.match(r"^(\s*)```(\w*)", lines[i])
        if opening is None:
            i += 1
            continue
        indent, language = opening.group(1), opening.group(2)
        previous = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = previous if previous.startswith("<!--") else ""
        start = i + 1
        end = start
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        code = "\n".join(line[len(indent) :] for line in lines[start:end])
        found.append(Block(page, start, language, code, marker))
        i = end + 1
    return found


def _python_blocks(page: str) -> list[Block]:
    return [b for b in blocks(page) if b.language == "python" and b.marker != SKIP]


@contextlib.contextmanager
def _no_real_sleep(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fail on any real sleep of a positive duration (the virtual clock patches over this)."""
    real_async_sleep = asyncio.sleep

    def sleep(seconds: float) -> None:
        if seconds > 0:
            raise AssertionError(f"a docs example slept {seconds} s for real")

    async def async_sleep(delay: float, result: Any = None) -> Any:
        if delay > 0:
            raise AssertionError(f"a docs example awaited asyncio.sleep({delay}) for real")
        return await real_async_sleep(0, result)

    with monkeypatch.context() as patch:
        patch.setattr(time, "sleep", sleep)
        patch.setattr(asyncio, "sleep", async_sleep)
        yield


def run_page(page: str) -> types.ModuleType:
    """Execute the page's Python blocks in one fresh module, in order; return the module."""
    name = "docs_example_" + re.sub(r"\W", "_", page.removesuffix(".md"))
    module = types.ModuleType(name)
    module.__file__ = str(DOCS / page)
    sys.modules[name] = module  # dataclasses and pickling look the module up
    try:
        for block in _python_blocks(page):
            code = compile(block.code, f"{DOCS / page}:{block.line}", "exec")
            exec(code, module.__dict__)
    finally:
        del sys.modules[name]
    return module


def _call_example_tests(module: types.ModuleType) -> list[str]:
    """Run the ``test_*`` functions a page defines (its examples of tests); return their names."""
    from tenacity_budget.testing import set_testing, virtual_clock

    ran = []
    for attr, fn in list(vars(module).items()):
        if not attr.startswith("test_") or not callable(fn):
            continue
        with contextlib.ExitStack() as stack:
            kwargs: dict[str, Any] = {}
            for param in inspect.signature(fn).parameters:
                if param == "virtual_clock":
                    kwargs[param] = stack.enter_context(virtual_clock())
                else:
                    raise AssertionError(f"{attr} needs an unknown fixture {param!r}")
            result = fn(**kwargs)
            if asyncio.iscoroutine(result):
                asyncio.run(result)
        set_testing(False)
        ran.append(attr)
    return ran


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_examples_run(page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for requirement in PAGES[page]:
        pytest.importorskip(requirement)
    assert _python_blocks(page), f"{page} has no runnable example"
    with _no_real_sleep(monkeypatch):
        module = run_page(page)
        ran = _call_example_tests(module)
        check = PAGE_CHECKS.get(page)
        if check is not None:
            check(module)
    if page == "testing.md":
        assert ran, "the testing guide's example tests did not run"


# -- page-specific drives ---------------------------------------------------------------------


# The httpx recipes run against stand-in servers (httpx.MockTransport) on their pages.
PAGE_CHECKS: dict[str, Callable[[types.ModuleType], None]] = {}


# -- the command's output ---------------------------------------------------------------------


def _output_blocks() -> list[Block]:
    return [
        b
        for page in sorted(p.name for p in DOCS.glob("*.md"))
        for b in blocks(page)
        if b.marker.startswith(OUTPUT)
    ]


def test_documented_plan_output_is_what_the_command_prints() -> None:
    from tenacity_budget.cli import main

    documented = _output_blocks()
    assert documented, "no documented command output found"
    for block in documented:
        command, *expected = block.code.splitlines()
        argv = command.removeprefix("$ tenacity-budget ").split()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = main(argv)
        assert status == 0
        assert out.getvalue().rstrip("\n").splitlines() == expected, f"{block.page}:{block.line}"


# -- the API reference --------------------------------------------------------------------------


def _reference_targets() -> list[str]:
    targets = []
    for page in sorted((DOCS / "reference").glob("*.md")):
        targets += re.findall(r"^::: ([\w.]+)\s*$", page.read_text(encoding="utf-8"), re.M)
    return targets


def test_api_reference_documents_every_public_name() -> None:
    documented: set[str] = set()
    for target in _reference_targets():
        module = importlib.import_module(target)
        documented |= set(getattr(module, "__all__", ()))
    public = set(tenacity_budget.__all__) - {"__version__"}
    assert public - documented == set()


def docs_module(name: str) -> types.ModuleType:
    """Import the script ``docs/<name>.py``; ``docs/`` is on ``sys.path`` only while it imports."""
    sys.path.insert(0, str(DOCS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(DOCS))


def test_api_reference_has_a_page_per_module() -> None:
    modules = {
        f"tenacity_budget.{m.name}"
        for m in pkgutil.iter_modules(tenacity_budget.__path__)
        if m.name != "__main__" and not m.name.startswith("_")  # private: _config
    }
    assert modules - set(_reference_targets()) == set()


def test_every_figure_referenced_exists_and_every_generated_one_is_used() -> None:
    gen_figures = docs_module("gen_figures")
    text = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.rglob("*.md"))
    referenced = set(re.findall(r"figures/([\w.-]+\.svg)", text))
    assert referenced, "no figure referenced"
    for name in referenced:
        assert (DOCS / "figures" / name).is_file(), name
    assert set(gen_figures.GENERATORS) - referenced == set()


# -- the figure script ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gen_figures() -> types.ModuleType:
    pytest.importorskip("matplotlib")
    return docs_module("gen_figures")


def test_figures_are_byte_for_byte_reproducible(
    gen_figures: types.ModuleType, tmp_path: Path
) -> None:
    first, second = tmp_path / "a.svg", tmp_path / "b.svg"
    for path in (first, second):
        gen_figures._style()
        gen_figures.solver_curve(path)
    assert first.read_bytes() == second.read_bytes()
    assert b"<dc:date>" not in first.read_bytes()


def test_check_reports_missing_and_stale_figures(
    gen_figures: types.ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gen_figures, "GENERATORS", {"solver.svg": gen_figures.solver_curve})
    assert gen_figures.check(tmp_path) == ["solver.svg"]  # missing
    assert gen_figures.main(["--out", str(tmp_path)]) == 0
    assert gen_figures.check(tmp_path) == []
    assert gen_figures.main(["--check", "--out", str(tmp_path)]) == 0
    svg = tmp_path / "solver.svg"
    svg.write_bytes(svg.read_bytes().replace(b"max_attempts", b"max_attempt"))
    assert gen_figures.check(tmp_path) == ["solver.svg"]  # stale
    assert gen_figures.main(["--check", "--out", str(tmp_path)]) == 1


def test_timeline_rows_are_the_library_schedules(gen_figures: types.ModuleType) -> None:
    rows = gen_figures._timeline_rows()
    nominal = rows[0][2]
    assert nominal == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    for _label, policy, waits in rows:
        assert waits == policy.schedule(seed=gen_figures.SEED)
        assert sum(waits) + (len(waits) + 1) * policy.attempt_duration <= policy.max_elapsed


# -- the docstring renderer --------------------------------------------------------------------


@pytest.fixture(scope="module")
def griffe_rst() -> types.ModuleType:
    pytest.importorskip("griffe")
    return docs_module("griffe_rst")


def test_roles_become_inline_code(griffe_rst: types.ModuleType) -> None:
    text = "See :class:`~tenacity_budget.BackoffPolicy` and :meth:`BackoffPolicy.stop`."
    assert griffe_rst.to_markdown(text) == "See `BackoffPolicy` and `BackoffPolicy.stop`."
    assert griffe_rst.to_markdown(":func:`remaining()`") == "`remaining`"
    link = "`freezegun <https://github.com/spulec/freezegun>`_"
    assert griffe_rst.to_markdown(link) == "[freezegun](https://github.com/spulec/freezegun)"


def test_simple_tables_become_pipe_tables(griffe_rst: types.ModuleType) -> None:
    text = "\n".join(
        [
            "Fields:",
            "",
            "======== ===========",
            "``a``    first",
            "         and more",
            "``b|c``  second",
            "======== ===========",
            "",
            "after",
        ]
    )
    assert griffe_rst.to_markdown(text).splitlines() == [
        "Fields:",
        "",
        "|  |  |",
        "|---|---|",
        "| ``a`` | first and more |",
        "| ``b\\|c`` | second |",
        "",
        "after",
    ]
    headed = "=== ===\nx   y\n=== ===\n1   2\n=== ==="
    assert griffe_rst.to_markdown(headed).splitlines() == ["| x | y |", "|---|---|", "| 1 | 2 |"]


def test_literal_blocks_become_fenced(griffe_rst: types.ModuleType) -> None:
    text = "Use it::\n\n    if x:\n\n        y = 2\n\nDone."
    assert griffe_rst.to_markdown(text).splitlines() == [
        "Use it:",
        "",
        "```python",
        "if x:",
        "",
        "    y = 2",
        "```",
        "",
        "Done.",
    ]
    shell = griffe_rst.to_markdown("Run::\n\n    tenacity-budget plan --json\n")
    assert "```text" in shell


def test_grouped_arguments_are_split(griffe_rst: types.ModuleType) -> None:
    text = "Args:\n    rng, seed: as in wait.\n        More.\n    other: x.\n\nReturns:\n    y"
    assert griffe_rst.to_markdown(text).splitlines() == [
        "Args:",
        "    rng: as in wait.",
        "        More.",
        "    seed: as in wait.",
        "        More.",
        "    other: x.",
        "",
        "Returns:",
        "    y",
    ]
