"""Generated tokens/s of the engines on the same questions: hf one at a time, hf lockstep, hf continuous batching,
openai over loopback, and the anchor: hf against CTranslate2 on plain greedy generation.

    python benchmarks/engines.py [--ckpt smollm2-135m] [--questions 16] [--max-new-tokens 64] [--anchor-tokens 128]
                                 [--anchor-runs 5] [--anchor-only]

Every protocol arm runs the identical protocol-v1 loop with BM25 over the bundled corpus. The openai
arm starts `cfbench serve-model` on a free loopback port (same checkpoint, its own process) and sends
each turn's prompts in one request, so it measures what HTTP and JSON add to in-process hf.
The anchor arms run in their own processes (so each reports its own peak RSS): the same first-turn
prompts, greedy float32, --anchor-tokens new tokens, hf's lockstep decoder (with torch's linear layers
and with `--linear onednn`) and its continuous-batching decoder (`stream`: all prompts start together,
so what it adds here is only the shared instruction prefix's K/V, computed once) against CTranslate2's
Generator (the `bench` extra) on the same weights
converted once into the cache. A single anchor run takes about 15 s and varies by about 10% from run to run,
so each engine runs --anchor-runs times, the engines taking turns, and its median run is reported.
Prints each arm's rate, the ratios side by side, and whether the arms' outputs agree.
"""

from __future__ import annotations

import argparse
import json
import resource
import socket
import statistics
import subprocess
import sys
import time

import httpx

from cfbench.harness.agent import run_batch, run_stream, shared_prefix
from cfbench.harness.backends.hf import HFBackend
from cfbench.harness.backends.openai import OpenAIBackend
from cfbench.harness.checkpoints import resolve
from cfbench.harness.paths import cache_dir
from cfbench.harness.protocol import Knobs, user_prompt
from cfbench.harness.retrievers.choose import retriever_for
from cfbench.harness.suite import load_suite

ANCHORS = ("ctranslate2", "hf", "hf onednn", "hf continuous")  # the reference first


def served(ckpt: str) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "cfbench.cli", "serve-model", "--ckpt", ckpt, "--port", str(port)], stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}/v1"
    while True:
        try:
            if httpx.get(url + "/models").status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)


