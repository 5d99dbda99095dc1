#!/usr/bin/env python3
"""Reference for Lion and Adagrad (model/optimizer_math.h, model/cpu/optimizer_step.cc).

10 steps on 1M fp32 parameters with the data of make_cpu_adam_reference.py (the same integer
hash, so tests/unit/cpu_optimizer_test.cc rebuilds them exactly), gradients stored in fp32, bf16
or fp16 and multiplied by 0.7 before each step:
  - Adagrad: torch.optim.Adagrad (lr_decay and weight_decay set);
  - Lion: the update of Chen et al., "Symbolic Discovery of Optimization Algorithms" (2023),
    Algorithm 2 with decoupled weight decay, written here in numpy float32 one operation at a
    time (torch has no Lion; torch's fused multiply-adds would move u = b1 m + (1-b1) g by an
    ulp and so flip sign(u) where u is near zero):
        u = b1 m + (1 - b1) g;  p = p (1 - lr wd) - lr sign(u);  m = b2 m + (1 - b2) g
The fixture holds final parameters and states at every 1021st index and their float64 sums.

  python3 scripts/make_optimizer_reference.py [OUT]   # default tests/fixtures/optimizer_reference.json

Needs torch and numpy (pip install torch numpy); installs nothing.
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(__file__))
from fixture_common import hash_uniform, write_fixture  # noqa: E402
from make_cpu_adam_reference import N, STEPS, STRIDE, GRAD_FACTOR  # noqa: E402

LION = dict(lr=1e-4, betas=(0.9, 0.99), weight_decay=0.1)
ADAGRAD = dict(lr=1e-2, lr_decay=0.01, weight_decay=0.1, eps=1e-10)
DTYPES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def params():
    i = np.arange(N, dtype=np.uint32)
    return (1.0 + 0.5 * hash_uniform(i, 0)).astype(np.float32)


def grad(step, dtype):
    """The stored gradient widened exactly, times the unscale/clip factor (one fp32 rounding)."""
    i = np.arange(N, dtype=np.uint32)
    g = torch.from_numpy((hash_uniform(i, step) / 8).astype(np.float32)).to(dtype).float()
    return (g * torch.tensor(GRAD_FACTOR, dtype=torch.float32)).numpy()


def lion(dtype):
    f = np.float32
    p, m = params(), np.zeros(N, np.float32)
    b1, b2 = f(LION["betas"][0]), f(LION["betas"][1])
    omb1, omb2 = f(1 - LION["betas"][0]), f(1 - LION["betas"][1])
    decay, lr = f(1 - LION["lr"] * LION["weight_decay"]), f(LION["lr"])
    for step in range(1, STEPS + 1):
        g = grad(step, dtype)
        u = (b1 * m) + (omb1 * g)
        p = (p * decay) + (-(lr * np.sign(u)))
        m = (b2 * m) + (omb2 * g)
    return p, {"exp_avg": m}


def adagrad(dtype):
    p = torch.nn.Parameter(torch.from_numpy(params()))
    opt = torch.optim.Adagrad([p], **ADAGRAD, foreach=False)
    for step in range(1, STEPS + 1):
        p.grad = torch.from_numpy(grad(step, dtype))
        opt.step()
    return p.detach().numpy(), {"sum": opt.state[p]["sum"].numpy()}


def case(name, fn, dtype):
    p, states = fn(dtype)
    sample = lambda a: [float(x) for x in a[0:N:STRIDE]]
    out = {"optimizer": name, "grad_dtype": DTYPES[dtype], "param": sample(p),
           "sum_param": float(p.astype(np.float64).sum())}
    for k, a in states.items():
        out[k] = sample(a)
        out["sum_" + k] = float(a.astype(np.float64).sum())
    return out


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "fixtures", "optimizer_reference.json")
    torch.set_num_threads(1)
    cases = [case(n, fn, d) for n, fn in (("Lion", lion), ("Adagrad", adagrad)) for d in DTYPES]
    doc = {"generator": "scripts/make_optimizer_reference.py", "torch": torch.__version__,
           "n": N, "steps": STEPS, "stride": STRIDE, "grad_factor": GRAD_FACTOR,
           "lion": {"lr": LION["lr"], "beta1": LION["betas"][0], "beta2": LION["betas"][1],
                    "weight_decay": LION["weight_decay"]},
           "adagrad": ADAGRAD, "cases": cases}
    write_fixture(out, doc)


if __name__ == "__main__":
    main()
