"""How `cfbench index build` and search grow with the corpus: bm25s and Lucene (pyserini) on synthetic
Wikipedia-like corpora, with a power-law fit extrapolated to wiki-18's 21M passages.

    pip install -e ".[lucene]" && python benchmarks/retrieval_scaling.py [--sizes 100000 500000 2000000]
        [--kinds bm25 lucene] [--work DIR] [--queries 256]

The corpora are generated from the bundled corpus's statistics (seeded, streamed to disk a chunk at a
time): passage and title lengths are drawn from the bundled passages' own lengths, and words from a
Zipf law fitted to the bundled word frequencies, over a vocabulary that grows with the corpus as
Heaps' law fitted on the bundled corpus says (the bundled words first, by frequency; made-up
lower-case words beyond them). Wikipedia's vocabulary keeps growing with its size, which is what
makes an inverted index's size and a query's posting lists grow, so a corpus that only resampled
the bundled 21k passages' words would understate both.

For each size and kind: the real CLI (`cfbench index build`) in its own process, its wall time and peak
RSS (os.wait4: the process and the children it waited for, Lucene's indexer JVM included); the index
directory's size; then one process that opens the index (RSS after opening = what a server holds) and
times fixed1325's questions at top-3, one query at a time and 32 at a time (p50 and p99 per call).
Each quantity y is fitted as y = a * n^b over the sizes (least squares in log-log) and extrapolated to
21M passages. Prints a markdown table for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

WIKI18 = 21_015_324  # passages in Search-R1's wiki-18 (psgs_w100)
WORD = re.compile(r"[a-z]{2,}")  # what bm25s's default token pattern indexes, lower-cased


def bundled_statistics() -> dict:
    """Title and text lengths (words) of every bundled passage, word frequencies, and Heaps' law V = k n^beta."""
    from cfbench.harness.corpus import load_corpus, split_contents

    corpus = load_corpus()
    titles, texts, counts, seen, heaps = [], [], Counter(), 0, []
    for i, contents in enumerate(corpus.contents):
        title, text = split_contents(contents)
        words = WORD.findall(text.lower())
        titles.append(max(1, len(title.split())))
        texts.append(len(text.split()))
        counts.update(words)
        seen += len(words)
        if (i + 1) % 1000 == 0:
            heaps.append((seen, len(counts)))
    beta, log_k = np.polyfit(np.log([n for n, _ in heaps]), np.log([v for _, v in heaps]), 1)
    ranked = [w for w, _ in counts.most_common()]
    freqs = np.array([counts[w] for w in ranked], dtype=np.float64)
    top = min(len(freqs), 10_000)  # Zipf's exponent from the head, where counts are not dominated by ones
    zipf = -np.polyfit(np.log(np.arange(1, top + 1)), np.log(freqs[:top]), 1)[0]
    return {
        "passages": len(corpus.ids),
        "titles": np.array(titles),
        "texts": np.array(texts),
        "words": ranked,
        "zipf": float(zipf),
        "heaps": (float(np.exp(log_k)), float(beta)),
    }


def made_up(rank: int) -> str:
    """A lower-case word for a vocabulary rank past the bundled words (base 26, at least 3 letters, prefixed 'zq')."""
    letters = []
    while True:
        rank, r = divmod(rank, 26)
        letters.append(chr(97 + r))
        if rank == 0:
            break
    return "zq" + "".join(reversed(letters))


def write_corpus(path: Path, n: int, stats: dict, seed: int = 0, chunk: int = 20_000) -> None:
    """n passages '"Title"\\ntext' as Search-R1's {"id", "contents"} jsonl, a chunk at a time."""
    rng = np.random.default_rng(seed)
    mean_words = float(stats["texts"].mean() + stats["titles"].mean())
    k, beta = stats["heaps"]
    vocab = int(k * (n * mean_words) ** beta)
    p = 1.0 / np.arange(1, vocab + 1) ** stats["zipf"]
    cdf = np.cumsum(p / p.sum())
    known = stats["words"]
    words = known[:vocab] + [made_up(r) for r in range(max(0, vocab - len(known)))]
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, n, chunk):
            m = min(chunk, n - start)
            title_len = rng.choice(stats["titles"], m)
            text_len = rng.choice(stats["texts"], m)
            ranks = np.searchsorted(cdf, rng.random(int(title_len.sum() + text_len.sum())))
            at = 0
            lines = []
            for i in range(m):
                title = " ".join(words[r] for r in ranks[at : at + title_len[i]]).title()
                at += title_len[i]
                text = " ".join(words[r] for r in ranks[at : at + text_len[i]])
                at += text_len[i]
                lines.append(json.dumps({"id": f"syn-{start + i}", "contents": f'"{title}"\n{text}'}))
            f.write("\n".join(lines) + "\n")


def measured(command: list[str]) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (GB) and stdout of a command run to completion."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"failed: {' '.join(command)}")
    return time.perf_counter() - started, usage.ru_maxrss / 1e6, out


