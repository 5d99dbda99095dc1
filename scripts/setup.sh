#!/usr/bin/env bash
# Installs every Debian package zerotrain needs to build and test, then builds into build/.
# Idempotent; safe to rerun. Needs root (or sudo) for apt-get on a fresh Debian 12 machine
# with the CUDA toolkit in /usr/local/cuda (optional: without nvcc the CUDA backend is skipped).
#
#   scripts/setup.sh            packages + build
#   scripts/setup.sh --python   also the reference Python in .venv/ (numpy, torch, transformers,
#                               safetensors, sentencepiece, deepspeed from PyPI, about 5 GB): the
#                               test export_through_transformers_* runs with it instead of
#                               reporting itself skipped, and the fixture scripts in scripts/
#                               run with .venv/bin/python.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON_ENV=0
for arg in "$@"; do
  case "$arg" in
    --python) PYTHON_ENV=1 ;;
    *) echo "setup: unknown option '$arg' (known: --python)" >&2; exit 2 ;;
  esac
done

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libabsl-dev                       # flags, Status/StatusOr, strings
  libsentencepiece-dev sentencepiece
  nlohmann-json3-dev
  zlib1g-dev                        # CRC-32 of checkpoint files
  libprotobuf-c-dev protobuf-c-compiler  # the tensorboard monitor's event messages
  libisal-dev                       # CRC32C of TensorBoard's records (ISA-L)
  clang libclang-rt-14-dev          # libFuzzer + AddressSanitizer for tests/fuzz (clang 14 on Debian 12)
  libopenblas-openmp-dev            # CPU GEMM, OpenMP threading (shares our thread pool)
  libopenmpi-dev openmpi-bin        # multi-rank runs (mpirun)
  iproute2                          # `ip netns` for the two-namespace multi-node test
  time                              # /usr/bin/time in benchmarks (wall time, max RSS)
  fio                               # benchmarks/swapper_vs_fio.py: the disk's own limit
  liburing-dev                      # NVMe offload (io_uring)
  qemu-user                         # tests/portable: the binary on a CPU without AVX-512
  libsimde-dev                      # tests: the AVX-512 kernels on CPUs without AVX-512
  libgtest-dev libgmock-dev libbenchmark-dev
  python3 python3-venv              # scripts (reference fixtures are committed); --python
  python3-matplotlib                # scripts/plot_runs.py (the offload study's picture)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

JOBS=$(nproc)
# ZT_CMAKE_ARGS: extra CMake options, e.g. ZT_CMAKE_ARGS=-DZT_NATIVE=ON (build for this CPU only).
# shellcheck disable=SC2086
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release ${ZT_CMAKE_ARGS:-}
cmake --build build -j "$JOBS"
echo "setup: built build/zerotrain"

if ((PYTHON_ENV)); then
  # DeepSpeed pinned to the version the fixtures mirror; PyPI's torch wheel brings CUDA's
  # libraries too (most of the 5 GB), though the references run on the CPU.
  [[ -x .venv/bin/python ]] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q numpy torch transformers safetensors sentencepiece \
    tensorboard "deepspeed==0.19.*"
  echo "setup: reference Python in .venv/ ($(.venv/bin/python -c 'import torch, transformers;
print(f"torch {torch.__version__}, transformers {transformers.__version__}")'))"
fi
