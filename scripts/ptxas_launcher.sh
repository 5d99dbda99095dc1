#!/usr/bin/env bash
# CUDA_COMPILER_LAUNCHER of model/cuda (model/CMakeLists.txt): runs the nvcc command line it is
# given, and keeps ptxas's resource report (-Xptxas -v: registers, stack frame, spills, shared
# memory of each kernel) in OBJECT.ptxas beside the object, out of the build's output.
# scripts/kernel_budget.py reads those files.
out=""
for ((i = 1; i < $#; ++i)); do
  [[ ${!i} == -o ]] && { j=$((i + 1)); out=${!j}; }
done
report=$(mktemp)
"$@" 2>"$report"
rc=$?
grep -vE '^ptxas info|^ +[0-9]+ bytes stack frame' "$report" >&2
[[ -n $out && $rc == 0 ]] && mv "$report" "$out.ptxas" || rm -f "$report"
exit $rc
