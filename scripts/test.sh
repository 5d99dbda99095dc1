#!/usr/bin/env bash
# Runs every test: builds (scripts/setup.sh) and runs ctest. GPU tests skip themselves when no
# GPU is present; multi-rank tests run under mpirun.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
