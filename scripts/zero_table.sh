#!/usr/bin/env bash
# Measures ZeRO stages 0-3 on N CPU ranks (default 4) and prints the README/docs table:
# model-state bytes per rank measured vs the paper's formula, peak bytes, and communication
# per step in units of Psi, from the runs' own memory_report / comm_report files.
# Usage: scripts/zero_table.sh [N] [MODEL]   (needs data_cache/shakespeare from scripts/demo.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-4}; MODEL=${2:-shakespeare-llama}
OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT
MPIRUN=(mpirun --oversubscribe --bind-to none -np "$N")
[[ $(id -u) -eq 0 ]] && MPIRUN+=(--allow-run-as-root)
# 3x: stage 3 with persistence and reuse off, the paper's schedule (every unit gathered again
# for its backward, unless the backward needs no weights).
for st in 0 1 2 3 3x; do
  # bf16 working weights and gradients, fp32 Adam: the paper's mixed-precision setting (K = 12).
  python3 - "$st" "$OUT/zero$st.json" <<'PY'
import json, sys
c = json.load(open(f"configs/ds/zero{sys.argv[1][0]}.json"))
c["bf16"] = {"enabled": True}
if sys.argv[1] == "3x":
    c["zero_optimization"].update(stage3_param_persistence_threshold=0, stage3_max_reuse_distance=0)
json.dump(c, open(sys.argv[2], "w"))
PY
  "${MPIRUN[@]}" build/zerotrain train --model "$MODEL" --seq_len 64 --steps 3 --val_every 0 \
    --deepspeed "$OUT/zero$st.json" --train_data 'data_cache/shakespeare/train_*.bin' \
    --sample_tokens 0 --run_dir "$OUT/run$st" --memory_report --comm_report > "$OUT/log$st" 2>&1
done
python3 - "$OUT" "$N" "$MODEL" <<'PY'
import json, sys
out, n, model = sys.argv[1], int(sys.argv[2]), sys.argv[3]
print(f"{model}, N_d = {n} CPU ranks, bf16 weights and gradients, fp32 Adam (K = 12), rank 0:\n")
print("| stage | model states measured | paper formula | measured / formula | peak total | comm / step |")
print("|---|---|---|---|---|---|")
for st in ["0", "1", "2", "3", "3x"]:
    m = json.load(open(f"{out}/run{st}/memory_report_rank0.json"))
    c = json.load(open(f"{out}/run{st}/comm_report_rank0.json"))
    ms = m["model_states"]
    peak = sum(v["peak_bytes"] for v in m["categories"].values())
    vols = [s["volume_over_psi"] for s in c["steps"]]
    name = "3, no persistence/reuse" if st == "3x" else st
    print(f"| {name} | {ms['measured_bytes']/2**20:.2f} MiB | {ms['paper_formula_bytes']/2**20:.2f} MiB "
          f"| {ms['measured_over_paper']:.4f} | {peak/2**20:.1f} MiB "
          f"| {vols[-1]:.3f} Ψ (step 1: {vols[0]:.3f} Ψ) |")
print(f"\nΨ = {m['psi']:,} parameters ({m['padded_psi']:,} after padding each unit to N_d shards).")
PY
