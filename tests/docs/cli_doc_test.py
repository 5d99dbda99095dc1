#!/usr/bin/env python3
"""docs/cli.md against `zerotrain --helpfull`: every flag of trainer/main.cc has exactly one row,
`| `--name` | `DEFAULT` | meaning |`, whose DEFAULT is what --helpfull prints after "default: ",
and no row names a flag the binary does not have. So the reference cannot drift from the code.

Usage: cli_doc_test.py BUILD/zerotrain docs/cli.md
"""
import re
import subprocess
import sys


def binary_flags(binary):
    """{name: default} of the flags --helpfull lists under trainer/main.cc."""
    out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True).stdout
    flags, ours = {}, False
    text = re.sub(r"\n {5,}", " ", out)  # absl wraps a flag's text over deeper-indented lines
    for line in text.splitlines():
        if line.startswith("  Flags from "):
            ours = "trainer/main.cc" in line
            continue
        m = re.match(r"\s+--(\w+) \(.*\); default: (.*);$", line)
        if ours and m:
            flags[m.group(1)] = m.group(2)
    return flags


def documented_flags(path):
    """{name: [default, ...]} of the table rows of `path` that start with a flag."""
    rows = {}
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        m = re.match(r"\| `--(\w+)` \| `([^`]*)` \|", line)
        if m:
            rows.setdefault(m.group(1), []).append((m.group(2), n))
    return rows


def main():
    binary, doc = sys.argv[1], sys.argv[2]
    flags, rows = binary_flags(binary), documented_flags(doc)
    if len(flags) < 20:
        print(f"FAIL: only {len(flags)} flags read from {binary} --helpfull")
        return 1
    errors = []
    for name, default in sorted(flags.items()):
        if name not in rows:
            errors.append(f"--{name} (default {default}) has no row in {doc}")
        elif len(rows[name]) > 1:
            errors.append(f"--{name} has {len(rows[name])} rows in {doc} (lines "
                          f"{', '.join(str(n) for _, n in rows[name])}); give it one")
        elif rows[name][0][0] != default:
            errors.append(f"--{name}: {doc}:{rows[name][0][1]} says default `{rows[name][0][0]}`, "
                          f"--helpfull says {default}")
    for name, where in sorted(rows.items()):
        if name not in flags:
            errors.append(f"{doc}:{where[0][1]}: --{name} is not a zerotrain flag")
    for e in errors:
        print("FAIL:", e)
    print(f"{len(flags)} flags, {len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
