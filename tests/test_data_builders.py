"""The data builders (cfbench/tasks/build_data.py, build_warmstart.py) on the small sources shipped in tests/fixtures/,
cut from the original sources by tests/fixtures/cut_sources.py; and, marked `sources`, the full rebuild of every
shipped file byte for byte from the original sources when CFBENCH_SOURCES names the folder holding them
(`sources/` and `train_sources/`; docs/development.md, Tests). Without it those tests are deselected (conftest.py)."""

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cfbench.harness.metrics import normalize
from cfbench.harness.paths import TASKS_DIR

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
ROWS = json.loads((FIXTURES / "sources" / "ROWS.json").read_text())  # original positions of the rows the cut kept


def build(module: str, sources: Path, out: Path, *extra: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", module, "--sources", str(sources), "--out", str(out), *extra], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-4000:]


def jsonl(path: Path) -> list[dict]:
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    return [json.loads(line) for line in text.splitlines()]


def contents(tasks: Path, name: str) -> dict[str, str]:
    return {r["id"]: r["contents"] for r in jsonl(tasks / "corpus" / f"{name}.jsonl.gz")}


def as_shipped(row: dict) -> dict:
    """A row built from the fixture with its positional names (`"row": i`, `dev-row-i`) back at the original positions."""
    sources = [s | {"row": ROWS[s["file"]][s["row"]]} if "row" in s and s["file"] in ROWS else s for s in row["source"]]
    named = re.fullmatch(r"(.*-row-)(\d+)", row["id"])
    full_split = next((s["file"] for s in row["source"] if s["file"].startswith("full_splits/")), None)
    ident = f"{named.group(1)}{ROWS[full_split][int(named.group(2))]}" if named else row["id"]
    return row | {"id": ident, "source": sources}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("built")
    build("cfbench.tasks.build_data", FIXTURES / "sources", out)
    return out


def test_the_fixture_rebuilds_the_shipped_mini_suite_row_for_row(built):
    """Every source row mini names is in the fixture, so the builder's matching, alias merging, ids and evidence
    linking give mini's 70 rows exactly; evidence compared by passage text (ids are positions in the corpus)."""
    shipped, mine = jsonl(TASKS_DIR / "suites" / "mini.jsonl"), [as_shipped(r) for r in jsonl(built / "suites" / "mini.jsonl")]
    assert len(mine) == len(shipped) == 70
    bundled, fixture = contents(TASKS_DIR, "bundled"), contents(built, "bundled")
    for want, got in zip(shipped, mine):
        assert {k: v for k, v in got.items() if k != "evidence_ids"} == {k: v for k, v in want.items() if k != "evidence_ids"}
        assert [fixture[e] for e in got["evidence_ids"]] == [bundled[e] for e in want["evidence_ids"]], want["id"]
    assert sum(bool(r["evidence_ids"]) for r in mine) >= 30 and sum(len(r["golden_answers"]) > 1 for r in mine) >= 20


def test_the_fixture_build_keeps_training_rows_and_drops_evaluation_questions(built):
    manifest = json.loads((built / "manifest.json").read_text())
    for name, entry in manifest["suites"].items():
        assert entry["n"] == 70 and jsonl(built / entry["file"]) == jsonl(built / "suites" / "mini.jsonl"), name
    train = manifest["train"]["search-r1"]
    assert train["dropped"]["eval_overlap"]["hotpotqa"] == len(ROWS["hotpotqa/hotpotqa_train_800.parquet"]) > 0  # asked by mini
    shipped = {r["id"]: r for r in jsonl(TASKS_DIR / "train" / "search-r1.jsonl.gz")}
    rows = jsonl(built / "train" / "search-r1.jsonl.gz")
    assert len(rows) == train["n"] >= 10 and all(shipped[r["id"]] == r for r in rows)  # the shipped training rows, unchanged


def test_two_fixture_builds_are_byte_identical(built, tmp_path):
    build("cfbench.tasks.build_data", FIXTURES / "sources", tmp_path)
    files = sorted(p.relative_to(built) for p in built.rglob("*") if p.is_file())
    assert files and all((tmp_path / f).read_bytes() == (built / f).read_bytes() for f in files)


@pytest.mark.slow
def test_the_warm_start_builder_on_the_fixture(tmp_path):
    """The training-source corpus rows are the shipped ones with the same ids (passages touching the evaluation
    dropped the same way), and every trajectory is grounded protocol v1 over that small corpus."""
    build("cfbench.tasks.build_warmstart", FIXTURES / "train_sources", tmp_path)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    shipped = {r["id"]: r for r in jsonl(TASKS_DIR / "corpus" / "train-sources.jsonl.gz")}
    corpus = jsonl(tmp_path / "corpus" / "train-sources.jsonl.gz")
    assert len(corpus) >= 50 and all(shipped[r["id"]] == r for r in corpus)
    assert manifest["corpus"]["train-sources"]["dropped"]["squad paragraphs: evaluation evidence title"] > 0
    trajectories = jsonl(tmp_path / "train" / "warmstart.jsonl.gz")
    assert {r["kind"] for r in trajectories} >= {"single", "propose-2"}
    for row in trajectories:
        *searches, last = row["turns"]
        assert all(t["generated"].endswith("</search>") and t["observation"].startswith("\n\n<information>") for t in searches)
        if row["role"] == "solver":
            assert any(f" {normalize(row['answer'])} " in f" {normalize(t['observation'])} " for t in searches), row["id"]
    proposer = jsonl(tmp_path / "train" / "warmstart-proposer.jsonl.gz")
    by_id = {r["id"]: r for r in trajectories if r["role"] == "proposer"}  # the proposer rows above, and the compositions
    assert {r["id"]: r for r in proposer if r["kind"] != "compose-2"} == by_id
    assert manifest["train"]["warmstart-proposer"]["n"] == len(proposer)


@pytest.fixture(scope="module")
def sources() -> Path:
    """The original sources' folder, from CFBENCH_SOURCES (the tests that need it are deselected when it is not set)."""
    given = os.environ["CFBENCH_SOURCES"]
    folder = Path(given).resolve()
    assert (folder / "sources").is_dir() and (folder / "train_sources").is_dir(), (
        f"CFBENCH_SOURCES={given}: no sources/ and train_sources/ in it"
    )
    return folder


@pytest.mark.sources
@pytest.mark.slow
def test_the_original_sources_rebuild_the_shipped_suites_byte_for_byte(sources, tmp_path):
    build("cfbench.tasks.build_data", sources / "sources", tmp_path, "--train-sources", str(sources / "train_sources"))
    built, shipped = (json.loads((d / "manifest.json").read_text()) for d in (tmp_path, TASKS_DIR))
    owned = {"corpus": ["bundled"], "train": ["search-r1", "search-r1-answerable"]}  # build_warmstart owns the other entries
    shipped = {k: {n: v[n] for n in owned[k]} if k in owned else v for k, v in shipped.items()}
    assert built == shipped
    for rel in (
        "suites/fixed1325.jsonl",
        "suites/mini.jsonl",
        "suites/full.jsonl.gz",
        "corpus/bundled.jsonl.gz",
        "train/search-r1.jsonl.gz",
        "train/search-r1-answerable.jsonl.gz",
    ):
        assert (tmp_path / rel).read_bytes() == (TASKS_DIR / rel).read_bytes(), rel


@pytest.mark.sources
@pytest.mark.slow
def test_the_original_training_sources_rebuild_the_warm_start_data_byte_for_byte(sources, tmp_path):
    build("cfbench.tasks.build_warmstart", sources / "train_sources", tmp_path)
    manifest = json.loads((TASKS_DIR / "manifest.json").read_text())
    for kind, name in (("corpus", "train-sources"), ("train", "warmstart"), ("train", "warmstart-proposer")):
        spec = manifest[kind][name]
        assert (tmp_path / spec["file"]).read_bytes() == (TASKS_DIR / spec["file"]).read_bytes(), spec["file"]
