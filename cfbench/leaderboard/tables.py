"""The leaderboard as text: README.md (Markdown), results.csv and a LaTeX table, all from the built dict."""

from __future__ import annotations

import csv
import html
import io

from cfbench.harness.metrics import GROUPS, METRICS

GROUP_LABELS = {"avg7": "7-avg", "multi_hop": "multi-hop", "single_hop": "single-hop"}
BENCHMARK_LABELS = {
    "nq": "NQ",
    "triviaqa": "TriviaQA",
    "popqa": "PopQA",
    "hotpotqa": "HotpotQA",
    "2wikimultihopqa": "2WikiMultihopQA",
    "musique": "MuSiQue",
    "bamboogle": "Bamboogle",
}
METRIC_LABELS = {"cover_em": "Cover-EM", "em": "EM", "sub_em": "SubEM", "f1": "F1"}
MEMBER_COLUMNS = ("name", "treatment", "size", "config")
HEADINGS = ("#", "run", "treatment", "model size", "training config")


def pct(x: float) -> str:
    return f"{100 * x:.1f}"


def signed(x: float) -> str:
    return f"{100 * x:+.1f}"


def column_label(name: str) -> str:
    return GROUP_LABELS.get(name, name)


def title(i: int) -> str:
    return "Ranked runs" if i == 0 else f"Set apart ({i}): not comparable with the ranked runs"


def views(table: dict) -> list[tuple[str, str, list[str]]]:
    """The two tables each comparable group is shown as (kind, heading, columns): per benchmark, then the averages."""
    return [view for view in (("benchmarks", "Per benchmark", table["benchmarks"]), ("averages", "Averages", table["groups"])) if view[2]]


def run_name(row: dict) -> str:
    """A row's label: its run's name, or every run's name when several gave the same predictions."""
    return (
        row["label"]
        + (": identical predictions" if row["identical_predictions"] else "")
        + (" (reference)" if row.get("reference") else "")
    )


def shared(row: dict, field: str) -> str:
    """A label the row's runs share, or each run's, joined, where they differ."""
    return " / ".join(dict.fromkeys(m[field] for m in row["members"]))


def reference_row(table: dict) -> dict | None:
    return next((row for row in table["runs"] if row["reference"]), None)


def comparable_on(table: dict) -> str:
    k = table["comparable_on"]
    knobs = ", ".join(f"{n} {v}" for n, v in sorted(k["protocol"].get("knobs", {}).items()))
    retriever = k["retriever"]
    return (
        f"suite {k['suite']['name']} (sha256 {str(k['suite']['sha256'])[:12]}), protocol {k['protocol'].get('version')} "
        f"({knobs}), {k['metric_version']}, retriever {retriever.get('kind')} (index sha256 {str(retriever.get('index_sha256'))[:12]})"
    )


def group_definition(name: str, board: dict) -> str:
    members = ", ".join(BENCHMARK_LABELS.get(b, b) for b in board["groups"][name])
    return f"{column_label(name)}: the mean of the benchmark means of {members}"


