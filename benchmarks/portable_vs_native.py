#!/usr/bin/env python3
"""What the portable build costs: the default binary (x86-64-v3 baseline, AVX-512 kernels chosen
at run time) against one built for this CPU (-DZT_NATIVE=ON, -march=native), on the same
model, batch, data and threads, measured by the trainer itself (metrics.jsonl step_ms and
optimizer_ms) in alternating runs.

  python3 benchmarks/portable_vs_native.py [--markdown docs/benchmarks.md]

Builds the native binary into build-native/ (CPU backend only, the trainer alone) when
--native is not given. Each round runs both binaries back to back, the order flipping every
round; a time is the median over rounds of the median over steps 2..N, and the ratio is the
median of the rounds' native / portable (its two runs seconds apart).
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
from bench_md import SHARED_DATA, alternate, prepare_shards, publish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_native(out):
    subprocess.run(["cmake", "-S", ROOT, "-B", out, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                    "-DZT_NATIVE=ON", "-DZT_WITH_CUDA=OFF", "-DZT_BUILD_TESTS=OFF",
                    "-DZT_BUILD_BENCHMARKS=OFF"], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", out, "--target", "zerotrain"], check=True,
                   capture_output=True)
    return os.path.join(out, "zerotrain")


def run(a, binary, data, tmp, tag):
    cfg = os.path.join(tmp, "ds.json")
    with open(cfg, "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": a.batch, "gradient_accumulation_steps": 1,
                   "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
                   "gradient_clipping": 1.0, "zero_optimization": {"stage": 0},
                   "steps_per_print": 1000}, f)
    run_dir = os.path.join(tmp, "run_" + tag)
    subprocess.run([binary, "train", "--deepspeed", cfg, "--train_data", data, "--model", a.model,
                    "--seq_len", str(a.seq_len), "--steps", str(a.steps), "--val_every", "0",
                    "--sample_tokens", "0", "--threads", str(a.threads), "--run_dir", run_dir],
                   check=True, capture_output=True)
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    rows = [r for r in rows if "step_ms" in r][1:]
    return (statistics.median(r["step_ms"] for r in rows),
            statistics.median(r["optimizer_ms"] for r in rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt2-124m")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq_len", type=int, default=256)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--portable", default=os.path.join(ROOT, "build", "zerotrain"))
    ap.add_argument("--native", default=None, help="default: build it into build-native/")
    ap.add_argument("--shared-data", default=SHARED_DATA)
    ap.add_argument("--markdown", default=None)
    a = ap.parse_args()
    t0 = time.time()
    native = a.native or build_native(os.path.join(ROOT, "build-native"))
    with tempfile.TemporaryDirectory(prefix="zt_native_") as tmp:
        data = prepare_shards(a.portable, a.shared_data, os.path.join(tmp, "data"))
        res, loads = alternate(
            a.rounds, lambda nat: run(a, native if nat else a.portable, data, tmp, str(nat)),
            "native")
    lines = [
        f"## The portable build against -march=native ({a.model}, {a.batch} × {a.seq_len})",
        "",
        "The default build (x86-64-v3: AVX2 and FMA for the compiler; the AVX-512 kernels chosen "
        "at run time) against one built with `-DZT_NATIVE=ON` (`-march=native`) on this machine; "
        "same model, data, batch and threads, stage 0, fp32. Times: median over "
        f"{a.rounds} alternating rounds of the median over steps 2..{a.steps}; ratio: median of "
        "the rounds' native / portable (below 1: native faster).",
        "",
        "| phase | portable ms | native ms | native / portable | each round |",
        "|---|---:|---:|---:|---|",
    ]
    for i, phase in enumerate(["whole step", "optimizer"]):
        p = [x[i] for x in res[False]]
        n = [x[i] for x in res[True]]
        ratios = [y / x for x, y in zip(p, n)]
        lines.append(f"| {phase} | {statistics.median(p):.0f} | {statistics.median(n):.0f} | "
                     f"**{statistics.median(ratios):.3f}** | "
                     f"{', '.join(f'{r:.3f}' for r in ratios)} |")
    lines.append(f"\n{a.threads} threads.")
    publish(lines, loads, t0, a.markdown, f"portable_vs_native:{a.model}")


if __name__ == "__main__":
    main()
