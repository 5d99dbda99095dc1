#!/usr/bin/env python3
"""Writes tests/fixtures/loss_scaler_reference.json: the loss scale and skip decision DeepSpeed's
own DynamicLossScaler gives for fixed overflow patterns, for tests/unit/loss_scaler_test.cc.

Needs torch and DeepSpeed importable (this script installs nothing). If `import deepspeed`
fails, pass --loss-scaler-py PATH to load deepspeed/runtime/fp16/loss_scaler.py standalone.

The scaler is built as ZeRO stages 1-3 build it (CreateLossScaler -> DynamicLossScaler with
dynamic_loss_args from the fp16 section, raise_error_at_min_scale left at its default True), and
driven as their step() drives it: update_scale(overflow) once per optimizer step; an overflowing
step is skipped. Recorded per case: "overflow" and "skip" as strings of 0/1 (one char a step),
"scales"[k] = the scale after update k (the scale the next step uses), and "error_at" = the step
whose update raised (no scale recorded for it), or -1.
"""
import argparse
import importlib.util
import json
import logging
import os
import random
import sys
import types

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "loss_scaler_reference.json")


def load_loss_scaler(path):
    if path is None:
        import deepspeed
        from deepspeed.runtime.fp16 import loss_scaler
        mod, version = loss_scaler, deepspeed.__version__
    else:
        # Standalone: provide the small modules it imports.
        logger = logging.getLogger("loss_scaler")
        stubs = {"deepspeed": {}, "deepspeed.runtime": {},
                 "deepspeed.runtime.config_utils": {"DeepSpeedConfigObject": object},
                 "deepspeed.comm": {}, "deepspeed.utils": {"logger": logger,
                                                           "log_dist": lambda *a, **k: None},
                 "deepspeed.runtime.utils": {"has_inf_or_nan": None}}
        for name, attrs in stubs.items():
            m = types.ModuleType(name)
            m.__dict__.update(attrs)
            sys.modules.setdefault(name, m)
        sys.modules["deepspeed"].comm = sys.modules["deepspeed.comm"]
        spec = importlib.util.spec_from_file_location("loss_scaler", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        version = "standalone:" + path
    # update_scale asks dist.get_rank() only to decide who logs; no process group needed.
    mod.dist = types.SimpleNamespace(get_rank=lambda: 0)
    return mod, version


def fp16_section(power=16, window=1000, hysteresis=2, consecutive=False, min_scale=1):
    return {"loss_scale": 0, "initial_scale_power": power, "loss_scale_window": window,
            "hysteresis": hysteresis, "consecutive_hysteresis": consecutive,
            "min_loss_scale": min_scale}


def random_pattern(seed, n, p):
    rng = random.Random(seed)
    return "".join("1" if rng.random() < p else "0" for _ in range(n))


def cases():
    out = []
    # Small windows, every hysteresis / consecutive_hysteresis combination, random overflows.
    for h in (1, 2, 3):
        for consecutive in (False, True):
            for seed, p in ((1, 0.15), (2, 0.3)):
                out.append((f"random_p{p}_seed{seed}_h{h}_{'consec' if consecutive else 'plain'}",
                            fp16_section(power=12, window=3, hysteresis=h,
                                         consecutive=consecutive),
                            random_pattern(seed * 10 + h, 300, p)))
    bursts = ("0000011100000000001000000011110000000000000000101010100000000000000"
              "1100000000000000000011111000000000000000000000000")
    for h in (1, 2, 3):
        for consecutive in (False, True):
            out.append((f"bursts_h{h}_{'consec' if consecutive else 'plain'}",
                        fp16_section(power=16, window=4, hysteresis=h, consecutive=consecutive),
                        bursts))
    out.append(("long_clean_window3", fp16_section(power=4, window=3),
                "0" * 40 + "1" + "0" * 20 + "11" + "0" * 20))
    out.append(("long_clean_window1", fp16_section(power=0, window=1, hysteresis=1),
                "0" * 10 + "1" + "0" * 5 + "101" + "0" * 5))
    # DeepSpeed defaults over a long run: doubling every 1000 clean steps.
    defaults = ["0"] * 3500
    for i in (0, 1, 2, 3, 700, 1701, 1702, 2900):
        defaults[i] = "1"
    out.append(("defaults_long", fp16_section(), "".join(defaults)))
    # Reaching the minimum scale: DeepSpeed 0.19 raises on an overflow at the minimum.
    out.append(("min_scale_error_h1", fp16_section(power=3, window=5, hysteresis=1,
                                                   min_scale=1), "1" * 6))
    out.append(("min_scale_error_h2", fp16_section(power=2, window=5, hysteresis=2,
                                                   min_scale=1), "1" * 6))
    out.append(("min_scale_error_h3_consec", fp16_section(power=2, window=2, hysteresis=3,
                                                          consecutive=True, min_scale=2),
                "11011" + "1" * 5))
    out.append(("min_scale_not_power_of_two", fp16_section(power=5, window=2, hysteresis=1,
                                                           min_scale=3), "11110001" + "1"))
    out.append(("initial_below_min", fp16_section(power=1, window=2, hysteresis=1,
                                                  min_scale=4), "1000011"))
    out.append(("min_scale_recovers", fp16_section(power=2, window=2, hysteresis=1,
                                                   min_scale=1), "11" + "0" * 7 + "1"))
    return out


def run_case(ls, fp16, pattern):
    args = {ls.INITIAL_LOSS_SCALE: 2**fp16["initial_scale_power"],
            ls.SCALE_WINDOW: fp16["loss_scale_window"],
            ls.DELAYED_SHIFT: fp16["hysteresis"],
            ls.CONSECUTIVE_HYSTERESIS: fp16["consecutive_hysteresis"],
            ls.MIN_LOSS_SCALE: fp16["min_loss_scale"]}
    scaler = ls.CreateLossScaler(dtype=torch.half, static_loss_scale=fp16["loss_scale"],
                                 dynamic_scaling=True, dynamic_loss_args=args)
    assert scaler.dynamic
    initial = float(scaler.loss_scale)
    scales, skips, error_at, error = [], [], -1, ""
    for k, c in enumerate(pattern):
        overflow = c == "1"
        try:
            scaler.update_scale(overflow)
        except Exception as e:  # noqa: BLE001 -- DeepSpeed raises a bare Exception
            error_at, error = k, str(e)
            break
        skips.append("1" if overflow else "0")  # stage_1_and_2 / stage3 step(): skip iff overflow
        scales.append(float(scaler.loss_scale))
    return {"initial_scale": initial, "overflow": pattern, "skip": "".join(skips),
            "scales": scales, "error_at": error_at, "error": error}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loss-scaler-py", default=None)
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args()
    ls, version = load_loss_scaler(a.loss_scaler_py)
    result = {"source": f"DeepSpeed {version} deepspeed/runtime/fp16/loss_scaler.py",
              "convention": "scales[k] is the scale after update k (used by step k+1); "
                            "skip[k] is whether step k is skipped; error_at is the step whose "
                            "update raised, or -1",
              "cases": []}
    for name, fp16, pattern in cases():
        r = run_case(ls, fp16, pattern)
        result["cases"].append({"name": name, "fp16": fp16, **r})
        print(f"{name}: {len(r['scales'])} steps, final scale {r['scales'][-1] if r['scales'] else r['initial_scale']}, error_at {r['error_at']}")
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
