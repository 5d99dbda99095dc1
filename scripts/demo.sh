#!/usr/bin/env bash
# The main job: set up (install packages, build), tokenize TinyShakespeare with the Llama 2
# tokenizer, and train a small LLaMA on it with the CPU backend on 2 MPI ranks with ZeRO
# stage 2, then print a sample and the measured memory and communication per rank.
# Usage: scripts/demo.sh [path/to/shared/data]   (default: ../shared/data beside the repo)
# NP=1 scripts/demo.sh trains on one rank instead (same global batch).
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data}
for f in tinyshakespeare.txt llama2_tokenizer.model; do
  [[ -r "$DATA/$f" ]] || { echo "demo: $DATA/$f not found; pass the shared data folder" >&2; exit 2; }
done
bash scripts/setup.sh
build/zerotrain prepare --tokenizer "$DATA/llama2_tokenizer.model" \
  --input "$DATA/tinyshakespeare.txt" --out data_cache/shakespeare --val-fraction 0.1
NP=${NP:-2}
MPIRUN=(mpirun --oversubscribe --bind-to none -np "$NP")
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)  # Open MPI refuses root without it
"${MPIRUN[@]}" build/zerotrain train --flagfile configs/recipes/shakespeare.flags \
  --tokenizer "$DATA/llama2_tokenizer.model" --memory_report --comm_report
python3 - "$NP" <<'PY'
import json, sys
for r in range(int(sys.argv[1])):
    m = json.load(open(f"runs/shakespeare/memory_report_rank{r}.json"))["model_states"]
    c = json.load(open(f"runs/shakespeare/comm_report_rank{r}.json"))["mean_volume_over_psi"]
    print(f"rank {r}: model states {m['measured_bytes'] / 2**20:.1f} MiB "
          f"(formula {m['paper_formula_bytes'] / 2**20:.1f} MiB), communication {c:.3f} Psi/step")
PY
