#!/usr/bin/env python3
"""Stage-3 parameter offload to NVMe: forward + backward time with the store's read-ahead (the
next shard read from the drive while the current unit computes) on and off
(ZEROTRAIN_PARAM_READ_AHEAD=0), in alternating runs of the same trainer, model and data.

  python3 benchmarks/param_read_ahead.py [--model gpt2-124m] [--nvme_path /tmp] \
      [--markdown docs/offload.md]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_md import add_trainer_args, alternate, prepare_shards, publish  # noqa: E402



def run(a, data, tmp, ahead):
    cfg = os.path.join(tmp, "ds.json")
    with open(cfg, "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                   "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                   "bf16": {"enabled": True}, "steps_per_print": 1,
                   "wall_clock_breakdown": True,
                   "zero_optimization": {
                       "stage": 3,
                       "offload_param": {"device": "nvme", "nvme_path": a.nvme_path,
                                         "max_in_cpu": 0},
                       "offload_optimizer": {"device": "cpu"}}}, f)
    run_dir = os.path.join(tmp, f"run_{int(ahead)}")
    env = dict(os.environ, ZEROTRAIN_PARAM_READ_AHEAD="1" if ahead else "0")
    out = subprocess.run([a.binary, "train", "--deepspeed", cfg, "--train_data", data, "--model",
                          a.model, "--seq_len", str(a.seq_len), "--steps", str(a.steps),
                          "--val_every", "0", "--sample_tokens", "0", "--threads",
                          str(a.threads), "--run_dir", run_dir],
                         check=True, capture_output=True, text=True, env=env).stdout
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    rows = [r for r in rows if "forward_ms" in r][1:]  # step 1 learns the unit sequence
    waits = [float(x) for x in re.findall(r"NVMe read wait ([0-9.]+)", out)][1:]
    return (statistics.median([r["forward_ms"] + r["backward_ms"] for r in rows]),
            statistics.median(waits))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_trainer_args(ap, steps=5)
    ap.add_argument("--seq_len", type=int, default=64)
    a = ap.parse_args()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="zt_ahead_") as tmp:
        data = prepare_shards(a.binary, a.shared_data, os.path.join(tmp, "data"))
        res, loads = alternate(a.rounds, lambda on: run(a, data, tmp, on), "read-ahead")
    med = lambda k, i: statistics.median(x[i] for x in res[k])
    off, on = med(False, 0), med(True, 0)
    wait_off, wait_on = med(False, 1), med(True, 1)
    lines = [
        f"## NVMe parameter offload: reading the next shard ahead ({a.model})",
        "",
        f"Forward + backward per step (ms): stage 3, bf16, one rank, micro-batch 1 × "
        f"{a.seq_len}, every parameter shard on `{a.nvme_path}` (`max_in_cpu` 0), the "
        f"optimizer on the CPU; median over {a.rounds} alternating rounds of the median over "
        f"steps 2..{a.steps} (step 1 learns the unit sequence the read-ahead follows).",
        "",
        "| read-ahead | NVMe read wait ms | forward + backward ms | against off |",
        "|---|---:|---:|---:|",
        f"| off (`ZEROTRAIN_PARAM_READ_AHEAD=0`) | {wait_off:.0f} | {off:.0f} | 1.00x |",
        f"| on (default) | {wait_on:.0f} | {on:.0f} | **{on / off:.2f}x** |",
        "",
        f"{a.threads} threads; forward + backward per round (off / on): " + ", ".join(
            f"{x[0]:.0f} / {y[0]:.0f}" for x, y in zip(res[False], res[True])) + " ms. The "
        "read wait is the time the trainer's thread waited for the drive (`wall_clock_breakdown`"
        "'s NVMe read wait), in the forward here: at one rank the gathered units stay on the "
        "device from the forward through the backward.",
    ]
    publish(lines, loads, t0, a.markdown, f"param_read_ahead:{a.model}")


if __name__ == "__main__":
    main()
