#!/usr/bin/env bash
# Stage 3's transient device memory, measured (the tracker's peak in --memory_report) beside
# the estimator's prediction for the same run, in two markdown tables (docs/zero.md, ZeRO++;
# docs/estimator.md, "Known gap"):
#   1. comm_buffers of tiny-llama on 4 ranks (CPU backend, bf16, overlap_comm, reuse distance 0,
#      every unit sharded): plain stage 3, qwZ, qgZ, and qwZ + hpZ (2) + qgZ;
#   2. workspace of a 12-block LLaMA 64 wide (256-token vocabulary) on 2 ranks on the emulated
#      CUDA backend (zerotrain_emu --device cuda: a GPU's dtypes, no fp32 weight views), by
#      stage3_prefetch_bucket_size: 0, half a block, one and a half blocks, DeepSpeed's 5e7.
# Random tokens, 3 steps each; about a minute on 2 cores.
# Usage: benchmarks/stage3_memory.sh [build dir]   (OUT overrides the work directory)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=${OUT:-runs/stage3_memory}
for b in zerotrain zerotrain_emu; do
  [[ -x $BUILD/$b ]] || { echo "stage3_memory: $BUILD/$b not found (build first)" >&2; exit 2; }
done
MPI=(mpirun --oversubscribe)
[[ $(id -u) == 0 ]] && MPI+=(--allow-run-as-root)
rm -rf "$OUT" && mkdir -p "$OUT"

python3 - "$OUT" <<'PY'
import json, random, struct, sys
out = sys.argv[1]
n = 20000
rng = random.Random(0)
with open(f"{out}/train_000.bin", "wb") as f:
    f.write(struct.pack("<256i", *([20240520, 1, n] + [0] * 253)))
    f.write(struct.pack(f"<{n}H", *[rng.randrange(256) for _ in range(n)]))
z3 = {"stage": 3, "overlap_comm": True, "stage3_param_persistence_threshold": 0,
      "stage3_max_reuse_distance": 0}
base = {"train_batch_size": 8, "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}
for name, keys in {"plain": {}, "qwz": {"zero_quantized_weights": True},
                   "qgz": {"zero_quantized_gradients": True},
                   "all": {"zero_quantized_weights": True, "zero_hpz_partition_size": 2,
                           "zero_quantized_gradients": True}}.items():
    json.dump(dict(base, zero_optimization=dict(z3, **keys)), open(f"{out}/{name}.json", "w"))
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
           "intermediate_size": 192, "num_hidden_layers": 12, "num_attention_heads": 4,
           "num_key_value_heads": 4, "vocab_size": 256, "max_position_embeddings": 64,
           "rms_norm_eps": 1e-5, "tie_word_embeddings": False}, open(f"{out}/deep.json", "w"))
block = 4 * 64 * 64 + 3 * 64 * 192 + 2 * 64  # a block's parameters
for name, bucket in {"bucket_0": 0, "bucket_half_block": block // 2,
                     "bucket_1.5_blocks": block * 3 // 2, "bucket_5e7": 5e7}.items():
    json.dump(dict(base, train_batch_size=4,
                   zero_optimization=dict(z3, stage3_prefetch_bucket_size=bucket)),
              open(f"{out}/{name}.json", "w"))
PY

run() {  # binary ranks model config device
  "${MPI[@]}" -np "$2" "$BUILD/$1" train --model "$3" --seq_len 32 --deepspeed "$OUT/$4.json" \
    --train_data "$OUT/train_*.bin" --steps 3 --sample_tokens 0 --threads 1 --device "$5" \
    --memory_report --run_dir "$OUT/$4" > "$OUT/$4.log" 2>&1 ||
    { tail -5 "$OUT/$4.log"; echo "stage3_memory: $4 failed" >&2; exit 1; }
}
for m in plain qwz qgz all; do run zerotrain 4 tiny-llama "$m" cpu; done
for b in bucket_0 bucket_half_block bucket_1.5_blocks bucket_5e7; do
  run zerotrain_emu 2 "$OUT/deep.json" "$b" cuda
done

python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def row(name, category):
    c = json.load(open(f"{out}/{name}/memory_report_rank0.json"))["categories"][category]
    return f"| {name} | {c['peak_bytes']:,} | {c['predicted_bytes']:,} |"
print("| tiny-llama, 4 ranks, CPU | comm_buffers peak (bytes) | predicted |\n|---|---|---|")
for m in ("plain", "qwz", "qgz", "all"):
    print(row(m, "comm_buffers"))
print("\n| 12 blocks, 2 ranks, emulated CUDA | workspace peak (bytes) | predicted |\n|---|---|---|")
for b in ("bucket_0", "bucket_half_block", "bucket_1.5_blocks", "bucket_5e7"):
    print(row(b, "workspace"))
PY
