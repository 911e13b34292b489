#!/usr/bin/env bash
# Device check of the verl path: 2 Search-R1 steps through verl (FSDP2 actor and reference, vLLM rollouts,
# weight sync) on one GPU, at a small random model, printing step time, tokens/s and peak GPU memory.
#
#   WHEELS=/path/to/wheelhouse bash benchmarks/verl_gpu_check.sh
#
# WHEELS holds every wheel verl 0.9.1 with vLLM needs for the machine's Python (no index is used; the
# device reaches nothing outside): `pip download -d wheelhouse torch verl==0.9.1 vllm cachetools fastapi
# uvicorn` plus cfbench's dependencies (docs/training-at-scale.md, "Environment") on a machine with internet.
# The script
#   1. makes the verl venv under $WORK from WHEELS (cfbench with --no-deps: verl pins transformers < 5.11);
#   2. builds a small random Llama and a BPE tokenizer from the bundled corpus (benchmarks/gpu_check.py
#      --build-model; nothing is downloaded);
#   3. runs benchmarks/verl_gpu_check.py: search-r1's paper config at that model, 2 steps of 16 prompts x 5
#      samples on 1 GPU, through `cfbench train --engine verl`'s launch, and prints what verl measured.
# Budget: under 8 minutes on one H100 (most of it Ray and vLLM start-up). Not yet run: no device was lent.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${WHEELS:?set WHEELS to a folder of wheels for verl, vLLM and the dependencies of cfbench}"
WORK=${WORK:-/tmp/cfbench-verl-gpu-check}
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
python3 -m venv "$WORK/venv"
PIP=("$WORK/venv/bin/pip" install -q --no-index --find-links "$WHEELS")
"${PIP[@]}" setuptools torch verl==0.9.1 vllm cachetools fastapi uvicorn
"${PIP[@]}" bm25s PyStemmer gguf faiss-cpu click rich httpx filelock "openai>=1.66,<4" matplotlib "trl>=1.16,<2" "peft>=0.21,<1"
"$WORK/venv/bin/pip" install -q --no-deps --no-build-isolation -e .
"$WORK/venv/bin/python" benchmarks/gpu_check.py --build-model "$WORK/model"
rm -rf "$WORK/run"  # the launch refuses a run directory that holds files
timeout 450 "$WORK/venv/bin/python" benchmarks/verl_gpu_check.py --model "$WORK/model" --out "$WORK/run" 2>&1 | tee "$OUT/verl_gpu_check.log"
