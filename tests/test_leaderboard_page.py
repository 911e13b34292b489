"""index.html opened in headless Chromium from disk: the numbers it shows are results.json's,
clicking a column header sorts the rows, ten runs fit a 1280 px window with no overlapping chart
labels, and a benchmark cell opens the run's question-by-question page. Needs Debian's chromium
(scripts/test installs it; docs/development.md, Tests)."""

from __future__ import annotations

import json
import shutil
from itertools import combinations

import pytest
from click.testing import CliRunner

from cfbench.cli import main
from cfbench.harness.jsonl import dumps
from cfbench.harness.metrics import score
from cfbench.harness.runrecord import TRAJECTORIES
from cfbench.leaderboard.build import build, outputs
from cfbench.leaderboard.store import STORED_TRAJECTORIES, add, content_id, load_run
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
                    best = table["bold"][col] == run["id"]
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
    rank = {r["id"]: r["rank"] for r in runs}
    shown = [rank[run] for run in browser.evaluate(ORDER)]
    assert shown == sorted(shown) and len(set(rank.values())) > 1  # shared ranks keep their order among themselves


BASE = {"nq": 0.45, "triviaqa": 0.6, "popqa": 0.35, "hotpotqa": 0.3, "2wikimultihopqa": 0.3, "musique": 0.1, "bamboogle": 0.2}
# Labels as long as the study's, so a legend that placed them at fixed offsets would overlap them.
TEN = [
    (f"Qwen3.5-{scale} {treatment} with warm start, seed {seed}", treatment, scale)
    for scale, treatment, seed in (
        ("4B", "Base", 1),
        ("4B", "Search-R1", 2),
        ("4B", "Dr. Zero", 3),
        ("4B", "MSV", 4),
        ("4B", "CrossFit", 5),
        ("4B", "MSV+CrossFit", 6),
        ("9B", "Base", 7),
        ("9B", "Search-R1", 8),
        ("9B", "MSV+CrossFit", 9),
        ("9B", "CrossFit", 10),
    )
]
# Untrusted text in a question, a prediction and a turn: shown as text, never run or parsed as markup.
HOSTILE = "<script>document.title = 'pwned'</script></article><b>bold</b> & \"quoted\" 'it'"
TURNS = [
    {
        "action": "search",
        "generated": "<think> look </think>\n<search> first <query> </search>",
        "query": "first <query>",
        "doc_ids": ["7", "727"],
        "doc_scores": [2.0, 1.0],
        "observation": "OBSERVATION TEXT, left out of the page",
    },
    {"action": "invalid", "generated": "</pre><i>no tag</i>", "query": None, "doc_ids": [], "doc_scores": []},
    {
        "action": "search",
        "generated": "<search> second & last </search>",
        "query": "second & last",
        "doc_ids": ["31"],
        "doc_scores": [3.0],
        "observation": "OBSERVATION TEXT, left out of the page",
    },
    {"action": "answer", "generated": "<answer> " + HOSTILE + " </answer>", "query": None, "doc_ids": [], "doc_scores": []},
]


def _with_turns(run_dir):
    """The first two missed bamboogle questions get hostile text: one a prediction and searches, one no answer at all."""
    rows = [json.loads(line) for line in (run_dir / TRAJECTORIES).read_text().splitlines()]
    missed = [r for r in rows if r["benchmark"] == "bamboogle" and r["prediction"] == "y"]
    missed[0] |= {"question": HOSTILE, "golden_answers": ["x", "<x>"], "prediction": HOSTILE, "turns": TURNS}
    # no answer at all: its one turn answers nothing, so protocol v1 extracts no prediction from it either
    silent = {"action": "invalid", "doc_ids": [], "doc_scores": [], "generated": "I am not sure.", "query": None}
    missed[1] |= {"prediction": None, "turns": [silent]}
    for row in missed[:2]:
        again = score(row["prediction"] or "", row["golden_answers"])
        assert again == row["scores"], again  # still missed, so results.json still adds up
    (run_dir / TRAJECTORIES).write_text("".join(dumps(r) + "\n" for r in rows))
    return missed[0]["id"], missed[1]["id"]


