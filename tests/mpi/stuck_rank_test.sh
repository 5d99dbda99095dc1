#!/usr/bin/env bash
# A rank waiting for a stopped one (tests/mpi/stuck_rank_main.cc): the job must end with exit
# status 2 and the timeout's message, after lines naming the collective it waits in, with no
# process left (the stopped rank too), and without spinning (the program's own watcher).
# Usage: stuck_rank_test.sh BINARY MPIRUN [FLAGS...]
set -uo pipefail
binary=$1
shift
fail() { echo "FAIL: $*"; exit 1; }
# Exit 2, the timeout's line, every rank ended (expect_exit.sh), then the lines before it.
out=$(bash "$(dirname "$0")/expect_exit.sh" 2 "timed out" "$binary" "$@" -np 2 "$binary") ||
  fail "see above: $out"
echo "$out"
grep -q "unreachable\|FAIL" <<<"$out" && fail "see above"
waits=$(grep -c "^warning: \[rank 0\] waiting [0-9]* s in collective all_reduce (scalars) #2 of 2 ranks" <<<"$out")
[[ $waits -ge 3 ]] || fail "$waits lines say which collective rank 0 waits in, want one a second"
grep -Eq "^error: \[rank 0\] collective all_reduce \(scalars\) #2 of 2 ranks timed out: waited [0-9]+ s \(zerotrain.collective_timeout\)" <<<"$out" ||
  fail "no timeout message"
echo "PASS"
