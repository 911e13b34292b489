#!/usr/bin/env bash
# GPU check of the engines: the mini suite through vLLM and through hf on one GPU, with no hub access.
# (benchmarks/gpu_check.py checks hf rollouts + training steps on a GPU without the vLLM wheel.)
#
#   WHEELS=/path/to/wheelhouse bash benchmarks/gpu_check.sh
#
# WHEELS holds every wheel the [vllm] extra needs for the machine's Python (no index is used):
# on a machine with internet, `pip download -d wheelhouse -e ".[vllm]"` for that Python version
# and platform, then copy the folder over. The script
#   1. installs cfbench with the vllm extra from WHEELS into a fresh venv under $WORK;
#   2. builds a small random-initialised Llama and a BPE tokenizer trained on the bundled corpus
#      (nothing is downloaded), saved as an HF checkpoint (benchmarks/gpu_check.py --build-model);
#   3. runs `cfbench eval --suite mini` with --backend vllm and --backend hf (bf16, cuda);
#   4. prints generated tokens/s per engine and how many predictions and trajectories agree.
# It takes a few minutes on one H100/H200 (budget: under 8). A random model writes no tags, so
# every question uses all 5 generation calls at 500 tokens: the heaviest decode the protocol allows.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${WHEELS:?set WHEELS to a folder of wheels for the [vllm] extra}"
WORK=${WORK:-/tmp/cfbench-gpu-check}
rm -rf "$WORK" && mkdir -p "$WORK"
export CFBENCH_CACHE="$WORK/cache" HF_HUB_OFFLINE=1 VLLM_BATCH_INVARIANT=1

python3 -m venv "$WORK/venv"
. "$WORK/venv/bin/activate"
pip install -q --no-index --find-links "$WHEELS" -e ".[vllm]"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader

python benchmarks/gpu_check.py --build-model "$WORK/model"  # random Llama (hidden 256, 4 layers) + BPE tokenizer

for engine in vllm hf; do
  extra=(); [ "$engine" = hf ] && extra=(--device cuda --batch-size 70)
  [ "$engine" = vllm ] && extra=(--batch-size 70 --gpu-memory-utilization 0.5)
  cfbench eval --backend "$engine" --ckpt "$WORK/model" --suite mini --dtype bfloat16 --out "$WORK/runs/$engine" "${extra[@]}" >/dev/null
done

python - "$WORK/model" "$WORK/runs" <<'EOF'
import json, sys
from pathlib import Path
from transformers import AutoTokenizer

tok = AutoTokenizer.from_pretrained(sys.argv[1])
runs = {e: Path(sys.argv[2]) / e for e in ("vllm", "hf")}
rows = {e: [json.loads(l) for l in (d / "trajectories.jsonl").read_text().splitlines()] for e, d in runs.items()}
for engine, d in runs.items():
    seconds = json.loads((d / "results.json").read_text())["wall_time_s"]
    tokens = sum(len(tok(t["generated"], add_special_tokens=False)["input_ids"]) for r in rows[engine] for t in r["turns"])
    print(f"{engine:<5} {tokens:>8} generated tokens in {seconds:>7.1f} s = {tokens / seconds:>9.0f} tokens/s")
pairs = list(zip(rows["vllm"], rows["hf"]))
print(f"agreement vllm vs hf: predictions {sum(a['prediction'] == b['prediction'] for a, b in pairs)}/{len(pairs)}, "
      f"first turns {sum(a['turns'][0]['generated'] == b['turns'][0]['generated'] for a, b in pairs)}/{len(pairs)}, "
      f"whole trajectories {sum(a['turns'] == b['turns'] for a, b in pairs)}/{len(pairs)}")
EOF
