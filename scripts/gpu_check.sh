#!/usr/bin/env bash
# GPU checks, as one prepared command for a lent GPU machine (which has the driver but none of
# our Debian packages): run `scripts/gpu_check.sh --pack` here first, which copies the shared
# libraries the test binaries need into build/gpu_libs/, then on the GPU machine, with build/
# carried, `scripts/gpu_check.sh`. Prints the device and every CUDA-vs-CPU kernel check.
set -uo pipefail
cd "$(dirname "$0")/.."
TESTS=(build/tests/cuda_backend_test)
if [[ "${1:-}" == "--pack" ]]; then
  mkdir -p build/gpu_libs
  for t in "${TESTS[@]}"; do
    ldd "$t" | awk '/=> \// {print $3}' | grep -vE 'lib(c|m|dl|pthread|rt|cuda)\.so' |
      xargs -r -I{} cp -L {} build/gpu_libs/
  done
  du -sh build/gpu_libs
  exit 0
fi
export LD_LIBRARY_PATH="$PWD/build/gpu_libs:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
status=0
for t in "${TESTS[@]}"; do
  echo "== $t"
  "$t" --gtest_color=no || status=1
done
exit $status
