#!/usr/bin/env bash
# Bit-for-bit comparison of two zerotrain binaries (a refactor must change no result): the same
# 5-step runs of shakespeare-llama on 2 ranks, fp32 and bf16, at stages 0-3, with the optimizer
# offloaded to host memory and (with the parameters in host memory) to NVMe. For each run it
# prints whether the per-step losses in metrics.jsonl and the final checkpoint's rank files
# (master weights and optimizer states) are identical. Exit 1 if any differ.
#
#   scripts/compare_builds.sh OLD_BINARY NEW_BINARY [SHARED_DATA_DIR]
#
# Build the old binary from a worktree: git worktree add /tmp/old REV && cmake -S /tmp/old -B
# /tmp/old/build -G Ninja -DZT_WITH_CUDA=OFF -DZT_BUILD_TESTS=OFF -DZT_BUILD_BENCHMARKS=OFF &&
# ninja -C /tmp/old/build zerotrain.
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n 2,13p "$0" >&2; exit 2; }
OLD=$(realpath "$1") NEW=$(realpath "$2")
DATA=$(realpath "${3:-$(dirname "$0")/../../shared/data}")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
"$NEW" prepare --tokenizer "$DATA/llama2_tokenizer.model" --input "$DATA/tinyshakespeare.txt" \
  --out data --val-fraction 0.1 > /dev/null
MPIRUN=(mpirun --oversubscribe --bind-to none -np 2)
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
mkdir -p nvme
status=0
for zero in '"stage": 0' '"stage": 1' '"stage": 2' '"stage": 3' \
  '"stage": 2, "offload_optimizer": {"device": "cpu"}' \
  '"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "'"$WORK"'/nvme"}, "offload_param": {"device": "cpu"}'; do
  for bf16 in false true; do
    cat > ds.json <<EOF
{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-3, "weight_decay": 0.1}},
 "bf16": {"enabled": $bf16}, "zero_optimization": {$zero}}
EOF
    for side in old new; do
      bin=$OLD
      [[ $side == new ]] && bin=$NEW
      rm -rf "run_$side" "ck_$side"
      "${MPIRUN[@]}" "$bin" train --model shakespeare-llama --seq_len 32 --val_every 0 \
        --sample_tokens 0 --threads 1 --train_data 'data/train_*.bin' --deepspeed ds.json \
        --steps 5 --run_dir "run_$side" --save_dir "ck_$side" > "log_$side" 2>&1 ||
        { echo "$side failed:"; tail -5 "log_$side"; exit 1; }
    done
    losses() { python3 -c 'import json,sys; print([json.loads(l)["loss"] for l in open(sys.argv[1]) if "loss" in l])' "$1"; }
    same=yes
    [[ $(losses run_old/metrics.jsonl) == "$(losses run_new/metrics.jsonl)" ]] || same=no
    for f in ck_old/step_00000005/rank_*.bin; do
      cmp -s "$f" "ck_new/step_00000005/$(basename "$f")" || same=no
    done
    echo "bf16 $bf16, $zero: losses and rank files identical: $same"
    [[ $same == yes ]] || status=1
  done
done
exit $status
