#!/usr/bin/env python3
"""Side-by-side training throughput: zerotrain's CPU path vs PyTorch eager, in one run.

Both sides train the same architecture (same parameter count, asserted), same micro-batch B,
sequence length T, thread count and optimizer (AdamW on every parameter, weight decay 0.1,
constant lr, gradient clipping 1.0), fp32, for the same number of steps. Each step is
forward + backward + clip + optimizer step. The sides alternate over --rounds rounds (ours,
then each PyTorch variant, then ours again...), so a machine that gets busier cannot favour one
side. A round's tokens/s is the median over its steps after the warm-up ones (B*T / step time),
and each row reports the median over rounds, with every round's load average. GFLOP/s counts
the model's FLOPs (6 N Psi_linear for the products, plus causal attention, as the flops
profiler does) over the step time; the machine's sgemm rate (benchmarks/sgemm_bench, 4096^3,
same threads) is measured before the first round and after the last. Peak memory is each
side's max RSS.

  python3 benchmarks/compare_torch.py                       # shakespeare-llama, B=32, T=128
  python3 benchmarks/compare_torch.py --model-preset gpt2-124m --batch 8 --seq 256 \
      --steps 4 --warmup 1 --rounds 3 --torch-attn eager
  python3 benchmarks/compare_torch.py --markdown docs/benchmarks.md
  python3 benchmarks/compare_torch.py --baseline /path/to/older/zerotrain   # a row for it too

PyTorch/transformers are used only by this script, never by the trainer.
"""
import argparse
import datetime
import glob
import json
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_md import prepare_shards, write_section  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARD_MAGIC_U16, SHARD_VERSION_U16, HEADER_INTS = 20240520, 1, 256

# Mirrors model/config.cc (the presets this script can map to a HF model).
PRESETS = {
    "shakespeare-llama": dict(arch="llama", hidden=128, intermediate=384, layers=4, heads=4,
                              kv_heads=2, vocab=32000, max_seq=256, eps=1e-5, theta=1e4),
    "tiny-llama": dict(arch="llama", hidden=64, intermediate=128, layers=2, heads=4, kv_heads=2,
                       vocab=256, max_seq=64, eps=1e-5, theta=1e4),
    "tiny-gpt2": dict(arch="gpt2", hidden=64, layers=2, heads=4, vocab=256, max_seq=64,
                      eps=1e-5),
    "gpt2-124m": dict(arch="gpt2", hidden=768, layers=12, heads=12, vocab=50257, max_seq=1024,
                      eps=1e-5),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-preset", default="shakespeare-llama", choices=sorted(PRESETS))
    p.add_argument("--batch", type=int, default=32, help="micro-batch B")
    p.add_argument("--seq", type=int, default=128, help="sequence length T")
    p.add_argument("--steps", type=int, default=12, help="steps per side and round")
    p.add_argument("--rounds", type=int, default=1, help="alternations of the sides")
    p.add_argument("--warmup", type=int, default=2, help="leading steps left out of the median")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--binary", default=os.path.join(ROOT, "build", "zerotrain"))
    p.add_argument("--baseline", default=None,
                   help="another zerotrain binary (an older build) run in the same rounds")
    p.add_argument("--data", default=None,
                   help="glob of llm.c token shards (default: TinyShakespeare shards for 32k-vocab "
                        "presets, prepared if missing; random tokens for the tiny presets)")
    p.add_argument("--shared-data", default=os.path.join(ROOT, "..", "shared", "data"))
    p.add_argument("--torch-attn", default="eager,sdpa",
                   help="comma list of HF attn_implementation values to measure (first is the "
                        "reference for the ratio)")
    p.add_argument("--profile", action="store_true",
                   help="also print the torch profiler's top ops for one eager step")
    p.add_argument("--markdown", default=None, help="write/update a section in this markdown file")
    a = p.parse_args()
    if a.steps <= a.warmup:
        p.error("--steps must exceed --warmup")
    return a


# ---------------------------------------------------------------------------- data

def write_random_shard(path, n_tokens, vocab, seed=0):
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[:3] = [SHARD_MAGIC_U16, SHARD_VERSION_U16, n_tokens]
    toks = np.random.default_rng(seed).integers(0, vocab, n_tokens, dtype=np.uint16)
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())


def read_shard(path):
    raw = np.fromfile(path, dtype=np.int32, count=HEADER_INTS)
    assert raw[0] == SHARD_MAGIC_U16 and raw[1] == SHARD_VERSION_U16, f"{path}: not a u16 shard"
    return np.fromfile(path, dtype=np.uint16, offset=HEADER_INTS * 4)[: raw[2]]


