#!/usr/bin/env bash
# Misuse across ranks fails fast on every rank with a clear message and exit code 2, never a
# hang (ctest's TIMEOUT would catch one): ranks started with different configs or models, a
# world size that does not divide the batch, and stage-3 ranks fetching different units.
# Usage: misuse_test.sh ZEROTRAIN SEQUENCE_MISMATCH_DRIVER MPIRUN [MPI FLAGS]
set -uo pipefail
BIN=$1; SEQ=$2; MPIRUN=$3; shift 3; MPIFLAGS=("$@")
DIR=$(mktemp -d); trap 'rm -rf "$DIR"' EXIT
python3 - "$DIR" <<'PY'
import struct, sys, random
random.seed(1)
toks = [random.randrange(256) for _ in range(4000)]
hdr = [20240520, 1, len(toks)] + [0] * 253
open(sys.argv[1] + "/train_000000.bin", "wb").write(struct.pack("<256i", *hdr) + struct.pack(f"<{len(toks)}H", *toks))
PY
cat > "$DIR/a.json" <<'JSON'
{"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 3}}
JSON
cat > "$DIR/b.json" <<'JSON'
{"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 2e-3}}, "zero_optimization": {"stage": 3}}
JSON
cat > "$DIR/c.json" <<'JSON'
{"train_batch_size": 4, "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "zero_optimization": {"stage": 3, "overlap_comm": false}}
JSON
cat > "$DIR/six.json" <<'JSON'
{"train_batch_size": 6, "zero_optimization": {"stage": 2}}
JSON
COMMON=(train --seq_len 16 --steps 2 --sample_tokens 0 --train_data "$DIR/train_000000.bin" --run_dir "$DIR/run")
fails=0
# expect NAME NRANKS_WITH_MESSAGE PHRASE -- mpirun arguments...
expect() {
  local name=$1 ranks=$2 phrase=$3; shift 4
  local out rc
  out=$(timeout 120 "$MPIRUN" "${MPIFLAGS[@]}" "$@" 2>&1); rc=$?
  local seen; seen=$(grep -c -- "$phrase" <<<"$out")
  if [[ $rc -eq 2 && $seen -ge $ranks ]]; then
    echo "PASS $name (exit 2, $seen rank message(s))"
  else
    echo "FAIL $name: exit $rc, '$phrase' seen $seen time(s), wanted exit 2 on $ranks rank(s)"
    echo "$out" | tail -20
    fails=$((fails + 1))
  fi
}
expect different-configs 2 "differs across ranks" -- \
  -np 1 "$BIN" "${COMMON[@]}" --model tiny-llama --deepspeed "$DIR/a.json" : \
  -np 1 "$BIN" "${COMMON[@]}" --model tiny-llama --deepspeed "$DIR/b.json"
expect different-overlap 2 "differs across ranks" -- \
  -np 1 "$BIN" "${COMMON[@]}" --model tiny-llama --deepspeed "$DIR/a.json" : \
  -np 1 "$BIN" "${COMMON[@]}" --model tiny-llama --deepspeed "$DIR/c.json"
expect different-models 2 "differs across ranks" -- \
  -np 1 "$BIN" "${COMMON[@]}" --model tiny-llama --deepspeed "$DIR/a.json" : \
  -np 1 "$BIN" "${COMMON[@]}" --model tiny-gpt2 --deepspeed "$DIR/a.json"
expect batch-not-divisible 4 "not divisible" -- \
  -np 4 "$BIN" "${COMMON[@]}" --model tiny-llama --deepspeed "$DIR/six.json"
# Ranks that read different data (on a cluster: one path, other files on each node) would
# train silently on a mix: a shard of another size, or of the same size with one token changed,
# stops every rank naming the shard (each rank its own path) and the rank that differs.
mkdir "$DIR/short" "$DIR/edited"
python3 - "$DIR" <<'PY'
import struct, sys
d = sys.argv[1]
data = open(d + "/train_000000.bin", "rb").read()
hdr = [20240520, 1, 600] + [0] * 253
open(d + "/short/train_000000.bin", "wb").write(struct.pack("<256i", *hdr) + data[1024:1024 + 1200])
edited = bytearray(data); edited[1024 + 2 * 2000] ^= 1
open(d + "/edited/train_000000.bin", "wb").write(bytes(edited))
PY
SAME=(train --seq_len 16 --steps 2 --sample_tokens 0 --run_dir "$DIR/run" --model tiny-llama --deepspeed "$DIR/a.json")
expect data-of-another-size 2 "train_000000.bin' (here: .* tokens, CRC-32 .*token shard differs across ranks" -- \
  -np 1 "$BIN" "${SAME[@]}" --train_data "$DIR/train_000000.bin" : \
  -np 1 "$BIN" "${SAME[@]}" --train_data "$DIR/short/train_000000.bin"
expect data-one-token-changed 2 "rank(s) 1 of 2 disagree with rank 0" -- \
  -np 1 "$BIN" "${SAME[@]}" --train_data "$DIR/train_000000.bin" : \
  -np 1 "$BIN" "${SAME[@]}" --train_data "$DIR/edited/train_000000.bin"
expect val-data-differs 2 "^.*--val_data '" -- \
  -np 1 "$BIN" "${SAME[@]}" --train_data "$DIR/train_000000.bin" --val_data "$DIR/train_000000.bin" : \
  -np 1 "$BIN" "${SAME[@]}" --train_data "$DIR/train_000000.bin" --val_data "$DIR/edited/train_000000.bin"
expect stage3-unit-sequences 2 "different unit sequences" -- -np 2 "$SEQ"
# ZeRO++'s hpZ group size must divide the ranks: refused on every rank (check_zeropp).
cat > "$DIR/hpz.json" <<'JSON'
{"train_batch_size": 6, "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2}}
JSON
expect zeropp-hpz-size 3 "hpz.json: zero_optimization.zero_hpz_partition_size: 2 must divide" -- \
  -np 3 "$BIN" "${COMMON[@]}" --model tiny-llama --deepspeed "$DIR/hpz.json"
# The drive fills while the ranks reserve their NVMe swap space: a 1 MiB tmpfs (in a private
# mount namespace around mpirun) holds one rank's optimizer state (about 0.64 MB) but not two.
# A rank that cannot reserve names the file and the OS error; the other stops too, with its
# own such error (both may run out, reserving at once) or "another rank failed"; exit 2, no
# hang, and nothing is left on the drive.
if [[ $(id -u) -eq 0 ]] && unshare -m true 2>/dev/null; then
  mkdir "$DIR/small"
  cat > "$DIR/nvme.json" <<JSON
{"train_batch_size": 4, "zero_optimization": {"stage": 2,
 "offload_optimizer": {"device": "nvme", "nvme_path": "$DIR/small"}}}
JSON
  out=$(timeout 120 unshare -m bash -c "mount -t tmpfs -o size=1m tmpfs '$DIR/small' || exit 77
    $(printf '%q ' "$MPIRUN" "${MPIFLAGS[@]}" -np 2 "$BIN" "${COMMON[@]}" --model tiny-llama \
        --deepspeed "$DIR/nvme.json")
    code=\$?; echo LEFT:\$(ls -A '$DIR/small'); exit \$code" 2>&1); rc=$?
  if [[ $rc -eq 77 ]]; then
    echo "SKIP drive-full-on-one-rank: cannot mount a tmpfs here"
  elif [[ $rc -eq 2 ]] && grep -q "cannot reserve .*No space left on device" <<<"$out" &&
       [[ $(grep -cE "cannot reserve|another rank failed" <<<"$out") -ge 2 ]] &&
       grep -qx "LEFT:" <<<"$out"; then
    echo "PASS drive-full-on-one-rank (exit 2, both ranks stopped, nothing left)"
  else
    echo "FAIL drive-full-on-one-rank: exit $rc"; echo "$out" | tail -20
    fails=$((fails + 1))
  fi
else
  echo "SKIP drive-full-on-one-rank: needs root and unshare to mount a tmpfs"
fi
[[ $fails -eq 0 ]] && echo "misuse: all passed" || echo "misuse: $fails failed"
exit $(( fails > 0 ))
