#!/usr/bin/env python3
"""The training step a PyTorch user would run instead of zerotrain, timed: the reference for
scripts/gpu_check.sh's benchmark stages (issue 25), on the same GPU in the same command.

The strongest setting a user picks: Hugging Face transformers' model with PyTorch's default
SDPA attention, fp32 weights under bf16 autocast (zerotrain's bf16 mode: bf16 compute, fp32
master weights), fused AdamW (lr 3e-4, weight decay 0.1), gradient clipping 1.0, and with
--compile, torch.compile (default mode; its compilation is timed apart, in the warm-up steps).
The model is our preset of that name (model/config.cc), randomly initialised on the device.
Batches are random tokens: the step time does not depend on the data.

  python3 benchmarks/torch_step.py --model gpt2-124m --batch 8 --seq 1024 --steps 8
  python3 benchmarks/torch_step.py --model tiny-llama --batch 2 --seq 64 --device cpu

Prints one JSON object: model, psi (parameter count Ψ), batch, seq, compile, tokens_per_s and
step_ms (the mean over the steps after --warmup), warmup_s (the warm-up steps' wall time),
peak_bytes (torch.cuda.max_memory_allocated; 0 on the CPU), torch and device names.
"""
import argparse
import json
import time

import torch
import transformers

# Our presets (model/config.cc): (arch, hidden, intermediate, layers, heads, kv heads, vocab).
PRESETS = {
    "gpt2-124m": ("gpt2", 768, 3072, 12, 12, 12, 50257),
    "tinyllama-1.1b": ("llama", 2048, 5632, 22, 32, 4, 32000),
    "shakespeare-llama": ("llama", 128, 384, 4, 4, 2, 32000),
    "tiny-gpt2": ("gpt2", 64, 256, 2, 4, 4, 256),
    "tiny-llama": ("llama", 64, 128, 2, 4, 2, 256),
}


def build(name, seq):
    arch, c, i, layers, heads, kv, vocab = PRESETS[name]
    if arch == "gpt2":
        cfg = transformers.GPT2Config(n_embd=c, n_inner=i, n_layer=layers, n_head=heads,
                                      n_positions=seq, vocab_size=vocab, bos_token_id=None,
                                      eos_token_id=None, attn_implementation="sdpa")
        return transformers.GPT2LMHeadModel(cfg), vocab
    cfg = transformers.LlamaConfig(hidden_size=c, intermediate_size=i, num_hidden_layers=layers,
                                   num_attention_heads=heads, num_key_value_heads=kv,
                                   vocab_size=vocab, max_position_embeddings=seq, rms_norm_eps=1e-5,
                                   tie_word_embeddings=False, attn_implementation="sdpa")
    return transformers.LlamaForCausalLM(cfg), vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    dev = torch.device(a.device)
    torch.manual_seed(0)
    with dev:
        model, vocab = build(a.model, a.seq)
    model.train()
    psi = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1,
                            fused=dev.type == "cuda")
    fwd = torch.compile(model) if a.compile else model
    x = torch.randint(0, vocab, (a.batch, a.seq), device=dev)  # HF shifts the labels itself

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    def step():
        with torch.autocast(dev.type, dtype=torch.bfloat16):
            loss = fwd(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    t0 = time.perf_counter()
    for _ in range(a.warmup):
        step()
    sync()
    warmup_s = time.perf_counter() - t0
    times = []
    for _ in range(a.steps - a.warmup):
        t = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t)
    step_s = sum(times) / len(times)
    print(json.dumps({
        "model": a.model, "psi": psi, "batch": a.batch, "seq": a.seq, "compile": a.compile,
        "tokens_per_s": a.batch * a.seq / step_s, "step_ms": 1e3 * step_s,
        "warmup_s": warmup_s,
        "peak_bytes": torch.cuda.max_memory_allocated() if dev.type == "cuda" else 0,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu"}))


if __name__ == "__main__":
    main()