def resolve_data(a, cfg, tmp):
    if a.data:
        return a.data
    if cfg["vocab"] >= 32000:
        default = os.path.join(ROOT, "data_cache", "shakespeare", "train_*.bin")
        if glob.glob(default):
            return default
        return prepare_shards(a.binary, a.shared_data, os.path.join(tmp, "shakespeare"))
    path = os.path.join(tmp, "random_000000.bin")
    write_random_shard(path, 1 << 20, cfg["vocab"])
    return path


# ---------------------------------------------------------------------------- ours

def our_param_count(a):
    out = subprocess.run([a.binary, "info", "--model", a.model_preset], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.split()[:1] == ["total"]:
            return int(line.split()[1])
    raise RuntimeError(f"no 'total' line in zerotrain info output:\n{out}")


def run_ours(a, data, tmp, binary=None):
    with open(os.path.join(ROOT, "benchmarks", "ds_bench.json")) as f:
        ds = json.load(f)
    ds["train_micro_batch_size_per_gpu"] = a.batch
    ds["optimizer"]["params"]["lr"] = a.lr
    ds_path = os.path.join(tmp, "ds_bench.json")
    with open(ds_path, "w") as f:
        json.dump(ds, f)
    run_dir = os.path.join(tmp, "run")
    cmd = [binary or a.binary, "train", "--model", a.model_preset, "--deepspeed", ds_path,
           "--train_data", data, "--seq_len", str(a.seq), "--steps", str(a.steps),
           "--threads", str(a.threads), "--sample_tokens", "0", "--val_data", "",
           "--val_every", "0", "--run_dir", run_dir]
    print("ours:", " ".join(shlex.quote(c) for c in cmd), flush=True)
    # The peak RSS of this child alone: GNU time's %M (getrusage's children maximum would
    # include the other children).
    timed = ["/usr/bin/time", "-f", "maxrss_kib %M", "-o", os.path.join(tmp, "rss.txt")]
    subprocess.run(timed + cmd, check=True, stdout=subprocess.DEVNULL)
    rss_gb = int(open(os.path.join(tmp, "rss.txt")).read().split()[-1]) * 1024 / 1e9
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    rows = [r for r in rows if "tokens_per_s" in r][a.warmup:]
    med = lambda k: statistics.median(r[k] for r in rows)
    return dict(tok_s=med("tokens_per_s"), step_ms=med("step_ms"), forward_ms=med("forward_ms"),
                backward_ms=med("backward_ms"), optimizer_ms=med("optimizer_ms"),
                loss=rows[-1]["loss"], rss_gb=rss_gb)


# ---------------------------------------------------------------------------- torch

def hf_model(cfg, attn):
    import torch
    if cfg["arch"] == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM
        hc = LlamaConfig(vocab_size=cfg["vocab"], hidden_size=cfg["hidden"],
                         intermediate_size=cfg["intermediate"], num_hidden_layers=cfg["layers"],
                         num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"],
                         max_position_embeddings=cfg["max_seq"], rms_norm_eps=cfg["eps"],
                         rope_parameters={"rope_type": "default", "rope_theta": cfg["theta"]},
                         hidden_act="silu", attention_bias=False, mlp_bias=False,
                         attention_dropout=0.0, tie_word_embeddings=False)
        hc._attn_implementation = attn
        return LlamaForCausalLM(hc).to(torch.float32)
    from transformers import GPT2Config, GPT2LMHeadModel
    hc = GPT2Config(vocab_size=cfg["vocab"], n_positions=cfg["max_seq"], n_embd=cfg["hidden"],
                    n_layer=cfg["layers"], n_head=cfg["heads"], layer_norm_epsilon=cfg["eps"],
                    activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                    attn_pdrop=0.0, tie_word_embeddings=True,
                    bos_token_id=None, eos_token_id=None)
    hc._attn_implementation = attn
    return GPT2LMHeadModel(hc).to(torch.float32)


def run_torch(a, cfg, tokens, attn, profile=False):
    import torch
    import torch.nn.functional as F
    torch.manual_seed(1337)
    model = hf_model(cfg, attn)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8,
                            weight_decay=0.1)
    rng = np.random.default_rng(1337)
    B, T = a.batch, a.seq

    def batch():
        starts = rng.integers(0, len(tokens) - T - 1, B)
        xy = torch.from_numpy(np.stack([tokens[s:s + T + 1] for s in starts]).astype(np.int64))
        return xy[:, :-1].contiguous(), xy[:, 1:].contiguous()

    def step(x, y):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
        t1 = time.perf_counter()
        loss.backward()
        t2 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        t3 = time.perf_counter()
        return loss.item(), (t1 - t0) * 1e3, (t2 - t1) * 1e3, (t3 - t2) * 1e3, (t3 - t0) * 1e3

    rows = []
    for _ in range(a.steps):
        rows.append(step(*batch()))
    prof_table = None
    if profile:
        from torch.profiler import profile as tprof, ProfilerActivity
        with tprof(activities=[ProfilerActivity.CPU]) as prof:
            step(*batch())
        prof_table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    steady = rows[a.warmup:]
    med = lambda i: statistics.median(r[i] for r in steady)
    del model, opt  # (this process's peak RSS below includes them)
    rss_gb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9
    return dict(tok_s=statistics.median(B * T / (r[4] / 1e3) for r in steady), step_ms=med(4),
                forward_ms=med(1), backward_ms=med(2), optimizer_ms=med(3), loss=steady[-1][0],
                n_params=n_params, profile=prof_table, rss_gb=rss_gb)


