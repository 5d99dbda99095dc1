#!/usr/bin/env python3
"""Round trip with Hugging Face transformers (issue 9, Done-when 1): zerotrain trains a tiny
model a few steps and saves, `zerotrain export` writes a Hugging Face directory, and
transformers' from_pretrained loads it. The loss transformers computes on the first validation
micro-batch must equal zerotrain's own step-0 validation loss on the same tokens, from the same
export loaded with --init_from (fp32; 1e-5 relative).

    python3 scripts/check_export.py [--zerotrain build/zerotrain] [--model tiny-llama]

Needs torch and transformers (pip); exits 1 on a mismatch.
"""
import argparse
import json
import pathlib
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers


def write_shard(path, tokens):
    """An llm.c uint16 token shard: 256 int32 header (magic, version, count), then tokens."""
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zerotrain", default=str(pathlib.Path(__file__).parent.parent / "build/zerotrain"))
    ap.add_argument("--model", default="tiny-llama", choices=["tiny-llama", "tiny-gpt2"])
    a = ap.parse_args()
    B, T = 2, 16
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        rng = np.random.default_rng(7)
        write_shard(d / "train_000000.bin", rng.integers(0, 256, 4000))
        val = rng.integers(0, 256, 1000)
        write_shard(d / "val_000000.bin", val)
        (d / "ds.json").write_text(json.dumps({
            "train_micro_batch_size_per_gpu": B, "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}},
            "zero_optimization": {"stage": 2}}))
        common = [a.zerotrain, "train", "--model", a.model, "--seq_len", str(T),
                  "--sample_tokens", "0", "--deepspeed", str(d / "ds.json"),
                  "--train_data", str(d / "train_*.bin")]
        subprocess.run(common + ["--steps", "5", "--val_every", "0", "--run_dir", str(d / "run"),
                                 "--save_dir", str(d / "ck")], check=True, capture_output=True)
        subprocess.run([a.zerotrain, "export", "--checkpoint", str(d / "ck"), "--out",
                        str(d / "hf"), "--dtype", "fp32"], check=True)
        # zerotrain's loss on the first validation micro-batch (step 0, before any update).
        subprocess.run(common + ["--init_from", str(d / "hf"), "--steps", "1", "--val_every", "0",
                                 "--val_batches", "1", "--val_data", str(d / "val_*.bin"),
                                 "--run_dir", str(d / "eval")], check=True, capture_output=True)
        ours = next(json.loads(l)["val_loss"] for l in open(d / "eval/metrics.jsonl")
                    if '"val_loss"' in l)
        model = transformers.AutoModelForCausalLM.from_pretrained(str(d / "hf"),
                                                                  dtype=torch.float32)
        model.eval()
        # The loader's first micro-batch: sequences b = 0..B-1 of T+1 tokens at stride T.
        x = torch.tensor(np.stack([val[b * T:b * T + T] for b in range(B)]), dtype=torch.long)
        y = torch.tensor(np.stack([val[b * T + 1:b * T + T + 1] for b in range(B)]),
                         dtype=torch.long)
        with torch.no_grad():
            logits = model(input_ids=x).logits.double()
        theirs = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                   y.reshape(-1)).item()
        rel = abs(ours - theirs) / abs(theirs)
        ok = rel <= 1e-5
        print(f"{a.model}: zerotrain {ours:.7f}, transformers {theirs:.7f}, relative "
              f"difference {rel:.1e} (limit 1e-5): {'pass' if ok else 'FAIL'}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
