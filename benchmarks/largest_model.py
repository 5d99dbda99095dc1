#!/usr/bin/env python3
"""The largest model each ZeRO system trains, measured: ZeRO-Offload's Figure 7 and ZeRO-Infinity's
Figure 6(a) scaled down by a factor s so they run on this machine's CPU backend.

One DGX-2 scaled by s: a rank's device memory 32 GiB / s (zerotrain.device_memory_limit), the
node's host memory 1.5 TiB / s shared by its ranks (zerotrain.host_memory_limit = that / N). The
models are the papers' shapes scaled down: LLaMA blocks of hidden size h = the paper's hidden
size for that model size / sqrt(s) (2048 -> 128 at s = 256), micro-batches of the paper's batch
per GPU x 1024 / sqrt(s) tokens, so a model of the same layer count has 1/s of the parameters
and of the activations. Figure 7's systems take ZeRO-Offload's Table 3 (hidden 2048 and batch 32
up to 2B, ... 4096 and 4 at 13B, 8192 and 8 up to 60B), the others ZeRO-Infinity's Table 4
(batch 1, hidden 1536 up to 2B, 4096 up to 20B, 8192 above). A 256-token vocabulary, bf16, AdamW, activation
checkpointing at every block (as the papers' runs).

For each system and rank count it finds the largest layer count L that trains one step, twice:
  predicted  `zerotrain estimate` says the ds_config fits both limits (bisection on L);
  measured   `zerotrain train --steps 1` exits 0 (exit 2 with a memory-limit error: too big),
             searched from the prediction outward (steps of ~3%, then bisection).
Systems: PyTorch DDP (stage 0), ZeRO-2, ZeRO-Offload (stage 2, optimizer on the CPU), ZeRO-3,
ZeRO-Inf-CPU (stage 3, parameters and optimizer on the CPU). ZeRO-Inf-NVMe is left out: its
largest model at s = 256 (the host still holds the 16-bit gradients) is billions of parameters,
more than this machine trains a step of in the time budget.

    python3 benchmarks/largest_model.py [--scale 256] [--ranks 1,4] [--markdown docs/estimator.md]

Prints the table (measured and predicted parameters, their ratio, the paper's figure / s) and the
ZeRO-Offload / PyTorch ratio at one rank against the paper's 9.3x.
"""
import argparse
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_md import ROOT, load_average, publish  # noqa: E402

GiB, TiB = 2**30, 2**40


def offload_shape(billions):
    """ZeRO-Offload Table 3 (the Figure 7 runs): hidden size and batch per GPU for a model of
    that many billion parameters."""
    for top, hidden, batch in ((2.5, 2048, 32), (5, 2304, 32), (9, 3072, 16), (11.5, 4096, 8),
                               (13.5, 4096, 4), (16, 4096, 8), (65, 8192, 8)):
        if billions <= top:
            return hidden, batch
    return 9216, 8


def infinity_shape(billions):
    """ZeRO-Infinity Table 4 (the Figure 6(a) runs): batch 1 a GPU; hidden 1536 (its 1.4B),
    4096 up to 20B, 8192 above."""
    return (1536 if billions <= 2.5 else 4096 if billions <= 20 else 8192), 1


# (name, zero_optimization, paper's largest in billions for 1 and 4 GPUs (Figure 7), the paper's
# shapes its runs used: Figure 7's systems ZeRO-Offload's Table 3, the others ZeRO-Infinity's
# Table 4).
SYSTEMS = [
    ("PyTorch DDP", {"stage": 0}, (1.4, 1.4), offload_shape),
    ("ZeRO-2", {"stage": 2}, (1.4, 3.9), offload_shape),
    ("ZeRO-Offload", {"stage": 2, "offload_optimizer": {"device": "cpu"}}, (13, 30),
     offload_shape),
    ("ZeRO-3", {"stage": 3, "stage3_param_persistence_threshold": 0,
                "stage3_max_reuse_distance": 0}, (None, None), infinity_shape),
    ("ZeRO-Inf-CPU", {"stage": 3, "stage3_param_persistence_threshold": 0,
                      "stage3_max_reuse_distance": 0, "offload_param": {"device": "cpu"},
                      "offload_optimizer": {"device": "cpu"}}, (None, None), infinity_shape),
]


