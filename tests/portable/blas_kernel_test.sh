#!/usr/bin/env bash
# The CPU-numerics tests a second time under OpenBLAS's Haswell kernels (OPENBLAS_CORETYPE=
# Haswell), so a test that holds only for the kernel this machine picks (its K split, its
# summation order) fails in the session that writes it, not on the next machine. Haswell's
# kernels run correctly on every AVX2 machine; no other kernel type is forced (on some
# processors the others compute wrong results, which is why some environments set the
# variable). Where the environment already sets OPENBLAS_CORETYPE, the first pass ran under it:
# skips (77).
# Usage: blas_kernel_test.sh COMMAND... (each one argument: a test binary, with its environment
# and launcher, e.g. "env ZT_TEST_DEVICE=cuda build/tests/reference_emu_test")
set -uo pipefail
if [[ -n "${OPENBLAS_CORETYPE:-}" ]]; then
  echo "SKIPPED: OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE is set; the suite's first pass used it"
  exit 77
fi
export OPENBLAS_CORETYPE=Haswell
# The variable acts only on an OpenBLAS built for several CPUs (DYNAMIC_ARCH, as Debian's):
# its own report says which kernel a binary runs.
first=${1%% *}; [[ "$1" == env* ]] && first=$(awk '{print $NF}' <<<"$1")
probe=$(OPENBLAS_VERBOSE=2 "$first" --gtest_filter=None 2>&1)
if [[ "$probe" != *"Core: Haswell"* ]]; then
  echo "SKIPPED: OPENBLAS_CORETYPE does not choose the kernel of this BLAS (no DYNAMIC_ARCH)"
  exit 77
fi
failed=()
for cmd in "$@"; do
  echo "== OPENBLAS_CORETYPE=Haswell $cmd"
  if ! bash -c "$cmd --gtest_brief=1" 2>&1 | tail -n 40; then
    failed+=("$cmd")
  fi
done
if ((${#failed[@]})); then
  printf 'FAILED under OPENBLAS_CORETYPE=Haswell: %s\n' "${failed[@]}"
  exit 1
fi
echo "PASS: every CPU-numerics test under OPENBLAS_CORETYPE=Haswell"
