#!/usr/bin/env python3
"""Reference for the config.json `zerotrain export` writes (model/config.cc hf_config_json):
what transformers' own config classes hold for the same models.

For each model below (GPT-2 and LLaMA shapes: tied and untied embeddings, GQA, an MLP width
other than 4C), the fixture holds
  - model: the model in zerotrain's terms (model/config.h ModelConfig's fields), with the
    torch dtype and the tokenizer's bos/eos ids the export is given;
  - expected: transformers' GPT2Config / LlamaConfig built from that model and `.to_dict()`,
    the keyword arguments mapped here by hand from each class's documented arguments;
  - defaults: the class's `.to_dict()` with no arguments, what transformers takes for a key a
    config.json leaves out;
  - derived: keys whose value differs from the default though no argument set them (the class
    computes them from others, e.g. LLaMA's head_dim = hidden_size / num_attention_heads).
tests/unit/model_config_test.cc (ExportedConfig.*) checks every field the export writes
against `expected`, and every field it leaves out against `defaults`, with no Python.

    python3 scripts/make_hf_config_reference.py [OUT]   # default tests/fixtures/hf_config_reference.json

Needs transformers (its config classes only; no torch).
"""
import os
import sys

import transformers
from transformers import GPT2Config, LlamaConfig

sys.path.insert(0, os.path.dirname(__file__))
from fixture_common import write_fixture  # noqa: E402


def gpt2(name, V, T, C, L, H, inner, eps, dtype, bos=-1, eos=-1):
    return dict(name=name, model=dict(arch="gpt2", vocab_size=V, max_seq_len=T, n_layer=L,
                                      n_head=H, n_kv_head=H, hidden=C, intermediate=inner,
                                      norm_eps=eps, rope_theta=1e4, tied_embeddings=True),
                dtype=dtype, bos=bos, eos=eos)


def llama(name, V, T, C, inner, L, H, KV, eps, theta, tied, dtype, bos=-1, eos=-1):
    return dict(name=name, model=dict(arch="llama", vocab_size=V, max_seq_len=T, n_layer=L,
                                      n_head=H, n_kv_head=KV, hidden=C, intermediate=inner,
                                      norm_eps=eps, rope_theta=theta, tied_embeddings=tied),
                dtype=dtype, bos=bos, eos=eos)


# gpt2-124m; the tiny GPT-2 fixture's shape with a 3C MLP; the tiny LLaMA fixture (untied, GQA:
# tests/fixtures/tiny_llama, which tiny_llama_checkpoint's export must reproduce); a tied
# LLaMA without GQA; llama-7b with its tokenizer's ids.
CASES = [
    gpt2("gpt2_124m", 50257, 1024, 768, 12, 12, 3072, 1e-5, "bfloat16", 50256, 50256),
    gpt2("gpt2_narrow_mlp", 67, 16, 32, 2, 4, 96, 1e-5, "float32"),
    llama("tiny_llama_untied_gqa", 71, 32, 32, 40, 2, 4, 2, 1e-5, 1e4, False, "float32"),
    llama("llama_tied", 100, 64, 64, 160, 2, 4, 4, 1e-6, 5e5, True, "bfloat16", 1, 2),
    llama("llama_7b", 32000, 2048, 4096, 11008, 32, 32, 32, 1e-6, 1e4, False, "float16", 1, 2),
]


def hf_kwargs(case):
    m = case["model"]
    kw = dict(vocab_size=m["vocab_size"], tie_word_embeddings=m["tied_embeddings"],
              dtype=case["dtype"])
    if case["bos"] >= 0:
        kw.update(bos_token_id=case["bos"], eos_token_id=case["eos"])
    if m["arch"] == "gpt2":
        kw.update(architectures=["GPT2LMHeadModel"], n_positions=m["max_seq_len"],
                  n_embd=m["hidden"], n_layer=m["n_layer"], n_head=m["n_head"],
                  n_inner=m["intermediate"], layer_norm_epsilon=m["norm_eps"],
                  activation_function="gelu_new")
        return GPT2Config, kw
    kw.update(architectures=["LlamaForCausalLM"], max_position_embeddings=m["max_seq_len"],
              hidden_size=m["hidden"], intermediate_size=m["intermediate"],
              num_hidden_layers=m["n_layer"], num_attention_heads=m["n_head"],
              num_key_value_heads=m["n_kv_head"], rms_norm_eps=m["norm_eps"],
              rope_parameters={"rope_type": "default", "rope_theta": m["rope_theta"]},
              hidden_act="silu", attention_bias=False, mlp_bias=False)
    return LlamaConfig, kw


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "fixtures", "hf_config_reference.json")
    cases = []
    for case in CASES:
        cls, kw = hf_kwargs(case)
        expected, defaults = cls(**kw).to_dict(), cls().to_dict()
        derived = sorted(k for k, v in expected.items()
                         if k not in kw and k != "transformers_version" and v != defaults.get(k))
        cases.append({**case, "expected": expected, "defaults": defaults, "derived": derived})
    write_fixture(out, {"generator": "scripts/make_hf_config_reference.py",
                        "transformers": transformers.__version__, "cases": cases})


if __name__ == "__main__":
    main()
