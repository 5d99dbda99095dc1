#!/usr/bin/env bash
# The ZeRO-Offload fine-tuning study in one command: TinyLlama-1.1B (random weights, or
# --init_from a Hugging Face directory) on packed Alpaca-format data (the shared seed tasks, or
# --data FILE such as the 52k-example alpaca_data.json) at T = 512, bf16, under an 8 GiB
# device-memory limit:
#   stage0      no offload: expected to stop at once with the device-memory error;
#   stage2_cpu  stage 2, optimizer (fp32 master weights and Adam moments) in CPU memory;
#   stage2_dpu  the same with the delayed parameter update (after 1 ordinary step);
#   stage3_cpu  stage 3, parameters and optimizer in CPU memory;
# each traced from its second step (zerotrain.trace: $OUT/<name>/trace_rank0.json, for
# Perfetto), then `zerotrain compare` (the table, $OUT/table.md, with the exposed
# communication and offload time) and scripts/plot_runs.py (the picture, $OUT/study.png). On the CPU backend each configuration runs a few steps (--steps, default 3;
# the whole study takes about 4 minutes on 2 cores) and needs its device and host memory in
# RAM at once: one that does not fit the RAM available is skipped, saying so (the delayed
# update needs about 23.2 GiB). On a GPU it is the seed study itself (give more --steps).
# docs/offload.md has its output on the development machine.
#
# Usage: scripts/offload_study.sh [--init_from HF_DIR] [--data FILE.json] [--steps N]
#                                 [--out DIR] [--shared DIR] [--device cpu|cuda|auto]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SHARED=$ROOT/../shared/data OUT=$ROOT/runs/offload_study STEPS=3 DATA="" INIT="" DEVICE=auto
# Paths given on the command line are the caller's: resolved before the cd below.
while (($#)); do
  case "$1" in
    --init_from) INIT=$(realpath -m -- "$2"); shift 2 ;;
    --data) DATA=$(realpath -m -- "$2"); shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --out) OUT=$(realpath -m -- "$2"); shift 2 ;;
    --shared) SHARED=$(realpath -m -- "$2"); shift 2 ;;
    --device) DEVICE=$2; shift 2 ;;
    *) echo "offload_study: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ $STEPS =~ ^[1-9][0-9]*$ ]] || { echo "offload_study: --steps '$STEPS' is not a count" >&2; exit 2; }
cd "$ROOT"
DATA=${DATA:-$SHARED/alpaca_seed_tasks.json}
TOK=$SHARED/llama2_tokenizer.model
for f in "$DATA" "$TOK"; do
  [[ -r $f ]] || { echo "offload_study: $f not found" >&2; exit 2; }
done
ZT=build/zerotrain
[[ -x $ZT ]] || { echo "offload_study: $ZT not built (run scripts/setup.sh)" >&2; exit 2; }
MODEL=(--model tinyllama-1.1b)
[[ -n $INIT ]] && MODEL=(--init_from "$INIT")
# $OUT is replaced only when it is empty or an earlier study's (its marker file): never a
# directory the user meant to keep.
MARK=.zerotrain_offload_study
if [[ -e $OUT && ! -e $OUT/$MARK && -n $(ls -A "$OUT" 2>/dev/null) ]]; then
  echo "offload_study: $OUT exists and is not an earlier study's output; give another --out" >&2
  exit 2
fi
rm -rf "$OUT" && mkdir -p "$OUT" && touch "$OUT/$MARK"

echo "== data: $DATA, packed into rows of 512 tokens"
$ZT prepare --format alpaca --pack --tokenizer "$TOK" --input "$DATA" --out "$OUT/data" \
  --seq_len 512 --val_fraction 0.1 | tee "$OUT/prepare.txt"

common='"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 2e-5, "weight_decay": 0.0}},
 "bf16": {"enabled": true}, "gradient_clipping": 1.0, "wall_clock_breakdown": true'
limit='"device_memory_limit": "8GiB"'
write_config() {  # name, zero_optimization, extra zerotrain keys
  echo "{$common, \"zero_optimization\": {$2}, \"zerotrain\": {$limit${3:+, $3}}}" \
    > "$OUT/$1.json"
}
write_config stage0 '"stage": 0'
write_config stage2_cpu '"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}'
write_config stage2_dpu '"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}' \
  '"delayed_param_update": {"enabled": true, "warmup_steps": 1}'