@pytest.fixture(scope="module")
def ten(tmp_path_factory):
    """Ten comparable runs: the top one with hostile text in its questions, the last stored as scores only."""
    tmp = tmp_path_factory.mktemp("ten")
    root = tmp / "lb"
    ids = {}
    for k, (name, treatment, scale) in enumerate(TEN):
        run_dir = write_run(tmp / f"r{k}", {b: v * (0.55 + 0.05 * k) for b, v in BASE.items()}, seed=k, model=name)
        if k == 9:
            ids["hostile"] = _with_turns(run_dir)
        run = load_run(run_dir)
        entry, _ = add(run, root, {"treatment": treatment, "scale": scale})
        ids[k] = run.id
        if k == 0:  # an entry stored before trajectories were kept
            (entry / STORED_TRAJECTORIES).unlink()
            ids[k] = content_id(run.results, run.rows, None)
            entry.rename(entry.parent / ids[k])
    suite = root / "fixed1325"
    (suite / "questions").mkdir(parents=True)
    (suite / "questions" / "0123456789abcdef.html").write_text("a run no longer stored")
    build([suite])
    chromium = Chromium(tmp / "profile")
    chromium.viewport(1280, 900)
    yield suite, ids, chromium, tmp
    chromium.close()


OVERFLOW = """[document.documentElement.scrollWidth, document.documentElement.clientWidth,
  Array.from(document.querySelectorAll("table")).map(t => [t.id, t.getBoundingClientRect().right])]"""
# Every text label of each chart (axis ticks, axis titles, benchmark names, legend entries) as [text, left, top, right, bottom].
LABELS = """Array.from(document.querySelectorAll("figure")).map(f =>
  Array.from(f.querySelectorAll("svg text, ol.legend li")).map(e => {
    const r = e.getBoundingClientRect(); return [e.textContent, r.left, r.top, r.right, r.bottom];
  }))"""
SWATCHES = """Array.from(document.querySelectorAll("ol.legend")).map(l =>
  Array.from(l.querySelectorAll("i")).map(i => getComputedStyle(i).backgroundColor))"""


def test_ten_runs_fit_a_1280_px_window_and_chart_labels_do_not_overlap(ten):
    suite, _, chromium, tmp = ten
    chromium.open(suite / "index.html")
    scroll_width, client_width, tables = chromium.evaluate(OVERFLOW)
    print("screenshot:", chromium.screenshot(tmp / "leaderboard-ten-runs-1280.png"))
    assert client_width >= 1250  # the window is 1280 px less any scrollbar
    assert scroll_width <= client_width
    assert {t for t, _ in tables} == {
        "t0-benchmarks",
        "t0-averages",
        "t0-pairwise",
        "scores-only-benchmarks",
        "scores-only-averages",
        "reported-table",
    }
    assert all(right <= client_width for _, right in tables), tables
    figures = chromium.evaluate(LABELS)
    assert len(figures) == 2  # bars and scatter
    for labels in figures:
        legend = [label for label in labels if label[0].startswith(tuple(f"{rank}. " for rank in range(1, 11)))]
        assert len(legend) == 9 and all(label[3] <= client_width for label in labels)
        for a, b in combinations(labels, 2):
            assert a[3] <= b[1] or b[3] <= a[1] or a[4] <= b[2] or b[4] <= a[2], (a, b)
    assert [len(set(colours)) for colours in chromium.evaluate(SWATCHES)] == [9, 9]  # a colour per ranked run (one is scores only)


ARTICLE = """(() => {{ const a = document.querySelector("article[data-id='{qid}']"); return {{
  section: a.closest("section").id,
  score: a.querySelector("h3 span:last-child").textContent,
  question: a.querySelector(".question").textContent,
  gold: Array.from(a.querySelectorAll(".gold span")).map(s => s.textContent),
  prediction: a.querySelector(".prediction").textContent,
  queries: Array.from(a.querySelectorAll(".query")).map(q => q.textContent),
  docs: Array.from(a.querySelectorAll(".searches small")).map(s => s.textContent),
  folded: a.querySelector("details") ? [a.querySelector("details").open, a.querySelector("details pre").checkVisibility()] : null,
}}; }})()"""


