#!/usr/bin/env bash
# The portable build runs on a CPU without AVX-512: `zerotrain info` and a 3-step tiny-llama
# training under `qemu-x86_64 -cpu max` (QEMU 7.2's TCG: AVX2 and FMA, no AVX-512), with the
# native run's losses within 1e-4 relative (the kernels differ: AVX2 paths chosen at run time,
# and OpenBLAS's kernel for the emulated CPU). A -march=native build on an AVX-512 machine dies
# here with SIGILL. Skips (77) without qemu-user.
# Usage: qemu_test.sh BUILD/zerotrain
set -euo pipefail
BIN=$1
command -v qemu-x86_64 >/dev/null || { echo "SKIPPED: qemu-x86_64 not installed (qemu-user)"; exit 77; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
QEMU=(qemu-x86_64 -cpu max)

"${QEMU[@]}" "$BIN" info --model tiny-llama > "$WORK/info.txt" || {
  echo "FAIL: zerotrain info under qemu -cpu max exited $?"; exit 1; }
grep -q "^total" "$WORK/info.txt" || { echo "FAIL: no total in:"; cat "$WORK/info.txt"; exit 1; }

# 3000 random tokens below 256 as an llm.c shard (header: magic, version, count; uint16 tokens).
python3 - "$WORK/train_000000.bin" <<'PY'
import random, struct, sys
random.seed(7)
n = 3000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *(random.randrange(256) for _ in range(n))))
PY
printf '{"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "optimizer": {"type": "AdamW", "params": {"lr": 3e-3}}, "bf16": {"enabled": true}, "zero_optimization": {"stage": 2}}' > "$WORK/ds.json"
train() {  # $1: run dir; the rest: the launcher
  local run=$1; shift
  "$@" "$BIN" train --model tiny-llama --seq_len 16 --steps 3 --val_every 0 --sample_tokens 0 \
    --threads 2 --train_data "$WORK/train_*.bin" --deepspeed "$WORK/ds.json" --run_dir "$run"
}
train "$WORK/native" > "$WORK/native.txt" 2>&1 || { echo "FAIL: native run"; cat "$WORK/native.txt"; exit 1; }
train "$WORK/qemu" "${QEMU[@]}" > "$WORK/qemu.txt" 2>&1 || {
  echo "FAIL: the run under qemu -cpu max exited $?"; cat "$WORK/qemu.txt"; exit 1; }
python3 - "$WORK/native/metrics.jsonl" "$WORK/qemu/metrics.jsonl" <<'PY'
import json, sys
def losses(p):
    return [j["loss"] for j in map(json.loads, open(p)) if "loss" in j]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == 3 and len(b) == 3, (a, b)
for i, (x, y) in enumerate(zip(a, b)):
    rel = abs(x - y) / abs(x)
    print(f"step {i + 1}: native {x:.8f} qemu -cpu max {y:.8f} relative {rel:.2e}")
    assert rel <= 1e-4, f"step {i + 1}: {rel:.2e} > 1e-4"
print("PASS: portable binary under qemu -cpu max")
PY