def legend(board: dict) -> list[str]:
    """How to read every table, one sentence each: shown above the tables in README.md, index.html and results.tex."""
    b = board["bootstrap"]
    tables = board["tables"]
    ref = next((row for table in tables if (row := reference_row(table))), None)
    ranked_by = column_label(tables[0]["ranked_by"]) if tables else "none"
    return [
        f"Values: {METRIC_LABELS[board['metric']]} in percent of questions, with its {100 * b['level']:.0f}% "
        f"bootstrap interval in brackets ({b['resamples']} resamples of the questions, stratified by benchmark, seed {b['seed']}, "
        "percentile interval); results.json and results.csv hold the same values as fractions (0-1).",
        *(group_definition(name, board) + "." for name in board["groups"]),
        f"#: 1 + the number of runs significantly better on the ranked column ({ranked_by}): "
        f"paired bootstrap test on the same questions, two-sided, Holm-corrected over all pairs of rows at "
        f"family-wise error {b['alpha']}; runs no run beats share rank 1.",
        'Runs whose predictions are byte-identical on every question share one row that names them all ("A = B: identical '
        'predictions"); they are one result and are tested once.',
        (
            f"Reference: {_reference_name(ref, board['reference'])}; Δ and p are each row minus the reference on the same questions "
            f"(paired bootstrap, centred, p = (1 + #{{|d* - d| >= |d|}}) / (resamples + 1), uncorrected)."
            if ref
            else "Reference: none set (cfbench leaderboard build --reference RUN names one); no Δ columns."
        ),
        "Bold: a value significantly above every other row's in its column (paired tests, Holm-corrected over that "
        "column's comparisons); no bold where no row is.",
        "Model size: the model's parameter count; training config: the `cfbench train --scale` configuration a trained run "
        "used (cfbench/training/configs/*.<config>.json), 'untrained' for a model scored as shipped.",
        "Every score is recomputed from the stored predictions; runs stored with scores only (no predictions) are listed "
        "apart, neither ranked nor tested.",
    ]


def markdown(board: dict) -> str:
    out = [
        f"# Leaderboard: {board['suite']}",
        "",
        "Generated by `cfbench leaderboard build` from the runs in `runs/`; do not edit. "
        "Also here: `results.json`, `results.csv`, `results.tex` and `index.html` (open it from disk).",
        "",
        "## How to read it",
        "",
        *(f"- {line}" for line in legend(board)),
        "",
    ]
    if not board["tables"] and not board["scores_only"]:
        out += ["No runs have been added yet: `cfbench leaderboard add RUN_DIR`, then `cfbench leaderboard build`.", ""]
    for i, table in enumerate(board["tables"]):
        out += [f"## {title(i)}", "", f"Comparable on: {comparable_on(table)}.", ""]
        if table["set_apart_because"]:
            out += ["Set apart because (this group vs the ranked runs): " + "; ".join(table["set_apart_because"]) + ".", ""]
        for _, heading, cols in views(table):
            extra = _vs_reference_columns(table, cols)
            out += [
                f"### {heading}",
                "",
                _md_row([*HEADINGS, *map(column_label, cols), *extra]),
                _md_row(["---"] * (len(HEADINGS) + len(cols) + len(extra))),
            ]
            for row in table["runs"]:
                cells = [_md_cell(row["scores"][col][board["metric"]], table["bold"].get(col) == row["id"]) for col in cols]
                out.append(_md_row([*map(_md_text, _labels(row)), *cells, *_vs_reference_cells(table, row, extra)]))
            out.append("")
        if table["pairwise"]:
            out += [
                f"### Pairwise tests on the {column_label(table['ranked_by'])}",
                "",
                _md_row(["A", "B", "A - B [95% interval]", "p", "p (Holm)", f"significant at {_alpha(board)}"]),
                _md_row(["---"] * 6),
            ]
            out += [_md_row(_pair_cells(board, table, pair)) for pair in table["pairwise"]]
            out.append("")
    if board["scores_only"]:
        out += [
            "## Scores only: not ranked, not tested",
            "",
            "Stored before predictions were kept, so their scores cannot be recomputed; checked only for consistency.",
            "",
        ]
        cols = _only_columns(board)
        for kind, heading, names in (
            ("benchmarks", "Per benchmark", [c for c in cols if c not in GROUPS]),
            ("averages", "Averages", [c for c in cols if c in GROUPS]),
        ):
            if not names:
                continue
            extra = ["differs from the ranked runs in"] if kind == "averages" else []
            out += [f"### {heading}", "", _md_row([*HEADINGS[1:], *map(column_label, names), *extra])]
            out.append(_md_row(["---"] * (len(HEADINGS) - 1 + len(names) + len(extra))))
            for row in board["scores_only"]:
                cells = [_md_cell(row["scores"][c][board["metric"]], False) if c in row["scores"] else "" for c in names]
                note = [_md_text("; ".join(row["differs_from_ranked"]) or "nothing")] if extra else []
                out.append(_md_row([*map(_md_text, _labels(row)[1:]), *cells, *note]))
            out.append("")
    rep = board["reported"]
    if rep:
        out += [
            "## Reported, not reproduced",
            "",
            f"From {rep['source']}; not ranked with the runs above.",
            "",
            _md_row(["treatment", *rep["scales"]]),
            _md_row(["---"] * (1 + len(rep["scales"]))),
        ]
        out += [_md_row([row["treatment"], *(pct(row["avg7"][s]) for s in rep["scales"])]) for row in rep["rows"]]
        out.append("")
    return "\n".join(out)


