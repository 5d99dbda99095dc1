#!/usr/bin/env bash
# Runs a multi-rank command and checks how it ended, not only what it printed: the exit status
# must be CODE, the output must match REGEX, and no process of BINARY may be left (every rank
# ended; none hangs in a collective).
# Usage: expect_exit.sh CODE REGEX BINARY COMMAND...
set -uo pipefail
want=$1 regex=$2 binary=$3
shift 3
out=$("$@" 2>&1)
code=$?
echo "$out"
sleep 1  # a rank being killed may need a moment to go
left=$(pidof -- "$binary" || true)
if [[ -n "$left" ]]; then
  echo "FAIL: processes of $binary still running: $left"; kill -9 $left; exit 1
fi
if [[ $code -ne $want ]]; then echo "FAIL: exit status $code, want $want"; exit 1; fi
if ! grep -Eq -- "$regex" <<<"$out"; then echo "FAIL: no line matches '$regex'"; exit 1; fi
echo "PASS: exit status $code, every rank ended"
