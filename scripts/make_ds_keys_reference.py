#!/usr/bin/env python3
"""Writes tests/fixtures/tiny_llama/ds_keys_reference.json: for each ds_config key that
changes training, the losses of a short run with that key set, computed with DeepSpeed 0.19's
own optimizers and schedulers.

The model is tests/fixtures/tiny_llama, its batch that of reference.safetensors (B=2, T=8,
targets not shifted, -100 ignored); every step trains on that batch. The forward and backward
run in float64 (transformers' LlamaForCausalLM with scripts/make_reference.py's float64
patch); the master weights are float32 and the update is DeepSpeed's CPU Adam
(deepspeed.ops.adam.DeepSpeedCPUAdam, which defines bias_correction and adamw_mode as
DeepSpeed trains), after torch.nn.utils.clip_grad_norm_ at gradient_clipping (DeepSpeed's
default 1.0 where the config does not set it; 0 is off), with
the learning rate of DeepSpeed's scheduler classes (deepspeed.runtime.lr_schedules) stepped
once per optimizer step as DeepSpeed's engine does.
The other optimizer types run the class DeepSpeed's engine builds for them
(DeepSpeedEngine._configure_basic_optimizer, deepspeed/runtime/engine.py) with the params it
passes: "Lion", DeepSpeedCPULion (deepspeed.ops.lion; FusedLion on a GPU, the same update);
"Adagrad", torch.optim.Adagrad (DeepSpeedCPUAdagrad only under CPU offload, which has no
lr_decay); "Muon", MuonWithAuxAdam (deepspeed.runtime.zero.muon.muon_optimizer) over the engine's two
param groups (DeepSpeedEngine._muon_param_groups): the parameters deepspeed.initialize tags
use_muon (deepspeed.set_optimizer_flags: 2-D, and not the embedding or lm_head) at muon_lr
(else lr) with momentum and weight_decay, the others (embedding, head, norms) in its AdamW at
adam_lr (else lr) with betas, eps and weight_decay, run inline as on a machine without
FusedAdam. Its Newton-Schulz iteration runs in float32, DeepSpeed's own fallback where the
accelerator lacks fp16 (zerotrain runs it in fp32), so the fixture holds the method and not
fp16's rounding.

Each entry holds the ds_config it ran (an optimizer's base config with one change; AdamW's
entries are unprefixed, the others' "Type/key") and its losses, the loss before each of STEPS
updates.

    python3 scripts/make_ds_keys_reference.py [OUT_FILE]
"""
import copy
import json
import os
import sys

import torch
import torch.nn.functional as F
from deepspeed.ops.adam import DeepSpeedCPUAdam
from deepspeed.runtime import lr_schedules
from safetensors import safe_open
from transformers import LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import IGNORE_INDEX, patch_llama_for_float64  # noqa: E402

STEPS = 6
BASE = {"train_micro_batch_size_per_gpu": 2,
        "optimizer": {"type": "AdamW",
                      "params": {"lr": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8,
                                 "weight_decay": 0.0}}}


def with_params(**kw):
    c = copy.deepcopy(BASE)
    c["optimizer"]["params"].update(kw)
    return c


def variants():
    adam_l2 = with_params(weight_decay=0.1, adam_w_mode=False)
    adam_l2["optimizer"]["type"] = "Adam"
    yield "base", BASE
    yield "betas", with_params(betas=[0.8, 0.9])
    yield "eps", with_params(eps=1e-3)
    yield "weight_decay", with_params(weight_decay=0.1)
    yield "adam_w_mode_false", adam_l2
    yield "bias_correction_false", with_params(bias_correction=False)
    for value in (2.5, 0.0):  # the base run clips at DeepSpeed's default, 1.0
        clip = copy.deepcopy(BASE)
        clip["gradient_clipping"] = value
        yield f"gradient_clipping_{value}", clip
    for name, params in [
        ("WarmupLR", {"warmup_min_lr": 1e-3, "warmup_max_lr": 1e-2, "warmup_num_steps": 4}),
        ("WarmupDecayLR", {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-2, "warmup_num_steps": 2,
                           "total_num_steps": 6, "warmup_type": "linear"}),
        ("WarmupCosineLR", {"warmup_min_ratio": 0.1, "warmup_num_steps": 2,
                            "total_num_steps": 6, "cos_min_ratio": 0.2}),
    ]:
        c = copy.deepcopy(BASE)
        c["scheduler"] = {"type": name, "params": params}
        yield "scheduler_" + name, c
    yield from other_optimizers()


def with_type(type_, **params):
    c = copy.deepcopy(BASE)
    c["optimizer"] = {"type": type_, "params": params}
    return c


