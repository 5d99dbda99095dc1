#!/usr/bin/env python3
"""The roofline budget of one training step on an H100 or H200 (the kernels issue): every kernel the
CUDA backend launches for one micro-batch of GPT-2 124M (B 16, T 1024) or TinyLlama-1.1B
(B 4, T 2048), single GPU, stage 0, bf16 parameters and activations, fp32 master weights and
AdamW, each with its FLOPs, the bytes it must move, its time at the GPU's roofs (989.4 TFLOP/s
dense bf16 on both; 3.35 TB/s of HBM3 on an H100 SXM, 4.8 TB/s of HBM3e on an H200), and the
step time and MFU that follow when each kernel runs at a stated fraction of its roof.

  benchmarks/gpu_roofline.py [--gpu h100|h200|both] [--model gpt2|tinyllama|both] [--batch B]
                             [--ordered-dq]
                             [--beta0] [--residual-in-gemm] [--measured PROFILE.txt]

The kernel list is the CUDA backend's as built (model/transformer.cc's forward and backward,
under the op names the flops profiler, model/profiling_backend.cc, uses): the vocabulary
padded to a multiple of 128 on the device, bf16 logits in one chunk, the tensor-core
attention, cuBLASLt's GELU_AUX_BIAS epilogue on GPT-2's first MLP GEMM and DGELU on its
backward, two-pass column reductions for the biases, the norms' parameter gradients taken as
tile partials in their dx pass, 16-byte element-wise
kernels (GELU, SwiGLU, the residual add). --ordered-dq, --beta0 and --residual-in-gemm add items of the plan not built yet. A
kernel's time is max(FLOPs / (fraction x peak), bytes / (fraction x bandwidth)) plus a
launch gap. `--measured` reads the flops profiler's table (the ds_config's flops_profiler on
the GPU: each op synchronised and timed alone) and prints the measured time per op beside the
budget.

MFU is PaLM's (Chowdhery et al. 2022, appendix B), as scripts/gpu_check.py reports it:
(6 Psi + 12 L C T) FLOPs per token over the dense bf16 peak.
"""
import argparse
import re
import sys
from collections import OrderedDict

PEAK = 989.4e12  # dense bf16 FLOP/s, H100/H200 SXM (NVIDIA's datasheet)
# Memory bandwidth, bytes/s (NVIDIA's datasheets): the two share the compute roof and differ here.
GPUS = OrderedDict(h100=(3.35e12, "H100 SXM, HBM3"), h200=(4.8e12, "H200, HBM3e"))
HBM = GPUS["h200"][0]  # the GPU being planned for (main sets it from --gpu)
# The fraction of its roof each kind of kernel is planned to reach, and why that is credible.
FRACTION = OrderedDict(
    gemm=(0.75, "cuBLASLt bf16 GEMMs of these shapes on Hopper: 650-750 TFLOP/s (NVIDIA's "
                "cuBLAS figures; llm.c's GPT-2 runs its GEMMs there)"),
    attn_fwd=(0.35, "FlashAttention-2 on mma.sync reaches 335-350 TFLOP/s forward on H100 at "
                    "head size 64-128 (Dao 2023, Fig. 5-6); wgmma (FA3) would double it"),
    attn_bwd=(0.25, "FlashAttention-2's backward: ~250 TFLOP/s on H100 (Dao 2023)"),
    memory=(0.80, "element-wise, norm and reduction kernels with 128-bit loads, one pass: "
                  "80% of HBM bandwidth (STREAM-like copies reach ~90% on Hopper)"),
)
LAUNCH_GAP_S = 1.5e-6  # per kernel, queued asynchronously (no host sync inside the step)
BF16, F32 = 2, 4

MODELS = {
    "gpt2": dict(name="GPT-2 124M", L=12, C=768, NH=12, KVH=12, I=3072, V=50257, T=1024, B=16,
                 gpt2=True),
    "tinyllama": dict(name="TinyLlama-1.1B", L=22, C=2048, NH=32, KVH=4, I=5632, V=32000, T=2048,
                      B=4, gpt2=False),
}


