#!/usr/bin/env python3
"""CPU Adam side by side: zerotrain's fused kernel vs DeepSpeed's DeepSpeedCPUAdam and
torch.optim.AdamW (foreach and fused), with the machine's bandwidth bound, in one run.

Every side updates the same number of fp32 parameters (fp32 gradients, AdamW, weight decay 0.1)
on the same threads. Rounds alternate the order of the sides, each side runs in its own
process, and each figure is the median over rounds of the median step time, so a busy moment
cannot favour one side. Then (--paired N) ours, ours with every buffer on a 2 MiB boundary,
DeepSpeed and torch's fused AdamW run as resident processes taking single steps in turn for N
cycles, which cancels even the drift between rounds. The bound is 28 bytes per parameter
divided by bandwidth measured in the same run by build/benchmarks/cpu_adam_bench (see its
header for the two bandwidths).

  python3 benchmarks/cpu_adam_compare.py                                  # 100M params, 2 threads
  python3 benchmarks/cpu_adam_compare.py --markdown docs/benchmarks.md

Needs torch and deepspeed (pip install torch deepspeed ninja); DeepSpeed builds its CPU Adam
op on first use. Used only by this script, never by the trainer.
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_md import load_average, publish  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def child(kind, params, threads, reps):
    """Runs in its own process: median seconds of one optimizer step of `kind`."""
    import torch
    torch.set_num_threads(threads)
    p = torch.nn.Parameter(torch.ones(params))
    p.grad = torch.full((params,), 1e-3)
    hp = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1)
    if kind == "deepspeed":
        from deepspeed.ops.adam import DeepSpeedCPUAdam
        opt = DeepSpeedCPUAdam([p], adamw_mode=True, **hp)
    elif kind == "torch-foreach":
        opt = torch.optim.AdamW([p], foreach=True, **hp)
    elif kind == "torch-fused":
        opt = torch.optim.AdamW([p], fused=True, **hp)
    else:
        raise ValueError(kind)
    opt.step()  # warm-up: state allocation and first touch
    if reps == 0:  # serve: one step per line on stdin, its seconds on stdout
        for _ in sys.stdin:
            t = time.perf_counter()
            opt.step()
            print(time.perf_counter() - t, flush=True)
        return 0.0
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run_child(kind, a):
    # Huge pages on every side: zerotrain's buffers ask for them (common/memory.h), and torch's
    # CPU allocator does for large tensors with THP_MEM_ALLOC_ENABLE=1.
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), THP_MEM_ALLOC_ENABLE="1")
    out = subprocess.run([sys.executable, __file__, "--child", kind, "--params", str(a.params),
                          "--threads", str(a.threads), "--reps", str(a.reps)],
                         env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{kind} failed:\n{out.stderr[-3000:]}")
    return float(out.stdout.strip().splitlines()[-1])


# The resident step servers of --paired: ours as the trainer allocates, ours with every buffer
# on a 2 MiB boundary (no alloc_streaming stagger), and the two fastest others.
SERVERS = ("ours", "ours-aligned", "deepspeed", "torch-fused")


def paired_steps(a):
    """The SERVERS as resident processes taking single steps in turn (the order shuffled each
    cycle), so each cycle runs at the same moment of the machine's drift. Returns, per server,
    its speed relative to DeepSpeed's in each cycle, and ours' speed relative to ours-aligned
    and to torch-fused per cycle, each sorted."""
    # Ours as the trainer runs by default, whatever this shell's environment says.
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), THP_MEM_ALLOC_ENABLE="1",
               ZEROTRAIN_HUGE_PAGES="1", ZEROTRAIN_STAGGER="1")

    def command(kind):
        if kind.startswith("ours"):
            return [a.binary, "--params", str(a.params), "--threads", str(a.threads),
                    "--serve", "1", "--aligned", "1" if kind == "ours-aligned" else "0"]
        return [sys.executable, __file__, "--child", kind, "--params", str(a.params),
                "--threads", str(a.threads), "--reps", "0"]

    # Ours' errors (a stale binary refusing a flag) reach the terminal; torch's logging does not.
    procs = {kind: subprocess.Popen(command(kind), stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE,
                                    stderr=None if kind.startswith("ours") else subprocess.DEVNULL,
                                    text=True, env=env) for kind in SERVERS}

    def step(kind):
        p = procs[kind]
        p.stdin.write("step\n")
        p.stdin.flush()
        while True:  # DeepSpeed may log to stdout first
            line = p.stdout.readline()
            if not line:
                sys.exit(f"{kind} step server ended early")
            try:
                return float(line)
            except ValueError:
                continue

    try:
        for kind in SERVERS:  # warm-up
            step(kind), step(kind)
        vs_ds = {kind: [] for kind in SERVERS}
        vs = {"ours-aligned": [], "torch-fused": []}  # ours' speed relative to each, per cycle
        order, rng = list(SERVERS), random.Random(0)
        for _ in range(a.paired):
            rng.shuffle(order)  # each server goes first, last and after each other alike
            t = {kind: step(kind) for kind in order}
            for kind in SERVERS:
                vs_ds[kind].append(t["deepspeed"] / t[kind])
            for kind in vs:
                vs[kind].append(t[kind] / t["ours"])
        return {k: sorted(v) for k, v in vs_ds.items()}, {k: sorted(v) for k, v in vs.items()}
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait()


def run_ours(a):
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    out = subprocess.run([a.binary, "--params", str(a.params), "--threads", str(a.threads),
                          "--reps", str(a.reps)], env=env, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{a.binary} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--params", type=int, default=100_000_000,
                    help="fp32 parameters every side updates (default: %(default)s)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(),
                    help="threads on every side (default: this machine's cores, %(default)s)")
    ap.add_argument("--reps", type=int, default=7,
                    help="timed steps per process and round (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds, each side in its own process (default: %(default)s)")
    ap.add_argument("--paired", type=int, default=40,
                    help="cycles in which ours, ours on 2 MiB boundaries, DeepSpeed and torch "
                         "fused, as resident processes, each take one step (0: none; "
                         "default: %(default)s)")
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "benchmarks", "cpu_adam_bench"),
                    help="our benchmark binary (default: %(default)s)")
    ap.add_argument("--markdown", default=None,
                    help="write the section into this Markdown file (e.g. docs/benchmarks.md)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(child(a.child, a.params, a.threads, a.reps))
        return

    others = ["deepspeed", "torch-fused", "torch-foreach"]
    ours, rates, loads = [], {k: [] for k in others}, []
    t0 = time.time()
    for r in range(a.rounds):
        order = ["ours"] + others
        order = order[r % len(order):] + order[:r % len(order)]
        for kind in order:
            loads.append(load_average())
            if kind == "ours":
                ours.append(run_ours(a))
            else:
                rates[kind].append(a.params / run_child(kind, a) / 1e9)
            print(f"round {r + 1}: {kind} done", file=sys.stderr)
    med = lambda xs: statistics.median(xs)
    simd = ours[0]["simd"]
    ours_fp32 = med([next(x["Gparams"] for x in o["cpu_adam"]
                          if x["simd"] == simd and x["grads"] == "fp32") for o in ours])
    ours_bf16 = med([next(x["Gparams"] for x in o["cpu_adam"]
                          if x["simd"] == simd and x["grads"].startswith("bf16")) for o in ours])
    bound_pat32 = med([o["bound_pattern_fp32_Gparams"] for o in ours])
    bound_pat16 = med([o["bound_pattern_bf16_Gparams"] for o in ours])
    bound_triad = med([o["bound_triad_Gparams"] for o in ours])
    triad = med([o["triad_GBps"] for o in ours])
    ds = med(rates["deepspeed"])
    steps, ours_vs = paired_steps(a) if a.paired > 0 else ({}, {})
    # Paired within each round (the sides ran minutes apart at most), which cancels the
    # machine's slower drift: the median and range of ours / DeepSpeed per round.
    pick32 = lambda o: next(x["Gparams"] for x in o["cpu_adam"]
                            if x["simd"] == simd and x["grads"] == "fp32")
    paired = sorted(pick32(o) / d for o, d in zip(ours, rates["deepspeed"]))

    in_turn = lambda k: f"**{statistics.median(steps[k]):.2f}x**" if k in steps else ""

    import deepspeed
    import torch
    lines = [
        "## CPU Adam: parameters/s against the bandwidth bound, DeepSpeed and PyTorch",
        "",
        f"{a.params:,} fp32 parameters, AdamW (weight decay 0.1), {a.threads} threads on every "
        f"side; median over {a.rounds} alternating rounds of the median of {a.reps} steps. "
        "The bound is 28 bytes per parameter (gradient read, master weights and both moments "
        "read and written) over bandwidth measured in the same run: `pattern` runs the step's "
        "own loads and stores with trivial arithmetic; `triad` is a STREAM triad (12 bytes per "
        "element as STREAM counts them). Every side's buffers ask for transparent huge pages "
        "(ours through `alloc_streaming`, torch's with `THP_MEM_ALLOC_ENABLE=1`).",
        "",
        "`vs DeepSpeed, in turn` is the median over the single-step cycles listed below the "
        "table (the figure this machine's drift leaves standing); `in rounds` divides the "
        "rounds' medians, minutes apart.",
        "",
        "| implementation | G params/s | of pattern bound | vs DeepSpeed, in turn | "
        "vs DeepSpeed, in rounds |",
        "|---|---:|---:|---:|---:|",
        f"| zerotrain CPU Adam, fp32 gradients ({simd}) | {ours_fp32:.3f} | "
        f"{ours_fp32 / bound_pat32:.0%} | {in_turn('ours')} | {ours_fp32 / ds:.2f}x |",
        f"| zerotrain CPU Adam, bf16 gradients + bf16 working copy ({simd}) | {ours_bf16:.3f} | "
        f"{ours_bf16 / bound_pat16:.0%} (bf16 pattern) | | {ours_bf16 / ds:.2f}x |",
        f"| DeepSpeedCPUAdam {deepspeed.__version__} | {ds:.3f} | {ds / bound_pat32:.0%} | 1.00x "
        "| 1.00x |",
    ]
    for k in ("torch-fused", "torch-foreach"):
        v = med(rates[k])
        lines.append(f"| torch.optim.AdamW({k.split('-')[1]}=True) {torch.__version__} | {v:.3f} | "
                     f"{v / bound_pat32:.0%} | {in_turn(k)} | {v / ds:.2f}x |")
    lines += [
        f"| bound: Adam pattern, fp32 / bf16 | {bound_pat32:.3f} / {bound_pat16:.3f} | 100% | | |",
        f"| bound: STREAM triad {triad:.1f} GB/s ÷ 28 B | {bound_triad:.3f} | | | |",
        "",
        f"Ours (fp32 gradients) / DeepSpeed paired within each round: median "
        f"{med(paired):.2f}x, range {paired[0]:.2f}-{paired[-1]:.2f}x over {len(paired)} "
        f"rounds ({sum(r >= 1.0 for r in paired)} at or above 1.00x).",
    ]
    if steps:
        def summary(xs):
            q = lambda f: xs[min(len(xs) - 1, int(f * len(xs)))]
            return (f"median **{statistics.median(xs):.3f}x**, interquartile "
                    f"{q(0.25):.3f}-{q(0.75):.3f}x, range {xs[0]:.3f}-{xs[-1]:.3f}x "
                    f"({sum(r >= 1.0 for r in xs)} of {len(xs)} at or above 1.00x)")
        names = {"ours": "zerotrain", "torch-fused": "torch fused",
                 "ours-aligned": "zerotrain with every buffer on a 2 MiB boundary"}
        lines += ["", f"Single steps in turn ({a.paired} cycles; {', '.join(SERVERS)} as "
                  "resident processes with their buffers allocated, each taking one step in "
                  "turn, the order shuffled each cycle), speed relative to DeepSpeed in the "
                  "same cycle:", ""]
        lines += [f"- {names[k]}: {summary(steps[k])};" for k in SERVERS if k != "deepspeed"]
        lines += [f"- zerotrain / zerotrain with every buffer on a 2 MiB boundary (what "
                  f"`alloc_streaming`'s stagger buys): {summary(ours_vs['ours-aligned'])};",
                  f"- zerotrain / torch fused: {summary(ours_vs['torch-fused'])}."]
    lines += [
        "",
        f"Per SIMD level (ours, last round): " + ", ".join(
            f"{x['simd']} {x['grads']} {x['Gparams']:.2f}" for x in ours[-1]["cpu_adam"]) + ".",
    ]
    publish(lines, loads, t0, a.markdown, "cpu_adam_compare")


if __name__ == "__main__":
    main()