def csv_table(board: dict) -> str:
    """One line per run (several per row where runs gave identical predictions): scores as fractions with intervals,
    the row's rank and its paired result against the reference."""
    names = list(dict.fromkeys(n for t in board["tables"] for n in t["benchmarks"] + t["groups"]))
    header = ["table", "set_apart_because", "rank", "row", "identical_predictions_with", "reference", *MEMBER_COLUMNS]
    header += ["id", "model", "weights_sha256", "units", "groups"]
    header += [f"{n}.{m}{part}" for n in names for m in METRICS for part in ("", ".lo", ".hi")] + [f"{n}.n" for n in names]
    header += [f"{n}.{board['metric']}.vs_reference.{k}" for n in names for k in ("delta", "lo", "hi", "p")]
    groups = "; ".join(f"{n} = {' + '.join(members)}" for n, members in board["groups"].items())
    units = f"{board['units']} of questions (0-1)"
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for i, table in enumerate(board["tables"]):
        for row in table["runs"]:
            s, vs = row["scores"], row["vs_reference"] or {}
            for member in row["members"]:
                line = [i, "; ".join(table["set_apart_because"]), row["rank"], row["label"]]
                line += [" ".join(m["id"] for m in row["members"] if m is not member), int(member["id"] == board["reference"])]
                line += [member[c] for c in MEMBER_COLUMNS] + [member["id"], member["model"], member["weights_sha256"], units, groups]
                line += [s[n][m][k] if n in s else "" for n in names for m in METRICS for k in ("value", "lo", "hi")]
                line += [s[n]["n"] if n in s else "" for n in names]
                line += [vs[n][k] if n in vs else "" for n in names for k in ("delta", "lo", "hi", "p")]
                writer.writerow(line)
    return buf.getvalue()


def latex_table(board: dict) -> str:
    """booktabs tabulars of Cover-EM (significantly best in bold), one per comparable group, then the reported rows."""
    out = [
        f"% Generated by cfbench leaderboard build ({board['suite']}); do not edit. Needs \\usepackage{{booktabs}}.",
        *(f"% {line}" for line in legend(board)),
    ]
    for i, table in enumerate(board["tables"]):
        cols = table["benchmarks"] + table["groups"]
        out += ["", f"% {title(i)}: comparable on {comparable_on(table)}"]
        if table["set_apart_because"]:
            out.append("% set apart because: " + "; ".join(table["set_apart_because"]))
        extra = _vs_reference_columns(table, cols)
        out += [
            r"\begin{tabular}{rllll" + "r" * (len(cols) + len(extra)) + "}",
            r"\toprule",
            " & ".join([*(_tex(h.capitalize()) for h in HEADINGS), *(_tex(column_label(c)) for c in cols), *map(_tex, extra)]) + r" \\",
            r"\midrule",
        ]
        for row in table["runs"]:
            cells = []
            for col in cols:
                v = row["scores"][col][board["metric"]]
                text = f"{pct(v['value'])}\\,{{\\scriptsize[{pct(v['lo'])}, {pct(v['hi'])}]}}"
                cells.append(f"\\textbf{{{text}}}" if table["bold"].get(col) == row["id"] else text)
            out.append(" & ".join([*map(_tex, _labels(row)), *cells, *map(_tex, _vs_reference_cells(table, row, extra))]) + r" \\")
        out += [r"\bottomrule", r"\end{tabular}"]
    rep = board["reported"]
    if rep:
        out += [
            "",
            f"% {rep['note']}: {rep['source']}",
            r"\begin{tabular}{l" + "r" * len(rep["scales"]) + "}",
            r"\toprule",
            " & ".join([f"Treatment ({rep['note']})", *map(_tex, rep["scales"])]) + r" \\",
            r"\midrule",
        ]
        out += [" & ".join([_tex(row["treatment"]), *(pct(row["avg7"][s]) for s in rep["scales"])]) + r" \\" for row in rep["rows"]]
        out += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(out) + "\n"


