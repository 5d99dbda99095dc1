#!/usr/bin/env python3
"""What bf16 costs on the CPU backend: forward + backward time of the same model, batch and
data in fp32 and in bf16 (bf16 working weights and gradients, fp32 master weights), measured by
the trainer itself (metrics.jsonl forward_ms / backward_ms) in alternating runs.

  python3 benchmarks/bf16_overhead.py [--model gpt2-124m] [--markdown docs/benchmarks.md]

Each (B, T) runs fp32 and bf16 back to back, the order flipping every round; a time is the
median over rounds of the median over steps (the first step left out), and the ratio is the
median over rounds of each round's bf16 / fp32 (its two runs seconds apart, so a slow minute of
a shared machine moves both sides alike).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_md import SHARED_DATA, load_average, prepare_shards, publish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ds_config(path, batch, bf16):
    cfg = {"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
           "gradient_clipping": 1.0, "zero_optimization": {"stage": 0},
           "bf16": {"enabled": bf16}, "steps_per_print": 1000}
    with open(path, "w") as f:
        json.dump(cfg, f)


def run(a, data, tmp, batch, seq, bf16):
    cfg = os.path.join(tmp, f"ds_{batch}_{int(bf16)}.json")
    ds_config(cfg, batch, bf16)
    run_dir = os.path.join(tmp, f"run_{batch}_{seq}_{int(bf16)}")
    subprocess.run([a.binary, "train", "--deepspeed", cfg, "--train_data", data, "--model", a.model,
                    "--seq_len", str(seq), "--steps", str(a.steps), "--val_every", "0",
                    "--sample_tokens", "0", "--threads", str(a.threads), "--run_dir", run_dir],
                   check=True, capture_output=True)
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    rows = [r for r in rows if "forward_ms" in r][1:]
    return statistics.median(r["forward_ms"] + r["backward_ms"] for r in rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt2-124m")
    ap.add_argument("--shapes", default="1x64,1x256,4x64,4x256", help="BxT list")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "zerotrain"))
    ap.add_argument("--shared-data", default=SHARED_DATA)
    ap.add_argument("--markdown", default=None)
    a = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in a.shapes.split(",")]
    t0, loads = time.time(), []
    with tempfile.TemporaryDirectory(prefix="zt_bf16_") as tmp:
        data = prepare_shards(a.binary, a.shared_data, os.path.join(tmp, "data"))
        res = {s: {False: [], True: []} for s in shapes}
        for r in range(a.rounds):
            for (b, t) in shapes:
                for bf16 in ((False, True) if r % 2 == 0 else (True, False)):
                    loads.append(load_average())
                    res[(b, t)][bf16].append(run(a, data, tmp, b, t, bf16))
                    print(f"round {r + 1} B={b} T={t} {'bf16' if bf16 else 'fp32'}: "
                          f"{res[(b, t)][bf16][-1]:.0f} ms", file=sys.stderr)
    lines = [
        f"## bf16 on the CPU backend: forward + backward against fp32 ({a.model})",
        "",
        "Same model, data, batch and threads; `bf16.enabled` stores working weights and "
        "gradients in bf16 (fp32 master weights and Adam moments), kernels compute in fp32. "
        f"Times: median over {a.rounds} alternating rounds of the median over steps 2..{a.steps}; "
        "ratio: median of the rounds' ratios.",
        "",
        "| B × T | fp32 fwd+bwd ms | bf16 fwd+bwd ms | bf16 / fp32 | each round |",
        "|---|---:|---:|---:|---|",
    ]
    for (b, t) in shapes:
        f32, b16 = statistics.median(res[(b, t)][False]), statistics.median(res[(b, t)][True])
        ratios = [y / x for x, y in zip(res[(b, t)][False], res[(b, t)][True])]
        each = ", ".join(f"{r:.2f}" for r in ratios)
        lines.append(f"| {b} × {t} | {f32:.0f} | {b16:.0f} | **{statistics.median(ratios):.2f}x** "
                     f"| {each} |")
    lines.append(f"\n{a.threads} threads.")
    publish(lines, loads, t0, a.markdown, f"bf16_overhead:{a.model}")


if __name__ == "__main__":
    main()
