"""A person checks the audit judge: a static review page of sampled judged questions, and agreement with the judge.

`cfbench audit review RUN --sample N` picks N judged questions of an audited run (seeded, from
RUN/judged/JUDGE/step-N.jsonl) and writes one HTML file that opens from disk with no server and
fetches nothing: each question with its source, the passages the proposer retrieved, the question,
the adopted label, the solver's responses and the judge's verdicts. There are three verdict types:
    reference   the judge resolved a reference answer from the evidence (or found none)
    label       the adopted label is correct
    response    a response that does not share the label's verdict is correct
A person marks each verdict right or wrong and exports the marks as a JSON file (a download, and the
same text in a box to copy). `cfbench audit agreement FILE` reads it back: per verdict type, the share
of marked verdicts the person found right and Cohen's kappa between the judge's values and the
person's (the judge's value where marked right, its opposite where marked wrong).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from cfbench.harness import jsonl
from cfbench.harness.errors import CfbenchError
from cfbench.harness.runrecord import write_atomic

REVIEW_VERSION = 1
TYPES = ("reference", "label", "response")


def _verdicts(i: int, q: dict) -> list[dict]:
    ref = q["reference"]
    where = "the source" if ref.get("quote_from") in (None, 0) else f"retrieved passage P{ref['quote_from']}"
    out = [
        {
            "id": f"q{i}-reference",
            "type": "reference",
            "judge": ref["status"] == "resolved",
            "says": f"reference {ref['answer']!r}, quoting {where}: {ref['quote']!r}"
            if ref["status"] == "resolved"
            else f"unresolved: {ref['reason']}",
        }
    ]
    if q["label"] is not None and q["label"]["correct"] is not None:
        out.append(
            {
                "id": f"q{i}-label",
                "type": "label",
                "judge": q["label"]["correct"],
                "says": f"label {q['adopted_label']!r} is {'correct' if q['label']['correct'] else 'wrong'} (by {q['label']['by']})",
            }
        )
    for j, x in enumerate(q["responses"]):
        if x["correct"] is not None and x["by"] != "label":  # a response matching the label has the label's verdict, not its own
            out.append(
                {
                    "id": f"q{i}-r{j}",
                    "type": "response",
                    "judge": x["correct"],
                    "says": f"response {x['prediction']!r} is {'correct' if x['correct'] else 'wrong'} (by {x['by']})",
                }
            )
    return out


def sample(judged_dir: Path, n: int, seed: int) -> list[dict]:
    """N judged questions of the run (all when fewer), in run order, with their verdicts to review."""
    paths = sorted(judged_dir.glob("step-*.jsonl"), key=lambda p: int(p.stem.split("-")[1]))
    judged = [row for p in paths for _, row in jsonl.iter_rows(p, jsonl.read_bytes(p))]
    if not judged:
        raise CfbenchError(f"{judged_dir} holds no judged steps; run `cfbench audit RUN --judge SPEC` with the same judge first")
    chosen = sorted(random.Random(seed).sample(range(len(judged)), min(n, len(judged))))
    return [
        {
            "id": f"q{i}",
            "step": judged[k]["step"],
            "task_id": judged[k]["task_id"],
            "hops": judged[k]["hops"],
            "source": judged[k]["source"],
            "evidence": judged[k]["evidence"],
            "question": judged[k]["question"],
            "label": judged[k]["adopted_label"],
            "responses": [x["prediction"] for x in judged[k]["responses"]],
            "verdicts": _verdicts(i, judged[k]),
        }
        for i, k in enumerate(chosen)
    ]


def write_page(items: list[dict], meta: dict, out: Path) -> None:
    data = json.dumps({"review_version": REVIEW_VERSION, **meta, "items": items}, ensure_ascii=False).replace("</", "<\\/")
    write_atomic(out, _PAGE.replace("__DATA__", data).replace("__TITLE__", f"Judge review: {len(items)} questions"))


def agreement(path: Path) -> dict:
    """Per verdict type: marked verdicts, the share the person found right, Cohen's kappa, and unmarked ones."""
    try:
        marks = json.loads(path.read_text(encoding="utf-8"))
        rows = [(m["type"], bool(m["judge"]), m["human"]) for m in marks["marks"]]
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as err:
        raise CfbenchError(f"{path}: not a review export ({err!r}); export the marks from the review page's Export button") from None
    for _, _, human in rows:
        if human not in ("right", "wrong", None):
            raise CfbenchError(f"{path}: field human must be right, wrong or null, got {human!r}; export the marks again from the page")
    out = {"run": marks.get("run"), "judge": marks.get("judge"), "types": {}}
    for kind in TYPES:
        mine = [(judge, human) for t, judge, human in rows if t == kind]
        done = [(judge, judge if human == "right" else not judge) for judge, human in mine if human]
        right = sum(j == h for j, h in done)
        out["types"][kind] = {
            "marked": len(done),
            "unmarked": len(mine) - len(done),
            "agreement": right / len(done) if done else None,
            "kappa": cohen_kappa(done),
        }
    return out


