#!/usr/bin/env bash
# Packed against padded instruction data, side by side in one invocation: prepares the Alpaca
# seed tasks both ways at T (default 512), trains the same model on each for STEPS steps
# (default 12; the first 2 are warm-up), and prints a markdown table: rows, fill rate, the
# median step time, tokens/s over whole rows, and example tokens/s (the rows' tokens that are
# examples, not padding: the work that trains something), with packed / padded ratios.
# Usage: benchmarks/packing_bench.sh [path/to/shared/data]   (MODEL, T, B, STEPS, OUT override)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data}
T=${T:-512} B=${B:-4} STEPS=${STEPS:-12} MODEL=${MODEL:-shakespeare-llama}
OUT=${OUT:-runs/packing_bench}
ZT=build/zerotrain
for f in llama2_tokenizer.model alpaca_seed_tasks.json; do
  [[ -r "$DATA/$f" ]] || { echo "packing_bench: $DATA/$f not found" >&2; exit 2; }
done
rm -rf "$OUT" && mkdir -p "$OUT"
cat > "$OUT/ds.json" <<JSON
{"train_micro_batch_size_per_gpu": $B, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 0}}
JSON
for layout in padded packed; do
  flag=""; [[ $layout == packed ]] && flag="--pack"
  $ZT prepare --format alpaca --tokenizer "$DATA/llama2_tokenizer.model" \
    --input "$DATA/alpaca_seed_tasks.json" --out "$OUT/$layout" --seq_len "$T" \
    --val_fraction 0 $flag | tee "$OUT/$layout.prepare"
  $ZT train --model "$MODEL" --max_seq_len "$T" --seq_len "$T" --steps "$STEPS" --val_every 0 \
    --sample_tokens 0 --deepspeed "$OUT/ds.json" --train_data "$OUT/$layout/train_*.bin" \
    --run_dir "$OUT/run_$layout" >/dev/null
done
python3 - "$OUT" "$T" "$B" "$MODEL" <<'PY'
import json, re, statistics, sys
out, T, B, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = {}
for layout in ("padded", "packed"):
    line = open(f"{out}/{layout}.prepare").read()
    n, fill = re.search(r"as (\d+) \w+ rows of T tokens, ([\d.]+)% of them", line).groups()
    steps = [json.loads(l) for l in open(f"{out}/run_{layout}/metrics.jsonl") if '"step_ms"' in l]
    ms = statistics.median(s["step_ms"] for s in steps[2:])
    tps = B * T / ms * 1e3
    rows[layout] = (int(n), float(fill), ms, tps, tps * float(fill) / 100)
print(f"{model}, T = {T}, micro-batch {B}, stage 0, CPU; median of steps 3-{len(steps)}\n")
print("| layout | rows | fill | step (ms) | tokens/s | example tokens/s |")
print("|---|---:|---:|---:|---:|---:|")
for k, (n, fill, ms, tps, ex) in rows.items():
    print(f"| {k} | {n} | {fill:.1f}% | {ms:.0f} | {tps:,.0f} | {ex:,.0f} |")
p, q = rows["packed"], rows["padded"]
print(f"| packed / padded | {p[0] / q[0]:.2f}x | | {p[2] / q[2]:.2f}x | {p[3] / q[3]:.2f}x | "
      f"**{p[4] / q[4]:.2f}x** |")
PY
