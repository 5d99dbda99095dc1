#!/usr/bin/env python3
"""The offload pipeline on the CPU backend: step time of the serial update (forward + backward,
then the CPU optimizer step on the training thread) against the pipelined one (the update on
threads of its own, overlapped with the next forward) and the delayed update, in alternating
runs of the same trainer, model, data and threads (issue 49, Done-when 2).

Each mode's step is also predicted by `zerotrain estimate --time --hardware this` with the same
config and threads (issue 49, Done-when 3). The serial run measures the two parts: forward + backward, and the optimizer step. The
pipelined and delayed runs are set against max(forward + backward, optimizer step), the step
time of a perfect overlap, and against their sum, the serial step. A fourth run, the serial one
again beside a spin loop on another core (no memory traffic), measures what a second busy core
costs the compute on this machine (shared cores of a VM, a shared clock): the overlap cannot
beat max(that forward + backward, optimizer step), the second bound the table gives.

  python3 benchmarks/offload_pipeline.py [--model gpt2-124m] [--seq_len 32] [--threads 1] \
      [--optimizer_threads 1] [--markdown docs/benchmarks.md]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_md import SHARED_DATA, ROOT, load_average, prepare_shards, publish  # noqa: E402

MODES = ("serial", "pipelined", "delayed", "serial_beside_spin")


def overlap_ms(trace_file):
    """Milliseconds in which the optimizer thread's spans and the compute track's spans of a
    Chrome trace (zerotrain.trace) overlap, and the optimizer thread's total."""
    events = json.load(open(trace_file))
    events = events["traceEvents"] if isinstance(events, dict) else events
    names = {e["tid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans = {"compute": [], "optimizer thread": []}
    for e in events:
        track = names.get(e.get("tid"))
        if e.get("ph") == "X" and track in spans:
            spans[track].append((e["ts"], e["ts"] + e["dur"]))

    def union(v):
        out = []
        for a, b in sorted(v):
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out
    comp, opt = union(spans["compute"]), union(spans["optimizer thread"])
    both = sum(max(0, min(b, d) - max(a, c)) for a, b in comp for c, d in opt)
    return both / 1e3, sum(b - a for a, b in opt) / 1e3


def refresh_probe(a, cfg):
    """Measures this machine's rates again (`--hardware this-refresh`), so that the predictions
    use the rates of the minutes the runs are measured in (a shared host drifts)."""
    subprocess.run([a.binary, "estimate", "--time", "--deepspeed", cfg, "--model", a.model,
                    "--seq_len", str(a.seq_len), "--hardware", "this-refresh"],
                   check=True, capture_output=True)


def run(a, data, tmp, mode):
    """Median per-step figures over steps 3..steps (step 1 allocates, step 2 is the delayed
    update's first)."""
    cfg = os.path.join(tmp, f"ds_{mode}.json")
    zt = {"offload_pipeline": mode not in ("serial", "serial_beside_spin")}
    if mode == "delayed":
        zt["delayed_param_update"] = {"enabled": True, "warmup_steps": 1}
    with open(cfg, "w") as f:
        json.dump({"train_micro_batch_size_per_gpu": a.micro_batch,
                   "gradient_accumulation_steps": 1,
                   "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "weight_decay": 0.1}},
                   "gradient_clipping": 1.0, "bf16": {"enabled": True}, "steps_per_print": 1,
                   "wall_clock_breakdown": True,
                   "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
                   "zerotrain": zt}, f)
    if mode == MODES[0] and not os.path.exists(os.path.join(tmp, "probed")):
        refresh_probe(a, cfg)
        open(os.path.join(tmp, "probed"), "w").close()
    run_dir = os.path.join(tmp, f"run_{mode}")
    spin = None
    if mode == "serial_beside_spin":  # another core kept busy, with no memory traffic
        # It ends with this script, however this script ends (a spin loop left behind would
        # skew every later measurement on the machine).
        spin = subprocess.Popen([sys.executable, "-c", f"import os\nwhile os.getppid() == "
                                 f"{os.getpid()}: pass"])
        time.sleep(0.5)
    try:
        subprocess.run([a.binary, "train", "--deepspeed", cfg, "--train_data", data, "--model",
                        a.model, "--seq_len", str(a.seq_len), "--steps", str(a.steps),
                        "--val_every", "0", "--sample_tokens", "0", "--threads", str(a.threads),
                        "--optimizer_threads", str(a.optimizer_threads), "--run_dir", run_dir,
                        "--trace_steps", f"{a.steps - 1},{a.steps}"],
                       check=True, capture_output=True, text=True)
    finally:
        if spin:
            spin.kill()
            spin.wait()
    est = subprocess.run([a.binary, "estimate", "--time", "--deepspeed", cfg, "--model", a.model,
                          "--seq_len", str(a.seq_len), "--hardware", "this", "--threads",
                          str(a.threads), "--optimizer_threads", str(a.optimizer_threads)],
                         check=True, capture_output=True, text=True).stdout
    predicted = float(re.search(r"^\s*step\s+([0-9.]+) ms", est, re.M).group(1))
    both, opt = overlap_ms(os.path.join(run_dir, "trace_rank0.json"))
    rows = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    rows = [r for r in rows if "step_ms" in r][2:]
    med = lambda f: statistics.median(f(r) for r in rows)
    return {"step": med(lambda r: r["step_ms"]),
            "fwd_bwd": med(lambda r: r["forward_ms"] + r["backward_ms"]),
            "optimizer": med(lambda r: r["optimizer_ms"]),
            "cpu_step": med(lambda r: r["offload"]["cpu_step_ms"]),
            "overlap": both / 2, "optimizer_thread": opt / 2,  # a traced step's
            "predicted": predicted,
            "loss": rows[-1]["loss"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="gpt2-124m")
    ap.add_argument("--seq_len", type=int, default=32)
    ap.add_argument("--micro_batch", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--optimizer_threads", type=int, default=1)
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "zerotrain"))
    ap.add_argument("--shared-data", default=SHARED_DATA)
    ap.add_argument("--markdown", default=None)
    a = ap.parse_args()
    t0 = time.time()
    res, loads = {m: [] for m in MODES}, []
    with tempfile.TemporaryDirectory(prefix="zt_pipeline_") as tmp:
        data = prepare_shards(a.binary, a.shared_data, os.path.join(tmp, "data"))
        for r in range(a.rounds):
            order = MODES if r % 2 == 0 else MODES[::-1]
            for m in order:
                loads.append(load_average())
                res[m].append(run(a, data, tmp, m))
                print(f"round {r + 1} {m}: {res[m][-1]}", file=sys.stderr)
    med = lambda m, k: statistics.median(x[k] for x in res[m])
    fb, opt = med("serial", "fwd_bwd"), med("serial", "optimizer")
    ideal, serial_sum = max(fb, opt), fb + opt
    fb_busy = med("serial_beside_spin", "fwd_bwd")
    busy = max(fb_busy, opt)
    lines = [
        f"## The offload pipeline on the CPU backend ({a.model})",
        "",
        f"Step time (ms): stage 2, bf16, the optimizer (AdamW) on the CPU, one rank, micro-batch "
        f"{a.micro_batch} x {a.seq_len}, `--threads {a.threads} --optimizer_threads "
        f"{a.optimizer_threads}`, gradient clipping 1.0; median over {a.rounds} alternating "
        f"rounds of the median over steps 3..{a.steps}. From the serial run: forward + backward "
        f"{fb:.0f} ms, optimizer step {opt:.0f} ms, so a perfect overlap takes max = "
        f"{ideal:.0f} ms and the serial step their sum, {serial_sum:.0f} ms. The serial run "
        f"again beside a spin loop on the other core: forward + backward {fb_busy:.0f} ms "
        f"({fb_busy / fb:.2f}x alone), so on this machine an overlap cannot beat "
        f"max(that, optimizer step) = {busy:.0f} ms.",
        "",
        "| update | step ms | against max(fwd+bwd, opt) | against max(fwd+bwd beside a busy "
        "core, opt) | against the serial step | `estimate --time` ms (/ measured) | optimizer "
        "thread ms, of which beside compute (trace) | last loss |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for m in MODES[:3]:
        s = med(m, "step")
        p = med(m, "predicted")
        lines.append(f"| {m} | {s:.0f} | **{s / ideal:.2f}x** | {s / busy:.2f}x "
                     f"| {s / med('serial', 'step'):.2f}x | {p:.0f} ({p / s:.2f}) "
                     f"| {med(m, 'optimizer_thread'):.0f}, {med(m, 'overlap'):.0f} "
                     f"| {res[m][-1]['loss']:.4f} |")
    lines += ["", "Per round, step ms: " + "; ".join(
        f"{m} " + ", ".join(f"{x['step']:.0f}" for x in res[m]) for m in MODES) + "."]
    publish(lines, loads, t0, a.markdown, f"offload_pipeline:{a.model}:{a.seq_len}")


if __name__ == "__main__":
    main()
