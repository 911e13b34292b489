"""Progress a log can read: long jobs run as real subprocesses with stdout and stderr pipes, as under CI or nohup.

A rich bar prints nothing there until the job ends; cfbench prints one plain line per batch (done/total, rate, ETA).
"""

import re
import subprocess
import sys

from tests.audit_runs import make_run

LINE = re.compile(
    r"^(?P<what>.+): (?P<done>\d+)/(?P<total>\d+) (?P<unit>\w+) \((?P<pct>\d+)%\)  (?P<rate>[\d.]+ (\w+/s|s/\w+))"
    r"  ETA (?P<eta>\d+:\d\d:\d\d)(?P<fields>.*)$"
)


def cfbench(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "cfbench.cli", *args], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    return done


def progress_lines(stderr: str) -> list[re.Match]:
    return [m for m in map(LINE.match, stderr.splitlines()) if m]


def test_eval_prints_a_line_per_batch_into_a_pipe(tmp_path, tiny_llama):
    done = cfbench(
        "eval",
        "--ckpt",
        str(tiny_llama),
        "--suite",
        "mini",
        "--out",
        str(tmp_path / "run"),
        "--batch-size",
        "35",
        "--max-new-tokens",
        "4",
        "--max-searches",
        "1",
        "--threads",
        "1",
    )
    lines = progress_lines(done.stderr)
    assert [(m["what"], int(m["done"]), int(m["total"]), m["unit"], m["pct"]) for m in lines] == [
        ("mini", 35, 70, "q", "50"),
        ("mini", 70, 70, "q", "100"),
    ], done.stderr
    assert lines[-1]["eta"] == "0:00:00" and re.fullmatch(r"  searches \d+", lines[0]["fields"])
    assert "━" not in done.stderr  # no bar drawn into the log


def test_audit_prints_a_line_per_judged_step_into_a_pipe(tmp_path):
    run = make_run(tmp_path / "run")
    steps = len(list((run / "audit").glob("step-*.jsonl")))
    done = cfbench("audit", str(run), "--judge", "reference")
    lines = progress_lines(done.stderr)
    assert [int(m["done"]) for m in lines] == list(range(1, steps + 1)) and {int(m["total"]) for m in lines} == {steps}, done.stderr
    assert {m["what"] for m in lines} == {f"{run}: judged"} and lines[-1]["eta"] == "0:00:00"
    assert [m["fields"] for m in lines][:1] == ["  last 1"]
