#!/usr/bin/env bash
# The 135M study's remaining work, in order, each piece resumed where it stopped and skipped when done
# (STUDY.md). Run from the repository root with the project's venv activated, in the background:
#   . .venv/bin/activate && nohup nice -n 10 leaderboards/fixed1325/study/run.sh >> runs/study.log 2>&1 &
# Arguments pick pieces (eval:T, train:T, pilot:T, probe:T, replay) and their order instead of the whole list, e.g. `run.sh train:crossfit eval:msv`
# (a sitting with about 2 hours left trains first: an evaluation can stop anywhere, a training cannot).
# First the fixed1325 evaluations of the finished trainings (unfinished ones live in
# leaderboards/fixed1325/pending/, a few MB of text, so a sitting can stop anywhere), then the
# trainings not yet finished. A training stopped midway must be committed with its latest checkpoint's
# state/ (tens of MB per role), so start one only with about 2 hours of the sitting left. Commit that one
# checkpoint only (about 127 MB for CrossFit's four roles): remove the sitting's earlier checkpoint-N/ folders
# first, and restore the committed checkpoint's state/ that the newer save deleted (`git checkout -- RUN/checkpoint-M`)
# rather than committing its removal: what one sitting submits is capped in size (binary files count whole, a
# removal too), and a sitting that committed several checkpoints was refused whole, its work lost.
# Evaluations keep the Base row's engine: --linear torch, 2 threads (batch 32, an engine setting).
# RECIPE=signal runs the same pieces for the recipe with signal (the cpu configs since issue 35) in study/signal/,
# its evaluations into pending/ as smollm2-135m-signal-T; unset, the first cpu recipe's runs in study/ (all trained).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=2
study=leaderboards/fixed1325/study${RECIPE:+/$RECIPE}
pending=leaderboards/fixed1325/pending
tag=smollm2-135m${RECIPE:+-$RECIPE}

finished() {  # a training run whose metrics reached its last scheduled step
  [ -f "$1/metrics.jsonl" ] && python3 - "$1" <<'EOF'
import json, sys
from pathlib import Path
run = Path(sys.argv[1])
steps = json.loads((run / "config.json").read_text())["steps"]
rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
sys.exit(0 if rows and rows[-1]["step"] == steps and (run / f"checkpoint-{steps}").is_dir() else 1)
EOF
}

last_checkpoint() {  # a run's checkpoint with the highest step
  ls -d "$1"/checkpoint-* | sort -t- -k2 -n | tail -1
}

evaluate() {  # fixed1325 of a finished training's last checkpoint, into pending/ until it is added to the leaderboard
  local t=$1
  local out=$pending/$tag-$t
  finished "$study/$t" || return 0
  [ -f "$out/results.json" ] && return 0
  local last
  last=$(last_checkpoint "$study/$t")
  grep -qs "\"model\": \"$last\"" leaderboards/fixed1325/runs/*/results.json && return 0  # already published
  cfbench eval --ckpt "$last" --suite fixed1325 --out "$out" --threads 2 --batch-size 32 --linear torch $([ -f "$out/run.json" ] && echo --resume)
}

train() {
  local t=$1 out=$study/$1
  finished "$out" && return 0
  cfbench train --treatment "$t" --scale cpu --out "$out" --threads 2 $([ -f "$out/config.json" ] && echo --resume)
}

pilot() {  # the first 20 steps of a treatment, a checkpoint after each (kept out of git), in study/pilots/T-cpu (STUDY.md)
  local t=$1 out=leaderboards/fixed1325/study/pilots/$1-cpu
  [ -f "$out/metrics.jsonl" ] && [ "$(tail -1 "$out/metrics.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])')" = 20 ] && return 0
  cfbench train --treatment "$t" --scale cpu --steps 20 --save-every 1 --out "$out" --threads 2 $([ -f "$out/config.json" ] && echo --resume)
}

probe() {  # the held-out training-set probe (study/pilots/train_probe.py) of a finished training's last checkpoint
  local t=$1 last
  finished "$study/$t" || return 0
  last=$(last_checkpoint "$study/$t")
  grep -qs "\"model\": \"$last\"" leaderboards/fixed1325/study/pilots/probe/runs/*/results.json && return 0  # probed already
  python3 leaderboards/fixed1325/study/pilots/train_probe.py eval "$tag-$t" "$last"
}

replay() {  # the fixed-bank replay of the Dr. Zero run: every question its solver steps admitted, judged by the sheet
  # (references copied from the run's audit sheet); a variant trained is kept, so a stop anywhere loses at most one
  cfbench replay "$study/dr-zero" --bank 47 --feedback coupled --feedback source-id --feedback same-source \
    --feedback full-data --feedback random-split --feedback half-budget --judge sheet:llm-annotators \
    --answers-from "$study/dr-zero" --out "$study/replay" --threads 2 ||
    echo "run.sh: replay stopped (above: judge prompts waiting in $study/replay/sheet.jsonl, or an error)"
}

if [ $# -eq 0 ]; then
  set -- eval:dr-zero eval:msv eval:search-r1 eval:crossfit eval:msv-crossfit \
    train:search-r1 eval:search-r1 train:dr-zero eval:dr-zero train:crossfit eval:crossfit train:msv eval:msv \
    train:msv-crossfit eval:msv-crossfit replay
fi
for piece in "$@"; do
  case $piece in
    eval:*) evaluate "${piece#eval:}" ;;
    train:*) train "${piece#train:}" ;;
    pilot:*) pilot "${piece#pilot:}" ;;
    probe:*) probe "${piece#probe:}" ;;
    replay) replay ;;
    *) echo "run.sh: '$piece' is none of eval:TREATMENT, train:TREATMENT, pilot:TREATMENT, probe:TREATMENT, replay" >&2; exit 2 ;;
  esac
done
