"""Every citation of the protocol document in the tree names one of its numbered headings.

Code cites `docs/protocol.md §N` (older text: "protocol.md section N"); a citation whose section does
not exist is a broken promise to the reader, so it fails here rather than in a reader's hands.
"""

import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "protocol.md"
NUMBER = re.compile(r"\d+(?:\.\d+)*")
CITATION = re.compile(r"protocol\.md (?:§|sections? )(\d+(?:\.\d+)*(?:(?:, | and |-|–)§?\d+(?:\.\d+)*)*)")
HEADING = re.compile(r"^(#{2,}) (\d+(?:\.\d+)*)\.? ", re.MULTILINE)
BINARY = (".gz", ".npy", ".png", ".safetensors", ".bin", ".pt")


def headings(doc: str) -> list[str]:
    """Section numbers in order: "2" for `## 2. Protocol v1`, "2.1" for `### 2.1 Prompt`."""
    return [number for _, number in HEADING.findall(doc)]


def citations(text: str) -> list[tuple[int, str]]:
    """(line, section number) of every section a citation names; "sections 5 and 6" names two."""
    return [(text.count("\n", 0, m.start()) + 1, n) for m in CITATION.finditer(text) for n in NUMBER.findall(m.group(1))]


def dangling(text: str, known: set[str]) -> list[tuple[int, str]]:
    return [(line, n) for line, n in citations(text) if n not in known]


def tree() -> list[Path]:
    """Tracked files and new ones git does not ignore: what a clone or the next commit holds."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"], capture_output=True, text=True, check=True
    ).stdout
    return [REPO / name for name in dict.fromkeys(listed.split("\0")) if name and not name.endswith(BINARY) and (REPO / name).is_file()]


def test_every_citation_in_the_tree_names_a_heading():
    known = set(headings(DOC.read_text(encoding="utf-8")))
    found, broken = [], []
    for path in tree():
        text = path.read_text(encoding="utf-8", errors="replace")
        where = path.relative_to(REPO).as_posix()
        found += [(where, n) for _, n in citations(text)]
        broken += [f"{where}:{line} cites §{n}" for line, n in dangling(text, known)]
    assert ("cfbench/harness/protocol.py", "2") in found and ("cfbench/harness/metrics.py", "3") in found  # the scan sees the code
    assert not broken, "citations of sections docs/protocol.md does not have (add the section or fix the citation): " + "; ".join(broken)


def test_sections_are_numbered_in_order():
    numbers = headings(DOC.read_text(encoding="utf-8"))
    top = [n for n in numbers if "." not in n]
    assert top == [str(i) for i in range(1, len(top) + 1)] and len(top) >= 8
    for section in top:
        subs = [n for n in numbers if n.startswith(section + ".")]
        assert subs == [f"{section}.{i}" for i in range(1, len(subs) + 1)], f"§{section}: subsections out of order: {subs}"


def test_a_dangling_citation_is_caught():
    known = set(headings("## 1. Suite\n## 2. Protocol v1\n### 2.1 Prompt\n## 3. Metrics\n"))
    assert known == {"1", "2", "2.1", "3"}
    cite, old = "docs/protocol.md §", "protocol.md section"  # split so this file holds no citation of its own
    text = f"ok: {cite}2 and {cite}2.1.\nbroken: {cite}9, {cite}2.4\nold: {old}s 3 and 7; {old} 1"
    assert dangling(text, known) == [(2, "9"), (2, "2.4"), (3, "7")]


README = REPO / "README.md"
DATED = re.compile(r"\b20\d\d-\d\d-\d\d\b")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_is_user_documentation_without_measurement_logs():
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines: move reference material to docs/"
    dated = [f"README.md:{i}: {line.strip()}" for i, line in enumerate(lines, 1) if DATED.search(line)]
    assert not dated, "dated measurements belong in benchmarks/RESULTS.md: " + "; ".join(dated)
    assert "git clone" in text and "cfbench eval --ckpt smollm2-135m-search --suite mini" in text
    missing = [target for target in LINK.findall(text) if "://" not in target and not (REPO / target).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"
    assert (REPO / "LICENSE").read_text().lstrip().startswith("Apache License") and (REPO / "CITATION.cff").is_file()


def test_ci_runs_readmes_test_command_exactly():
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    command = next(block.strip() for block in blocks if "scripts/test" in block)
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines() if line.strip() and not line.startswith("#")]
    # CI runs what README tells a user to run, as it is; only the verl adapter's own venv and tests follow it
    assert command == "./scripts/test" and ci[ci.index(command) :] == [command, "./scripts/test-verl"]