def vs_reference_name(table: dict) -> str | None:
    """The column the paired comparison against the reference is shown for, when the table has a reference."""
    return table["ranked_by"] if table["reference"] is not None else None


def _reference_name(row: dict, run_id: str) -> str:
    """The reference run by name and id, and the runs that share its row, if any."""
    me = next(m for m in row["members"] if m["id"] == run_id)
    others = [m["name"] for m in row["members"] if m is not me]
    return f"{me['name']} ({run_id})" + (f", whose predictions {' and '.join(others)} share (one row)" if others else "")


def _labels(row: dict) -> list[str]:
    return [str(row["rank"]) if "rank" in row else "", run_name(row), shared(row, "treatment"), shared(row, "size"), shared(row, "config")]


def _only_columns(board: dict) -> list[str]:
    return list(dict.fromkeys(n for row in board["scores_only"] for n in row["scores"]))


def _alpha(board: dict) -> str:
    return str(board["bootstrap"]["alpha"])


def _pair_cells(board: dict, table: dict, pair: dict) -> list[str]:
    label = {row["id"]: row["label"] for row in table["runs"]}
    return [
        _md_text(label[pair["a"]]),
        _md_text(label[pair["b"]]),
        f"{signed(pair['delta'])} [{signed(pair['lo'])}, {signed(pair['hi'])}]",
        f"{pair['p']:.3f}",
        f"{pair['p_holm']:.3f}",
        "yes" if pair["p_holm"] < board["bootstrap"]["alpha"] else "no",
    ]


def _vs_reference_columns(table: dict, cols: list[str]) -> list[str]:
    name = vs_reference_name(table)
    return [f"Δ {column_label(name)} vs reference", "p"] if name in cols else []


def _vs_reference_cells(table: dict, row: dict, extra: list[str]) -> list[str]:
    if not extra:
        return []
    if row["vs_reference"] is None:
        return ["(reference)", ""]
    d = row["vs_reference"][table["ranked_by"]]
    return [f"{signed(d['delta'])} [{signed(d['lo'])}, {signed(d['hi'])}]", f"{d['p']:.3f}"]


def _md_cell(v: dict, bold: bool) -> str:
    text = f"{pct(v['value'])} [{pct(v['lo'])}, {pct(v['hi'])}]"
    return f"**{text}**" if bold else text


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _md_text(text: str) -> str:
    """A label as one table cell whose HTML (a run named `<script>`) shows as text wherever the Markdown is rendered."""
    return html.escape(text, quote=False).replace("|", "\\|").replace("\n", " ")


_TEX = str.maketrans(
    {
        "\\": r"\textbackslash{}",
        "&": r"\&",
        "%": r"\%",
        "$": r"\$",
        "#": r"\#",
        "_": r"\_",
        "{": r"\{",
        "}": r"\}",
        "~": r"\textasciitilde{}",
        "^": r"\textasciicircum{}",
        "Δ": r"$\Delta$",
    }
)


def _tex(text: str) -> str:
    return text.translate(_TEX)
