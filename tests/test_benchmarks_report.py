"""Tests of ``benchmarks.report``: the generated blocks of the benchmark pages and their verdicts.

Rendering only, from the stored ``benchmarks/results/*.json`` and fixed shape figures; no
benchmark is run and no timing is asserted.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from benchmarks import report, transport

SHAPE: dict[str, Any] = {
    "modules": 3,
    "cycles": [],
    "cc_max": 11,
    "cc_max_where": "tenacity_budget.decision:decide",
    "cc_over_10": ["tenacity_budget.decision:decide 11"],
    "public_all": 49,
    "all_by_module": {"tenacity_budget": 49},
    "docstring_mean": 6.0,
    "docstring_max": 12,
    "docstring_max_where": "tenacity_budget.pytest_plugin",
}


@pytest.fixture(scope="module")
def results() -> dict[str, dict[str, Any]]:
    return {name: report._load(name) for name in report.RESULTS}


def _names(text: str) -> set[str]:
    return set(re.findall(r"<!-- BEGIN GENERATED: ([\w-]+) -->", text))


def test_every_block_of_both_pages_is_rendered(results: dict[str, dict[str, Any]]) -> None:
    doc = report.DOC.read_text(encoding="utf-8")
    readme = report.README.read_text(encoding="utf-8")
    assert _names(doc) == set(report.blocks(results, SHAPE))
    assert _names(readme) == set(report.readme_blocks(results, SHAPE)) == {"targets", "shape"}


def test_the_readme_shows_the_same_targets_table_as_the_docs(
    results: dict[str, dict[str, Any]],
) -> None:
    doc = report.blocks(results, SHAPE)
    readme = report.readme_blocks(results, SHAPE)
    assert readme["targets"] == doc["targets"]
    assert readme["shape"] == doc["shape"]


def test_render_doc_replaces_bodies_and_refuses_unknown_or_missing_blocks() -> None:
    text = "a\n<!-- BEGIN GENERATED: x -->\nold\n<!-- END GENERATED: x -->\nb\n"
    assert report.render_doc(text, {"x": "new\n"}) == (
        "a\n<!-- BEGIN GENERATED: x -->\nnew\n<!-- END GENERATED: x -->\nb\n"
    )
    with pytest.raises(SystemExit, match="unknown generated block 'x'"):
        report.render_doc(text, {}, "page.md")
    with pytest.raises(SystemExit, match=r"page.md lacks generated blocks: \['y'\]"):
        report.render_doc(text, {"x": "", "y": ""}, "page.md")


def test_a_target_row_says_met_on_its_side_of_the_limit() -> None:
    assert report._target_row("f", "b", "n", 1.05, 1.05)[-1] == "met"
    assert report._target_row("f", "b", "n", 1.051, 1.05)[-1] == "**not met**"
    assert report._target_row("f", "b", "n", 0.97, 0.97, at_least=True)[-1] == "met"
    assert report._target_row("f", "b", "n", 0.969, 0.97, at_least=True)[-1] == "**not met**"


def test_the_targets_table_follows_the_results(results: dict[str, dict[str, Any]]) -> None:
    changed = copy.deepcopy(results)
    row = changed["overhead"]["targets"]["per_call"]["ours policy.retry()"]
    row["ratio"], row["spread"] = 1.04, 0.01
    changed["transport"]["sync"]["BudgetTransport"]["rps_ratio"].update(
        ratio=0.98, spread=[0.975, 0.99]
    )
    lines = report._targets(changed).splitlines()
    retry = next(line for line in lines if line.startswith("| `policy.retry()` per call"))
    assert "| 1.19x | 1.040x (spread 0.010) | <= 1.05x | met |" in retry
    sync = next(line for line in lines if "(sync)" in line)
    assert "| 0.980x (0.975-0.990) | >= 0.97x | met |" in sync


def test_the_http_clients_are_judged_on_the_budgeted_candidate_by_name(
    results: dict[str, dict[str, Any]],
) -> None:
    changed = copy.deepcopy(results)
    clients = changed["http_clients"]
    _, floor, budgeted = clients["candidates"]["aiohttp"]
    clients["aiohttp"][budgeted]["rps_ratio"].update(ratio=0.969, spread=[0.95, 0.99])
    clients["aiohttp"][floor]["rps_ratio"].update(ratio=0.5, spread=[0.4, 0.6])
    # The rows' order in the results is not what picks the budgeted candidate.
    clients["aiohttp"] = dict(reversed(clients["aiohttp"].items()))
    row = next(line for line in report._targets(changed).splitlines() if "aiohttp" in line)
    assert "| 0.969x (0.950-0.990); wall clock" in row
    assert row.endswith("| >= 0.97x | **not met** |")


def test_each_http_candidate_shows_its_own_instructions() -> None:
    counted = {"plain": 100, "floor": 110, "budgeted": 125, "ratio": 0.8, "floor_ratio": 0.9091}
    names = ["plain", "floor", "budgeted"]
    assert report._instructions_cell(counted, names, "plain") == "100"
    assert report._instructions_cell(counted, names, "floor") == "110 (0.909x)"
    assert report._instructions_cell(counted, names, "budgeted") == "125 (0.800x)"
    assert report._instructions_cell(None, names, "budgeted") == "not counted"
    assert report._instructions_cell(counted, names, "other") == "not counted"


def test_each_transport_client_shows_its_own_instructions(
    results: dict[str, dict[str, Any]],
) -> None:
    data = copy.deepcopy(results["transport"])
    data.pop("instructions_per_request", None)
    assert report._transport(data).count("| not counted |") == 6
    data["instructions_per_request"] = {
        kind: transport.counted(1000 + (kind == "async"), 1010, 1020 + (kind == "async"))
        for kind in ("sync", "async")
    }
    body = report._transport(data)
    assert re.search(r"\| sync httpx \|.*\| 1,000 \|$", body, re.M)
    assert re.search(r"\| sync BudgetTransport \|.*\| 1,020 \(0\.980x\) \|$", body, re.M)
    assert re.search(r"\| async BudgetTransport \|.*\| 1,021 \(0\.980x\) \|$", body, re.M)
    assert "not counted" not in body


def test_the_shape_table_judges_each_figure() -> None:
    assert "| 0 | 0 | met |" in report._shape(SHAPE)
    worse = {**SHAPE, "cycles": [["a", "b"]], "cc_max": 13, "public_all": 51}
    body = report._shape(worse)
    assert "| 1 (a -> b) | 0 | **not met** |" in body
    assert "| <= 12 | **not met** |" in body
    assert "| 51 | <= 50 | **not met** |" in body


def test_the_overhead_instructions_follow_the_results(
    results: dict[str, dict[str, Any]],
) -> None:
    data = copy.deepcopy(results["overhead"])
    data["instructions"] = {
        data["reference"]: {"per_call": 1000, "ratio": 1.0},
        "ours wait()+stop()": {"per_call": 1015, "ratio": 1.015},
    }
    body = report._overhead_instructions(data)
    assert "| ours wait()+stop() | 1,015 | +15 | 1.015 |" in body
    del data["instructions"]
    assert "--instructions` to fill this table" in report._overhead_instructions(data)


def test_the_overhead_limits_are_those_overhead_py_judges_by() -> None:
    from benchmarks.overhead import FIRST_TRY_TARGETS, TARGETS

    limits = {"per_call": TARGETS, "first_try": FIRST_TRY_TARGETS}
    rendered = {(section, name): limit for section, name, _, _, limit in report.OVERHEAD_TARGETS}
    assert rendered == {
        (section, name): limit for section, table in limits.items() for name, limit in table.items()
    }


# -- the overload scenario (section 10) --------------------------------------------------------


def _run(fewer: float, goodput: float) -> dict[str, Any]:
    return {"fewer_rejected": fewer, "goodput_ratio": goodput}


def test_the_overload_goals_are_judged_on_their_side_of_each_limit() -> None:
    from benchmarks.overload import goals

    k2, both = (
        "throttle k=2: >= 80% fewer rejected at goodput >= 0.98x",
        "throttle + budget: >= 90% fewer rejected",
    )
    shared = "shared throttle k=2 (Redis): >= 80% fewer rejected at goodput >= 0.98x"
    met = goals({"policy+throttle k=2": _run(0.8, 0.98), "policy+throttle+budget": _run(0.9, 0)})
    assert met == {k2: True, both: True}  # no shared throttle in the run: no verdict on it
    short = goals(
        {
            "policy+throttle k=2": _run(0.81, 0.979),
            "policy+throttle+budget": _run(0.899, 2),
            "policy+redis-throttle k=2": _run(0.799, 1.5),
        }
    )
    assert short == {k2: False, both: False, shared: False}


def test_the_real_overload_block_follows_the_results(results: dict[str, dict[str, Any]]) -> None:
    data = copy.deepcopy(results["overload"])
    real = data["real"]
    body = report._overload_real(data)
    p = real["params"]
    assert body.startswith(f"{p['processes']} client processes, ")
    for candidate in real["candidates"].values():
        assert f"| {candidate['label']} | {candidate['rejected_attempts']:,} |" in body
    for goal, met in real["goals"].items():
        assert f"- {goal}: **{'met' if met else 'not met'}**" in body
    assert body.count("**met**") == sum(real["goals"].values())
    real["goals"] = dict.fromkeys(real["goals"], False)
    assert report._overload_real(data).count("**not met**") == len(real["goals"])
    skipped = {**data, "real": {"skipped": "no redis-server on PATH"}}
    assert report._overload_real(skipped) == "Not measured: no redis-server on PATH.\n"


def test_the_real_overload_figure_is_drawn_only_once_measured(
    results: dict[str, dict[str, Any]],
) -> None:
    data = results["overload"]
    assert set(report.overload_figures(data)) == {"overload.svg", "overload-real.svg"}
    skipped = {**data, "real": {"skipped": "not run"}}
    assert set(report.overload_figures(skipped)) == {"overload.svg"}
