#!/usr/bin/env python3
"""Round trip with Hugging Face transformers (issue 9, Done-when 1): zerotrain trains a tiny
model a few steps and saves, `zerotrain export` writes a Hugging Face directory, and
transformers' from_pretrained loads it. The loss transformers computes on the first validation
micro-batch must equal zerotrain's own step-0 validation loss on the same tokens, from the same
export loaded with --init_from (fp32; 1e-5 relative).

    python3 scripts/check_export.py [--zerotrain build/zerotrain] [--model tiny-llama]
    python3 scripts/check_export.py --export HF_DIR --val VAL.bin --deepspeed FP32.json \
        [--micro_batch 1] [--seq_len 64]    # an existing export (the TinyLlama benchmark)

Needs numpy, torch and transformers (`scripts/setup.sh --python` puts them in .venv/, which
this script then uses; or `pip install numpy torch transformers`); exits 1 on a
mismatch and 77 (ctest's "skipped", saying why) where they are not installed. ctest runs it as
export_through_transformers for both tiny models.
"""
import argparse
import json
import os
import pathlib
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import transformers
except ImportError as e:  # the check needs the library users load exports with
    from venv_or_skip import reexec_in_venv_or_skip

    reexec_in_venv_or_skip(e, "numpy torch transformers")


def write_shard(path, tokens):
    """An llm.c uint16 token shard: 256 int32 header (magic, version, count), then tokens."""
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype=np.uint16).tobytes())


def compare(zerotrain, hf, val, B, T, ds, run_dir, extra=()):
    """zerotrain's step-0 validation loss from export `hf` (--init_from, ds_config `ds`) against
    transformers' loss on the same first validation micro-batch of token array `val` (the val
    shard's tokens): sequences b = 0..B-1 of T+1 tokens at stride T. Returns (ours, theirs)."""
    subprocess.run([zerotrain, "train", "--seq_len", str(T), "--sample_tokens", "0",
                    "--deepspeed", str(ds), "--init_from", str(hf), "--steps", "1",
                    "--val_every", "0", "--val_sequences", str(B), "--run_dir", str(run_dir),
                    *extra], check=True, capture_output=True)
    ours = next(json.loads(l)["val_loss"] for l in open(pathlib.Path(run_dir) / "metrics.jsonl")
                if '"val_loss"' in l)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(hf), dtype=torch.float32)
    model.eval()
    x = torch.tensor(np.stack([val[b * T:b * T + T] for b in range(B)]), dtype=torch.long)
    y = torch.tensor(np.stack([val[b * T + 1:b * T + T + 1] for b in range(B)]), dtype=torch.long)
    with torch.no_grad():
        logits = model(input_ids=x).logits.double()
    theirs = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                               y.reshape(-1)).item()
    return ours, theirs


def report(name, ours, theirs):
    rel = abs(ours - theirs) / abs(theirs)
    ok = rel <= 1e-5
    print(f"{name}: zerotrain {ours:.7f}, transformers {theirs:.7f}, relative "
          f"difference {rel:.1e} (limit 1e-5): {'pass' if ok else 'FAIL'}")
    return 0 if ok else 1


def read_shard(path):
    """The tokens of an llm.c uint16 shard."""
    data = pathlib.Path(path).read_bytes()
    return np.frombuffer(data[1024:], dtype=np.uint16).astype(np.int64)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zerotrain", default=str(pathlib.Path(__file__).parent.parent / "build/zerotrain"))
    ap.add_argument("--model", default="tiny-llama",
                    help="a tiny preset (tiny-llama, tiny-gpt2) or a config.json of a small model")
    # An existing export instead of the tiny round trip (benchmarks/tinyllama_checkpoint.sh):
    ap.add_argument("--export", help="a Hugging Face directory zerotrain exported")
    ap.add_argument("--val", help="with --export: the validation shard (llm.c uint16 .bin)")
    ap.add_argument("--deepspeed", help="with --export: the fp32 ds_config zerotrain loads it with")
    ap.add_argument("--micro_batch", type=int, default=1)
    ap.add_argument("--seq_len", type=int, default=64)
    a = ap.parse_args()
    if a.export:
        with tempfile.TemporaryDirectory() as tmp:
            ours, theirs = compare(a.zerotrain, a.export, read_shard(a.val), a.micro_batch,
                                   a.seq_len, a.deepspeed, pathlib.Path(tmp) / "eval",
                                   ["--val_data", a.val, "--train_data", a.val])
        return report(pathlib.Path(a.export).name, ours, theirs)
    B, T = 2, 16
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        rng = np.random.default_rng(7)
        vocab = json.load(open(a.model))["vocab_size"] if a.model.endswith(".json") else 256
        write_shard(d / "train_000000.bin", rng.integers(0, vocab, 4000))
        val = rng.integers(0, vocab, 1000)
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
        ours, theirs = compare(a.zerotrain, d / "hf", val, B, T, d / "ds.json", d / "eval",
                               ["--model", a.model, "--train_data", str(d / "train_*.bin"),
                                "--val_data", str(d / "val_*.bin")])
        return report(pathlib.Path(a.model).parent.name if a.model.endswith(".json") else a.model,
                      ours, theirs)


if __name__ == "__main__":
    sys.exit(main())
