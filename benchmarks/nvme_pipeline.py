#!/usr/bin/env python3
"""What offload_optimizer.pipeline_read / pipeline_write buy on NVMe: the optimizer phase of
the same run (metrics.jsonl optimizer_ms: CPU Adam with master weights and moments swapped
from the drive) without and with the pipeline, in alternating runs.

  python3 benchmarks/nvme_pipeline.py [--model gpt2-124m] [--nvme_path /tmp] \
      [--markdown docs/offload.md]

Stage 2, bf16, one rank, micro-batch 1 x 64 tokens; sub_group_size splits every unit into
several sub-groups so there is something to overlap within a unit too. A figure is the median
over rounds of the median over steps (the first step left out).
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
from bench_md import add_trainer_args, alternate, prepare_shards, publish  # noqa: E402



def run(a, data, tmp, pipeline):
    cfg = os.path.join(tmp, f"ds_{int(pipeline)}.json")
    with open(cfg, "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                   "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                   "bf16": {"enabled": True}, "steps_per_print": 1000,
                   "zero_optimization": {
                       "stage": 2, "sub_group_size": a.sub_group_size,
                       "offload_optimizer": {"device": "nvme", "nvme_path": a.nvme_path,
                                             "pipeline_read": pipeline,
                                             "pipeline_write": pipeline}}}, f)
    run_dir = os.path.join(tmp, f"run_{int(pipeline)}")
    subprocess.run([a.binary, "train", "--deepspeed", cfg, "--train_data", data, "--model",
                    a.model, "--seq_len", "64", "--steps", str(a.steps), "--val_every", "0",
                    "--sample_tokens", "0", "--threads", str(a.threads), "--run_dir", run_dir],
                   check=True, capture_output=True)
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    return statistics.median([r["optimizer_ms"] for r in rows if "optimizer_ms" in r][1:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_trainer_args(ap, steps=4)
    ap.add_argument("--sub_group_size", type=int, default=4_000_000)
    a = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="zt_pipe_") as tmp:
        data = prepare_shards(a.binary, a.shared_data, os.path.join(tmp, "data"))
        res, loads = alternate(a.rounds, lambda on: run(a, data, tmp, on), "pipeline")
    off, on = statistics.median(res[False]), statistics.median(res[True])
    lines = [
        f"## NVMe optimizer offload: the pipeline ({a.model})",
        "",
        f"Optimizer phase per step (ms): stage 2, bf16, one rank, the state on `{a.nvme_path}`, "
        f"`sub_group_size` {a.sub_group_size}; median over {a.rounds} alternating rounds of "
        f"the median over steps 2..{a.steps}.",
        "",
        "| pipeline_read / pipeline_write | optimizer ms | against off |",
        "|---|---:|---:|",
        f"| false / false | {off:.0f} | 1.00x |",
        f"| true / true | {on:.0f} | **{on / off:.2f}x** |",
        "",
        f"{a.threads} threads; per round: " + ", ".join(
            f"{x:.0f} / {y:.0f}" for x, y in zip(res[False], res[True])) + " ms (off / on).",
    ]
    publish(lines, loads, t0, a.markdown, f"nvme_pipeline:{a.model}")


if __name__ == "__main__":
    main()
