#!/usr/bin/env python3
"""Each CUDA kernel's registers, stack frame, spills and shared memory for sm_90, as ptxas
reports them (-Xptxas -v), checked against docs/kernel_resources.md (issue 25).

The build of model/cuda keeps ptxas's report of each object in OBJECT.ptxas
(scripts/ptxas_launcher.sh) and runs this after linking zt_model_cuda:

  scripts/kernel_budget.py --check DIR    fails (exit 1) when a kernel in DIR's reports spills
                                          registers, or has a larger stack frame (local memory:
                                          arrays indexed at run time) than the docs record for it
  scripts/kernel_budget.py --record DIR   rewrites docs/kernel_resources.md from DIR's reports

So a kernel that starts to spill, or a local array that comes back, breaks the build; a kernel
that gets better is recorded with --record (the stack frame can then only stay or shrink).
"""
import argparse
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "kernel_resources.md")
HEADER = """# CUDA kernels' resources (sm_90)

ptxas's report (-Xptxas -v) for every kernel of model/cuda, written by
`scripts/kernel_budget.py --record build/model` and enforced by the build: a kernel that spills
registers, or whose stack frame (local memory) grows past the figure here, fails it. Stack
frames come from arrays indexed at run time or too many live values; each costs device memory
traffic per thread.

| kernel | registers | stack frame (bytes) | spill stores | spill loads | shared memory (bytes) |
|---|---|---|---|---|---|
"""


def parse(paths):
    """{kernel: {regs, stack, spill_st, spill_ld, smem}} from ptxas -v reports."""
    out = {}
    for path in paths:
        name = props = None  # the kernel being compiled; the function the next figures are for
        for line in open(path, errors="replace"):
            m = re.search(r"Compiling entry function '(\S+)'", line)
            if m:
                name = m.group(1)
                out[name] = dict(regs=0, stack=0, spill_st=0, spill_ld=0, smem=0)
                continue
            m = re.search(r"Function properties for (\S+)", line)
            if m:
                props = m.group(1)
                continue
            m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill "
                          r"loads", line)
            if m and props is not None:
                if props == name:
                    out[name].update(stack=int(m[1]), spill_st=int(m[2]), spill_ld=int(m[3]))
                elif int(m[2]) or int(m[3]):  # a device function's spills fail the build too
                    k = name or props
                    out.setdefault(k, dict(regs=0, stack=0, spill_st=0, spill_ld=0, smem=0))
                    out[k]["spill_st"] += int(m[2])
                    out[k]["spill_ld"] += int(m[3])
                props = None
                continue
            if name is None:
                continue
            m = re.search(r"Used (\d+) registers", line)
            if m:
                out[name]["regs"] = int(m[1])
                s = re.search(r"(\d+) bytes smem", line)
                out[name]["smem"] = int(s[1]) if s else 0
    names = list(out)
    plain = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                           text=True).stdout.split("\n") if names else []
    return {(p or n): out[n] for n, p in zip(names, plain + [""] * len(names))}


def table(kernels):
    rows = [f"| `{k}` | {v['regs']} | {v['stack']} | {v['spill_st']} | {v['spill_ld']} | "
            f"{v['smem']} |" for k, v in sorted(kernels.items())]
    return HEADER + "\n".join(rows) + "\n"


def recorded(doc):
    """The stack frame the docs record for each kernel."""
    if not os.path.exists(doc):
        return {}
    return {m[1]: int(m[2]) for m in re.finditer(r"^\| `(.+)` \| \d+ \| (\d+) \|",
                                                 open(doc).read(), re.M)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", metavar="DIR")
    g.add_argument("--record", metavar="DIR")
    ap.add_argument("--doc", default=DOC, help="the recorded table (default: %(default)s)")
    a = ap.parse_args()
    d = a.check or a.record
    reports = sorted(glob.glob(os.path.join(d, "**", "*.ptxas"), recursive=True))
    kernels = parse(reports)
    if not kernels:
        print(f"kernel_budget: no ptxas reports (*.ptxas) under {d}", file=sys.stderr)
        return 1
    if a.record:
        open(a.doc, "w").write(table(kernels))
        print(f"kernel_budget: recorded {len(kernels)} kernels in {a.doc}")
        return 0
    budget = recorded(a.doc)
    bad = []
    for k, v in sorted(kernels.items()):
        if v["spill_st"] or v["spill_ld"]:
            bad.append(f"{k}: spills ({v['spill_st']} bytes stored, {v['spill_ld']} loaded)")
        if v["stack"] > budget.get(k, 0):
            bad.append(f"{k}: a {v['stack']}-byte stack frame, over the {budget.get(k, 0)} "
                       f"bytes recorded")
    for b in bad:
        print(f"error: kernel {b}", file=sys.stderr)
    if bad:
        print(f"kernel_budget: {len(bad)} kernels over their budget in {a.doc}. Keep the values "
              "in registers (compile-time indices, fewer live values), or, if the cost is meant, "
              f"record it: scripts/kernel_budget.py --record {d}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
