#!/usr/bin/env python3
"""TinyLlama-1.1B's configuration with random weights, saved by transformers' save_pretrained
(bf16, sharded), for the TinyLlama-sized checkpoint benchmark (issue 9, Done-when 7:
benchmarks/tinyllama_checkpoint.sh). The configuration is TinyLlama/TinyLlama-1.1B's
config.json (../shared/REFERENCES.md): 22 layers, hidden 2048, intermediate 5632, 32 heads,
4 key/value heads, vocabulary 32000, RoPE theta 10000, RMSNorm eps 1e-5, untied head.

    python3 scripts/make_tinyllama_random.py OUT_DIR    # needs torch, transformers

Writes about 2.2 GB; builds the model in bf16 to stay near that much memory.
"""
import sys

import torch
import transformers


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    config = transformers.LlamaConfig(
        vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
        num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        hidden_act="silu", bos_token_id=1, eos_token_id=2, torch_dtype="bfloat16")
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    model = transformers.LlamaForCausalLM(config)
    model.save_pretrained(sys.argv[1], max_shard_size="1GB")
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {sys.argv[1]}: {n:,} parameters, bf16")


if __name__ == "__main__":
    main()
