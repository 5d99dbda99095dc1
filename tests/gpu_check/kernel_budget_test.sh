#!/usr/bin/env bash
# scripts/kernel_budget.py on planted ptxas reports (issue 25): a kernel that spills fails the
# check, one whose stack frame grows past the recorded figure fails it, one at its figure
# passes, and an unrecorded kernel may have no stack frame.
set -u
budget="python3 $(dirname "$0")/../../scripts/kernel_budget.py"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
# report FILE KERNEL STACK SPILL: a ptxas -v report of one kernel.
report() {
  printf "ptxas info    : Compiling entry function '%s' for 'sm_90'\nptxas info    : Function properties for %s\n    %s bytes stack frame, %s bytes spill stores, %s bytes spill loads\nptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]\n" \
    "$2" "$2" "$3" "$4" "$4" >"$tmp/$1.ptxas"
}
expect() {  # expect RC WHAT: the check's exit code
  $budget --check "$tmp" --doc "$tmp/budget.md" >"$tmp/out" 2>&1
  local rc=$?
  if [[ $rc != "$1" ]]; then echo "FAIL: $2: exit $rc"; cat "$tmp/out"; fails=1; else echo "ok: $2"; fi
}
report a _Z6kernelPf 32 0
$budget --record "$tmp" --doc "$tmp/budget.md" >/dev/null
grep -q '| `kernel(float\*)` | 40 | 32 | 0 | 0 | 1024 |' "$tmp/budget.md" ||
  { echo "FAIL: the recorded row"; cat "$tmp/budget.md"; fails=1; }
expect 0 "a kernel at its recorded stack frame"
report a _Z6kernelPf 16 0
expect 0 "a smaller stack frame"
report a _Z6kernelPf 48 0
expect 1 "a stack frame past the recorded one"
grep -q "48-byte stack frame, over the 32 bytes recorded" "$tmp/out" || { echo "FAIL: message"; fails=1; }
report a _Z6kernelPf 32 8
expect 1 "a kernel that spills"
report a _Z6kernelPf 32 0
report b _Z5otherv 0 0
expect 0 "a new kernel without a stack frame"
report b _Z5otherv 8 0
expect 1 "a new kernel with a stack frame"
exit $fails