def padded(v, multiple=128):
    return (v + multiple - 1) // multiple * multiple


def psi(m):
    """Parameter count Psi (unpadded vocabulary, tied GPT-2 embeddings)."""
    L, C, I, V, hd = m["L"], m["C"], m["I"], m["V"], m["C"] // m["NH"]
    qkv = (m["NH"] + 2 * m["KVH"]) * hd
    if m["gpt2"]:
        block = C * qkv + qkv + C * C + C + C * I + I + I * C + C + 4 * C
        return V * C + m["T"] * C + L * block + 2 * C
    block = C * qkv + C * C + C * 2 * I + I * C + 2 * C
    return 2 * V * C + L * block + C


def kernels(m, ordered_dq=False, beta0=False, residual_in_gemm=False):
    """[(op, kernel, kind, flops, bytes)] for one step: forward, backward, optimizer.
    ordered_dq: the attention backward as one kernel of 5 products (FlashAttention-2's
    deterministic mode) instead of the two kernels built, which recompute S and dP in each.
    beta0: the backward's dX GEMMs write their output (beta 0) instead of adding into scratch
    zeroed first (as built: cudaMemsetAsync, then beta 1). residual_in_gemm: the block's residual
    added by the fc projection GEMM (beta 1) instead of a separate add (as built)."""
    L, C, NH, KVH, I, T, B = m["L"], m["C"], m["NH"], m["KVH"], m["I"], m["T"], m["B"]
    V, Vp, N, hd, g2 = m["V"], padded(m["V"]), m["B"] * m["T"], m["C"] // m["NH"], m["gpt2"]
    qkv = (NH + 2 * KVH) * hd
    fc = I if g2 else 2 * I
    pairs = T * (T + 1) // 2  # causal (query, key) pairs per head
    out = []

    def k(op, name, kind, flops, nbytes):
        out.append((op, name, kind, float(flops), float(nbytes)))

    def gemm(op, name, M, Nn, K, extra_bytes=0):
        k(op, name, "gemm", 2 * M * Nn * K, BF16 * (M * K + Nn * K + M * Nn) + extra_bytes)

    def gemm_dw(op, name, M, Nn, K):  # dW (M x Nn, fp32, read and written) += dY^T X over K rows
        k(op, name, "gemm", 2 * M * Nn * K, BF16 * (M * K + Nn * K) + 2 * F32 * M * Nn)

    def column_sum(op, name, rows, cols, outputs=1, inputs=1):  # two passes; pass 2 is tiny
        k(op, name + " (pass 1)", "memory", 2 * rows * cols * inputs,
          BF16 * rows * cols * inputs + F32 * (rows // 256 + 1) * cols * outputs)
        k(op, name + " (pass 2)", "memory", 0, F32 * ((rows // 256 + 1) + 2) * cols * outputs)

    norm = "layernorm" if g2 else "rmsnorm"

    def norm_backward():  # a norm's dx (added into dinp, zeroed or the residual's
        # gradient: read and written) and its parameters' gradients, in one pass over tiles of
        # 32 rows; then the tiles' partials summed in column_sum's two passes
        K, tiles = (2 if g2 else 1), (N + 31) // 32
        k(f"{norm}_backward", f"{norm} backward, dx and the parameter gradients' tile partials",
          "memory", (14 if g2 else 12) * N * C,
          4 * BF16 * N * C + K * F32 * N + F32 * tiles * K * C)
        k(f"{norm}_backward", f"{norm} parameter gradients (tile partials, pass 1)", "memory",
          tiles * K * C, F32 * tiles * K * C + F32 * ((tiles + 255) // 256) * K * C)
        k(f"{norm}_backward", f"{norm} parameter gradients (tile partials, pass 2)", "memory", 0,
          F32 * ((tiles + 255) // 256 + 2) * K * C)
    # ---- forward ----
    k("embedding_forward", "token + position lookup", "memory", 0,
      BF16 * N * C * (3 if g2 else 2) + 4 * N)
    for _ in range(L):
        k(f"{norm}_forward", f"{norm} of the block's input", "memory", 8 * N * C,
          2 * BF16 * N * C + 2 * F32 * N)
        gemm("matmul_forward", "qkv GEMM (+bias epilogue)", N, qkv, C)
        if not g2:
            k("rope_forward", "RoPE on q and k", "memory", 6 * N * (NH + KVH) * hd,
              2 * BF16 * N * (NH + KVH) * hd)
        k("attention_forward", "flash forward (mma.sync)", "attn_fwd", 4 * B * NH * pairs * hd,
          BF16 * N * (qkv + C) + F32 * B * NH * T)
        gemm("matmul_forward", "attention projection GEMM", N, C, C)
        k(f"residual_{norm}_forward", f"residual add + {norm}", "memory", 8 * N * C,
          BF16 * N * C * 4 + 2 * F32 * N)
        if g2:
            gemm("matmul_forward", "fc GEMM, GELU epilogue (pre-GELU kept)", N, I, C,
                 extra_bytes=BF16 * N * I)
        else:
            gemm("matmul_forward", "gate|up GEMM", N, fc, C)
            k("swiglu_forward", "SwiGLU", "memory", 4 * N * I, BF16 * N * 3 * I)
        if residual_in_gemm:  # the block's residual added by the GEMM (beta 1, C = mid)
            gemm("matmul_forward", "fc projection GEMM (+ residual as C)", N, C, I,
                 extra_bytes=BF16 * N * C)
        else:
            gemm("matmul_forward", "fc projection GEMM", N, C, I)
            k("add_inplace", "residual add", "memory", N * C, 3 * BF16 * N * C)
    k(f"{norm}_forward", f"final {norm}", "memory", 8 * N * C, 2 * BF16 * N * C + 2 * F32 * N)
    # ---- head: padded vocabulary, one chunk, bf16 logits ----
    gemm("matmul_forward", "classifier GEMM", N, Vp, C)
    k("crossentropy", "softmax + loss + dlogits in place", "memory", 5 * N * V,
      2 * BF16 * N * Vp + 8 * N)
    if not beta0:
        k("zero", "zero dlnf and dx (scratch the GEMMs add into)", "memory", 0, 2 * BF16 * N * C)
    gemm("matmul_backward", "classifier dX GEMM", N, C, Vp)
    gemm_dw("matmul_backward", "classifier dW GEMM", Vp, C, N)
    norm_backward()
    # ---- backward, per block ----
    for _ in range(L):
        if not beta0:
            k("zero", "zero dact, dln x2, datty, dqkv (scratch the GEMMs add into)", "memory", 0,
              BF16 * N * (I + 3 * C + qkv))
        if g2:  # cuBLASLt's DGELU epilogue: dGELU from the kept pre-GELU
            gemm("matmul_backward", "fc projection dX GEMM, dGELU epilogue", N, I, C,
                 extra_bytes=BF16 * N * I)
        else:
            gemm("matmul_backward", "fc projection dX GEMM", N, I, C)
        gemm_dw("matmul_backward", "fc projection dW GEMM", C, I, N)
        if g2:
            column_sum("matmul_backward", "fc projection bias gradient", N, C)
        else:
            k("swiglu_backward", "SwiGLU backward", "memory", 8 * N * I, BF16 * N * 5 * I)
        gemm("matmul_backward", "fc dX GEMM", N, C, fc)
        gemm_dw("matmul_backward", "fc dW GEMM", fc, C, N)
        if g2:
            column_sum("matmul_backward", "fc bias gradient", N, I)
        norm_backward()
        gemm("matmul_backward", "attention projection dX GEMM", N, C, C)
        gemm_dw("matmul_backward", "attention projection dW GEMM", C, C, N)
        if g2:
            column_sum("matmul_backward", "attention projection bias gradient", N, C)
        k("attention_backward", "D = rowsum(dO o O)", "memory", 2 * N * C, 2 * BF16 * N * C)
        if ordered_dq:  # one kernel, 5 products; dQ added in key-block order (a semaphore)
            k("attention_backward", "flash backward, dQ in key-block order (mma.sync)",
              "attn_bwd", 10 * B * NH * pairs * hd, BF16 * N * (qkv + 2 * C) + 2 * F32 * N * C)
        else:  # as built: S and dP recomputed by both kernels, 7 products
            k("attention_backward", "flash backward dQ (mma.sync)", "attn_bwd",
              6 * B * NH * pairs * hd, BF16 * N * (qkv + 2 * C))
            k("attention_backward", "flash backward dK/dV (mma.sync)", "attn_bwd",
              8 * B * NH * pairs * hd, BF16 * N * (qkv + 2 * C))
        if not g2:
            k("rope_backward", "RoPE backward", "memory", 6 * N * (NH + KVH) * hd,
              2 * BF16 * N * (NH + KVH) * hd)
        gemm("matmul_backward", "qkv dX GEMM", N, C, qkv)
        gemm_dw("matmul_backward", "qkv dW GEMM", qkv, C, N)
        if g2:
            column_sum("matmul_backward", "qkv bias gradient", N, qkv)
        norm_backward()
    k("embedding_backward", "token (+ position) gradients", "memory", N * C,
      BF16 * N * C + 2 * F32 * N * C)
    # ---- optimizer and gradient bookkeeping over Psi ----
    P = psi(m)
    k("sum_squares", "gradient norm", "memory", 2 * P, F32 * P)
    k("optimizer_update", "AdamW (fp32 master, m, v; bf16 copy)", "memory", 12 * P,
      (4 * F32 + 3 * F32 + BF16) * P)
    k("zero", "zero the gradients", "memory", 0, F32 * P)
    return out


def budget(m, fractions, options):
    rows = []
    for op, name, kind, flops, nbytes in kernels(m, **options):
        frac = fractions[kind]
        t_c = flops / (frac * PEAK) if kind != "memory" else 0.0
        t_m = nbytes / (fractions["memory"] * HBM)
        rows.append(dict(op=op, kernel=name, kind=kind, flops=flops, bytes=nbytes,
                         roof_s=max(flops / PEAK, nbytes / HBM),
                         planned_s=max(t_c, t_m) + LAUNCH_GAP_S))
    return rows


def model_flops_per_step(m):
    N = m["B"] * m["T"]
    return N * (6 * psi(m) + 12 * m["L"] * m["C"] * m["T"])


def read_measured(path):
    """{op: ms in the profiled step} from the flops profiler's table (model/profiling_backend.cc:
    op, shape, calls, ms, share, ...; an op's rows of several shapes added)."""
    got = {}
    row = re.compile(r"^([a-z_0-9]+)\s+(.*?)\s+(\d+)\s+([0-9.]+)\s+[0-9.]+%")
    for line in open(path):
        m = row.match(line)
        if m:
            got[m[1]] = got.get(m[1], 0.0) + float(m[4])
    return got


def report(key, fractions, measured, options):
    m = MODELS[key]
    rows = budget(m, fractions, options)
    step = sum(r["planned_s"] for r in rows)
    roof = sum(r["roof_s"] for r in rows)
    mf = model_flops_per_step(m)
    p = psi(m)
    print(f"\n### {m['name']}: B {m['B']}, T {m['T']}, vocabulary {m['V']} -> {padded(m['V'])} "
          f"on the device; Psi = {p / 1e6:.1f} M\n")
    # Kernels of one op and name collapse into one row: calls x per-call figures.
    agg = OrderedDict()
    for r in rows:
        a = agg.setdefault((r["op"], r["kernel"]), dict(r, calls=0, flops=0, bytes=0, roof_s=0,
                                                         planned_s=0))
        a["calls"] += 1
        for f in ("flops", "bytes", "roof_s", "planned_s"):
            a[f] += r[f]
    print("| op | kernel | calls | GFLOP | GB moved | bound | at roof (ms) | planned (ms) | share |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (op, name), a in agg.items():
        bound = "compute" if a["kind"] != "memory" and a["flops"] / PEAK > a["bytes"] / HBM \
            else "memory"
        print(f"| {op} | {name} | {a['calls']} | {a['flops'] / 1e9:.1f} | {a['bytes'] / 1e9:.2f} "
              f"| {bound} | {a['roof_s'] * 1e3:.3f} | {a['planned_s'] * 1e3:.3f} "
              f"| {100 * a['planned_s'] / step:.1f}% |")
    by_kind = OrderedDict()
    for r in rows:
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + r["planned_s"]
    print(f"\nKernels launched: {len(rows)}. Model FLOPs per step (6 Psi + 12 L C T per token): "
          f"{mf / 1e12:.2f} TFLOP.")
    print("Time by kind: " + ", ".join(f"{k} {v * 1e3:.2f} ms ({100 * v / step:.0f}%)"
                                       for k, v in by_kind.items()) + ".")
    print(f"Every kernel at its roof: {roof * 1e3:.2f} ms, MFU {100 * mf / (roof * PEAK):.1f}%. "
          f"At the planned fractions: **{step * 1e3:.2f} ms per step, "
          f"{m['B'] * m['T'] / step:,.0f} tokens/s, MFU {100 * mf / (step * PEAK):.1f}%**.")
    if measured:
        print("\nMeasured (the flops profiler: each op synchronised, so launch gaps count):\n\n"
              "| op | planned (ms) | measured (ms) | measured / planned |\n|---|---|---|---|")
        per_op = OrderedDict()
        for r in rows:
            per_op[r["op"]] = per_op.get(r["op"], 0) + r["planned_s"] * 1e3
        for op, ms in per_op.items():
            got = measured.get(op)
            print(f"| {op} | {ms:.3f} | {'' if got is None else f'{got:.3f}'} | "
                  f"{'' if got is None else f'{got / ms:.2f}x'} |")
        for op, got in measured.items():  # launched, but fused away or not modelled
            if op not in per_op:
                print(f"| {op} | (not in the plan) | {got:.3f} | |")
        print(f"\nMeasured in all: {sum(measured.values()):.3f} ms; planned {step * 1e3:.3f} ms.")
    return 100 * mf / (step * PEAK)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", choices=list(GPUS) + ["both"], default="both",
                    help="the GPU whose memory bandwidth is the memory roof (default both)")
    ap.add_argument("--model", choices=["gpt2", "tinyllama", "both"], default="both")
    ap.add_argument("--measured", help="the flops profiler's table from a GPU run")
    ap.add_argument("--batch", type=int, help="micro-batch B (default: 16 GPT-2, 4 TinyLlama)")
    ap.add_argument("--ordered-dq", action="store_true",
                    help="plan the attention backward as one 5-product kernel (not built)")
    ap.add_argument("--beta0", action="store_true",
                    help="plan the backward's dX GEMMs with beta 0, no zeroed scratch (not built)")
    ap.add_argument("--residual-in-gemm", action="store_true",
                    help="plan the block's residual added by the fc projection GEMM (not built)")
    for kind, (f, _) in FRACTION.items():
        ap.add_argument(f"--{kind}", type=float, default=f,
                        help=f"fraction of roof for {kind} kernels (default {f})")
    a = ap.parse_args()
    fractions = {k: getattr(a, k) for k in FRACTION}
    print("\n| kind | fraction of roof | why |\n|---|---|---|")
    for kind, (f, why) in FRACTION.items():
        print(f"| {kind} | {fractions[kind]:.2f} | {why} |")
    measured = read_measured(a.measured) if a.measured else None
    global HBM
    for gpu in (list(GPUS) if a.gpu == "both" else [a.gpu]):
        HBM, name = GPUS[gpu]
        print(f"\n## {name}\n\nRoofs: {PEAK / 1e12:.1f} TFLOP/s dense bf16, {HBM / 1e12:.2f} TB/s; "
              f"a launch gap of {LAUNCH_GAP_S * 1e6:.1f} us per kernel.")
        for key in (["gpt2", "tinyllama"] if a.model == "both" else [a.model]):
            if a.batch:
                MODELS[key]["B"] = a.batch
            report(key, fractions, measured, dict(ordered_dq=a.ordered_dq, beta0=a.beta0,
                                                  residual_in_gemm=a.residual_in_gemm))


if __name__ == "__main__":
    sys.exit(main())
