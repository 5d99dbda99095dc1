#!/usr/bin/env python3
"""The step-time model (`zerotrain estimate --time --hardware this`) against measured step times
on this machine's CPU backend: seven configurations, stages 0-3, offload none / cpu / nvme, 1
and 2 ranks, gpt2-124m and a TinyLlama-shaped model (TinyLlama-1.1B's blocks, 2 of its 22).

    python3 benchmarks/step_time_check.py [--markdown docs/estimator.md] [--nvme_path /tmp]

Each run: bf16, micro-batch 4 x 128 tokens of TinyShakespeare, 4 steps; measured is the median
step_ms of steps 2-4 (metrics.jsonl). The prediction uses the machine's rates measured by
`--hardware this` (cached; see trainer/hardware_probe.h).
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
from bench_md import ROOT, SHARED_DATA, load_average, prepare_shards, publish  # noqa: E402

TINYLLAMA2 = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
              "intermediate_size": 5632, "num_hidden_layers": 2, "num_attention_heads": 32,
              "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 2048,
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "zerotrain"))
    ap.add_argument("--nvme_path", default="/tmp")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    t0, loads = time.time(), [load_average()]
    with tempfile.TemporaryDirectory(prefix="zt_steptime_") as tmp:
        data = prepare_shards(a.binary, SHARED_DATA, os.path.join(tmp, "data"))
        tl = os.path.join(tmp, "tinyllama_2_blocks.json")
        with open(tl, "w") as f:
            json.dump(TINYLLAMA2, f)
        nvme = os.path.join(tmp, "swap")
        os.makedirs(nvme)
        zeros = {
            "stage 0": {"stage": 0},
            "stage 1": {"stage": 1},
            "stage 2, optimizer cpu": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
            "stage 2, optimizer nvme": {"stage": 2, "offload_optimizer": {
                "device": "nvme", "nvme_path": a.nvme_path}},
            "stage 3": {"stage": 3},
            "stage 3, params and optimizer cpu": {"stage": 3, "offload_param": {"device": "cpu"},
                                                  "offload_optimizer": {"device": "cpu"}},
        }
        runs = [("gpt2-124m", "gpt2-124m", "stage 0", 1),
                ("gpt2-124m", "gpt2-124m", "stage 2, optimizer cpu", 1),
                ("gpt2-124m", "gpt2-124m", "stage 3, params and optimizer cpu", 1),
                ("gpt2-124m", "gpt2-124m", "stage 2, optimizer nvme", 1),
                ("gpt2-124m", "gpt2-124m", "stage 1", 2),
                ("TinyLlama, 2 blocks", tl, "stage 2, optimizer cpu", 1),
                ("TinyLlama, 2 blocks", tl, "stage 3", 2)]
        lines = ["| model | layout | ranks | measured (ms) | predicted (ms) | predicted / measured |"
                 " compute | optimizer | copies + comm + nvme |",
                 "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        worst = 0
        for k, (label, model, layout, ranks) in enumerate(runs):
            ds = os.path.join(tmp, f"ds{k}.json")
            with open(ds, "w") as f:
                json.dump({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
                           "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                           "bf16": {"enabled": True}, "zero_optimization": zeros[layout]}, f)
            run_dir = os.path.join(tmp, f"run{k}")
            cmd = [a.binary, "train", "--deepspeed", ds, "--model", model, "--seq_len", "128",
                   "--steps", "4", "--train_data", data, "--val_every", "0", "--sample_tokens",
                   "0", "--quiet", "--run_dir", run_dir]
            if ranks > 1:
                cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + (
                    ["--allow-run-as-root"] if os.geteuid() == 0 else []) + cmd
            subprocess.run(cmd, check=True, capture_output=True)
            with open(os.path.join(run_dir, "metrics.jsonl")) as f:
                steps = [json.loads(line) for line in f if '"step_ms"' in line]
            measured = statistics.median(s["step_ms"] for s in steps[1:])
            out = subprocess.run([a.binary, "estimate", "--time", "--deepspeed", ds, "--model",
                                  model, "--seq_len", "128", "--dp", str(ranks), "--hardware",
                                  "this", "--nvme_path", a.nvme_path],
                                 check=True, capture_output=True, text=True).stdout
            ms = {ln.split()[0]: float(ln.split()[-2]) for ln in out.splitlines()
                  if ln.startswith("  ") and ln.rstrip().endswith(" ms")}
            other = ms["communication"] + ms["offload"] + ms["nvme"]
            ratio = ms["step"] / measured
            worst = max(worst, abs(ratio - 1))
            lines.append(f"| {label} | {layout} | {ranks} | {measured:.0f} | {ms['step']:.0f} | "
                         f"{ratio:.2f} | {ms['compute']:.0f} | {ms['optimizer']:.0f} | "
                         f"{other:.0f} |")
            loads.append(load_average())
        rates = next(ln for ln in out.splitlines() if "GEMM" in ln).strip()
        lines += ["", f"Rates (`--hardware this`): {rates}.",
                  f"Largest error: {100 * worst:.0f}%."]
        publish(lines, loads, t0, a.markdown, "step-time-check")


if __name__ == "__main__":
    main()
