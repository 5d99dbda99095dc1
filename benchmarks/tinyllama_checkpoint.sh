#!/usr/bin/env bash
# TinyLlama-1.1B-sized state through save, resume at another world size, and export, on one
# machine with 24 GB of RAM (issue 9, Done-when 7). Not a CI test: it takes several minutes and
# about 35 GB of disk under WORK.
#   1. scripts/make_tinyllama_random.py: TinyLlama-1.1B's configuration, random weights, saved
#      by transformers (bf16, sharded);
#   2. 2 ranks, stage 3, parameters on the CPU, optimizer on NVMe, bf16, micro-batch 1, T = 64:
#      --init_from that directory, 2 steps, save at step 2;
#   3. 1 rank resumes from it (re-slicing 2 -> 1 as it loads), trains step 3, saves;
#   4. `zerotrain export --dtype fp32` of the step-3 save; scripts/check_export.py loads the export
#      in transformers and compares its loss on the first validation micro-batch with
#      zerotrain's from the same export (1e-5 relative).
# The resident memory of every zerotrain process is sampled every 0.1 s. It prints the peak summed
# over the ranks during the save (from the step-2 line to the "saved" line), during the resume
# (start to the "resumed" line), and for each whole run.
# Usage: [WORK=/tmp] [PYTHON=python3] benchmarks/tinyllama_checkpoint.sh [DATA_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data}
PY=${PYTHON:-python3}
W=$(mktemp -d "${WORK:-/tmp}/zt_ckbench_XXXXXX")
trap 'pkill -P $$ 2>/dev/null || true; rm -rf "$W"' EXIT
ZT=$PWD/build/zerotrain
MPI=(mpirun --oversubscribe -np 2)
[[ $(id -u) == 0 ]] && MPI+=(--allow-run-as-root)

echo "== TinyLlama-1.1B configuration, random weights (transformers)"
"$PY" scripts/make_tinyllama_random.py "$W/hf_in"
"$ZT" prepare --tokenizer "$DATA/llama2_tokenizer.model" --input "$DATA/tinyshakespeare.txt" \
  --out "$W/data" > /dev/null
mkdir -p "$W/nvme"
cfg() {  # dtype block, gradient accumulation -> ds_config on stdout
  cat <<EOF
{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": $2,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-5}}, $1
 "steps_per_print": 1,
 "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0,
   "offload_param": {"device": "cpu", "pin_memory": true},
   "offload_optimizer": {"device": "nvme", "nvme_path": "$W/nvme", "pin_memory": true}}}
EOF
}
cfg '"bf16": {"enabled": true},' 1 > "$W/bf16.json"
cfg '"bf16": {"enabled": true},' 2 > "$W/bf16_one_rank.json"  # the same global batch on 1 rank
cfg '' 1 > "$W/fp32.json"

# Samples the summed RSS of the zerotrain processes every 0.1 s as "seconds KiB" into $1, while
# the command after it runs; stamps each line of the command's output with the same clock.
sampled() {
  local log=$1
  shift
  local t0
  t0=$(date +%s.%N)
  (set +eo pipefail  # no zerotrain running yet is a 0, not an error
   while true; do
     kib=$(ps -C zerotrain -o rss= | awk '{s += $1} END {print s + 0}')
     echo "$(echo "$(date +%s.%N) - $t0" | bc) $kib"
     sleep 0.1
   done) > "$log.rss" &
  local sampler=$!
  "$@" 2>&1 | while IFS= read -r line; do
    echo "$(echo "$(date +%s.%N) - $t0" | bc) $line"
  done | tee "$log.out"
  local rc=${PIPESTATUS[0]}
  kill "$sampler" 2>/dev/null || true
  return "$rc"
}
peak() {  # log, start pattern (START: the run's start), end pattern, label: the peak summed
  # RSS between the two lines
  awk -v a="$2" -v b="$3" -v label="$4" '
    BEGIN { if (a == "START") t0 = 0 }
    FNR == NR { if (t0 == "" && $0 ~ a) t0 = $1; if (t0 != "" && t1 == "" && $0 ~ b) t1 = $1; next }
    t0 != "" && $1 >= t0 && (t1 == "" || $1 <= t1) && $2 > m { m = $2 }
    { if ($2 > all) all = $2 }
    END { printf "%s: peak RSS %.2f GiB (all ranks; whole run %.2f GiB)\n", label, m / 2^20, all / 2^20 }
  ' "$1.out" "$1.rss"
}

echo "== 2 ranks, stage 3, parameters on CPU, optimizer on NVMe: 2 steps, save at step 2"
sampled "$W/train" "${MPI[@]}" "$ZT" train --deepspeed "$W/bf16.json" --init_from "$W/hf_in" \
  --train_data "$W/data/train_*.bin" --seq_len 64 --steps 2 --val_every 0 --sample_tokens 0 \
  --run_dir "$W/run2" --save_dir "$W/ck" --save_interval 2
peak "$W/train" " step +2/" "saved " "save (2 ranks)"
du -sh "$W/ck/step_00000002"

echo "== 1 rank resumes from the 2-rank save, trains step 3, saves"
sampled "$W/resume" "$ZT" train --deepspeed "$W/bf16_one_rank.json" --model tinyllama-1.1b \
  --train_data "$W/data/train_*.bin" --seq_len 64 --steps 3 --val_every 0 --sample_tokens 0 --run_dir "$W/run1" \
  --save_dir "$W/ck" --save_interval 1 --resume
peak "$W/resume" START "resumed from" "resume (1 rank)"
peak "$W/resume" " step +3/" "saved " "save (1 rank)"

echo "== export (fp32) and the logits in transformers"
"$ZT" export --checkpoint "$W/ck" --out "$W/hf_out" --dtype fp32
ls "$W/hf_out"
"$PY" scripts/check_export.py --export "$W/hf_out" --val "$W/data/val_000000.bin" \
  --deepspeed "$W/fp32.json" --micro_batch 1 --seq_len 64
