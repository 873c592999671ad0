"""The documentation cannot drift from the code.

* Every ``python`` code block of README.md and of every ``docs/*.md`` page runs as written,
  as a test of its own (``cookbook.md:123`` names the block's fence line): in a fresh
  namespace, or, below a ``<!-- docs-test: continue -->`` line, in the namespace of the block
  before it on the same page (the test of such a block runs its chain's earlier blocks first).
  A block below ``<!-- docs-test: skip: <reason> -->`` is skipped with that reason; a skip
  without one is an error. Real sleeps are forbidden: examples that retry run on the
  virtual clock. The ``test_*`` functions a block defines run too (with the fixtures
  ``virtual_clock`` and ``virtual_event_loop``).
* A block that reads ``REDIS_URL`` gets a real server (``tests/_redis.py``), flushed before
  the block runs; the HTTP recipes bring their own stand-in server (``httpx.MockTransport``
  or an ASGI app behind ``httpx.ASGITransport``), so they run as a user would copy them.
* The ``tenacity-budget plan`` output shown in the docs is what the command prints.
* The API reference documents every public name, and every module of the package.
* The figure script writes deterministic SVGs and its ``--check`` mode notices a stale one.
* The griffe extension that renders the docstrings turns their reST-isms into Markdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
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
from tests._redis import RedisServer, redis_server_fixture  # noqa: F401

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
MARKER = "<!-- docs-test:"
CONTINUE = "<!-- docs-test: continue -->"
SKIP = re.compile(r"<!-- docs-test: skip(?:(?P<colon>:)(?P<reason>.*?))?\s*-->")
OUTPUT = "<!-- docs-test: output of "


def pages() -> list[str]:
    """Every page whose blocks run: README.md and each ``docs/*.md``, by file name."""
    return ["README.md", *sorted(p.name for p in DOCS.glob("*.md"))]


def page_path(page: str) -> Path:
    return ROOT / page if page == "README.md" else DOCS / page


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str
    line: int  # the fence's line number (1-based); the code starts on the next line
    language: str
    code: str
    marker: str  # the HTML comment right above the fence, or ""

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: str, text: str | None = None) -> list[Block]:
    """Every fenced code block of the page (or of ``text``, as that page), in order."""
    if text is None:
        text = page_path(page).read_text(encoding="utf-8")
    lines = text.splitlines()
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


# -- the examples: every python block, its chain, and whether it is skipped --------------------


@dataclass(frozen=True)
class Example:
    """A python block as the suite runs it: ``chain`` is what runs, this block last."""

    block: Block
    chain: tuple[Block, ...]
    skip: str = ""  # the reason given on the page
    error: str = ""  # a marker the runner refuses, and why
    last: bool = False  # the page's last python block: its PAGE_CHECKS run after it

    @property
    def id(self) -> str:
        return self.block.id

    @property
    def continued(self) -> bool:
        return len(self.chain) > 1


def _marker_of(block: Block) -> tuple[str, str]:
    """``("run" | "continue" | "skip" | "error", detail)`` from the comment above the block."""
    marker = block.marker
    if not marker.startswith(MARKER):
        return "run", ""
    if marker == CONTINUE:
        return "continue", ""
    skip = SKIP.fullmatch(marker)
    if skip is not None:
        reason = (skip.group("reason") or "").strip()
        if skip.group("colon") and reason:
            return "skip", reason
        return (
            "error",
            f"{block.id}: a skip marker must say why: <!-- docs-test: skip: <reason> -->",
        )
    return "error", f"{block.id}: unknown marker {marker!r} above a python block"


def examples(page: str, text: str | None = None) -> list[Example]:
    """The page's python blocks in page order, each with the chain of blocks it runs."""
    found: list[Example] = []
    for block in blocks(page, text):
        if block.language != "python":
            continue
        kind, detail = _marker_of(block)
        before = found[-1] if found else None
        if kind == "skip":
            found.append(Example(block, (block,), skip=detail))
        elif kind == "error":
            found.append(Example(block, (block,), error=detail))
        elif kind == "run":
            found.append(Example(block, (block,)))
        elif before is None:
            found.append(Example(block, (block,), error=f"{block.id} continues no block"))
        elif before.skip or before.error:
            why = "is skipped" if before.skip else "is refused"
            error = f"{block.id} continues {before.id}, which {why}"
            found.append(Example(block, (block,), error=error))
        else:
            found.append(Example(block, (*before.chain, block)))
    if found:
        found[-1] = dataclasses.replace(found[-1], last=True)
    return found


ALL_EXAMPLES = [example for page in pages() for example in examples(page)]


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


def _compiled(block: Block) -> types.CodeType:
    """The block's code, numbered as on its page (so a traceback shows the page's line)."""
    return compile("\n" * block.line + block.code, str(page_path(block.page)), "exec")


def _test_functions(module: types.ModuleType, before: dict[str, Any]) -> dict[str, Any]:
    """The ``test_*`` functions the last block defined (or redefined)."""
    return {
        name: fn
        for name, fn in vars(module).items()
        if name.startswith("test_") and callable(fn) and before.get(name) is not fn
    }


def _fixtures(name: str, fn: Callable[..., Any], stack: contextlib.ExitStack) -> dict[str, Any]:
    """The fixtures a docs test asks for: ``virtual_clock``, ``virtual_event_loop`` (one clock)."""
    from tenacity_budget.testing import virtual_clock

    params = set(inspect.signature(fn).parameters)
    unknown = params - {"virtual_clock", "virtual_event_loop"}
    if unknown:
        raise AssertionError(f"{name} needs an unknown fixture {sorted(unknown)[0]!r}")
    if not params:
        return {}
    clock = stack.enter_context(virtual_clock())
    kwargs: dict[str, Any] = {"virtual_clock": clock} if "virtual_clock" in params else {}
    if "virtual_event_loop" in params:
        kwargs["virtual_event_loop"] = stack.enter_context(clock.event_loop())
    return kwargs


def _call_example_tests(tests: dict[str, Any]) -> list[str]:
    """Run the ``test_*`` functions a block defines (its examples of tests); return their names."""
    from tenacity_budget.testing import set_testing

    ran = []
    for attr, fn in tests.items():
        with contextlib.ExitStack() as stack:
            kwargs = _fixtures(attr, fn, stack)
            result = fn(**kwargs)
            if asyncio.iscoroutine(result):
                asyncio.run(result)
        set_testing(False)
        ran.append(attr)
    return ran


def run_example(example: Example) -> types.ModuleType:
    """Run the example's chain in one fresh module, then the tests its last block defines."""
    name = "docs_example_" + re.sub(r"\W", "_", example.chain[0].id)
    module = types.ModuleType(name)
    module.__file__ = str(page_path(example.block.page))
    sys.modules[name] = module  # dataclasses and pickling look the module up
    try:
        for earlier in example.chain[:-1]:
            try:
                exec(_compiled(earlier), module.__dict__)
            except Exception as exc:
                raise AssertionError(
                    f"{earlier.id}, which {example.id} continues, failed: {exc!r}"
                ) from exc
        before = dict(vars(module))
        exec(_compiled(example.block), module.__dict__)
        tests = _test_functions(module, before)
        defined = set(re.findall(r"^(?:async )?def (test_\w+)", example.block.code, re.M))
        assert defined <= set(tests), f"{example.id}: {sorted(defined - set(tests))} not found"
        _call_example_tests(tests)
    finally:
        del sys.modules[name]
    return module


def _needs_redis(example: Example) -> bool:
    return any("REDIS_URL" in block.code for block in example.chain)


def _start_services(
    example: Example, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chain that reads ``REDIS_URL`` gets the session's real server, emptied first."""
    if not _needs_redis(example):
        return
    server: RedisServer = request.getfixturevalue("redis_server")
    import redis

    with redis.Redis.from_url(server.url) as client:
        client.flushdb()
    monkeypatch.setenv("REDIS_URL", server.url)


@pytest.mark.parametrize("example", ALL_EXAMPLES, ids=lambda example: example.id)
def test_docs_block_runs(
    example: Example, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if example.error:
        pytest.fail(example.error, pytrace=False)
    if example.skip:
        pytest.skip(f"{example.id}: {example.skip}")
    _start_services(example, request, monkeypatch)
    with _no_real_sleep(monkeypatch):
        module = run_example(example)
        check = PAGE_CHECKS.get(example.block.page)
        if check is not None and example.last:
            check(module)


def test_every_page_has_a_runnable_example_and_the_testing_guide_its_tests() -> None:
    for page in ("index.md", "getting-started.md", "testing.md"):
        assert any(not e.skip and not e.error for e in examples(page)), page
    assert any(
        re.search(r"^def test_", e.block.code, re.M) and not e.skip for e in examples("testing.md")
    ), "the testing guide shows no example test"


def _kinds(text: str) -> list[tuple[int, tuple[int, ...], str, str]]:
    return [
        (e.block.line, tuple(b.line for b in e.chain), e.skip, e.error)
        for e in examples("page.md", text)
    ]


def test_markers_chain_blocks_and_skips_need_a_reason() -> None:
    page = "\n".join(
        [
            "```python",  # 1
            "a = 1",
            "```",
            "<!-- docs-test: continue -->",
            "```python",  # 5
            "b = a",
            "```",
            "```text",
            "not python",
            "```",
            "<!-- docs-test: continue -->",
            "",
            "```python",  # 13
            "c = b",
            "```",
            "```python",  # 16
            "fresh = True",
            "```",
            "<!-- docs-test: skip: talks to a real payment provider -->",
            "```python",  # 20
            "charge()",
            "```",
        ]
    )
    assert _kinds(page) == [
        (1, (1,), "", ""),
        (5, (1, 5), "", ""),
        (13, (1, 5, 13), "", ""),
        (16, (16,), "", ""),
        (20, (20,), "talks to a real payment provider", ""),
    ]


@pytest.mark.parametrize(
    ("above", "below", "error"),
    [
        ("<!-- docs-test: skip -->", "", "page.md:2: a skip marker must say why"),
        ("<!-- docs-test: skip:  -->", "", "page.md:2: a skip marker must say why"),
        ("<!-- docs-test: skipped -->", "", "page.md:2: unknown marker"),
        ("<!-- docs-test: continue -->", "", "page.md:2 continues no block"),
        ("<!-- docs-test: skip: no -->", CONTINUE, "page.md:6 continues page.md:2, which is"),
    ],
)
def test_markers_the_runner_refuses(above: str, below: str, error: str) -> None:
    page = "\n".join([above, "```python", "x = 1", "```", below, "```python", "y = 2", "```"])
    errors = [e.error for e in examples("page.md", page) if e.error]
    assert errors, page
    assert errors[0].startswith(error)


def test_a_continued_block_runs_its_chain_and_a_failure_names_the_block() -> None:
    page = "```python\nstart = 41\n```\n" + CONTINUE + "\n```python\nanswer = start + 1\n```\n"
    first, second = examples("page.md", page)
    assert run_example(second).answer == 42
    broken = Example(second.block, (Block("page.md", 1, "python", "1 / 0", ""), second.block))
    with pytest.raises(AssertionError, match=r"page\.md:1, which page\.md:5 continues, failed"):
        run_example(broken)
    assert not hasattr(run_example(first), "answer")


def test_a_block_that_reads_redis_url_gets_an_empty_real_server(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = "\n".join(
        [
            "import os",
            "from redis import Redis",
            'client = Redis.from_url(os.environ.get("REDIS_URL", "redis://localhost:6379/0"))',
            'was = client.get("docs-test-key")',
            'client.set("docs-test-key", "set by the block")',
        ]
    )
    block = Block("page.md", 1, "python", code, "")
    for _ in range(2):  # the second run finds the server emptied again
        _start_services(Example(block, (block,)), request, monkeypatch)
        module = run_example(Example(block, (block,)))
        assert module.was is None
        assert module.client.get("docs-test-key") == b"set by the block"
        module.client.close()
    server: RedisServer = request.getfixturevalue("redis_server")
    assert module.client.connection_pool.connection_kwargs["port"] == server.port


def test_markers_stand_above_the_blocks_they_apply_to() -> None:
    misplaced = [
        f"{block.id}: {block.marker}"
        for page in pages()
        for block in blocks(page)
        if block.marker.startswith(MARKER)
        and (block.language == "python") == block.marker.startswith(OUTPUT)
    ]
    assert misplaced == []


def test_the_page_check_runs_after_the_last_block_with_its_namespace(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = "```python\nx = 1\n```\n\n```python\nx = 2\n```\n"
    seen: list[int] = []
    monkeypatch.setitem(PAGE_CHECKS, "page.md", lambda module: seen.append(module.x))
    first, second = examples("page.md", page)
    assert (first.last, second.last) == (False, True)
    test_docs_block_runs(first, request, monkeypatch)
    assert seen == []
    test_docs_block_runs(second, request, monkeypatch)
    assert seen == [2]


# -- page-specific drives ---------------------------------------------------------------------


# Run after the page's last block, with that block's namespace. The httpx recipes run
# against stand-in servers (httpx.MockTransport, httpx.ASGITransport) on their pages.
PAGE_CHECKS: dict[str, Callable[[types.ModuleType], None]] = {}


# -- the command's output ---------------------------------------------------------------------


def _output_blocks() -> list[Block]:
    return [b for page in pages() for b in blocks(page) if b.marker.startswith(OUTPUT)]


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
