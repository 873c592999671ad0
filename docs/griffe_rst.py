"""A griffe extension that renders the package's reST-flavoured docstrings as Markdown.

The docstrings of ``tenacity_budget`` are written for both ``help()`` and the API reference:
Google-style sections, but reST inline roles (``:class:`BackoffPolicy```), reST literal
blocks (``Usage::``) and reST simple tables (``=====`` borders). mkdocstrings renders
docstrings as Markdown, where a ``=====`` line turns the text above it into a heading and a
role shows up verbatim. This extension rewrites, in memory and only for the docs build:

* hyperlinks (`` `text <url>`_ ``) into Markdown links;
* inline roles (``:class:``, ``:meth:``, ``:func:``, ``:mod:``, ``:attr:``, ``:exc:``,
  ``:data:``, ``:obj:``) into inline code, keeping only the last dotted part for ``~name``;
* a paragraph ending in ``::`` into one ending in ``:``, and the indented block after it
  into a fenced Python code block;
* reST simple tables into Markdown pipe tables.

Loaded by ``mkdocs.yml`` (``extensions: [docs/griffe_rst.py]``); the source files are not
touched.
"""

from __future__ import annotations

import ast
import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|exc|data|obj|const):`(~?)([^`]+)`")
_LINK = re.compile(r"`([^`<]+?)\s*<([^>`]+)>`__?")
_BORDER = re.compile(r"^\s*=+( +=+)+\s*$")
_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Attributes|Other Parameters):\s*$")
_GROUPED = re.compile(r"^(\s+)(\w+(?:,\s*\w+)+):\s*(.*)$")


def _role(match: re.Match[str]) -> str:
    tilde, target = match.group(1), match.group(2).strip()
    if target.endswith("()"):
        target = target[:-2]
    shown = target.rsplit(".", 1)[-1] if tilde else target
    return f"`{shown}`"


def _columns(border: str) -> list[tuple[int, int]]:
    """(start, end) of each column, read from a ``=== ===`` border line."""
    return [(m.start(), m.end()) for m in re.finditer(r"=+", border)]


def _cells(line: str, columns: list[tuple[int, int]]) -> list[str]:
    cells = []
    for i, (start, _end) in enumerate(columns):
        stop = columns[i + 1][0] if i + 1 < len(columns) else len(line)
        cells.append(line[start:stop].strip())
    return cells


def _table(lines: list[str], columns: list[tuple[int, int]], indent: str) -> list[str]:
    """A reST simple table body (without borders) as Markdown pipe-table lines."""
    rows: list[list[str]] = []
    for line in lines:
        if not line.strip():
            continue
        cells = _cells(line, columns)
        if rows and not cells[0]:
            # A continuation line: its text belongs to the row above.
            for i, cell in enumerate(cells):
                if cell:
                    rows[-1][i] = f"{rows[-1][i]} {cell}".strip()
        else:
            rows.append(cells)
    if not rows:
        return []

    def fmt(cells: list[str]) -> str:
        return indent + "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    header = [""] * len(columns)
    out = [fmt(header), indent + "|" + "|".join("---" for _ in columns) + "|"]
    out.extend(fmt(row) for row in rows)
    return out


def _tables(lines: list[str]) -> list[str]:
    """Replace every reST simple table (top border, rows, bottom border) by a pipe table."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _BORDER.match(line):
            end = next((j for j in range(i + 1, len(lines)) if _BORDER.match(lines[j])), None)
            if end is not None:
                columns = _columns(line)
                indent = line[: len(line) - len(line.lstrip())]
                body = lines[i + 1 : end]
                # A table with a header: top border, header rows, border, body, border.
                after = next(
                    (j for j in range(end + 1, len(lines)) if _BORDER.match(lines[j])), None
                )
                has_header = (
                    len(body) == 1
                    and after is not None
                    and all(lines[k].strip() for k in range(end + 1, after))
                )
                if has_header and after is not None:
                    table = _table(lines[end + 1 : after], columns, indent)
                    head = _cells(body[0], columns)
                    if table:
                        table[0] = (
                            indent + "| " + " | ".join(c.replace("|", "\\|") for c in head) + " |"
                        )
                    out.extend(table)
                    i = after + 1
                    continue
                out.extend(_table(body, columns, indent))
                i = end + 1
                continue
        out.append(line)
        i += 1
    return out


def _literal_blocks(lines: list[str]) -> list[str]:
    """``text::`` + an indented block becomes ``text:`` + a fenced code block."""
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.rstrip()
        if stripped.endswith("::") and not stripped.lstrip().startswith((">>>", "...")):
            indent = len(line) - len(line.lstrip())
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            block_start = j
            while j < len(lines) and (
                not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent
            ):
                j += 1
            block = lines[block_start:j]
            while block and not block[-1].strip():
                block.pop()
            if block:
                text = stripped[:-2].rstrip()
                pad = " " * indent
                out.append(f"{text}:" if text.strip() else "")
                out.append("")
                inner = min(len(b) - len(b.lstrip()) for b in block if b.strip())
                code = [b[inner:] if b.strip() else "" for b in block]
                out.append(f"{pad}```{_language(code)}")
                out.extend(pad + c if c else "" for c in code)
                out.append(f"{pad}```")
                out.append("")
                i = j
                continue
        out.append(line)
        i += 1
    return out


def _language(code: list[str]) -> str:
    """``python`` for a block that parses as Python, ``text`` otherwise (shell lines...)."""
    try:
        ast.parse("\n".join(code))
    except SyntaxError:
        return "text"
    return "python"


def _split_grouped(lines: list[str]) -> list[str]:
    """``a, b: text`` in an Args/Attributes section becomes one entry per name.

    Google style documents one name per entry; griffe warns about a grouped entry.
    """
    out: list[str] = []
    in_section = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if _SECTION.match(line):
            in_section = True
            out.append(line)
            i += 1
            continue
        if in_section and line.strip() and len(line) - len(line.lstrip()) == 0:
            in_section = False
        grouped = _GROUPED.match(line) if in_section else None
        if grouped is None:
            out.append(line)
            i += 1
            continue
        indent, names, text = grouped.groups()
        j = i + 1
        while j < len(lines) and (
            not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > len(indent)
        ):
            j += 1
        continuation = lines[i + 1 : j]
        trailing = 0
        while trailing < len(continuation) and not continuation[-1 - trailing].strip():
            trailing += 1
        body = continuation[: len(continuation) - trailing]
        for name in (n.strip() for n in names.split(",")):
            out.append(f"{indent}{name}: {text}")
            out.extend(body)
        out.extend([""] * trailing)
        i = j
    return out


def to_markdown(text: str) -> str:
    """The Markdown rendering of one reST-flavoured docstring."""
    lines = _split_grouped(text.splitlines())
    lines = _tables(lines)
    lines = _literal_blocks(lines)
    converted = "\n".join(lines)
    converted = _LINK.sub(r"[\1](\2)", converted)
    return _ROLE.sub(_role, converted)


class RstToMarkdown(griffe.Extension):
    """Rewrite each docstring of the loaded package from reST-isms to Markdown."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        """Convert ``obj``'s docstring in place (once the object tree is complete)."""
        if obj.docstring is not None:
            obj.docstring.value = to_markdown(obj.docstring.value)
