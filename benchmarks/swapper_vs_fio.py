#!/usr/bin/env python3
"""The NVMe swapper against fio on the same file system, block size and queue depth.

Each round runs build/benchmarks/swapper_bench (writes, then reads, one file through io_uring
with O_DIRECT) and fio (ioengine io_uring, direct=1, the same file size, bs and iodepth, a
write job then a read job on a laid-out file), alternating which goes first; figures are
medians over rounds.

  python3 benchmarks/swapper_vs_fio.py --dir /local_nvme [--markdown docs/offload.md]

Needs fio (apt-get install fio; scripts/setup.sh installs it).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_md import load_average, publish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fio(a, path, rw):
    out = subprocess.run(["fio", "--name=zt", f"--filename={path}", f"--size={a.bytes}",
                          f"--bs={a.block_size}", f"--iodepth={a.queue_depth}",
                          "--ioengine=io_uring", "--direct=1", f"--rw={rw}", f"--loops={a.reps}",
                          # fio at its fastest here: batched submission, registered buffers
                          f"--iodepth_batch_submit={a.queue_depth}",
                          f"--iodepth_batch_complete_max={a.queue_depth}", "--fixedbufs=1",
                          "--registerfiles=1",
                          "--output-format=json"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["jobs"][0][rw]["bw_bytes"] / 1e9


def ours(a, fixed=True):
    out = subprocess.run([a.binary, "--dir", a.dir, "--bytes", str(a.bytes), "--block_size",
                          str(a.block_size), "--queue_depth", str(a.queue_depth), "--reps",
                          str(a.reps), "--fixed_buffers", "1" if fixed else "0"],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--bytes", type=int, default=1 << 30)
    ap.add_argument("--block_size", type=int, default=1 << 20)
    ap.add_argument("--queue_depth", type=int, default=8)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "benchmarks", "swapper_bench"))
    ap.add_argument("--markdown", default=None)
    a = ap.parse_args()
    t0, loads = time.time(), []
    res = {"ours_w": [], "ours_r": [], "plain_w": [], "plain_r": [], "fio_w": [], "fio_r": []}
    registered = 0
    path = os.path.join(a.dir, f"zt_fio_{os.getpid()}.tmp")
    try:
        for r in range(a.rounds):
            sides = ("ours", "plain", "fio")
            for side in (sides if r % 2 == 0 else sides[::-1]):
                loads.append(load_average())
                if side != "fio":
                    o = ours(a, fixed=side == "ours")
                    res[side + "_w"].append(o["write_GBps"])
                    res[side + "_r"].append(o["read_GBps"])
                    if side == "ours":
                        registered = o["registered_bytes"]
                else:
                    res["fio_w"].append(fio(a, path, "write"))
                    res["fio_r"].append(fio(a, path, "read"))
    finally:
        if os.path.exists(path):
            os.remove(path)
    m = {k: statistics.median(v) for k, v in res.items()}
    lines = [
        "## The NVMe swapper against fio",
        "",
        f"One {a.bytes / 2**30:.2f} GiB file in `{a.dir}`, block size {a.block_size} bytes, queue "
        f"depth {a.queue_depth}, io_uring with O_DIRECT on both sides (fio with batched "
        "submission, fixed buffers and registered files, its fastest settings here); GB/s = 1e9 "
        f"bytes/s, medians over {a.rounds} alternating rounds of {a.reps} passes. The development "
        "machine's drive is a virtual disk, not an NVMe device: the ratio is the claim, not the "
        "GB/s.",
        "",
        "The swapper registers its window with io_uring (fixed buffers, as the offload's "
        "windows are) and its files; `unregistered` is the same swapper without the fixed "
        "buffer (`--fixed_buffers 0`; its file stays registered). "
        + (f"The kernel took the whole {registered / 2**30:.2f} GiB window."
           if registered >= a.bytes else
           f"Here the kernel registered {registered} of the {a.bytes} bytes (the memlock limit, "
           "or no sparse tables before Linux 5.19): requests outside them are plain, so the two "
           "columns differ by that much at most."),
        "",
        "| direction | zerotrain swapper | unregistered | fio | swapper / fio | unregistered / fio |",
        "|---|---:|---:|---:|---:|---:|",
    ] + [f"| {name} | {m['ours_' + d]:.2f} | {m['plain_' + d]:.2f} | {m['fio_' + d]:.2f} | "
         f"**{m['ours_' + d] / m['fio_' + d]:.2f}x** | {m['plain_' + d] / m['fio_' + d]:.2f}x |"
         for name, d in (("write", "w"), ("read", "r"))]
    publish(lines, loads, t0, a.markdown, "swapper_vs_fio")


if __name__ == "__main__":
    main()