# ---------------------------------------------------------------------------- FLOPs, sgemm

def step_flops(cfg, B, T):
    """The model's FLOPs per step, as the flops profiler counts them: 6 N Psi_linear for the
    matrix products (2 forward, 4 backward) and causal attention, T(T+1)/2 x hd multiply-adds
    per head for each of QK^T and PV forward, five such products backward."""
    C, L, V, H = cfg["hidden"], cfg["layers"], cfg["vocab"], cfg["heads"]
    hd = C // H
    if cfg["arch"] == "gpt2":
        per_layer = C * 3 * C + C * C + 2 * C * 4 * C
    else:
        per_layer = (C * (H + 2 * cfg["kv_heads"]) * hd + C * C + 3 * C * cfg["intermediate"])
    linear = L * per_layer + V * C
    causal = 2 * B * H * (T * (T + 1) / 2) * hd
    return 6 * B * T * linear + L * 7 * causal


def sgemm_rate(a):
    """GFLOP/s of a 4096^3 sgemm through zerotrain's BLAS on --threads threads, or None."""
    exe = os.path.join(os.path.dirname(a.binary), "benchmarks", "sgemm_bench")
    if not os.path.exists(exe):
        return None
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads), OPENBLAS_NUM_THREADS=str(a.threads))
    out = subprocess.run([exe, "--benchmark_filter=BM_Sgemm/N:4096", "--benchmark_format=json"],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out)["benchmarks"][0]["GFLOP/s"]


def combine(rounds):
    """One row from a side's rounds: the median of each figure over the rounds."""
    keys = ["tok_s", "step_ms", "forward_ms", "backward_ms", "optimizer_ms"]
    row = {k: statistics.median(r[k] for r in rounds) for k in keys}
    row["rounds_tok_s"] = [r["tok_s"] for r in rounds]
    row["loss"] = rounds[-1]["loss"]
    row["n_params"] = rounds[-1].get("n_params")
    row["rss_gb"] = max(r["rss_gb"] for r in rounds)
    return row


