"""What the fixture scripts share: their deterministic data, rebuilt exactly by the C++ tests
that read them, and how a fixture file is written."""
import json

import numpy as np


def hash_uniform(i, stream):
    """Uniform on [-1, 1) on a 2^-23 grid (exact in fp32); same integer steps as the C++ test."""
    with np.errstate(over="ignore"):
        x = (i * np.uint32(0x9E3779B1) + np.uint32(stream) * np.uint32(0x85EBCA77)
             + np.uint32(0x165667B1)).astype(np.uint32)
        x ^= x >> np.uint32(15)
        x = (x * np.uint32(0x2C1B3C6D)).astype(np.uint32)
        x ^= x >> np.uint32(12)
        x = (x * np.uint32(0x297A2D39)).astype(np.uint32)
        x ^= x >> np.uint32(15)
    return ((x >> np.uint32(8)).astype(np.int64) - (1 << 23)).astype(np.float64) / (1 << 23)


def write_fixture(out, doc):
    """Writes doc as one line of compact JSON to out and says so."""
    with open(out, "w") as f:
        json.dump(doc, f, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out}")
