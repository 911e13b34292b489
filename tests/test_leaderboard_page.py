"""index.html opened in headless Chromium from disk: the numbers it shows are results.json's and
clicking a column header sorts the rows. Needs Debian's chromium (see README, Tests)."""

from __future__ import annotations

import json

import pytest

from cfbench.leaderboard.build import build
from cfbench.leaderboard.store import add, load_run
from chromium import Chromium
from leaderboard_runs import write_run

pytestmark = pytest.mark.slow  # Every test here drives headless Chromium.

CELLS = """Array.from(document.querySelectorAll("table.sortable[id^=t]")).map(table => ({
  id: table.id,
  rows: Array.from(table.tBodies[0].rows).map(tr => ({
    run: tr.dataset.run,
    cells: Object.fromEntries(Array.from(tr.querySelectorAll("td[data-key]")).map(td =>
      [td.dataset.key, [td.querySelector(".v").textContent, td.querySelector(".ci").textContent, td.classList.contains("best")]]))
  }))
}))"""
ORDER = 'Array.from(document.querySelectorAll("#t0-benchmarks tbody tr")).map(tr => tr.dataset.run)'
CLICK = (
    'document.querySelector("#t0-benchmarks th[data-key={key}]").click(); '
    'document.querySelector("#t0-benchmarks th[data-key={key}]").getAttribute("aria-sort")'
)


@pytest.fixture(scope="module")
def board(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("page")
    root = tmp / "lb"
    base = {"nq": 0.45, "triviaqa": 0.6, "popqa": 0.35, "hotpotqa": 0.3, "2wikimultihopqa": 0.3, "musique": 0.1, "bamboogle": 0.2}
    # Three comparable runs whose order on nq differs from their rank, and one set apart (topk 5).
    for name, seed, scale in (("first", 1, 1.0), ("second", 2, 0.8), ("third", 3, 0.6)):
        acc = {b: v * scale for b, v in base.items()} | {"nq": {"first": 0.3, "second": 0.7, "third": 0.5}[name]}
        add(load_run(write_run(tmp / name, acc, seed=seed, model=name)), root, {})
    knobs = {"topk": 5, "max_searches": 4, "max_new_tokens": 500, "max_obs_tokens": 500, "max_context_tokens": 4096}
    add(load_run(write_run(tmp / "apart", base, seed=4, model="apart", knobs=knobs)), root, {})
    build([root / "fixed1325"])
    return root / "fixed1325", tmp


@pytest.fixture(scope="module")
def browser(board):
    chromium = Chromium(board[1] / "profile")
    chromium.open(board[0] / "index.html")
    yield chromium
    chromium.close()


def test_rendered_numbers_are_results_json(board, browser):
    results = json.loads((board[0] / "results.json").read_text())
    assert browser.evaluate("performance.getEntriesByType('resource').length") == 0  # nothing fetched: opens offline
    shown = {t["id"]: t["rows"] for t in browser.evaluate(CELLS)}
    assert set(shown) == {"t0-benchmarks", "t0-averages", "t1-benchmarks", "t1-averages"}
    for i, table in enumerate(results["tables"]):
        for kind, cols in (("benchmarks", table["benchmarks"]), ("averages", table["groups"])):
            rows = shown[f"t{i}-{kind}"]
            assert [r["run"] for r in rows] == [r["id"] for r in table["runs"]]
            for row, run in zip(rows, table["runs"]):
                assert list(row["cells"]) == cols
                for col in cols:
                    v = run["scores"][col]["cover_em"]
                    best = len(table["runs"]) > 1 and v["value"] == table["best"][col]
                    assert row["cells"][col] == [f"{100 * v['value']:.1f}", f"[{100 * v['lo']:.1f}, {100 * v['hi']:.1f}]", best]
    reported = browser.evaluate(
        'Array.from(document.querySelectorAll("#reported-table tbody tr")).map(tr => Array.from(tr.cells).map(td => td.textContent))'
    )
    assert reported == [
        [r["treatment"], *(f"{100 * r['avg7'][s]:.1f}" for s in results["reported"]["scales"])] for r in results["reported"]["rows"]
    ]
    assert browser.evaluate("document.querySelectorAll('#table-0 svg rect title').length") == 3 * 7  # a bar per run and benchmark
    assert browser.evaluate("document.querySelectorAll('#table-0 svg circle').length") == 3  # a point per run


def test_clicking_a_header_sorts(board, browser):
    results = json.loads((board[0] / "results.json").read_text())
    runs = results["tables"][0]["runs"]
    by_rank = [r["id"] for r in runs]
    by_nq = [r["id"] for r in sorted(runs, key=lambda r: -r["scores"]["nq"]["cover_em"]["value"])]
    assert browser.evaluate(ORDER) == by_rank and by_nq != by_rank
    assert browser.evaluate(CLICK.replace("{key}", "nq")) == "descending"
    assert browser.evaluate(ORDER) == by_nq
    assert browser.evaluate(CLICK.replace("{key}", "nq")) == "ascending"
    assert browser.evaluate(ORDER) == by_nq[::-1]
    browser.evaluate('document.querySelector("#t0-benchmarks th").click()')  # the rank column: rank 1 first
    assert browser.evaluate(ORDER) == by_rank