def _rescore(root):
    result = CliRunner().invoke(main, ["leaderboard", "rescore", "--root", str(root)])
    return result.exit_code, [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


def test_a_benchmark_cell_opens_the_runs_questions_from_disk(ten):
    suite, ids, chromium, tmp = ten
    hostile, unanswered = ids["hostile"]
    _, files = outputs(suite)  # what rescore compares: the question pages are part of the build
    pages = sorted(p.relative_to(suite).as_posix() for p in (suite / "questions").iterdir())
    assert pages == sorted(f"questions/{ids[k]}.html" for k in range(1, 10)) == sorted(n for n in files if n.startswith("questions/"))
    assert all((suite / name).read_text() == text for name, text in files.items())
    assert "OBSERVATION TEXT" not in (suite / f"questions/{ids[9]}.html").read_text()
    copy = tmp / "rescored" / "fixed1325"
    shutil.copytree(suite, copy)
    assert _rescore(copy.parent) == (0, [f"{copy}: 9 runs rescored from their predictions, 1 scores only; tables identical"])
    (copy / "questions" / f"{ids[0]}.html").write_text("a page for a run that kept no trajectories")
    (copy / "questions" / f"{ids[1]}.html").write_text("edited")
    code, lines = _rescore(copy.parent)
    assert code != 0 and f"questions/{ids[0]}.html" in lines[0] and f"questions/{ids[1]}.html" in lines[0], lines

    chromium.open(suite / "index.html")
    links = chromium.evaluate(
        'Array.from(document.querySelectorAll("#t0-benchmarks tbody tr")).map(tr => '
        '[tr.dataset.run, Array.from(tr.querySelectorAll("td[data-key]")).map(td => td.querySelector("a.v")?.getAttribute("href"))])'
    )
    benchmarks = list(BASE)
    assert dict(links) == {ids[k]: [f"questions/{ids[k]}.html#{b}" for b in benchmarks] for k in range(1, 10)}  # scores-only: apart
    chromium.evaluate(f"document.querySelector('#t0-benchmarks tr[data-run=\"{ids[9]}\"] td[data-key=bamboogle] a').click()")
    chromium.wait_for("Page.loadEventFired")
    assert chromium.evaluate("location.href") == (suite / "questions" / f"{ids[9]}.html").as_uri() + "#bamboogle"
    assert chromium.evaluate("[document.querySelector(':target').id, document.title]") == [
        "bamboogle",
        f"{TEN[9][0]}: questions (fixed1325)",
    ]
    assert chromium.evaluate("[performance.getEntriesByType('resource').length, document.scripts.length]") == [0, 0]
    assert chromium.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")

    shown = chromium.evaluate(ARTICLE.format(qid=hostile))
    assert shown == {
        "section": "bamboogle",
        "score": "Cover-EM 0",
        "question": HOSTILE,
        "gold": ["x", "<x>"],
        "prediction": HOSTILE,
        "queries": ["first <query>", "second & last"],
        "docs": ["docs 7, 727", "docs 31"],
        "folded": [False, False],  # the generated text is there, folded
    }
    chromium.evaluate(f"document.querySelector(\"article[data-id='{hostile}'] summary\").click()")
    opened = chromium.evaluate(
        f"Array.from(document.querySelectorAll(\"article[data-id='{hostile}'] details pre\"))"
        ".map(e => [e.textContent, e.checkVisibility()])"
    )
    assert opened == [[t["generated"], True] for t in TURNS]
    assert chromium.evaluate(ARTICLE.format(qid=unanswered)) == {
        "section": "bamboogle",
        "score": "Cover-EM 0",
        "question": f"q {unanswered}?",
        "gold": ["x"],
        "prediction": "no answer",
        "queries": [],
        "docs": [],
        "folded": [False, False],  # its one turn's text (no answer in it) is there, folded
    }
    stored = [json.loads(line) for line in (suite.parent.parent / "r9" / TRAJECTORIES).read_text().splitlines()]
    in_page = chromium.evaluate(
        'Array.from(document.querySelectorAll("section#bamboogle article"))'
        '.map(a => [a.dataset.id, a.querySelector(".prediction").textContent])'
    )
    assert in_page == [[r["id"], r["prediction"] or "no answer"] for r in stored if r["benchmark"] == "bamboogle"]
