#!/usr/bin/env python3
"""The tensor-core attention's PTX (model/cuda/attention_mma.cu compiled for sm_90, the
zt_attention_ptx target): each of its kernels issues mma.sync m16n8k16 and declares no local
memory (.local), for every head size and both 16-bit types (the kernels issue, Done when 2).

  attention_ptx_test.py FILE.ptx
"""
import re
import sys

ptx = open(sys.argv[1]).read()
# An entry runs from its .entry line to the next one.
entries = re.split(r"(?m)^(?:\.visible\s+)?\.entry\s+", ptx)[1:]
kernels = {}
for body in entries:
    name = body.split("(", 1)[0].strip()
    kernels[name] = body
fails = []
wanted = {"forward": 0, "dq": 0, "dkv": 0}
for name, body in kernels.items():
    kind = next((k for k in wanted if f"mma_{'backward_' if k != 'forward' else ''}{k}" in name), None)
    if kind is None:
        continue
    wanted[kind] += 1
    if "mma.sync.aligned.m16n8k16.row.col.f32" not in body:
        fails.append(f"{name}: no mma.sync m16n8k16")
    if re.search(r"\.local\s", body):
        fails.append(f"{name}: declares local memory")
# 5 head sizes (32, 64, 80, 96, 128) x bf16 and fp16 x whole or packed rows for each kernel.
for kind, n in wanted.items():
    if n != 20:
        fails.append(f"{n} {kind} kernels in the PTX, expected 20")
for f in fails:
    print("FAIL:", f)
if not fails:
    print(f"ok: {sum(wanted.values())} tensor-core attention kernels, each with mma.sync and no .local")
sys.exit(1 if fails else 0)
