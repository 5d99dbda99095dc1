#!/usr/bin/env bash
# Seed 002's case on this machine: TinyLlama-1.1B's configuration (random weights), bf16,
# micro-batch 1, T = 512, one rank, a device-memory limit of 8 GiB.
#   1. stage 0 without offload must stop at once with the device-memory error;
#   2. stage 2 with the optimizer on the CPU runs 2 steps;
#   3. stage 3 with parameters and optimizer on NVMe (every shard on the drive: max_in_cpu 0)
#      runs 2 steps, swapping under NVME_DIR (default /tmp; needs about 16 GB free there);
#   4. at TinyLlama's full context, T = 2048, stage 2 with the optimizer on the CPU stops with
#      the device-memory error without activation checkpointing;
#   5. and runs 2 steps with checkpointing every block and cpu_checkpointing.
# For 2 and 3 it prints the peak device bytes (all categories at once) and the bytes per
# category next to the estimator's prediction for the same run, and the process's max RSS.
# On the CPU backend the "device" pool is host memory too, so RSS = device + host; the host
# share is RSS minus the device peak. Needs about 21 GB of RAM and several minutes on 2 cores.
# Usage: [CASES="0 2 3 4 5"] [NVME_DIR=/tmp] benchmarks/tinyllama_8gb.sh [DATA_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
build/zerotrain prepare --tokenizer "$DATA/llama2_tokenizer.model" \
  --input "$DATA/tinyshakespeare.txt" --out "$TMP/data" > /dev/null
common='"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 2e-5}}, "bf16": {"enabled": true},
 "steps_per_print": 1, "wall_clock_breakdown": true,
 "zerotrain": {"device_memory_limit": "8GiB"}'
echo "{$common, \"zero_optimization\": {\"stage\": 0}}" > "$TMP/stage0.json"
echo "{$common, \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}}}" > "$TMP/stage2.json"
NVME=$(mktemp -d "${NVME_DIR:-/tmp}/zt_bench_XXXXXX")
trap 'rm -rf "$TMP" "$NVME"' EXIT
# Stage 3 for a small device: units are freed after use (stage3_max_reuse_distance 0) and one
# gradient reduction is in flight at a time (overlap_comm false), as DeepSpeed's docs advise
# when memory is short; otherwise the defaults keep up to 1e9 gathered parameters for reuse.
echo "{$common, \"zero_optimization\": {\"stage\": 3, \"stage3_param_persistence_threshold\": 0,
 \"stage3_max_reuse_distance\": 0, \"overlap_comm\": false,
 \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"$NVME\", \"max_in_cpu\": 0},
 \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$NVME\"}}}" > "$TMP/stage3.json"
echo "{$common, \"zero_optimization\": {\"stage\": 2, \"offload_optimizer\": {\"device\": \"cpu\"}},
 \"activation_checkpointing\": {\"cpu_checkpointing\": true}}" > "$TMP/stage2_ckpt.json"
run() {  # ds_config, run dir[, T, more flags]
  /usr/bin/time -f "wall %e s, max RSS %M KiB" build/zerotrain train --deepspeed "$1" \
    --train_data "$TMP/data/train_*.bin" --model tinyllama-1.1b --seq_len "${3:-512}" --steps 2 ${4:-} \
    --val_every 0 --sample_tokens 0 --run_dir "$2" --memory_report --comm_report 2>&1
}
report() {  # run dir, the run's output
python3 - "$1" "$2" <<'PY'
import json, re, sys
d = json.load(open(f"{sys.argv[1]}/memory_report_rank0.json"))
rss = int(re.search(r"max RSS (\d+) KiB", sys.argv[2]).group(1)) * 1024
c = json.load(open(f"{sys.argv[1]}/comm_report_rank0.json"))
gib = 2 ** 30
print(f"{'pool':7} {'category':12} {'peak GiB':>9} {'estimate GiB':>13}")
for pool, cats in (("device", d["categories"]), ("host", d["host_categories"])):
    for k, v in cats.items():
        if v["peak_bytes"] or v["predicted_bytes"]:
            print(f"{pool:7} {k:12} {v['peak_bytes'] / gib:9.3f} {v['predicted_bytes'] / gib:13.3f}")
dev, est = d["device_peak_bytes"], d["device_predicted_bytes"]
print(f"device peak: {dev / gib:.3f} GiB (estimate {est / gib:.3f} GiB, "
      f"measured / estimate {dev / est:.3f})")
print(f"max RSS {rss / gib:.3f} GiB = device peak + host {(rss - dev) / gib:.3f} GiB")
o = c["steps"][1]["offload"]
print(f"offload traffic, step 2: {o['device_to_host_bytes'] / c['psi']:.3f} x Psi bytes out, "
      f"{o['host_to_device_bytes'] / c['psi']:.3f} x Psi bytes in")
PY
}
CASES=${CASES:-"0 2 3 4 5"}  # which runs to make
if [[ $CASES == *0* ]]; then
echo "== stage 0, no offload, limit 8 GiB (must stop with the device-memory error)"
run "$TMP/stage0.json" "$TMP/run0" | grep -E "^error:|wall .* RSS|exit status" || true
fi
if [[ $CASES == *2* ]]; then
echo "== stage 2, optimizer on the CPU, limit 8 GiB"
out=$(run "$TMP/stage2.json" "$TMP/run2")
grep -E "^step|time \(ms\)|wall .* RSS" <<< "$out"
report "$TMP/run2" "$out"
fi
if [[ $CASES == *3* ]]; then
echo "== stage 3, parameters and optimizer on NVMe ($NVME), limit 8 GiB"
out=$(run "$TMP/stage3.json" "$TMP/run3")
grep -E "^step|time \(ms\)|wall .* RSS|^error" <<< "$out"
report "$TMP/run3" "$out"
echo "left in the swap directory after the run: $(ls -A "$NVME" | wc -l) entries"
fi
if [[ $CASES == *4* ]]; then
echo "== T = 2048, stage 2, optimizer on the CPU, no checkpointing, limit 8 GiB (must stop)"
run "$TMP/stage2.json" "$TMP/run4" 2048 | grep -E "^error:|wall .* RSS" || true
fi
if [[ $CASES == *5* ]]; then
echo "== T = 2048, stage 2, optimizer on the CPU, checkpointing every block in host memory"
out=$(run "$TMP/stage2_ckpt.json" "$TMP/run5" 2048 --gradient_checkpointing)
grep -E "^step|time \(ms\)|offload \(ms\)|wall .* RSS|^error" <<< "$out"
report "$TMP/run5" "$out"
fi
