#!/usr/bin/env python3
"""CPU Lion and CPU Adagrad side by side: zerotrain's step (model/cpu/optimizer_step.cc) vs
DeepSpeed's DeepSpeedCPULion and DeepSpeedCPUAdagrad, and torch.optim.Adagrad (fused, else
foreach), in one run.

Every side updates the same fp32 parameters from fp32 gradients with the same hyper-parameters
on the same threads. The sides run as resident processes with their buffers allocated, and take
single steps in turn for --cycles cycles, the order shuffled each cycle, so each cycle's ratios
are taken at the same moment of the machine's drift; the figure is the median ratio.

  python3 benchmarks/cpu_optimizer_compare.py                          # 50M params, all cores
  python3 benchmarks/cpu_optimizer_compare.py --markdown docs/benchmarks.md

Needs torch and deepspeed (pip install torch deepspeed ninja); DeepSpeed builds its CPU ops on
first use. Used only by this script, never by the trainer.
"""
import argparse
import os
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_md import load_average, publish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HP = {"lion": dict(lr=1e-4, betas=(0.9, 0.99), weight_decay=0.1),
      "adagrad": dict(lr=1e-2, eps=1e-10, weight_decay=0.1)}


def serve(kind, params, threads):
    """A resident step server: one step per line on stdin, its seconds on stdout."""
    import torch
    torch.set_num_threads(threads)
    p = torch.nn.Parameter(torch.ones(params))
    p.grad = torch.full((params,), 1e-3)
    if kind == "deepspeed-lion":
        from deepspeed.ops.lion import DeepSpeedCPULion
        opt = DeepSpeedCPULion([p], **HP["lion"])
    elif kind == "deepspeed-adagrad":
        from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad
        opt = DeepSpeedCPUAdagrad([p], **HP["adagrad"])
    elif kind == "torch-adagrad":
        try:
            opt = torch.optim.Adagrad([p], fused=True, **HP["adagrad"])
            opt.step()
        except (RuntimeError, TypeError):
            opt = torch.optim.Adagrad([p], foreach=True, **HP["adagrad"])
    else:
        raise ValueError(kind)
    opt.step()  # warm-up: state allocation and first touch
    print("ready " + type(opt).__name__ + (" fused" if getattr(opt, "defaults", {}).get("fused")
                                            else ""), flush=True)
    for _ in sys.stdin:
        t = time.perf_counter()
        opt.step()
        print(time.perf_counter() - t, flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=int, default=50_000_000,
                    help="fp32 parameters every side updates (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="threads on every side (default: this machine's cores, %(default)s)")
    ap.add_argument("--cycles", type=int, default=40,
                    help="cycles of one step per side (default: %(default)s)")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "benchmarks", "cpu_adam_bench"),
                    help="our benchmark binary (default: %(default)s)")
    ap.add_argument("--markdown", default=None,
                    help="write the section into this Markdown file (e.g. docs/benchmarks.md)")
    ap.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        serve(a.serve, a.params, a.threads)
        return

    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), THP_MEM_ALLOC_ENABLE="1")
    t0, loads, lines = time.time(), [], []
    for opt, others in (("lion", ["deepspeed-lion"]),
                        ("adagrad", ["deepspeed-adagrad", "torch-adagrad"])):
        sides = ["ours"] + others
        names = {}

        def command(kind):
            if kind == "ours":
                return [a.binary, "--params", str(a.params), "--threads", str(a.threads),
                        "--serve", "1", "--optimizer", opt]
            return [sys.executable, __file__, "--serve", kind, "--params", str(a.params),
                    "--threads", str(a.threads)]

        procs = {k: subprocess.Popen(command(k), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=None if k == "ours" else subprocess.DEVNULL,
                                     text=True, env=env) for k in sides}

        def read(kind):
            while True:  # DeepSpeed may log to stdout first
                line = procs[kind].stdout.readline()
                if not line:
                    sys.exit(f"{kind} step server ended early")
                if line.startswith("ready"):
                    return line.split(None, 1)[1].strip()
                try:
                    return float(line)
                except ValueError:
                    continue

        def step(kind):
            procs[kind].stdin.write("step\n")
            procs[kind].stdin.flush()
            return read(kind)

        try:
            for k in sides:
                if k != "ours":
                    names[k] = read(k)  # built, allocated, one step taken
            for k in sides:
                step(k), step(k)  # warm-up
            ratios = {k: [] for k in sides}  # speed relative to the first DeepSpeed side
            secs = {k: [] for k in sides}
            order, rng = list(sides), random.Random(0)
            for _ in range(a.cycles):
                loads.append(load_average())
                rng.shuffle(order)
                t = {k: step(k) for k in order}
                for k in sides:
                    ratios[k].append(t[others[0]] / t[k])
                    secs[k].append(t[k])
        finally:
            for p in procs.values():
                p.stdin.close()
                p.wait()
        import deepspeed
        import torch
        label = {"ours": f"zerotrain CPU {opt.capitalize()}",
                 "deepspeed-lion": f"DeepSpeedCPULion {deepspeed.__version__}",
                 "deepspeed-adagrad": f"DeepSpeedCPUAdagrad {deepspeed.__version__}",
                 "torch-adagrad": f"torch.optim.{names.get('torch-adagrad', 'Adagrad')} "
                                  f"{torch.__version__}"}
        bytes_per = 20  # grad read, master and state read and written
        lines += [f"| {label[k]} | {a.params / statistics.median(secs[k]) / 1e9:.3f} | "
                  f"{bytes_per * a.params / statistics.median(secs[k]) / 1e9:.1f} | "
                  f"**{statistics.median(ratios[k]):.2f}x** "
                  f"({min(ratios[k]):.2f}-{max(ratios[k]):.2f}) |" for k in sides]
    lines = [
        "## CPU Lion and CPU Adagrad beside DeepSpeed's",
        "",
        f"{a.params:,} fp32 parameters, fp32 gradients, weight decay 0.1 (Lion lr 1e-4, betas "
        f"(0.9, 0.99); Adagrad lr 1e-2, eps 1e-10), {a.threads} threads on every side. The sides "
        f"are resident processes taking single steps in turn for {a.cycles} cycles (order "
        "shuffled each cycle); speeds are medians, the ratio is the median over cycles of "
        "DeepSpeed's step time over the side's (range in brackets). GB/s counts the 20 bytes "
        "per parameter each step must move (gradient read, master and state read and written).",
        "",
        "| implementation | G params/s | GB/s | vs DeepSpeed, in turn |",
        "|---|---:|---:|---:|",
    ] + lines
    publish(lines, loads, t0, a.markdown, "cpu_optimizer_compare")


if __name__ == "__main__":
    main()
