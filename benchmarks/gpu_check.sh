#!/usr/bin/env bash
# GPU check of the engines: the mini suite through vLLM and through hf on one GPU, with no hub access.
#
#   WHEELS=/path/to/wheelhouse bash benchmarks/gpu_check.sh
#
# WHEELS holds every wheel the [vllm] extra needs for the machine's Python (no index is used):
# on a machine with internet, `pip download -d wheelhouse -e ".[vllm]"` for that Python version
# and platform, then copy the folder over. The script
#   1. installs cfbench with the vllm extra from WHEELS into a fresh venv under $WORK;
#   2. builds a small random-initialised Llama and a BPE tokenizer trained on the bundled corpus
#      (nothing is downloaded), saved as an HF checkpoint;
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

python - "$WORK/model" <<'EOF'
import json, sys
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from cfbench.harness.corpus import load_corpus

out = sys.argv[1]
texts = load_corpus().contents[:5000]
bpe = Tokenizer(models.BPE(unk_token=None))
bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
bpe.decoder = decoders.ByteLevel()
specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
bpe.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=8192, special_tokens=specials,
                                                   initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>")
tok.chat_template = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                     "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
tok.save_pretrained(out)
torch.manual_seed(0)
config = LlamaConfig(vocab_size=len(tok), hidden_size=512, intermediate_size=1536, num_hidden_layers=6,
                     num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=8192,
                     initializer_range=0.2, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                     bos_token_id=tok.pad_token_id, tie_word_embeddings=True)
LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
print(f"random model: {sum(p.numel() for p in LlamaForCausalLM(config).parameters()) / 1e6:.1f} M parameters, vocab {len(tok)}")
EOF

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