def anchor_arm(engine: str, ckpt: str, questions: list, new_tokens: int) -> dict:
    """One anchor engine over the first-turn prompts, in this process: seconds, tokens, peak RSS and the output ids."""
    hf = HFBackend.load(resolve(ckpt), threads=2, linear="onednn" if engine == "hf onednn" else "torch")
    prompts = [hf.tokens.context(hf.tokens.chat_prompt(user_prompt(q.question)), Knobs().max_context_tokens) for q in questions]
    if engine == "hf continuous":
        texts = [hf.tokens.chat_prompt(user_prompt(q.question)) for q in questions]
        done: dict[int, list[int]] = {}
        start = time.perf_counter()
        hf.stream(
            enumerate(texts),
            lambda ended: done.update((i, hf.tokens.encode(c.text)) for i, c in ended) or [],
            len(texts),
            new_tokens,
            Knobs().max_context_tokens,
            (),
            prefix=shared_prefix(hf),
        )
        outputs = [done[i] for i in range(len(texts))]
    elif engine.startswith("hf"):
        start = time.perf_counter()
        outputs = [hf.tokens.encode(c.text) for c in hf.complete(prompts, new_tokens, ())]
    else:
        import ctranslate2  # the bench extra

        converted = cache_dir("ctranslate2") / hf.ckpt.weights_sha256
        if not (converted / "model.bin").is_file():
            ctranslate2.converters.TransformersConverter(str(hf.ckpt.location)).convert(str(converted), force=True)
        generator = ctranslate2.Generator(str(converted), device="cpu", intra_threads=2, inter_threads=1, compute_type="float32")
        tokens = [hf.tokens.tokenizer.convert_ids_to_tokens(ids) for ids in prompts]
        start = time.perf_counter()
        results = generator.generate_batch(
            tokens, max_length=new_tokens, sampling_topk=1, include_prompt_in_result=False, end_token=sorted(hf.eos_ids)
        )
        outputs = [hf.tokens.encode(hf.tokens.decode(r.sequences_ids[0])) for r in results]
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "tokens": sum(len(o) for o in outputs),
        "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
        "outputs": outputs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ckpt", default="smollm2-135m")
    parser.add_argument("--suite", default="mini")
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=64, help="v1 uses 500; lower keeps the one-at-a-time arm short")
    parser.add_argument("--anchor-tokens", type=int, default=128, help="new tokens per prompt in the hf vs CTranslate2 anchor")
    parser.add_argument("--anchor-runs", type=int, default=5, help="runs of each anchor engine; the median is reported")
    parser.add_argument("--anchor-only", action="store_true", help="skip the protocol-v1 loop arms")
    parser.add_argument("--anchor-arm", choices=ANCHORS, help=argparse.SUPPRESS)  # one anchor arm, run as a child
    args = parser.parse_args()

    suite = load_suite(args.suite)
    step = max(1, len(suite.questions) // args.questions)
    questions = list(suite.questions)[::step][: args.questions]  # spread over the benchmarks
    if args.anchor_arm:
        print(json.dumps(anchor_arm(args.anchor_arm, args.ckpt, questions, args.anchor_tokens)))
        return
    runs: dict[str, list[dict]] = {engine: [] for engine in ANCHORS}
    for _ in range(args.anchor_runs):
        for engine in ANCHORS:
            child = [sys.executable, __file__, "--ckpt", args.ckpt, "--suite", args.suite, "--questions", str(args.questions)]
            child += ["--anchor-tokens", str(args.anchor_tokens), "--anchor-arm", engine]
            runs[engine].append(json.loads(subprocess.run(child, check=True, capture_output=True, text=True).stdout.splitlines()[-1]))
    median = {engine: statistics.median_low(r["seconds"] for r in done) for engine, done in runs.items()}
    anchor = {engine: next(r for r in done if r["seconds"] == median[engine]) for engine, done in runs.items()}
    print(f"anchor: {len(questions)} first-turn prompts, {args.anchor_tokens} new tokens, greedy float32, 2 threads, model={args.ckpt}")
    print(f"median of {args.anchor_runs} runs per engine; seconds of every run:")
    for engine, done in runs.items():
        print(f"  {engine:<22}" + " ".join(f"{r['seconds']:.1f}" for r in done))
    print(f"{'engine':<24}{'seconds':>9}{'tokens':>8}{'tokens/s':>10}{'peak RSS GB':>13}")
    for name, r in anchor.items():
        print(f"{name:<24}{r['seconds']:>9.1f}{r['tokens']:>8}{r['tokens'] / r['seconds']:>10.1f}{r['rss_gb']:>13.2f}")
    ct2 = anchor["ctranslate2"]
    for name in ANCHORS[1:]:
        own = anchor[name]
        same = sum(a == b for a, b in zip(own["outputs"], ct2["outputs"]))
        ratio = (own["tokens"] / own["seconds"]) / (ct2["tokens"] / ct2["seconds"])
        print(f"{name} / ctranslate2 tokens/s: {ratio:.2f}x   same outputs: {same}/{len(questions)}")
    if args.anchor_only:
        return

    hf = HFBackend.load(resolve(args.ckpt))
    retriever = retriever_for("bm25")
    knobs = Knobs(max_new_tokens=args.max_new_tokens)
    proc, url = served(args.ckpt)
    try:
        remote = OpenAIBackend(url, args.ckpt, request_size=len(questions))
        arms = {
            "hf one at a time": lambda: [t for q in questions for t in run_batch([q], hf, retriever, knobs)],
            f"hf lockstep ({len(questions)})": lambda: run_batch(questions, hf, retriever, knobs),
            f"hf continuous ({len(questions)})": lambda: run_stream(questions, hf, retriever, knobs, len(questions)),
            f"openai lockstep ({len(questions)})": lambda: run_batch(questions, remote, retriever, knobs),
        }
        results = {}
        for name, run in arms.items():
            start = time.perf_counter()
            trajectories = run()
            seconds = time.perf_counter() - start
            tokens = sum(len(hf.tokens.encode(turn["generated"])) for t in trajectories for turn in t.turns)
            results[name] = (seconds, tokens, [t.turns for t in trajectories])
    finally:
        proc.terminate()

    print()
    print(f"protocol v1 loop: {len(questions)} questions, max_new_tokens={args.max_new_tokens}, model={args.ckpt}")
    print(f"{'arm':<24}{'seconds':>9}{'tokens':>8}{'tokens/s':>10}")
    for name, (seconds, tokens, _) in results.items():
        print(f"{name:<24}{seconds:>9.1f}{tokens:>8}{tokens / seconds:>10.1f}")
    (seq_s, _, seq), (lock_s, _, lock), (cont_s, _, cont), (http_s, _, http) = results.values()
    print(
        f"hf lockstep / one at a time: {seq_s / lock_s:.2f}x   hf continuous / lockstep: {lock_s / cont_s:.2f}x   "
        f"openai / hf lockstep time: {http_s / lock_s:.3f}x"
    )
    print(
        f"same trajectories: lockstep vs one at a time {sum(a == b for a, b in zip(lock, seq))}/{len(lock)}, "
        f"continuous vs lockstep {sum(a == b for a, b in zip(cont, lock))}/{len(lock)}, "
        f"openai vs hf lockstep {sum(a == b for a, b in zip(http, lock))}/{len(lock)}"
    )


if __name__ == "__main__":
    main()
