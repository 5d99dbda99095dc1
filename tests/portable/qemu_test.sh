#!/usr/bin/env bash
# The portable build runs on a CPU without AVX-512: `zerotrain info` and a 3-step tiny-llama
# training under `qemu-x86_64 -cpu max,avx512f=off` (QEMU 7.2's TCG: AVX2 and FMA; AVX-512 off
# in case a later QEMU emulates it), with the native run's losses within 1e-4 relative (the
# kernels differ: AVX2 paths chosen at run time, and OpenBLAS's kernel for the emulated CPU). A
# -march=native build on an AVX-512 machine dies here with SIGILL. Below the baseline
# (qemu -cpu Nehalem) the binary says so and exits 2. Skips (77) without qemu-user, or with a
# QEMU before 7.2 (no AVX2 in TCG).
# Usage: qemu_test.sh BUILD/zerotrain
set -euo pipefail
BIN=$1
command -v qemu-x86_64 >/dev/null || { echo "SKIPPED: qemu-x86_64 not installed (qemu-user)"; exit 77; }
version=$(qemu-x86_64 --version | sed -n 's/.*version \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
read -r major minor <<<"$version"
if ((major < 7 || (major == 7 && minor < 2))); then
  echo "SKIPPED: qemu-x86_64 $major.$minor emulates no AVX2 (7.2 does)"; exit 77
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
QEMU=(qemu-x86_64 -cpu max,avx512f=off)

"${QEMU[@]}" "$BIN" info --model tiny-llama > "$WORK/info.txt" || {
  echo "FAIL: zerotrain info under ${QEMU[*]} exited $?"; exit 1; }
grep -q "^total" "$WORK/info.txt" || { echo "FAIL: no total in:"; cat "$WORK/info.txt"; exit 1; }

# Below the baseline (Nehalem: SSE4.2, no AVX): a sentence and exit 2, not SIGILL.
set +e
"qemu-x86_64" -cpu Nehalem "$BIN" info --model tiny-llama > "$WORK/old.txt" 2>&1
code=$?
set -e
if [[ $code -ne 2 ]] || ! grep -q "built for x86-64-v3" "$WORK/old.txt"; then
  echo "FAIL: on a CPU without AVX2 (qemu -cpu Nehalem) want exit 2 and a message, got $code:"
  cat "$WORK/old.txt"; exit 1
fi

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
  echo "FAIL: the run under ${QEMU[*]} exited $?"; cat "$WORK/qemu.txt"; exit 1; }
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
