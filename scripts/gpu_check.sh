#!/usr/bin/env bash
# The GPU checks as one prepared command: --pack here, --run OUT on the GPU machine, --rehearse
# OUT here on the CUDA emulation, --file OUT to keep what came back under docs/gpu_runs/. See
# scripts/gpu_check.py's docstring (or --help).
exec python3 "$(dirname "$0")/gpu_check.py" "$@"
