#!/usr/bin/env python3
"""Reference for CPU Adam (model/cpu/cpu_adam.cc): torch.optim.AdamW and torch.optim.Adam (L2).

10 steps on 1M fp32 parameters, with gradients stored in fp32, bf16 or fp16 (rounded by
torch's own .to(dtype)), each multiplied by 0.7 before the step (the factor that unscales and
clips in zerotrain's fused kernel). Data come from an integer hash that tests/unit/
cpu_adam_test.cc repeats exactly, so the fixture holds only results: final parameters and
moments at every 1021st index, and their float64 sums over all elements.

  python3 scripts/make_cpu_adam_reference.py [OUT]   # default tests/fixtures/cpu_adam_reference.json

Needs torch and numpy (pip install torch numpy); installs nothing.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from fixture_common import hash_uniform, write_fixture  # noqa: E402

N = 1 << 20
STEPS = 10
STRIDE = 1021
GRAD_FACTOR = 0.7
HP = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)


def run(grad_dtype, adam_w_mode):
    i = np.arange(N, dtype=np.uint32)
    p = torch.nn.Parameter(torch.from_numpy((1.0 + 0.5 * hash_uniform(i, 0)).astype(np.float32)))
    opt = (torch.optim.AdamW if adam_w_mode else torch.optim.Adam)([p], **HP, foreach=False)
    for step in range(1, STEPS + 1):
        g = torch.from_numpy((hash_uniform(i, step) / 8).astype(np.float32))
        g = g.to(grad_dtype).to(torch.float32)  # the stored 16-bit gradient, widened exactly
        p.grad = g * torch.tensor(GRAD_FACTOR, dtype=torch.float32)
        opt.step()
    st = opt.state[p]
    m, v = st["exp_avg"], st["exp_avg_sq"]
    pick = slice(0, N, STRIDE)
    sample = lambda t: [float(x) for x in t.detach().numpy()[pick]]
    total = lambda t: float(t.detach().double().sum())
    return {
        "grad_dtype": {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[grad_dtype],
        "adam_w_mode": adam_w_mode,
        "param": sample(p), "exp_avg": sample(m), "exp_avg_sq": sample(v),
        "sum_param": total(p), "sum_exp_avg": total(m), "sum_exp_avg_sq": total(v),
    }


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "fixtures", "cpu_adam_reference.json")
    torch.set_num_threads(1)
    cases = [run(d, w) for d in (torch.float32, torch.bfloat16, torch.float16) for w in (True, False)]
    doc = {"generator": "scripts/make_cpu_adam_reference.py", "torch": torch.__version__,
           "n": N, "steps": STEPS, "stride": STRIDE, "grad_factor": GRAD_FACTOR,
           "lr": HP["lr"], "beta1": HP["betas"][0], "beta2": HP["betas"][1], "eps": HP["eps"],
           "weight_decay": HP["weight_decay"], "cases": cases}
    write_fixture(out, doc)


if __name__ == "__main__":
    main()