# ---------------------------------------------------------------------------- report

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def table(results, ref_key, flops):
    ref = results[ref_key]["tok_s"]
    lines = ["| implementation | tokens/s (rounds) | step ms | forward ms | backward ms "
             "| optimizer ms | GFLOP/s | peak RSS GB | ours / this |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    ours = results["zerotrain (ours)"]["tok_s"]
    for name, r in results.items():
        ratio = "—" if name == "zerotrain (ours)" else f"{ours / r['tok_s']:.2f}x"
        rounds = ", ".join(f"{x:.0f}" for x in r["rounds_tok_s"])
        lines.append(f"| {name} | {r['tok_s']:.0f} ({rounds}) | {r['step_ms']:.0f} "
                     f"| {r['forward_ms']:.0f} | {r['backward_ms']:.0f} | {r['optimizer_ms']:.0f} "
                     f"| {flops / r['step_ms'] / 1e6:.1f} | {r['rss_gb']:.2f} | {ratio} |")
    return "\n".join(lines), ours / ref


def write_markdown(path, a, body):
    write_section(path, f"compare_torch:{a.model_preset}:{a.batch}x{a.seq}", body)


def main():
    a = parse_args()
    cfg = PRESETS[a.model_preset]
    if a.seq > cfg["max_seq"]:
        sys.exit(f"--seq {a.seq} exceeds the preset's max_seq_len {cfg['max_seq']}")
    import torch
    import transformers
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)

    with tempfile.TemporaryDirectory(prefix="zt_bench_") as tmp:
        data = resolve_data(a, cfg, tmp)
        ours_params = our_param_count(a)
        tokens = np.concatenate([read_shard(p) for p in sorted(glob.glob(data))])
        t0 = time.time()
        sgemm = [sgemm_rate(a)]
        per_side, loads, profile_table = {}, [], None
        for rnd in range(a.rounds):  # the sides alternate, round after round
            loads.append(os.getloadavg()[0])
            per_side.setdefault("zerotrain (ours)", []).append(run_ours(a, data, tmp))
            if a.baseline:
                per_side.setdefault("zerotrain (baseline build)", []).append(
                    run_ours(a, data, tmp, a.baseline))
            for attn in [s for s in a.torch_attn.split(",") if s]:
                r = run_torch(a, cfg, tokens, attn,
                              profile=a.profile and attn == "eager" and rnd == 0)
                if r["n_params"] != ours_params:
                    sys.exit(f"parameter count mismatch: zerotrain {ours_params:,} vs "
                             f"PyTorch {r['n_params']:,} ({attn})")
                profile_table = profile_table or r["profile"]
                per_side.setdefault(f"PyTorch eager ({attn} attention)", []).append(r)
        sgemm.append(sgemm_rate(a))
        wall = time.time() - t0
    results = {name: combine(rounds) for name, rounds in per_side.items()}
    for name in results:
        if name.startswith("zerotrain"):
            results[name]["n_params"] = ours_params

    flops = step_flops(cfg, a.batch, a.seq)
    # The ratio is against the first PyTorch row (else the baseline build).
    ref_key = next((k for k in results if k.startswith("PyTorch")), list(results)[-1])
    tab, ratio = table(results, ref_key, flops)
    ours_gflops = flops / results["zerotrain (ours)"]["step_ms"] / 1e6
    if None in sgemm:
        peak_line = "sgemm: build/benchmarks/sgemm_bench not built, no peak measured"
    else:
        peak_line = (f"sgemm 4096^3 on {a.threads} threads: {sgemm[0]:.1f} GFLOP/s before the "
                     f"rounds, {sgemm[1]:.1f} after; ours runs at "
                     f"{100 * ours_gflops / max(sgemm):.0f}-{100 * ours_gflops / min(sgemm):.0f}% "
                     f"of it")
    load_line = "load average (1 min) at each round's start: " + ", ".join(
        f"{x:.2f}" for x in loads)
    argv = " ".join(shlex.quote(x) for x in ["python3", "benchmarks/compare_torch.py"] + sys.argv[1:])
    print(f"\nparameters: zerotrain {ours_params:,} | PyTorch {results[ref_key]['n_params']:,}")
    print(f"model {a.model_preset} | B={a.batch} T={a.seq} | {a.threads} threads | "
          f"median of steps {a.warmup + 1}..{a.steps}\n")
    print(tab)
    print(f"\nratio ours / {ref_key}: {ratio:.2f}x")
    print(f"model FLOPs per step {flops / 1e9:.1f} G; {peak_line}")
    print(load_line)
    print("losses at last step: " + ", ".join(f"{k} {v['loss']:.3f}" for k, v in results.items()))
    if profile_table:
        print("\ntorch profiler, one eager step (self CPU time):\n" + profile_table)

    if a.markdown:
        body = "\n".join([
            f"## {a.model_preset}, B x T = {a.batch} x {a.seq}: training tokens/s, zerotrain CPU "
            f"vs PyTorch eager",
            "",
            f"Model `{a.model_preset}` ({ours_params:,} parameters on both sides), micro-batch "
            f"B={a.batch}, T={a.seq}, fp32, AdamW (weight decay 0.1 on every parameter, constant "
            f"lr {a.lr:g}), gradient clipping 1.0; each step = forward + backward + clip + "
            f"optimizer step. tokens/s = median over steps {a.warmup + 1}..{a.steps} "
            f"({a.warmup} warm-up steps dropped), B*T / step time on both sides; {a.rounds} "
            f"alternating round(s), the row is the median over rounds (each round in brackets). "
            f"GFLOP/s = the model's {flops / 1e9:.1f} GFLOP per step / step time.",
            "",
            tab,
            "",
            f"**Ratio ours / {ref_key}: {ratio:.2f}x.** {peak_line}.",
            "",
            f"- {load_line}.",
            f"- Machine: {cpu_model()}, {os.cpu_count()} logical cores, {a.threads} threads on "
            f"both sides (`--threads`, `torch.set_num_threads`).",
            f"- Versions: torch {torch.__version__}, transformers {transformers.__version__}, "
            f"Python {platform.python_version()}.",
            f"- Date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}; all rows come from one "
            f"invocation ({wall:.0f} s), measured back to back.",
            f"- Command: `{argv}`",
        ])
        write_markdown(a.markdown, a, body)
        print(f"\nwrote section '{a.model_preset}' in {a.markdown}")


if __name__ == "__main__":
    main()