# Each optimizer's base params, and each key's changed value (one at a time).
OTHERS = {
    "Lion": ({"lr": 1e-3, "betas": [0.9, 0.99], "weight_decay": 0.0},
             {"lr": 3e-3, "betas": [0.0, 0.0], "weight_decay": 2.0}),
    "Adagrad": ({"lr": 1e-2, "eps": 1e-10, "weight_decay": 0.0, "lr_decay": 0.0},
                {"lr": 3e-2, "eps": 1e-1, "weight_decay": 0.5, "lr_decay": 0.5}),
    "Muon": ({"muon_lr": 2e-2, "adam_lr": 3e-3, "momentum": 0.95, "betas": [0.9, 0.95],
              "eps": 1e-10, "weight_decay": 0.0},
             {"muon_lr": 5e-2, "adam_lr": 1e-2, "momentum": 0.5, "betas": [0.5, 0.8],
              "eps": 1e-3, "weight_decay": 0.5}),
}


def other_optimizers():
    for type_, (base, changes) in OTHERS.items():
        yield f"{type_}/base", with_type(type_, **base)
        for key, value in changes.items():
            yield f"{type_}/{key}", with_type(type_, **{**base, key: value})
    # Muon given lr alone: both halves take it (the engine passes lr to both groups).
    yield "Muon/lr_alone", with_type("Muon", lr=1e-2)
    sched = with_type("Muon", **OTHERS["Muon"][0])
    sched["scheduler"] = {"type": "WarmupCosineLR", "params": {
        "warmup_min_ratio": 0.1, "warmup_num_steps": 2, "total_num_steps": 6, "cos_min_ratio": 0.2}}
    yield "Muon/scheduler_WarmupCosineLR", sched


def fp32_newton_schulz():
    """DeepSpeed's Newton-Schulz in float32, the fallback ns_compute_dtype takes where the
    accelerator lacks fp16 / bf16 (zerotrain runs it in fp32)."""
    from deepspeed.runtime.zero.muon import original_muon
    original_muon.ns_compute_dtype = lambda ns_method="gram": torch.float32


def make_optimizer(cfg, model, master):
    """The optimizer DeepSpeed's engine builds for cfg over the float32 master copies."""
    o = cfg["optimizer"]
    p = o["params"]
    if o["type"] in ("Adam", "AdamW"):
        adamw_mode = o["type"] == "AdamW" or p.get("adam_w_mode", True)  # DeepSpeed's engine
        return DeepSpeedCPUAdam(master, lr=p["lr"], betas=tuple(p["betas"]), eps=p["eps"],
                                weight_decay=p["weight_decay"],
                                bias_correction=p.get("bias_correction", True),
                                adamw_mode=adamw_mode)
    if o["type"] == "Lion":
        from deepspeed.ops.lion import DeepSpeedCPULion
        return DeepSpeedCPULion(master, **p)
    if o["type"] == "Adagrad":
        return torch.optim.Adagrad(master, **p)
    # Muon: deepspeed.initialize's tags (set_optimizer_flags), the engine's two groups and its
    # MuonWithAuxAdam, whose AdamW half runs inline where FusedAdam cannot be built (the CPU).
    import types
    import deepspeed
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero.muon.muon_optimizer import MuonWithAuxAdam
    p = dict(p)
    deepspeed.set_optimizer_flags(types.SimpleNamespace(optimizer_name="muon", optimizer_params=p),
                                  model)
    for w, m in zip(model.parameters(), master):
        m.use_muon = w.use_muon
        m.requires_grad_(True)  # the engine's groups keep trainable parameters only
    adam_w_mode = p.pop("adam_w_mode", True)
    groups = DeepSpeedEngine._muon_param_groups(master, p)
    return MuonWithAuxAdam(groups, adam_optimizer=None, adam_w_mode=adam_w_mode)


def run(cfg, src, input_ids, targets):
    model = LlamaForCausalLM.from_pretrained(src, attn_implementation="eager").double()
    master = [p.detach().float().clone().requires_grad_(False) for p in model.parameters()]
    opt = make_optimizer(cfg, model, master)
    sched = None
    if "scheduler" in cfg:
        s = cfg["scheduler"]
        sched = getattr(lr_schedules, s["type"])(opt, **s["params"])
    losses = []
    vocab = model.config.vocab_size
    for _ in range(STEPS):
        with torch.no_grad():
            for w, m in zip(model.parameters(), master):
                w.copy_(m.double())
        model.zero_grad()
        logits = model(input_ids=input_ids).logits
        loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1),
                               ignore_index=IGNORE_INDEX)
        loss.backward()
        losses.append(loss.item())
        clip = cfg.get("gradient_clipping", 1.0)  # DeepSpeed's default (runtime/constants.py)
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        for w, m in zip(model.parameters(), master):
            m.grad = w.grad.float()
        opt.step()
        if sched is not None:
            sched.step()
    return losses


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    src = os.path.join(root, "tests", "fixtures", "tiny_llama")
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(src, "ds_keys_reference.json")
    patch_llama_for_float64()
    fp32_newton_schulz()
    with safe_open(os.path.join(src, "reference.safetensors"), "pt") as f:
        input_ids, targets = f.get_tensor("input_ids"), f.get_tensor("targets")
    result = {"script": "scripts/make_ds_keys_reference.py", "steps": STEPS, "runs": {}}
    for name, cfg in variants():
        losses = run(cfg, src, input_ids, targets)
        result["runs"][name] = {"ds_config": cfg, "losses": losses}
        print(name, " ".join(f"{x:.6f}" for x in losses))
    with open(out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
