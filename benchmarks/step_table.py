#!/usr/bin/env python3
"""The optimizer phase at memory speed: build/benchmarks/step_bench on gpt2-124m and a
TinyLlama-shaped model (TinyLlama-1.1B's widths and vocabulary, 2 layers), fp32 and bf16, at
stage 0 on one rank and stage 2 on two (mpirun), each against the Adam access-pattern bound
measured in the same process, alternating with the steps.

  python3 benchmarks/step_table.py [--markdown docs/benchmarks.md]

Besides the 28-byte Adam bound the table gives the bytes the whole phase must move per owned
parameter. Where the backward's kernels accumulate straight into the stored gradient (a block's
at stages 0-1, fp32 or 16-bit on the CPU) the gradient norm reads it once more and Adam writes
it back as zeros; elsewhere (the embedding and head, and every unit at stage 2) the
norm's sum of squares is taken in the pass that writes the reduced gradient (its cost in that
pass is reported beside the cost of a separate pass) and the next write overwrites the
gradient. Stage 2's all-gather writes every other rank's updated working copy (received and
stored: 2 x (N_d - 1) x working bytes); with node-shared parameters (zerotrain.node_shared_params)
there is one copy per node, each rank writes its slice in place and a barrier replaces the
all-gather, so stage 2 moves Adam's 28 bytes only. Stage 2 runs both ways.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_md import load_average, publish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = [("gpt2-124m", []), ("tinyllama-1.1b", ["--layers", "2"])]


def run(binary, model, extra, dtype, stage, np_, steps, huge_pages=True, node_shared=False):
    cmd = [binary, "--model", model, *extra, "--dtype", dtype, "--stage", str(stage),
           "--steps", str(steps), "--node-shared", "1" if node_shared else "0"]
    env = dict(os.environ, ZEROTRAIN_HUGE_PAGES="1" if huge_pages else "0")
    if np_ > 1:
        mpirun = ["mpirun", "--oversubscribe", "--bind-to", "none", "-np", str(np_),
                  "-x", "OMPI_MCA_mpi_yield_when_idle=1", "-x", "ZEROTRAIN_HUGE_PAGES"]
        if os.geteuid() == 0:
            mpirun.insert(1, "--allow-run-as-root")
        cmd = mpirun + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"{shlex.join(cmd)} failed:\n{out.stderr}")
    r = json.loads([l for l in out.stdout.splitlines() if l.startswith("{")][-1])
    r["huge_pages"] = huge_pages
    return r


def phase_bytes(r):
    """Bytes per owned parameter: Adam's 28; where the backward's kernels added into the stored
    gradient (the share not `folded`), the norm's read and Adam's zeros (2 x its bytes); stage
    1-2's all-gather (received and stored), none where the parameters are node-shared."""
    g = 4 if r["dtype"] == "fp32" else 2
    gather = 2 * (r["world"] - 1) * g if r["stage"] in (1, 2) and not r["node_shared"] else 0
    return round(28 + 2 * g * (1 - r["folded"]) + gather, 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "benchmarks", "step_bench"))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--markdown", default=None)
    a = ap.parse_args()
    rows, loads, t0 = [], [], time.time()
    for model, extra in MODELS:
        for stage, np_, shared in ((0, 1, False), (2, 2, False), (2, 2, True)):
            for dtype in ("fp32", "bf16"):
                loads.append(load_average())
                r = run(a.binary, model, extra, dtype, stage, np_, a.steps, node_shared=shared)
                rows.append(r)
                print(json.dumps(r), file=sys.stderr)
    # Huge pages (common/memory.h alloc_streaming) side by side: stage 2's all-gather, whose
    # single-copy transfers pin every page, with the hint off and on, alternating.
    pages = []
    for _ in range(2):
        for huge in (False, True):
            loads.append(load_average())
            pages.append(run(a.binary, "gpt2-124m", [], "fp32", 2, 2, a.steps, huge))
    lines = [
        "## The optimizer phase at memory speed (Engine::step)",
        "",
        "Gradient norm, unscale and clip (one factor), AdamW on the fp32 master weights, the "
        "16-bit working copy, stage 2's all-gather (none where node-shared) and, at stage 0, the blocks' zeroed gradient "
        "(the backward's kernels add into it). Where the gradient is written by a fold or "
        "reduction pass (the embedding and head at stage 0, every unit at stage 2) "
        "the norm's Σg² is summed in that pass, in the backward: `norm in pass` is what that "
        "adds to the pass, and it counts in the phase; `norm pass` is what a separate pass "
        "would cost (both measured on the same elements). Parameters/s = Ψ / (step + norm in "
        "pass), all ranks at once. The bound is 28 bytes per parameter (Adam's own streams) at "
        "the bandwidth that access pattern reaches, measured in the same process right after "
        "each step, with every rank streaming at once; `of bound` is the median over the steps "
        "of each step's ratio to the pattern pass after it. `bytes/param` is what the whole "
        "phase must move per owned parameter, which caps the ratio (up to the noise of "
        "measuring the bound separately).",
        "",
        "| model | Ψ | dtype | stage, ranks × threads | step ms | norm in pass ms | comm wait ms "
        "| G params/s | bound | of bound | bytes/param | cap = 28/bytes | norm pass ms |",
        "|---|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        name = r["model"] + (f" ({r['layers']} layers)" if r["model"].startswith("tinyllama") else "")
        b = phase_bytes(r)
        norm_in_pass = f"{r['norm_fused_extra_ms'] * r['folded']:.1f}"
        lines.append(
            f"| {name} | {r['params'] / 1e6:.0f}M | {r['dtype']} | {r['stage']}, "
            f"{r['world']} × {r['threads_per_rank']}{', node-shared' if r['node_shared'] else ''} "
            f"| {r['step_ms']:.0f} | {norm_in_pass} "
            f"| {r['comm_wait_ms']:.0f} | {r['Gparams']:.2f} | {r['bound_Gparams']:.2f} "
            f"| **{r['of_bound']:.0%}** | {b:g} | {28 / b:.0%} | {r['norm_pass_ms']:.1f} |")
    lines += [
        "",
        "### Huge pages",
        "",
        "gpt2-124m, fp32, stage 2 on 2 ranks, with the transparent-huge-page hint of "
        "`alloc_streaming` off (`ZEROTRAIN_HUGE_PAGES=0`, which also drops its stagger) and on, "
        "alternating in this run:",
        "",
        "| huge pages | step ms | comm wait ms | of bound |",
        "|---|---:|---:|---:|",
    ]
    for r in pages:
        lines.append(f"| {'on' if r['huge_pages'] else 'off'} | {r['step_ms']:.0f} "
                     f"| {r['comm_wait_ms']:.0f} | {r['of_bound']:.0%} |")
    publish(lines, loads, t0, a.markdown, "step_table")


if __name__ == "__main__":
    main()
