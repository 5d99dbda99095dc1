#!/usr/bin/env python3
"""Draws training runs side by side into one PNG: the training loss (line) and validation loss
(dots) against tokens seen, tokens/s per step, and each run's peak device and host memory by
category (from memory_report_rank0.json when the run wrote one with --memory_report, else the
peak totals of run.json). Reads what `zerotrain train` leaves in each --run_dir: run.json and
metrics.jsonl, as `zerotrain compare` does.

    python3 scripts/plot_runs.py RUN_DIR... --out FILE.png [--title TEXT]

The memory panels stack each category's own peak (they need not peak at the same moment, so a
bar's top can exceed the true peak, which a black tick marks, from run.json: the device pool's
high-water mark, and the process's maximum resident set for the host); NVMe swap files
are storage, not host memory, and are left out. Needs matplotlib (scripts/setup.sh installs
Debian's python3-matplotlib). Exit 2 with a message for a directory that is not a finished run.
"""
import argparse
import json
import os
import sys


def die(message):
    print(f"plot_runs: {message}", file=sys.stderr)
    sys.exit(2)


def load(run_dir):
    paths = [os.path.join(run_dir, f) for f in ("run.json", "metrics.jsonl")]
    for p in paths:
        if not os.path.exists(p):
            die(f"{run_dir} has no {os.path.basename(p)}: not the --run_dir of a finished "
                "`zerotrain train`?")
    try:
        info = json.load(open(paths[0]))
        rows = [json.loads(line) for line in open(paths[1]) if line.strip()]
        per_step = (int(info["micro_batch"]) * int(info["seq_len"]) *
                    int(info["gradient_accumulation"]) * int(info["world_size"]))
        steps = [r for r in rows if "step_ms" in r]
        for r in steps:  # null: a diverged step's NaN, drawn as a gap
            for k in ("loss", "tokens_per_s"):
                r[k] = float("nan") if r.get(k, 0) is None else float(r[k])
            int(r["step"])
    except (ValueError, KeyError, TypeError) as e:
        die(f"{run_dir}: run.json or metrics.jsonl is not what `zerotrain train` writes "
            f"({type(e).__name__}: {e})")
    if not steps:
        die(f"{run_dir}: metrics.jsonl holds no training step")
    vals = [r for r in rows if "val_loss" in r]
    report = os.path.join(run_dir, "memory_report_rank0.json")
    memory = None
    if os.path.exists(report):
        try:
            memory = json.load(open(report))
            for pool in ("categories", "host_categories"):
                for v in memory[pool].values():
                    int(v["peak_bytes"])
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            die(f"{report}: not a memory report of `zerotrain train` ({type(e).__name__}: {e})")
    return {"name": os.path.basename(os.path.normpath(run_dir)), "info": info, "steps": steps,
            "vals": vals, "per_step": per_step, "memory": memory}


COLORS = {}  # category -> colour, the same in both memory panels


def color(category):
    return COLORS.setdefault(category, f"C{len(COLORS) % 10}")


SKIP = {"nvme"}  # storage, not memory


def memory_bars(ax, runs, pool, total_key, total_label, title):
    """Stacked bars of each category's peak bytes (GiB), one bar per run; a black tick at the
    run's true peak total (run.json); a grey bar for a run without a memory report."""
    cats = []
    for r in runs:
        if r["memory"]:
            cats += [c for c, v in r["memory"][pool].items()
                     if v["peak_bytes"] and c not in cats and c not in SKIP]
    names = [r["name"] for r in runs]
    bottoms = [0.0] * len(runs)
    for c in cats:
        heights = [r["memory"][pool].get(c, {}).get("peak_bytes", 0) / 2**30 if r["memory"] else 0
                   for r in runs]
        ax.bar(names, heights, bottom=bottoms, label=c, color=color(c))
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    bare = [r["info"].get(total_key, 0) / 2**30 if not r["memory"] else 0 for r in runs]
    if any(bare):
        ax.bar(names, bare, color="lightgrey", hatch="//", label="peak total (no report)")
    ax.scatter(names, [r["info"].get(total_key, 0) / 2**30 for r in runs], marker="_", s=400,
               color="black", zorder=3, label=total_label)
    ax.set_ylabel("GiB")
    ax.set_title(title)
    ax.legend(fontsize=7)
    ax.tick_params(axis="x", labelrotation=20, labelsize=7)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", help="run directories (--run_dir of zerotrain train)")
    ap.add_argument("--out", required=True, help="the PNG to write")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    if not a.out.lower().endswith(".png"):
        die(f"--out {a.out}: give a .png file")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        die("needs matplotlib (scripts/setup.sh installs python3-matplotlib)")
    runs = [load(d) for d in a.runs]
    fig, ax = plt.subplots(2, 2, figsize=(12, 8))
    for r in runs:
        x = [s["step"] * r["per_step"] for s in r["steps"]]
        line, = ax[0][0].plot(x, [s["loss"] for s in r["steps"]], label=r["name"])
        if r["vals"]:
            ax[0][0].plot([v["step"] * r["per_step"] for v in r["vals"]],
                          [v["val_loss"] for v in r["vals"]], "o", color=line.get_color())
        ax[0][1].plot([s["step"] for s in r["steps"]], [s["tokens_per_s"] for s in r["steps"]],
                      label=r["name"])
    ax[0][0].set(xlabel="tokens", ylabel="loss", title="training loss (line), validation (dots)")
    ax[0][0].legend(fontsize=7)
    ax[0][1].set(xlabel="step", ylabel="tokens/s", title="throughput")
    ax[0][1].legend(fontsize=7)
    memory_bars(ax[1][0], runs, "categories", "peak_device_bytes", "peak total (run.json)",
                "device memory: each category's peak")
    # The host tick is the process's maximum resident set: on the CPU backend it holds the
    # device pool too.
    memory_bars(ax[1][1], runs, "host_categories", "peak_host_bytes",
                "process max RSS (run.json)", "host memory: each category's peak")
    if a.title:
        fig.suptitle(a.title)
    fig.tight_layout()
    try:
        fig.savefig(a.out, dpi=100)
    except OSError as e:
        die(f"cannot write {a.out}: {e}")
    print(f"plot_runs: wrote {a.out} ({len(runs)} runs)")


if __name__ == "__main__":
    main()
