#!/usr/bin/env bash
# Where a training step's time goes, per op: GPT-2 124M, fp32, AdamW, micro-batch B x T (default
# 8 x 256), THREADS threads (default 2), stage 0, one rank; the flops profiler's table of step 2
# (ds_config "flops_profiler", model/profiling_backend.h), between two measurements of the
# machine's sgemm rate through the same BLAS (benchmarks/sgemm_bench.cc), so the GEMM rows can
# be read against it. Tokens come from TinyShakespeare through the Llama 2 tokenizer (ids below
# 32000 fit GPT-2's vocabulary; the cost does not depend on them).
# Usage: [B=8] [T=256] [THREADS=2] benchmarks/profile_gpt2.sh [DATA_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=${1:-../shared/data}
B=${B:-8} T=${T:-256} THREADS=${THREADS:-2}
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
build/zerotrain prepare --tokenizer "$DATA/llama2_tokenizer.model" \
  --input "$DATA/tinyshakespeare.txt" --out "$W/data" > /dev/null
cat > "$W/ds.json" <<EOF
{"train_micro_batch_size_per_gpu": $B, "gradient_accumulation_steps": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}},
 "gradient_clipping": 1.0, "zero_optimization": {"stage": 0}, "steps_per_print": 1,
 "wall_clock_breakdown": true, "flops_profiler": {"enabled": true, "profile_step": 2}}
EOF
sgemm() {
  OMP_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS build/benchmarks/sgemm_bench \
    --benchmark_filter='BM_Sgemm/N:(4096|2048)/C:(4096|768)/OC:(4096|2304)' 2>/dev/null |
    grep BM_Sgemm
}
echo "== sgemm before ($THREADS threads)"
sgemm
echo "== gpt2-124m, B $B x T $T, fp32, $THREADS threads"
build/zerotrain train --model gpt2-124m --deepspeed "$W/ds.json" --train_data "$W/data/train_*.bin" \
  --seq_len "$T" --steps 2 --threads "$THREADS" --val_every 0 --sample_tokens 0 --run_dir "$W/run" |
  grep -v "^  offload"
echo "== sgemm after"
sgemm
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
