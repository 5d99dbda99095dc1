#!/usr/bin/env bash
# The main job: set up (install packages, build), tokenize TinyShakespeare with the Llama 2
# tokenizer, and train a small LLaMA on it with the CPU backend, then print a sample.
# Usage: scripts/demo.sh [path/to/shared/data]   (default: ../shared/data beside the repo)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data}
for f in tinyshakespeare.txt llama2_tokenizer.model; do
  [[ -r "$DATA/$f" ]] || { echo "demo: $DATA/$f not found; pass the shared data folder" >&2; exit 2; }
done
bash scripts/setup.sh
build/zerotrain prepare --tokenizer "$DATA/llama2_tokenizer.model" \
  --input "$DATA/tinyshakespeare.txt" --out data_cache/shakespeare --val-fraction 0.1
build/zerotrain train --flagfile configs/recipes/shakespeare.flags \
  --tokenizer "$DATA/llama2_tokenizer.model"