class Study:
    def __init__(self, a, tmp):
        self.a, self.tmp = a, tmp
        self.device = int(32 * GiB / a.scale)
        self.host_node = int(1.5 * TiB / a.scale)
        self.runs = 0
        self.batch = 1
        self.seq = max(16, round(1024 / math.sqrt(a.scale)))  # the papers' 1024, scaled

    def model(self, hidden, layers):
        path = os.path.join(self.tmp, f"llama_{hidden}_{layers}.json")
        if not os.path.exists(path):
            with open(path, "w") as f:
                json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                           "hidden_size": hidden, "intermediate_size": hidden * 8 // 3 // 16 * 16,
                           "num_hidden_layers": layers, "num_attention_heads": max(1, hidden // 64),
                           "num_key_value_heads": max(1, hidden // 64), "vocab_size": 256,
                           "max_position_embeddings": self.seq, "rms_norm_eps": 1e-5,
                           "rope_theta": 10000.0, "tie_word_embeddings": False}, f)
        return path

    def params(self, hidden, layers):
        out = subprocess.run([self.a.binary, "info", "--model", self.model(hidden, layers)],
                             capture_output=True, text=True, check=True).stdout
        return int(re.search(r"^total\s+(\d+)", out, re.M).group(1))

    def ds(self, zero, ranks):
        path = os.path.join(self.tmp, f"ds_{abs(hash(json.dumps(zero, sort_keys=True)))}_{ranks}.json")
        with open(path, "w") as f:
            json.dump({"train_micro_batch_size_per_gpu": self.batch, "gradient_accumulation_steps": 1,
                       "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},
                       "bf16": {"enabled": True}, "zero_optimization": zero,
                       "zerotrain": {"device_memory_limit": self.device,
                                     "host_memory_limit": self.host_node // ranks}}, f)
        return path

    def predicted_fits(self, zero, ranks, hidden, layers):
        out = subprocess.run([self.a.binary, "estimate", "--deepspeed", self.ds(zero, ranks),
                              "--model", self.model(hidden, layers), "--seq_len", str(self.seq),
                              "--dp", str(ranks), "--gradient_checkpointing"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"largest_model: estimate failed: {out.stderr.strip()}")
        return "does NOT fit" not in out.stdout

    def trains(self, zero, ranks, hidden, layers):
        cmd = [self.a.binary, "train", "--deepspeed", self.ds(zero, ranks), "--model",
               self.model(hidden, layers), "--seq_len", str(self.seq), "--steps", "1",
               "--train_data", self.data, "--val_every", "0", "--sample_tokens", "0", "--quiet",
               "--gradient_checkpointing",
               "--threads", str(max(1, (os.cpu_count() or 1) // ranks))]
        if ranks > 1:
            cmd = ["mpirun", "--oversubscribe", "-np", str(ranks)] + (
                ["--allow-run-as-root"] if os.geteuid() == 0 else []) + cmd
        self.runs += 1
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode == 0:
            return True
        text = out.stdout + out.stderr
        if "memory limit" in text:
            return False
        sys.exit(f"largest_model: train failed for reasons other than memory:\n{text[-2000:]}")

    def largest_predicted(self, zero, ranks, hidden):
        lo, hi = 0, 1
        while self.predicted_fits(zero, ranks, hidden, hi):
            lo, hi = hi, hi * 2
            if hi > 1 << 16:
                return lo
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.predicted_fits(zero, ranks, hidden, mid) else (lo, mid)
        return lo

    def largest_measured(self, zero, ranks, hidden, start):
        """Outward from the prediction: the largest L that trains (lo) and one that does not."""
        step = max(1, round(0.03 * start))
        if self.trains(zero, ranks, hidden, max(start, 1)):
            lo, hi = max(start, 1), max(start, 1) + step
            while self.trains(zero, ranks, hidden, hi):
                lo, hi = hi, hi + step
        else:
            hi, lo = max(start, 1), max(start - step, 0)
            while lo > 0 and not self.trains(zero, ranks, hidden, lo):
                hi, lo = lo, max(lo - step, 0)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.trains(zero, ranks, hidden, mid) else (lo, mid)
        return lo


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", type=float, default=256, help="s: the DGX-2 divided by it")
    ap.add_argument("--ranks", default="1,4")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "zerotrain"))
    ap.add_argument("--markdown", help="write the table into this file's largest-model section")
    a = ap.parse_args()
    if not os.access(a.binary, os.X_OK):
        sys.exit(f"largest_model: {a.binary} not built (scripts/setup.sh)")
    ranks = [int(r) for r in a.ranks.split(",")]
    t0, loads = time.time(), [load_average()]
    tmp = tempfile.mkdtemp(prefix="zt_largest_")
    try:
        st = Study(a, tmp)
        st.data = os.path.join(tmp, "train_000000.bin")
        n = 20000  # llm.c shard: 256 int32 header (magic, version, count), uint16 tokens
        with open(st.data, "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
            f.write(struct.pack(f"<{n}H", *[(i * 7919) % 256 for i in range(n)]))
        rows, measured_1 = [], {}
        for name, zero, paper, shape in SYSTEMS:
            for r in ranks:
                # The paper's shape (hidden size, batch) for the size the estimator predicts.
                st.batch = 1
                guess = st.largest_predicted(zero, r, 128)
                billions = st.params(128, max(guess, 1)) * a.scale / 1e9
                paper_h, st.batch = shape(billions)
                hidden = max(64, round(paper_h / math.sqrt(a.scale) / 32) * 32)
                est_l = st.largest_predicted(zero, r, hidden)
                got_l = st.largest_measured(zero, r, hidden, est_l)
                est, got = st.params(hidden, max(est_l, 1)), st.params(hidden, max(got_l, 1))
                p = paper[0] if r == 1 else (paper[1] if r == 4 else None)
                rows.append((name, r, hidden, st.batch, got_l, got, est_l, est, p))
                if r == 1:
                    measured_1[name] = got
                loads.append(load_average())
                print(f"{name}, {r} rank(s): h {hidden}, batch {st.batch}, measured L {got_l} ({got / 1e6:.2f}M), "
                      f"predicted L {est_l} ({est / 1e6:.2f}M)", file=sys.stderr)
        s = a.scale
        lines = [
            f"Scale s = {s:g}: device {st.device / 2**20:.0f} MiB a rank, host "
            f"{st.host_node / GiB:.2f} GiB a node (1.5 TiB / s, shared by its ranks); LLaMA "
            f"blocks of hidden h and micro-batches of `batch` x {st.seq} tokens (the paper's for that "
            f"size, hidden and sequence / {math.sqrt(s):g}), 256-token vocabulary, bf16, "
            f"activation checkpointing. {st.runs} "
            "training runs.",
            "",
            "| system | ranks | h | batch | measured L | measured params | predicted L | "
            "predicted params | measured / predicted | paper / s |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, r, h, b, gl, g, el, e, p in rows:
            lines.append(f"| {name} | {r} | {h} | {b} | {gl} | {g / 1e6:.2f}M | {el} | {e / 1e6:.2f}M | "
                         f"{g / e:.3f} | {'-' if p is None else f'{p * 1e9 / s / 1e6:.2f}M'} |")
        if "ZeRO-Offload" in measured_1 and "PyTorch DDP" in measured_1:
            ratio = measured_1["ZeRO-Offload"] / measured_1["PyTorch DDP"]
            lines += ["", f"ZeRO-Offload / PyTorch at one rank: {ratio:.2f}x measured (the paper: "
                      f"13B / 1.4B = 9.3x; {100 * (ratio / 9.3 - 1):+.0f}%)."]
        publish(lines, loads, t0, a.markdown, "largest-model")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
