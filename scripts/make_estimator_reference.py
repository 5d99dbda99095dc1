#!/usr/bin/env python3
"""Writes tests/fixtures/deepspeed_estimates.json: DeepSpeed's own memory estimates, for
tests/unit/estimator_test.cc.

Calls the real functions of deepspeed/runtime/zero/stage_1_and_2.py and stage3.py (DeepSpeed
0.19): estimate_zero2_model_states_mem_needs / estimate_zero3_model_states_mem_needs for every
offload option DeepSpeed's *_all_cold printout lists, the printouts themselves (stdout of
estimate_zero{2,3}_model_states_mem_needs_all_cold), and, for the "live" variants,
model_to_params() of Hugging Face models built from zerotrain's small presets.

Needs torch, transformers and DeepSpeed importable; installs nothing. Deterministic.
"""
import contextlib
import io
import json
import logging
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "deepspeed_estimates.json")

logging.disable(logging.WARNING)
import deepspeed  # noqa: E402
from deepspeed.runtime.zero import stage_1_and_2 as z2  # noqa: E402
from deepspeed.runtime.zero import stage3 as z3  # noqa: E402

# (total_params, largest_layer_params, gpus_per_node, nodes)
CASES = [
    (124_439_808, 38_597_376, 1, 1),
    (124_439_808, 38_597_376, 8, 1),
    (1_100_048_384, 65_536_000, 1, 1),
    (1_100_048_384, 65_536_000, 4, 2),
    (6_738_415_616, 131_072_000, 8, 1),
    (6_738_415_616, 131_072_000, 8, 4),
    (7_500_000_000, 500_000_000, 16, 4),
    (3_000_000_007, 123_456_789, 3, 5),
    (1_000_000_000_000, 2_000_000_000, 8, 128),
]


def printed(fn, **kw):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        fn(**kw)
    return buf.getvalue()


def main():
    cases = []
    for P, L, G, n in CASES:
        zero2 = []
        for cpu_offload in [True, False]:
            cpu, gpu = z2.estimate_zero2_model_states_mem_needs(
                total_params=P, num_gpus_per_node=G, num_nodes=n, cpu_offload=cpu_offload)
            zero2.append({"offload_optimizer": "cpu" if cpu_offload else "none",
                          "cpu_bytes": cpu, "gpu_bytes": gpu})
        zero3 = []
        for cpu_offload in [True, False]:
            for cpu_offload_params in [True, False]:
                if not cpu_offload and cpu_offload_params:
                    continue
                for zero_init in [True, False]:
                    cpu, gpu, lmem = z3.estimate_zero3_model_states_mem_needs(
                        total_params=P, largest_layer_params=L, num_gpus_per_node=G,
                        num_nodes=n, cpu_offload=cpu_offload,
                        cpu_offload_params=cpu_offload_params, zero_init=zero_init)
                    zero3.append({"offload_param": "cpu" if cpu_offload_params else "none",
                                  "offload_optimizer": "cpu" if cpu_offload else "none",
                                  "zero_init": int(zero_init),
                                  "cpu_bytes": cpu, "gpu_bytes": gpu,
                                  "largest_layer_memory": lmem})
        cases.append({
            "total_params": P, "largest_layer_params": L, "gpus_per_node": G, "nodes": n,
            "zero2": zero2, "zero3": zero3,
            "zero2_printout": printed(z2.estimate_zero2_model_states_mem_needs_all_cold,
                                      total_params=P, num_gpus_per_node=G, num_nodes=n),
            "zero3_printout": printed(z3.estimate_zero3_model_states_mem_needs_all_cold,
                                      total_params=P, largest_layer_params=L,
                                      num_gpus_per_node=G, num_nodes=n),
        })

    # Live: DeepSpeed's model_to_params on HF models with zerotrain's small presets' shapes.
    import torch
    import transformers
    torch.manual_seed(0)
    live = []
    presets = {
        "tiny-gpt2": transformers.GPT2Config(vocab_size=256, n_positions=64, n_embd=64,
                                             n_layer=2, n_head=4),
        "tiny-llama": transformers.LlamaConfig(vocab_size=256, hidden_size=64,
                                               intermediate_size=128, num_hidden_layers=2,
                                               num_attention_heads=4, num_key_value_heads=2,
                                               max_position_embeddings=64),
        "shakespeare-llama": transformers.LlamaConfig(
            vocab_size=32000, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256),
    }
    for name, cfg in presets.items():
        model = (transformers.GPT2LMHeadModel(cfg) if isinstance(cfg, transformers.GPT2Config)
                 else transformers.LlamaForCausalLM(cfg))
        P, L = z3.model_to_params(model)
        live.append({"preset": name, "total_params": P, "largest_layer_params": L,
                     "zero3_live_printout": printed(
                         z3.estimate_zero3_model_states_mem_needs_all_live, model=model,
                         num_gpus_per_node=2, num_nodes=1)})

    doc = {"deepspeed_version": deepspeed.__version__,
           "python_version": sys.version.split()[0],
           "note": "printouts are DeepSpeed's stdout; f'{OffloadDeviceEnum.cpu:4}' is meant to be 'cpu ' but "
                   "prints 'OffloadDeviceEnum.cpu' on some Python versions (3.11 here)",
           "cases": cases, "live": live}
    with open(OUT, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print("wrote", os.path.normpath(OUT))


if __name__ == "__main__":
    main()
