"""questions/<run id>.html: one stored run question by question, a static page that opens from disk.

For every question, grouped by benchmark (each benchmark a section whose id is its name, which the
leaderboard's cells link to): the question, its gold answers, the run's prediction and Cover-EM, and
the searches in order with the ids of the documents each returned; the text the model generated
each turn is folded in a <details>. Observations are left out (they are in the stored entry) to
keep the file small. Questions and model output are untrusted text: everything is escaped.
"""

from __future__ import annotations

from html import escape

from cfbench.leaderboard.store import Run

QUESTIONS = "questions"  # the pages' folder in the suite folder

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 60em; padding: 0 1em; color: #222; }
nav ul { padding: 0; } nav li { display: inline-block; margin-right: 1.2em; }
article { border-top: 1px solid #ddd; padding: .5em 0; overflow-wrap: anywhere; }
article h3 { font-size: 1em; margin: 0 0 .3em; display: flex; gap: 1em; }
.covered { color: #176b1a; } .missed { color: #a11; }
dl { display: grid; grid-template-columns: 7em 1fr; gap: .1em .8em; margin: 0; }
dt { color: #666; } dd { margin: 0; }
.gold span + span::before { content: " · "; color: #999; }
.none { color: #999; font-style: italic; }
ol.searches { margin: 0; padding-left: 1.4em; } ol.searches small { color: #666; }
details pre { white-space: pre-wrap; background: #f6f6f6; padding: .4em; margin: .2em 0 .6em; }
"""


def question_page(run: Run) -> str:
    """The page for one run that kept its trajectories, in the suite's question order."""
    by_benchmark: dict[str, list[dict]] = {}
    for row in run.trajectories:
        by_benchmark.setdefault(row["benchmark"], []).append(row)
    name, suite = run.labels["name"], run.results["suite"]["name"]
    nav = [
        f"<li><a href='#{escape(bench)}'>{escape(bench)}</a> <small>{_covered(rows)} of {len(rows)} covered</small></li>"
        for bench, rows in by_benchmark.items()
    ]
    parts = [
        f"<h1>{escape(name)}: question by question</h1>",
        f"<p>Suite {escape(suite)}, run {escape(run.id)}, model {escape(str(run.results['model'].get('model')))}. "
        "Cover-EM per question; the searches with the ids of the documents each returned; the generated text on demand. "
        "<a href='../index.html'>Back to the leaderboard</a>.</p>",
        "<nav><ul>" + "".join(nav) + "</ul></nav>",
    ]
    for bench, rows in by_benchmark.items():
        parts.append(f"<section id='{escape(bench)}'>\n<h2>{escape(bench)}</h2>")
        parts += [_question(row) for row in rows]
        parts.append("</section>")
    return (
        "<!DOCTYPE html>\n<html lang=en>\n<head>\n<meta charset=utf-8>\n"
        f"<title>{escape(name)}: questions ({escape(suite)})</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        + "\n".join(parts)
        + "\n</body>\n</html>\n"
    )


def question_file(run_id: str) -> str:
    """Where a run's page is, relative to the suite folder (and so to index.html)."""
    return f"{QUESTIONS}/{run_id}.html"


def _covered(rows: list[dict]) -> int:
    return sum(row["scores"]["cover_em"] == 1 for row in rows)


def _question(row: dict) -> str:
    cover = row["scores"]["cover_em"]
    prediction = row["prediction"]
    searches = [t for t in row["turns"] if t["action"] == "search"]
    out = [
        f"<article id='q-{escape(row['id'])}' data-id='{escape(row['id'])}'>",
        f"<h3><span>{escape(row['id'])}</span><span class='{'covered' if cover == 1 else 'missed'}'>Cover-EM {cover:g}</span></h3>",
        "<dl>",
        f"<dt>question</dt><dd class=question>{escape(row['question'])}</dd>",
        "<dt>gold</dt><dd class=gold>" + "".join(f"<span>{escape(a)}</span>" for a in row["golden_answers"]) + "</dd>",
        "<dt>prediction</dt><dd class=prediction>"
        + (escape(prediction) if prediction is not None else "<span class=none>no answer</span>")
        + "</dd>",
        f"<dt>searches</dt><dd>{_searches(searches)}</dd>",
        "</dl>",
    ]
    if row["turns"]:
        out += [
            f"<details><summary>generated text ({len(row['turns'])} turns)</summary>",
            *(f"<div>{i}. {escape(t['action'])}</div><pre>{escape(t['generated'])}</pre>" for i, t in enumerate(row["turns"], start=1)),
            "</details>",
        ]
    out.append("</article>")
    return "\n".join(out)


def _searches(turns: list[dict]) -> str:
    if not turns:
        return "<span class=none>none</span>"
    items = [
        f"<li><span class=query>{escape(t['query'])}</span> <small>docs {escape(', '.join(map(str, t['doc_ids'])) or 'none')}</small></li>"
        for t in turns
    ]
    return "<ol class=searches>" + "".join(items) + "</ol>"