def cohen_kappa(pairs: list[tuple[bool, bool]]) -> float | None:
    """Cohen's kappa of two raters' yes/no values: (p_o - p_e) / (1 - p_e), p_e from each rater's own rate of yes.

    Written here because scikit-learn (cohen_kappa_score) is not a dependency and this is four lines;
    None where it is undefined (no pairs, or both raters gave one and the same value throughout).
    """
    if not pairs:
        return None
    n = len(pairs)
    observed = sum(a == b for a, b in pairs) / n
    a_yes, b_yes = sum(a for a, _ in pairs) / n, sum(b for _, b in pairs) / n
    expected = a_yes * b_yes + (1 - a_yes) * (1 - b_yes)
    return None if expected == 1 else (observed - expected) / (1 - expected)


def table(report: dict) -> str:
    lines = [
        f"Judge-human agreement: judge {report['judge']}, run {report['run']}",
        "",
        "| verdict | marked | unmarked | agreement | Cohen's kappa |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind, r in report["types"].items():
        cells = ["-" if r[k] is None else f"{r[k]:.3f}" for k in ("agreement", "kappa")]
        lines.append(f"| {kind} | {r['marked']} | {r['unmarked']} | {cells[0]} | {cells[1]} |")
    return "\n".join(lines) + "\n"


_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; max-width: 70rem; margin: 1rem auto; padding: 0 1rem; }
section { border: 1px solid #ccc; border-radius: 6px; padding: .6rem 1rem; margin: 1rem 0; }
.doc { background: #f6f6f6; padding: .3rem .6rem; margin: .3rem 0; white-space: pre-wrap; }
.mark { font-weight: bold; margin-right: .4rem; }
.verdict { margin: .3rem 0; } .verdict label { margin-left: .8rem; }
textarea { width: 100%; height: 8rem; }
</style></head><body>
<h1>__TITLE__</h1>
<p>Mark each of the judge's verdicts right or wrong, then export the marks and give the file to
<code>cfbench audit agreement FILE</code>. Unmarked verdicts are left out of the agreement.</p>
<div id="items"></div>
<p><button id="export">Export marks</button> <span id="count"></span></p>
<textarea id="exported" readonly placeholder="the exported JSON also appears here"></textarea>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const data = JSON.parse(document.getElementById("data").textContent);
const root = document.getElementById("items");
function el(tag, text, cls) {
  const e = document.createElement(tag); if (text !== undefined) e.textContent = text; if (cls) e.className = cls; return e;
}
function doc(mark, contents) {
  const d = el("div", undefined, "doc"); d.append(el("span", "[" + mark + "]", "mark"), contents); return d;
}
for (const q of data.items) {
  const s = el("section"); s.id = q.id;
  s.append(el("h2", q.id + ": step " + q.step + ", " + q.task_id + ", " + q.hops + "-hop"));
  s.append(el("h3", "Evidence"), doc("S", q.source));
  q.evidence.forEach((e, k) => s.append(doc("P" + (k + 1), e.contents)));
  s.append(el("h3", "Question"), el("p", q.question), el("h3", "Adopted label"), el("p", q.label));
  const ol = el("ol"); q.responses.forEach(r => ol.append(el("li", r === "" ? "(empty)" : r)));
  s.append(el("h3", "Solver responses"), ol, el("h3", "Judge verdicts"));
  for (const v of q.verdicts) {
    const row = el("div", undefined, "verdict"); row.dataset.id = v.id;
    row.append(el("span", v.type + ": " + v.says));
    for (const choice of ["right", "wrong"]) {
      const label = el("label"); const input = el("input"); input.type = "radio"; input.name = v.id; input.value = choice;
      input.addEventListener("change", count); label.append(input, " " + choice); row.append(label);
    }
    s.append(row);
  }
  root.append(s);
}
function marks() {
  return data.items.flatMap(q => q.verdicts.map(v => {
    const picked = document.querySelector('input[name="' + v.id + '"]:checked');
    return {id: v.id, type: v.type, judge: v.judge, says: v.says, human: picked ? picked.value : null};
  }));
}
function count() {
  const all = marks(); document.getElementById("count").textContent = all.filter(m => m.human).length + " of " + all.length + " marked";
}
document.getElementById("export").addEventListener("click", () => {
  const text = JSON.stringify({review_version: data.review_version, run: data.run, judge: data.judge, sample: data.sample,
                               marks: marks()}, null, 1);
  document.getElementById("exported").value = text;
  const a = el("a"); a.href = URL.createObjectURL(new Blob([text], {type: "application/json"}));
  a.download = "review-marks.json"; document.body.append(a); a.click(); a.remove();
});
count();
</script></body></html>
"""
