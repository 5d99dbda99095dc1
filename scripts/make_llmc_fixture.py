#!/usr/bin/env python3
"""llm.c GPT-2 model files of the tiny GPT-2 fixture, for the --init_from llm.c test.

Writes tests/fixtures/tiny_gpt2/llmc_fp32.bin and llmc_bf16.bin from that fixture's
model.safetensors (a transformers GPT2LMHeadModel) exactly as llm.c's train_gpt2.py write_model
does: a 256 int32 header (magic 20240326, version 3 or 5, block_size, vocab_size, n_layer,
n_head, n_embd, padded vocab), then its GPT's named parameters (nn.Linear (out, in): the
transposes of transformers' Conv1D weights) in write_tensors' order, wte padded with zero rows
to a multiple of 128. bf16 is the top 16 bits of fp32 rounded to nearest even, as
torch.Tensor.to(torch.bfloat16).

    python3 scripts/make_llmc_fixture.py    # needs numpy and safetensors
"""
import json
import pathlib

import numpy as np
from safetensors.numpy import load_file

FIX = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/tiny_gpt2"


def to_bf16(x):
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def main():
    cfg = json.loads((FIX / "config.json").read_text())
    w = load_file(str(FIX / "model.safetensors"))
    L, C, V, T, NH = cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"], cfg["n_positions"], cfg["n_head"]
    Vp = (V + 127) // 128 * 128
    wte = np.zeros((Vp, C), np.float32)
    wte[:V] = w["transformer.wte.weight"]
    h = lambda i, n: w[f"transformer.h.{i}.{n}"]
    conv = lambda i, n: h(i, n).T  # Conv1D (in, out) -> nn.Linear (out, in)
    tensors = [wte, w["transformer.wpe.weight"]]
    for name, get in [("ln_1.weight", h), ("ln_1.bias", h), ("attn.c_attn.weight", conv),
                      ("attn.c_attn.bias", h), ("attn.c_proj.weight", conv),
                      ("attn.c_proj.bias", h), ("ln_2.weight", h), ("ln_2.bias", h),
                      ("mlp.c_fc.weight", conv), ("mlp.c_fc.bias", h),
                      ("mlp.c_proj.weight", conv), ("mlp.c_proj.bias", h)]:
        tensors += [get(i, name) for i in range(L)]
    tensors += [w["transformer.ln_f.weight"], w["transformer.ln_f.bias"]]
    for version, name in [(3, "llmc_fp32.bin"), (5, "llmc_bf16.bin")]:
        header = np.zeros(256, np.int32)
        header[:8] = [20240326, version, T, V, L, NH, C, Vp]
        with open(FIX / name, "wb") as f:
            f.write(header.tobytes())
            for t in tensors:
                t = np.ascontiguousarray(t, dtype=np.float32)
                f.write(t.tobytes() if version == 3 else to_bf16(t).tobytes())
        print("wrote", FIX / name)


if __name__ == "__main__":
    main()
