#!/usr/bin/env bash
# A rank waiting for a stopped one (tests/mpi/stuck_rank_main.cc): the job must end with exit
# status 2 and the timeout's message, after lines naming the collective it waits in, with no
# process left (the stopped rank too), and without spinning (the program's own watcher).
# Usage: stuck_rank_test.sh BINARY MPIRUN [FLAGS...]
set -uo pipefail
binary=$1
shift
out=$("$@" -np 2 "$binary" 2>&1)
code=$?
echo "$out"
sleep 1  # a rank being killed may need a moment to go
left=$(pidof -- "$binary" || true)
if [[ -n "$left" ]]; then
  echo "FAIL: processes of $binary still running: $left"; kill -9 $left; exit 1
fi
fail() { echo "FAIL: $*"; exit 1; }
[[ $code -eq 2 ]] || fail "exit status $code, want 2"
grep -q "unreachable\|FAIL" <<<"$out" && fail "see above"
waits=$(grep -c "^warning: \[rank 0\] waiting [0-9]* s in collective all_reduce (scalars) #2 of 2 ranks" <<<"$out")
[[ $waits -ge 3 ]] || fail "$waits lines say which collective rank 0 waits in, want one a second"
grep -Eq "^error: \[rank 0\] collective all_reduce \(scalars\) #2 of 2 ranks timed out: waited [0-9]+ s \(zerotrain.collective_timeout\)" <<<"$out" ||
  fail "no timeout message"
echo "PASS"
