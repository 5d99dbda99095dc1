#!/usr/bin/env python3
"""Reference for Muon (model/optimizer_math.h, model/newton_schulz.h, zero/muon_rule.h).

Muon as its author wrote it (K. Jordan et al. 2024, "Muon: an optimizer for hidden layers";
the muon_update and zeropower_via_newtonschulz5 that DeepSpeed's MuonWithAuxAdam runs), in
numpy float64 rather than bf16, over 10 steps of one flat unit holding a wide matrix, a vector,
a tall matrix and a square one. On each matrix (nn.Linear (out, in) orientation):
    m = lerp(m, g, 1 - mu);  u = lerp(g, m, mu)                          (Nesterov)
    X = u / (|u|_F + 1e-7), transposed when tall; 5 times:
        A = X X^T;  B = b A + c A A;  X = a X + B X      (a, b, c) = (3.4445, -4.7750, 2.0315)
    o = X (transposed back) * sqrt(max(1, rows / cols))
    p = p (1 - lr wd) - lr o
and on the vector AdamW (torch.optim.AdamW's update, bias-corrected) at its own learning rate
(adam_lr, as DeepSpeed gives MuonWithAuxAdam's other half). Parameters are
1 + 0.5 hash(i, 0) and step t's gradient hash(i, t) / 8 in fp32, times 0.7 (the unscale and
clip factor), as tests/unit/cpu_optimizer_test.cc rebuilds them. The fixture holds the final
parameters, momentum (exp_avg) and AdamW's exp_avg_sq of every element.

  python3 scripts/make_muon_reference.py [OUT]   # default tests/fixtures/muon_reference.json

Needs numpy; installs nothing.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from fixture_common import hash_uniform, write_fixture  # noqa: E402

STEPS = 10
GRAD_FACTOR = 0.7
HP = dict(lr=0.02, adam_lr=3e-3, momentum=0.95, betas=(0.9, 0.95), eps=1e-10, weight_decay=0.1)
# (name, offset, shape): matrices with two dims, the rest AdamW's
LAYOUT = [("wide", 0, (24, 40)), ("bias", 960, (16,)), ("tall", 976, (48, 16)),
          ("square", 1744, (32, 32))]
N = 2768


def newton_schulz5(g):
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g / (np.linalg.norm(g) + 1e-7)
    tall = g.shape[0] > g.shape[1]
    if tall:
        x = x.T
    for _ in range(5):
        A = x @ x.T
        B = b * A + c * A @ A
        x = a * x + B @ x
    if tall:
        x = x.T
    return x * np.sqrt(max(1.0, g.shape[0] / g.shape[1]))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "fixtures", "muon_reference.json")
    i = np.arange(N, dtype=np.uint32)
    p = (1.0 + 0.5 * hash_uniform(i, 0)).astype(np.float32).astype(np.float64)
    m, v = np.zeros(N), np.zeros(N)
    lr, adam_lr, mu, wd, eps = HP["lr"], HP["adam_lr"], HP["momentum"], HP["weight_decay"], HP["eps"]
    b1, b2 = HP["betas"]
    for t in range(1, STEPS + 1):
        g = (hash_uniform(i, t) / 8).astype(np.float32).astype(np.float64) * GRAD_FACTOR
        for _, off, shape in LAYOUT:
            s = slice(off, off + int(np.prod(shape)))
            if len(shape) == 2:
                m[s] = m[s] + (1 - mu) * (g[s] - m[s])
                u = g[s] + mu * (m[s] - g[s])
                o = newton_schulz5(u.reshape(shape)).reshape(-1)
                p[s] = p[s] * (1 - lr * wd) - lr * o
            else:
                p[s] *= 1 - adam_lr * wd
                m[s] = b1 * m[s] + (1 - b1) * g[s]
                v[s] = b2 * v[s] + (1 - b2) * g[s] ** 2
                denom = np.sqrt(v[s]) / np.sqrt(1 - b2 ** t) + eps
                p[s] -= adam_lr / (1 - b1 ** t) * m[s] / denom
    doc = {"generator": "scripts/make_muon_reference.py", "numpy": np.__version__, "n": N,
           "steps": STEPS, "grad_factor": GRAD_FACTOR, **HP,
           "layout": [{"name": n, "offset": o, "shape": list(s)} for n, o, s in LAYOUT],
           "param": p.tolist(), "exp_avg": m.tolist(), "exp_avg_sq": v.tolist()}
    write_fixture(out, doc)


if __name__ == "__main__":
    main()