QUERY_PROCESS = """
import json, resource, sys, time
import numpy as np
from pathlib import Path
from cfbench.harness.retrievers.index import open_index
started = time.perf_counter()
index = open_index(Path(sys.argv[1]))
opened = time.perf_counter() - started
held = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
queries = json.loads(sys.argv[2])
index.search(queries[:32], 3)  # warm: the JVM compiles its hot paths on first use
def calls(size):
    seconds = []
    for i in range(0, len(queries) - size + 1, size):
        t = time.perf_counter(); index.search(queries[i : i + size], 3); seconds.append(time.perf_counter() - t)
    return [float(np.percentile(seconds, 50) * 1e3), float(np.percentile(seconds, 99) * 1e3)]
print(json.dumps({"open_s": opened, "rss_gb": held, "batch1_ms": calls(1), "batch32_ms": calls(32)}))
"""


def directory_gb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e9


def fit(sizes: list[int], values: list[float]) -> tuple[float, float]:
    """(exponent b, value at 21M) of y = a n^b by least squares in log-log."""
    b, log_a = np.polyfit(np.log(sizes), np.log(values), 1)
    return float(b), float(np.exp(log_a) * WIKI18**b)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 500_000, 2_000_000])
    parser.add_argument("--kinds", nargs="+", default=["bm25", "lucene"], choices=["bm25", "lucene"])
    parser.add_argument("--work", type=Path, default=None, help="where corpora and indexes go [default: a temporary directory]")
    parser.add_argument("--queries", type=int, default=256, help="fixed1325 questions timed per index")
    args = parser.parse_args()
    from cfbench.harness.paths import TASKS_DIR

    questions = [json.loads(line)["question"] for line in (TASKS_DIR / "suites" / "fixed1325.jsonl").read_text().splitlines()]
    queries = questions[:: max(1, len(questions) // args.queries)][: args.queries]
    stats = bundled_statistics()
    k, beta = stats["heaps"]
    print(
        f"bundled corpus: {stats['passages']} passages, {stats['texts'].mean():.0f} words of text and "
        f"{stats['titles'].mean():.1f} of title on average; Zipf exponent {stats['zipf']:.3f}, Heaps V = {k:.1f} n^{beta:.3f}"
    )
    rows: dict[str, list[dict]] = {kind: [] for kind in args.kinds}
    with tempfile.TemporaryDirectory(dir=args.work) as tmp:
        work = Path(tmp)
        for n in args.sizes:
            corpus = work / f"synthetic-{n}.jsonl"
            seconds = time.perf_counter()
            write_corpus(corpus, n, stats)
            seconds = time.perf_counter() - seconds
            print(f"{n:>10} passages: corpus {corpus.stat().st_size / 1e9:.2f} GB written in {seconds:.0f} s", flush=True)
            for kind in args.kinds:
                out = work / f"{kind}-{n}"
                build = [sys.executable, "-m", "cfbench.cli", "index", "build", "--corpus", str(corpus), "--kind", kind, "--out", str(out)]
                build_s, build_rss, _ = measured(build)
                _, _, printed = measured([sys.executable, "-c", QUERY_PROCESS, str(out), json.dumps(queries)])
                row = {"n": n, "build_s": build_s, "build_rss_gb": build_rss, "index_gb": directory_gb(out), **json.loads(printed)}
                rows[kind].append(row)
                rounded = {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}
                print(f"           {kind}: {json.dumps(rounded)}", flush=True)
                subprocess.run(["rm", "-rf", str(out)], check=True)
            corpus.unlink()
    names = {"bm25": "bm25s", "lucene": "Lucene (pyserini)"}
    print()
    print(
        "| engine | passages | build s | build peak RSS GB | index GB | open s | RSS after open GB "
        "| batch 1 p50 / p99 ms | batch 32 p50 / p99 ms |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind, measured_rows in rows.items():
        for r in measured_rows:
            print(
                f"| {names[kind]} | {r['n']:,} | {r['build_s']:.0f} | {r['build_rss_gb']:.2f} | {r['index_gb']:.2f} | {r['open_s']:.1f} | "
                f"{r['rss_gb']:.2f} | {r['batch1_ms'][0]:.1f} / {r['batch1_ms'][1]:.1f} | "
                f"{r['batch32_ms'][0]:.0f} / {r['batch32_ms'][1]:.0f} |"
            )
        if len(measured_rows) >= 2:
            sizes = [r["n"] for r in measured_rows]
            cells = []
            for key, pick, form in (
                ("build_s", None, "{:.0f}"),
                ("build_rss_gb", None, "{:.1f}"),
                ("index_gb", None, "{:.1f}"),
                ("open_s", None, "{:.0f}"),
                ("rss_gb", None, "{:.1f}"),
                ("batch1_ms", 0, "{:.0f}"),
                ("batch32_ms", 0, "{:.0f}"),
            ):
                values = [r[key] if pick is None else r[key][pick] for r in measured_rows]
                b, at = fit(sizes, values)
                cells.append(f"{form.format(at)} (n^{b:.2f})")
            print(f"| {names[kind]}, fitted | {WIKI18:,} | " + " | ".join(cells[:5]) + f" | {cells[5]} (p50) | {cells[6]} (p50) |")


if __name__ == "__main__":
    main()
