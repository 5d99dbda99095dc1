#!/usr/bin/env python3
"""Writes tests/fixtures/lr_reference.json: the lr DeepSpeed's own schedulers give each
optimizer step, for tests/unit/lr_schedule_test.cc.

Needs torch and DeepSpeed importable (`pip install deepspeed`; this script installs nothing).
If `import deepspeed` fails (e.g. no usable accelerator), pass --lr-schedules-py PATH to load
deepspeed/runtime/lr_schedules.py standalone.

Convention recorded: "lrs"[k] is the lr the optimizer uses for optimizer step k (0-based),
i.e. the lr after the scheduler is built (k = 0), then after k calls of scheduler.step() --
DeepSpeed's engine steps the scheduler after each applied optimizer step.
"""
import argparse
import importlib.util
import json
import logging
import os
import sys
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "lr_reference.json")


def load_lr_schedules(path):
    if path is None:
        import deepspeed
        from deepspeed.runtime import lr_schedules
        return lr_schedules, deepspeed.__version__
    # Standalone: provide the two small modules it imports.
    logger = logging.getLogger("lr_schedules")
    for name, attrs in {"deepspeed": {}, "deepspeed.runtime": {},
                        "deepspeed.runtime.constants": {},
                        "deepspeed.utils": {"logger": logger}}.items():
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        sys.modules.setdefault(name, mod)
    spec = importlib.util.spec_from_file_location("lr_schedules", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, "standalone:" + path


# (name, optimizer lr, scheduler section as in ds_config.json, number of steps, steps to keep)
def cases():
    dense = lambda n: list(range(n))
    sparse = sorted(set(list(range(0, 12)) + list(range(0, 6001, 137)) +
                        [998, 999, 1000, 1001, 1002, 4999, 5000, 5001, 5002, 6000]))
    return [
        ("warmup_lr_defaults", 3e-4, {"type": "WarmupLR", "params": {}}, 1200, sparse),
        ("warmup_lr_log", 1e-3,
         {"type": "WarmupLR", "params": {"warmup_min_lr": 1e-5, "warmup_max_lr": 5e-4,
                                         "warmup_num_steps": 10}}, 20, dense(20)),
        ("warmup_lr_linear", 1e-3,
         {"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 2e-3,
                                         "warmup_num_steps": 7, "warmup_type": "linear"}},
         15, dense(15)),
        ("warmup_lr_one_step", 1e-3,
         {"type": "WarmupLR", "params": {"warmup_num_steps": 1, "warmup_type": "linear"}},
         6, dense(6)),
        ("warmup_decay_defaults", 3e-4,
         {"type": "WarmupDecayLR", "params": {"total_num_steps": 5000}}, 6001, sparse),
        ("warmup_decay_log", 1e-3,
         {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 1e-6, "warmup_max_lr": 6e-4,
                                              "warmup_num_steps": 8, "total_num_steps": 30}},
         40, dense(40)),
        ("warmup_decay_linear_short", 1e-3,
         {"type": "WarmupDecayLR", "params": {"warmup_max_lr": 1e-3, "warmup_num_steps": 10,
                                              "total_num_steps": 5,
                                              "warmup_type": "linear"}}, 16, dense(16)),
        ("warmup_cosine_defaults", 6e-4,
         {"type": "WarmupCosineLR", "params": {"total_num_steps": 5000}}, 6001, sparse),
        ("warmup_cosine_linear", 6e-4,
         {"type": "WarmupCosineLR", "params": {"total_num_steps": 50, "warmup_num_steps": 5,
                                               "warmup_min_ratio": 0.1, "cos_min_ratio": 0.1,
                                               "warmup_type": "linear"}}, 60, dense(60)),
        ("warmup_cosine_log", 1e-3,
         {"type": "WarmupCosineLR", "params": {"total_num_steps": 25, "warmup_num_steps": 6,
                                               "cos_min_ratio": 0.0}}, 30, dense(30)),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lr-schedules-py", default=None)
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    mod, version = load_lr_schedules(args.lr_schedules_py)
    out = {"source": "DeepSpeed " + version + " deepspeed/runtime/lr_schedules.py",
           "convention": "lrs[i] is the lr of optimizer step steps[i] (0-based)",
           "cases": []}
    for name, lr, sched, n, keep in cases():
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
        s = getattr(mod, sched["type"])(opt, **sched["params"])
        lrs = []
        for k in range(n):
            lrs.append(float(opt.param_groups[0]["lr"]))
            s.step()
        keep = [k for k in keep if k < n]
        out["cases"].append({"name": name, "optimizer_lr": lr, "scheduler": sched,
                             "steps": keep, "lrs": [lrs[k] for k in keep]})
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print("wrote", os.path.normpath(args.out), "from", out["source"])


if __name__ == "__main__":
    main()
