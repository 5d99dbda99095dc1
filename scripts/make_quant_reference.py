#!/usr/bin/env python3
"""Writes tests/fixtures/quant_reference.json: block-wise symmetric quantization (ZeRO++'s qwZ
int8 and qgZ int4; model/quantize.h) computed here with numpy, vectorised over whole blocks, for
tests/unit/quantize_test.cc to hold every backend's kernel to.

Per block of `block` elements: scale = max|x| / qmax (float32, qmax = 2^(bits-1) - 1),
q = clip(round_half_even(x / scale), -qmax, qmax), x' = q * scale. Each case records its input
(float32 values; for "bf16" cases values exactly representable in bfloat16), the integers q, the
scales and the dequantized x', and the largest |x - x'| / (max|x| of its block).

Needs numpy only: python3 scripts/make_quant_reference.py [OUT]
"""
import os
import sys

import numpy as np

from fixture_common import hash_uniform, write_fixture

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "quant_reference.json")


def to_bf16(x):
    """float32 -> the nearest bfloat16 (ties to even), returned as float32."""
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32)


def quantize(x, bits, block):
    qmax = np.float32(2 ** (bits - 1) - 1)
    n = x.size
    pad = (-n) % block
    xb = np.concatenate([x, np.zeros(pad, np.float32)]).reshape(-1, block)
    absmax = np.abs(xb).max(axis=1).astype(np.float32)
    scale = (absmax / qmax).astype(np.float32)
    safe = np.where(scale == 0, np.float32(1), scale)
    q = np.where(scale[:, None] == 0, np.float32(0),
                 np.clip(np.rint((xb / safe[:, None]).astype(np.float32)), -qmax, qmax))
    q = q.astype(np.int64)  # integers: no negative zero
    deq = (q.astype(np.float32) * scale[:, None]).astype(np.float32)
    err = np.abs(xb - deq).max(axis=1) / np.where(absmax == 0, 1, absmax)
    return (q.reshape(-1)[:n].astype(np.int64), scale, deq.reshape(-1)[:n], float(err.max()))


def case(name, n, bits, block, dtype, stream, zero_block=False, ties=False):
    x = (hash_uniform(np.arange(n, dtype=np.uint32), stream) * 3.0).astype(np.float32)
    x[::17] *= 40  # an outlier now and then, as gradients have
    if zero_block:
        x[block:2 * block] = 0  # a block of zeros: scale 0
    if ties:
        # values that land exactly on k + 1/2 steps of the first block's scale: rounding to even
        x[0] = np.float32(2 ** (bits - 1) - 1)  # absmax 127 or 7 -> scale 1
        x[1:7] = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5], np.float32)
        x[7:block] = np.clip(x[7:block], -5, 5)
    if dtype == "bf16":
        x = to_bf16(x)
    q, scales, deq, err = quantize(x, bits, block)
    return {"name": name, "n": n, "bits": bits, "block": block, "dtype": dtype,
            "x": [float(v) for v in x], "q": [int(v) for v in q],
            "scales": [float(v) for v in scales], "dequantized": [float(v) for v in deq],
            "max_error_over_absmax": err}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else OUT
    cases = [
        case("int8 fp32 ties", 300, 8, 64, "fp32", 1, zero_block=True, ties=True),
        case("int8 bf16 uneven tail", 1000, 8, 128, "bf16", 2),
        case("int4 fp32 ties", 101, 4, 32, "fp32", 3, zero_block=True, ties=True),
        case("int4 bf16 odd length", 777, 4, 64, "bf16", 4),
        case("int4 fp32 one short block", 5, 4, 8, "fp32", 5),
    ]
    write_fixture(out, {"generator": "scripts/make_quant_reference.py (numpy "
                        + np.__version__ + ")", "cases": cases})


if __name__ == "__main__":
    main()
