"""The httpx transports at their edges: bad statuses, a missing extra.

The HTTP edges against real servers (cut attempts and the connection pool, bodies that
cannot be replayed) are in ``tests/test_httpx_real.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenacity_budget import BackoffPolicy
from tenacity_budget.httpx import AsyncBudgetTransport, BudgetTransport

POLICY = BackoffPolicy(base=1, factor=2, cap=4, max_elapsed=12, jitter="none")
TRANSPORTS = [BudgetTransport, AsyncBudgetTransport]

# -- retry_statuses: 4xx and 5xx only ---------------------------------------------------


@pytest.mark.parametrize("cls", TRANSPORTS)
@pytest.mark.parametrize("status", [200, 100, 204, 301, 304, 399, 600, 0, -503])
def test_a_status_that_is_no_error_is_refused(cls: type[Any], status: int) -> None:
    with pytest.raises(ValueError, match=rf"^retry_statuses .*, got {re.escape(str(status))}$"):
        cls(POLICY, retry_statuses=frozenset({503, status}))


@settings(max_examples=60, deadline=None)
@given(
    good=st.frozensets(st.integers(400, 599), max_size=5),
    bad=st.integers().filter(lambda status: not 400 <= status <= 599),
    transport=st.sampled_from(TRANSPORTS),
)
def test_retry_statuses_accept_exactly_the_error_codes(
    good: frozenset[int], bad: int, transport: type[Any]
) -> None:
    assert transport(POLICY, retry_statuses=good).retry_statuses == good
    with pytest.raises(ValueError, match=rf"^retry_statuses .*, got {re.escape(str(bad))}$"):
        transport(POLICY, retry_statuses=good | {bad})


@pytest.mark.parametrize("cls", TRANSPORTS)
@pytest.mark.parametrize("status", [True, False, 503.0, "503", None])
def test_a_status_that_is_no_int_stays_a_type_error(cls: type[Any], status: object) -> None:
    with pytest.raises(TypeError, match="retry_statuses"):
        cls(POLICY, retry_statuses=frozenset({status}))


# -- a fresh machine: httpx not installed ------------------------------------------------

MISSING = "tenacity_budget.httpx needs httpx: pip install 'tenacity-budget[httpx]'"


def _import_without_httpx(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where ``import httpx`` fails as if not installed."""
    prelude = "import sys\nsys.modules['httpx'] = None  # what an absent package gives\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_importing_the_module_without_httpx_names_the_extra() -> None:
    code = (
        "try:\n"
        "    import tenacity_budget.httpx\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__)\n"
        "    print(exc)\n"
        "    print(type(exc.__cause__).__name__)\n"
        "    print(exc.__cause__.name)\n"
    )
    out = _import_without_httpx(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["ImportError", MISSING, "ModuleNotFoundError", "httpx"]


def test_the_package_itself_imports_without_httpx() -> None:
    out = _import_without_httpx("import tenacity_budget, tenacity_budget.http; print('ok')")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
