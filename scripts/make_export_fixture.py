#!/usr/bin/env python3
"""A stored zerotrain checkpoint and the logits transformers computes from its export (issue 9,
Done-when 1), for tests/unit/reference_test.cc (ExportOfAStoredCheckpointGivesTransformersLogits).

Writes tests/fixtures/tiny_llama_checkpoint/:
  - meta.json and rank_00000.bin: zerotrain's save after 3 AdamW steps of the tiny_llama
    fixture (--init_from tests/fixtures/tiny_llama; 1 rank, stage 2, fp32) on random tokens;
  - reference.safetensors: tiny_llama's input_ids, and the logits transformers computes
    (from_pretrained in float64) from `zerotrain export --dtype fp32` of that save.
The test exports the stored save again and must get these logits through --init_from's reader.
A change to the checkpoint format that old saves cannot be read in fails the test: regenerate
only on purpose.

    python3 scripts/make_export_fixture.py [--zerotrain build/zerotrain]   # torch, transformers
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import tempfile

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIX = ROOT / "tests/fixtures"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zerotrain", default=str(ROOT / "build/zerotrain"))
    a = ap.parse_args()
    out = FIX / "tiny_llama_checkpoint"
    vocab = json.loads((FIX / "tiny_llama/config.json").read_text())["vocab_size"]
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        header = np.zeros(256, dtype=np.int32)
        header[:3] = [20240520, 1, 2000]
        tokens = np.random.default_rng(5).integers(0, vocab, 2000).astype(np.uint16)
        (d / "train_000000.bin").write_bytes(header.tobytes() + tokens.tobytes())
        (d / "ds.json").write_text(json.dumps({
            "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-2}},
            "zero_optimization": {"stage": 2}}))
        subprocess.run([a.zerotrain, "train", "--init_from", str(FIX / "tiny_llama"),
                        "--seq_len", "16", "--steps", "3", "--val_every", "0",
                        "--sample_tokens", "0", "--deepspeed", str(d / "ds.json"),
                        "--train_data", str(d / "train_*.bin"), "--run_dir", str(d / "run"),
                        "--save_dir", str(d / "ck")], check=True, capture_output=True)
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(d / "ck/step_00000003", out)
        subprocess.run([a.zerotrain, "export", "--checkpoint", str(out), "--out", str(d / "hf"),
                        "--dtype", "fp32"], check=True)
        ids = load_file(str(FIX / "tiny_llama/reference.safetensors"))["input_ids"]
        model = transformers.AutoModelForCausalLM.from_pretrained(str(d / "hf"),
                                                                  dtype=torch.float64)
        model.eval()
        with torch.no_grad():
            logits = model(input_ids=ids).logits.float()
        save_file({"logits": logits.contiguous(), "input_ids": ids},
                  str(out / "reference.safetensors"))
    print(f"wrote {out}: {sorted(p.name for p in out.iterdir())}")


if __name__ == "__main__":
    main()
