#!/usr/bin/env python3
"""Writes tests/fixtures/tiny_llama/ddp_reference.safetensors: the global gradient norm and
the clipped step of data parallelism at 1, 2, 3 and 4 ranks, from PyTorch.

The model is tests/fixtures/tiny_llama (transformers' LlamaForCausalLM, computed in float64
as scripts/make_reference.py does). One global batch of 12 sequences of 8 tokens, with ignored
targets (-100) spread unevenly, so that the ranks' numbers of trained positions differ. At
W ranks, rank r holds rows [r 12/W, (r+1) 12/W) and its loss is the mean over its trained
positions; the gradient is the mean of the ranks' gradients, as DistributedDataParallel and
DeepSpeed average them. Then torch.nn.utils.clip_grad_norm_(max_norm=MAX_NORM) and one
torch.optim.AdamW step (the settings below).

Tensors (float32; ids int64):
  input_ids, targets        (12, 8)
  norm.W<w>                 (1,)  the norm clip_grad_norm_ returned (before clipping)
  clipped.W<w>.<hf name>    the averaged gradient after clipping
  adamw.W<w>.<hf name>      the weights after the AdamW step
  hparams                   (6,)  max_norm, lr, beta1, beta2, eps, weight_decay

    python3 scripts/make_ddp_reference.py [OUT_DIR]     # default: tests/fixtures/tiny_llama
"""
import os
import sys

import torch
import torch.nn.functional as F
from transformers import LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import IGNORE_INDEX, patch_llama_for_float64, save_sorted  # noqa: E402

SEED = 4321
B, T = 12, 8
WORLD_SIZES = (1, 2, 3, 4)
MAX_NORM = 0.5  # below every world size's norm: clipping binds
ADAMW = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = os.path.join(root, "tests", "fixtures", "tiny_llama")
    out_dir = sys.argv[1] if len(sys.argv) > 1 else src
    torch.manual_seed(SEED)
    patch_llama_for_float64()
    base = LlamaForCausalLM.from_pretrained(src, attn_implementation="eager").double()
    vocab = base.config.vocab_size
    gen = torch.Generator().manual_seed(SEED)
    input_ids = torch.randint(0, vocab, (B, T), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, vocab, (B, T), generator=gen, dtype=torch.int64)
    # Uneven ignored targets: row b ignores its first (b % 4) positions (every row keeps some).
    for b in range(B):
        targets[b, : b % 4] = IGNORE_INDEX
    out = {"input_ids": input_ids, "targets": targets,
           "hparams": torch.tensor([MAX_NORM, ADAMW["lr"], *ADAMW["betas"], ADAMW["eps"],
                                    ADAMW["weight_decay"]], dtype=torch.float32)}
    names = [n for n, _ in base.named_parameters()]
    for w in WORLD_SIZES:
        model = LlamaForCausalLM.from_pretrained(src, attn_implementation="eager").double()
        model.zero_grad()
        rows = B // w
        for r in range(w):
            x, y = input_ids[r * rows:(r + 1) * rows], targets[r * rows:(r + 1) * rows]
            logits = model(input_ids=x).logits
            loss = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1),
                                   ignore_index=IGNORE_INDEX)
            (loss / w).backward()  # the mean over ranks of each rank's mean loss
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_NORM)
        assert norm > MAX_NORM, (w, norm)
        out[f"norm.W{w}"] = norm.reshape(1).float()
        for n, p in model.named_parameters():
            out[f"clipped.W{w}.{n}"] = p.grad.detach().float().clone()
        opt = torch.optim.AdamW(model.parameters(), **ADAMW)
        opt.step()
        for n, p in model.named_parameters():
            out[f"adamw.W{w}.{n}"] = p.detach().float().clone()
    assert len(names) * 2 * len(WORLD_SIZES) + 3 + len(WORLD_SIZES) == len(out)
    save_sorted(out, os.path.join(out_dir, "ddp_reference.safetensors"),
                {"script": "scripts/make_ddp_reference.py", "seed": str(SEED),
                 "max_norm": str(MAX_NORM), "adamw": str(ADAMW)})
    for w in WORLD_SIZES:
        print(f"W={w}: norm {out[f'norm.W{w}'].item():.6f}")


if __name__ == "__main__":
    main()
