#!/usr/bin/env bash
# Applies each one-line bug of tests/mutants/ alone, rebuilds, runs the suite (the mutant's
# expected catchers first, stopping at the first failure) and prints killed and survived.
# Options are scripts/mutation.py's (--only REGEX, --build DIR, --jobs N, --markdown FILE,
# --no-baseline, --first-only); see its docstring.
exec python3 "$(dirname "$0")/mutation.py" "$@"
