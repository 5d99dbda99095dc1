#!/usr/bin/env bash
# Builds the fuzz targets with clang (libFuzzer + AddressSanitizer) into BUILD_DIR and runs
# each for a fixed number of inputs from a seed corpus of valid files. Exit 77 (ctest: skipped)
# without clang's libFuzzer; 1 on any crash or sanitizer report.
# Usage: tests/fuzz/run.sh BUILD_DIR [RUNS]
set -uo pipefail
cd "$(dirname "$0")"
OUT=${1:?usage: run.sh BUILD_DIR [RUNS]}
RUNS=${2:-20000}
CXX=${CXX_FUZZ:-clang++}
command -v "$CXX" >/dev/null || { echo "no $CXX: fuzzing skipped"; exit 77; }
echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' > "/tmp/zt_fz_probe.cc"
"$CXX" -fsanitize=fuzzer /tmp/zt_fz_probe.cc -o /tmp/zt_fz_probe 2>/dev/null ||
  { echo "$CXX has no libFuzzer runtime (libclang-rt-dev): fuzzing skipped"; exit 77; }
cmake -S . -B "$OUT" -G Ninja -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
  cmake --build "$OUT" >/dev/null || { echo "fuzz build failed"; exit 1; }
ROOT=$(cd ../.. && pwd)
status=0
for target in safetensors_fuzz checkpoint_meta_fuzz alpaca_fuzz tokenizer_json_fuzz; do
  corpus="$OUT/corpus_$target"
  rm -rf "$corpus" && mkdir -p "$corpus"
  case $target in
    safetensors_fuzz) cp "$ROOT"/tests/fixtures/tiny_*/model.safetensors "$corpus"/ 2>/dev/null
      n=0; for f in "$ROOT"/tests/fixtures/tiny_llama_fp32_sharded/*.safetensors; do cp "$f" "$corpus/s$((n++))"; done ;;
    checkpoint_meta_fuzz) printf '%s' '{"format":"zerotrain-checkpoint","version":1,"units":[{"numel":3}],"ranks":[{"file":"rank_00000.bin","bytes":144,"crc32":0,"ranges":[[0,4]]}]}' > "$corpus/meta"
      printf '%s' '{"format":"zerotrain-checkpoint","version":2,"units":[{"numel":3}],"ranks":[{"file":"rank_00000.bin","bytes":144,"crc32":0,"ranges":[[0,4]]}]}' > "$corpus/meta2" ;;
    alpaca_fuzz) printf '%s' '[{"instruction":"a","input":"b","output":"c"},{"instruction":"d","output":"e"}]' > "$corpus/a" ;;
    tokenizer_json_fuzz) cp "$ROOT"/tests/fixtures/hf_tokenizers/byte_level/tokenizer.json "$corpus/b"
      printf '%s' '{"model":{"type":"BPE","vocab":{"<0x41>":0,"\u2581a":1,"\u0120b":2}},"added_tokens":[{"id":3,"content":"<s>","special":true}],"decoder":{"type":"Sequence","decoders":[{"type":"Replace"},{"type":"ByteFallback"},{"type":"Strip","start":1}]}}' > "$corpus/m"
      printf '%s' '{"model":{"vocab":{"\u0120b":0,"\u00c4\u0142":1}},"decoder":{"type":"ByteLevel"}}' > "$corpus/l" ;;
  esac
  echo "== $target ($RUNS inputs)"
  ASAN_OPTIONS=detect_leaks=1 "$OUT/$target" -runs="$RUNS" -max_len=4096 -seed=1 "$corpus" \
    >"$OUT/$target.log" 2>&1 || { status=1; tail -30 "$OUT/$target.log"; }
  grep -E "^#[0-9]+ *DONE|Done [0-9]+ runs" "$OUT/$target.log" | tail -1
done
exit $status