# Stage 3 for a small device, as DeepSpeed's docs advise when memory is short: units freed after
# use (stage3_max_reuse_distance 0), one gradient reduction in flight (overlap_comm false).
write_config stage3_cpu '"stage": 3, "stage3_param_persistence_threshold": 0,
 "stage3_max_reuse_distance": 0, "overlap_comm": false,
 "offload_param": {"device": "cpu", "pin_memory": true},
 "offload_optimizer": {"device": "cpu", "pin_memory": true}'

TRACE=()
((STEPS >= 2)) && TRACE=(--trace_steps "2,$STEPS")
train() {  # name
  $ZT train --deepspeed "$OUT/$1.json" "${MODEL[@]}" --seq_len 512 --steps "$STEPS" \
    --device "$DEVICE" --train_data "$OUT/data/train_*.bin" --val_data "$OUT/data/val_*.bin" \
    --val_every 0 --val_sequences 2 --sample_tokens 0 --memory_report --run_dir "$OUT/$1" \
    "${TRACE[@]}"
}
echo "== stage0: no offload (expected: the device-memory error)"
if train stage0 > "$OUT/stage0.log" 2>&1; then
  echo "offload_study: stage 0 fit in 8 GiB (unexpected for TinyLlama-1.1B)" >&2
else
  grep -m1 "^error" "$OUT/stage0.log" | cut -c1-400 || tail -n 3 "$OUT/stage0.log"
fi
# Without a GPU the device pool is host memory too: a configuration needs its device and host
# totals (zerotrain estimate) in RAM at once. One that does not fit is skipped, saying so,
# rather than left to the kernel's OOM killer.
has_gpu() { [[ $DEVICE == cuda ]] || { [[ $DEVICE == auto ]] && [[ -e /dev/nvidia0 ]]; }; }
fits() {  # name: 0 if it fits, else prints why and returns 1
  has_gpu && return 0
  local need avail estimate
  if ! estimate=$($ZT estimate --deepspeed "$OUT/$1.json" "${MODEL[@]}" --seq_len 512 2>&1) ||
    ! need=$(awk '/^device total/ {d = $3; nd++} /^host total/ {h = $3; nh++}
                  END {if (!nd || !nh) exit 1; printf "%.2f", d + h}' <<< "$estimate"); then
    echo "   skipped: zerotrain estimate gave no device and host totals:" >&2
    head -n 3 <<< "$estimate" >&2
    echo "$1: skipped, no memory estimate" >> "$OUT/skipped.txt"
    return 1
  fi
  avail=$(awk '/^MemAvailable/ {printf "%.2f", $2 / 2^20}' /proc/meminfo)
  if awk -v n="$need" -v a="$avail" 'BEGIN {exit !(n > a)}'; then
    echo "   skipped: needs $need GiB of RAM on the CPU backend (device pool and host memory" \
      "both in RAM; zerotrain estimate), $avail GiB available"
    echo "$1: skipped, needs $need GiB of RAM, $avail GiB available" >> "$OUT/skipped.txt"
    return 1
  fi
}
runs=()
for name in stage2_cpu stage2_dpu stage3_cpu; do
  echo "== $name"
  fits "$name" || continue
  start=$(date +%s)
  if ! train "$name" > "$OUT/$name.log" 2>&1; then
    tail -n 5 "$OUT/$name.log" >&2
    echo "offload_study: $name failed (log: $OUT/$name.log)" >&2
    exit 1
  fi
  grep -E "^(step|trained)" "$OUT/$name.log" | tail -n 2
  echo "   ($(( $(date +%s) - start )) s with set-up)"
  runs+=("$OUT/$name")
done
if ((${#runs[@]} == 0)); then
  echo "offload_study: no configuration ran (see above); no table, no picture" >&2
  exit 1
fi
echo "== table ($OUT/table.md)"
$ZT compare --markdown "${runs[@]}" | tee "$OUT/table.md"
if [[ -f $OUT/skipped.txt ]]; then
  sed 's/^/skipped: /' "$OUT/skipped.txt" | tee -a "$OUT/table.md"
fi
# The python3 on PATH, or Debian's (where setup.sh put python3-matplotlib) when PATH's lacks it.
PY=""
for p in python3 /usr/bin/python3; do
  if "$p" -c "import matplotlib" 2>/dev/null; then PY=$p; break; fi
done
if [[ -n $PY ]]; then
  "$PY" scripts/plot_runs.py "${runs[@]}" --out "$OUT/study.png" \
    --title "TinyLlama-1.1B, packed Alpaca, T = 512, bf16, 8 GiB device limit"
else
  echo "offload_study: no matplotlib, no picture (scripts/setup.sh installs python3-matplotlib)"
fi
