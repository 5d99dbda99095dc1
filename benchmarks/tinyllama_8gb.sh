#!/usr/bin/env bash
# Seed 002's case on this machine: TinyLlama-1.1B's configuration (random weights), bf16,
# micro-batch 1, T = 512, one rank, a device-memory limit of 8 GiB.
#   1. stage 0 without offload must stop at once with the device-memory error;
#   2. stage 2 with the optimizer on the CPU runs 2 steps; prints measured device and host
#      bytes per category next to the estimator's prediction for the same run.
# Needs about 21 GB of RAM (the CPU backend's "device" pool is host memory too) and a few
# minutes on 2 cores.   Usage: benchmarks/tinyllama_8gb.sh [DATA_DIR]
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
run() {  # ds_config, run dir
  /usr/bin/time -f "wall %e s, max RSS %M KiB" build/zerotrain train --deepspeed "$1" \
    --train_data "$TMP/data/train_*.bin" --model tinyllama-1.1b --seq_len 512 --steps 2 \
    --val_every 0 --sample_tokens 0 --run_dir "$2" --memory_report --comm_report 2>&1
}
echo "== stage 0, no offload, limit 8 GiB (must stop with the device-memory error)"
run "$TMP/stage0.json" "$TMP/run0" | grep -E "^error:|wall .* RSS|exit status" || true
echo "== stage 2, optimizer on the CPU, limit 8 GiB"
run "$TMP/stage2.json" "$TMP/run2" | grep -E "^step|time \(ms\)|wall .* RSS"
python3 - "$TMP/run2" <<'PY'
import json, sys
d = json.load(open(f"{sys.argv[1]}/memory_report_rank0.json"))
c = json.load(open(f"{sys.argv[1]}/comm_report_rank0.json"))
gib = 2 ** 30
print(f"{'pool':7} {'category':12} {'peak GiB':>9} {'estimate GiB':>13}")
for pool, cats in (("device", d["categories"]), ("host", d["host_categories"])):
    for k, v in cats.items():
        if v["peak_bytes"] or v["predicted_bytes"]:
            print(f"{pool:7} {k:12} {v['peak_bytes'] / gib:9.3f} {v['predicted_bytes'] / gib:13.3f}")
dev = sum(v["peak_bytes"] for v in d["categories"].values())
est = sum(v["predicted_bytes"] for v in d["categories"].values())
print(f"device, sum of category peaks: {dev / gib:.3f} GiB (estimate {est / gib:.3f} GiB)")
o = c["steps"][1]["offload"]
print(f"offload traffic, step 2: {o['device_to_host_bytes'] / c['psi']:.3f} x Psi bytes out, "
      f"{o['host_to_device_bytes'] / c['psi']:.3f} x Psi bytes in")
PY
