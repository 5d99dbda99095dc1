#!/usr/bin/env bash
# Instruction fine-tuning end to end on the CPU (issue 9): pretrain a small LLaMA on
# TinyShakespeare, save and export it to a Hugging Face directory, fine-tune that on the Alpaca
# seed tasks with the Alpaca template (only the responses are trained), export again, and answer
# an instruction with `zerotrain sample --template alpaca`. Prints the response loss before and
# after fine-tuning. Needs a build (scripts/setup.sh).
# Usage: scripts/instruct_demo.sh [path/to/shared/data]
# PRETRAIN_STEPS (default 300) and FINETUNE_STEPS (default 60) set the lengths; OUT the work
# directory (default runs/instruct).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data}
OUT=${OUT:-runs/instruct}
TOK=$DATA/llama2_tokenizer.model
for f in tinyshakespeare.txt llama2_tokenizer.model alpaca_seed_tasks.json; do
  [[ -r "$DATA/$f" ]] || { echo "instruct_demo: $DATA/$f not found" >&2; exit 2; }
done
ZT=build/zerotrain
mkdir -p "$OUT"
# A demo starts from step 0 each time: the saves of an earlier run of it go (train refuses a
# --save_dir that holds saves without --resume).
rm -rf "$OUT/pretrain_ckpt" "$OUT/finetune_ckpt"
cat > "$OUT/ds.json" <<'JSON'
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "weight_decay": 0.1}},
 "gradient_clipping": 1.0, "zero_optimization": {"stage": 2}}
JSON
# 1. Pretrain on TinyShakespeare, save, export.
$ZT prepare --tokenizer "$TOK" --input "$DATA/tinyshakespeare.txt" --out "$OUT/shakespeare" >/dev/null
$ZT train --model shakespeare-llama --seq_len 256 --steps "${PRETRAIN_STEPS:-300}" \
  --val_every 0 --sample_tokens 0 --deepspeed "$OUT/ds.json" \
  --train_data "$OUT/shakespeare/train_*.bin" --run_dir "$OUT/pretrain" \
  --save_dir "$OUT/pretrain_ckpt" --keep_last 1 | tail -n 2
$ZT export --checkpoint "$OUT/pretrain_ckpt" --out "$OUT/pretrained_hf" --dtype fp32 --tokenizer "$TOK"
# 2. Instruction data: one example per 256-token sequence, responses masked in.
$ZT prepare --format alpaca --tokenizer "$TOK" --input "$DATA/alpaca_seed_tasks.json" \
  --out "$OUT/alpaca" --seq_len 256 --val_fraction 0.1
# 3. Fine-tune from the export; validation loss on the held-out responses before and after.
$ZT train --init_from "$OUT/pretrained_hf" --seq_len 256 --steps "${FINETUNE_STEPS:-60}" \
  --val_every 0 --val_sequences 16 --sample_tokens 0 --deepspeed "$OUT/ds.json" \
  --train_data "$OUT/alpaca/train_*.bin" --val_data "$OUT/alpaca/val_*.bin" \
  --run_dir "$OUT/finetune" --save_dir "$OUT/finetune_ckpt" --keep_last 1 | tail -n 2
$ZT export --checkpoint "$OUT/finetune_ckpt" --out "$OUT/finetuned_hf" --tokenizer "$TOK"
python3 - "$OUT/finetune/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
val = [r["val_loss"] for r in rows if "val_loss" in r]
train = [r["loss"] for r in rows if "loss" in r]
k = max(1, len(train) // 10)
print(f"response loss: validation {val[0]:.3f} -> {val[-1]:.3f}; training (mean of "
      f"{k} steps) {sum(train[:k]) / k:.3f} -> {sum(train[-k:]) / k:.3f}")
PY
# 4. An answer, the prompt wrapped in the template the fine-tuning saw.
$ZT sample --init_from "$OUT/finetuned_hf" --tokenizer "$TOK" --template alpaca \
  --sample_prompt "Give three tips for staying healthy." --sample_tokens 60 --temperature 0.7
