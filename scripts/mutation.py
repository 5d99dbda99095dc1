#!/usr/bin/env python3
"""Mutation check: does the test suite catch plausible one-line bugs?

Each file tests/mutants/*.mutant describes one bug:

    # What is wrong, in a sentence or two (free text, '#' lines).
    file: zero/engine.cc              the source file, relative to the repository root
    find: <exact text>                occurs exactly once in that file
    replace: <text>                   what it becomes
    first: <ctest -R regex>           the tests expected to catch it (run before the rest)

For each mutant alone: apply it, rebuild incrementally, run the `first` tests, then (if they
all pass) the rest of the suite, stopping at the first failure, and restore the file. A mutant
is killed when a test fails (or times out) and survives when the whole suite passes. A ctest
that fails with no failed test (a `first` regex that selects nothing, a ctest error) is a bad
mutant, never a kill. The unmutated suite runs first: it must pass, or every kill would mean
nothing. The source is restored even when interrupted (Ctrl-C, SIGTERM, SIGHUP; ctest and its
test processes are killed as a group), and a copy of it is kept under BUILD/mutation_backup/
while a mutant is applied, so a run killed outright (SIGKILL, OOM) is repaired by the next
start. The build is brought back in step at the end.

Usage: scripts/mutation.sh [--build build] [--only REGEX] [--jobs 2] [--markdown FILE]
                           [--no-baseline] [--first-only]
       scripts/mutation.sh --check   (every mutant parses and its find text occurs once: ctest
                                      `mutants_apply`, so a refactor cannot strand one)
--first-only runs each mutant's `first` tests alone (a quick triage while writing mutants:
one it does not kill is reported "not-first", not "survived").
Exit status: 0 when every mutant is killed, 1 when one survives, 2 on a bad mutant (it does
not apply or does not compile) or bad usage.
"""
import argparse
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def parse(path):
    m = {"name": path.stem, "why": []}
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            m["why"].append(line.lstrip("# ").rstrip())
        elif line.strip():
            key, sep, value = line.partition(":")
            if not sep or key not in ("file", "find", "replace", "first"):
                raise ValueError(f"{path}: unknown line '{line}' (keys: file find replace first)")
            m[key] = value[1:] if value.startswith(" ") else value
    for key in ("file", "find", "replace", "first"):
        if key not in m:
            raise ValueError(f"{path}: missing '{key}:'")
    m["why"] = " ".join(m["why"])
    return m


class CtestError(Exception):
    """ctest failed without a failed test: nothing was tested, so nothing was caught."""


def ctest(build, jobs, args):
    """Runs ctest; returns the failing tests' names ([] when all passed)."""
    log = build / "Testing" / "Temporary" / "LastTestsFailed.log"
    log.unlink(missing_ok=True)
    r = run_group(["ctest", "-j", str(jobs), "--stop-on-failure", "--timeout", "300", *args],
                  cwd=build)
    if r.returncode == 0:
        return []
    failed = [l.split(":", 1)[-1].strip() for l in log.read_text().splitlines() if l.strip()] \
        if log.exists() else []
    if not failed:
        raise CtestError(f"ctest {' '.join(args)} exited {r.returncode} with no failed test:\n"
                         + (r.stdout + r.stderr)[-2000:])
    return failed


def run_group(cmd, cwd=None):
    """subprocess.run in a process group of its own, killed whole if we are interrupted (ctest's
    mpirun ranks would otherwise outlive it)."""
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, err = p.communicate()
    except BaseException:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def build_tree(build):
    r = run_group(["cmake", "--build", str(build)])
    return r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def restore_backups(build):
    """Puts back sources a killed run left mutated (their copies in BUILD/mutation_backup/)."""
    backups = build / "mutation_backup"
    for b in sorted(backups.rglob("*")) if backups.exists() else []:
        if b.is_file():
            rel = b.relative_to(backups)
            (ROOT / rel).write_bytes(b.read_bytes())
            b.unlink()
            print(f"mutation: restored {rel}, left mutated by an earlier run", file=sys.stderr)


def run_mutant(m, build, jobs, first_only=False):
    src = ROOT / m["file"]
    original = src.read_bytes()
    text = original.decode()
    count = text.count(m["find"])
    if count != 1:
        return "bad", f"'find' occurs {count} times in {m['file']} (must be once)", 0.0
    backup = build / "mutation_backup" / m["file"]
    backup.parent.mkdir(parents=True, exist_ok=True)
    backup.write_bytes(original)
    start = time.monotonic()
    try:
        src.write_bytes(text.replace(m["find"], m["replace"]).encode())
        ok, log = build_tree(build)
        if not ok:
            return "bad", "does not compile:\n" + log, time.monotonic() - start
        failed = ctest(build, jobs, ["-R", m["first"], "--no-tests=error"])
        if not failed and first_only:
            return "not-first", "its first tests pass", time.monotonic() - start
        if not failed:
            failed = ctest(build, jobs, ["-E", m["first"]])
    except CtestError as e:
        return "bad", str(e), time.monotonic() - start
    finally:  # no signal between putting the source back and dropping its copy
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        src.write_bytes(original)
        backup.unlink()
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    elapsed = time.monotonic() - start
    if failed:
        return "killed", ", ".join(failed[:3]), elapsed
    return "survived", "every test passed", elapsed


def check_all():
    """0 when every mutant parses and applies (its file exists, its find text occurs once);
    else 2, each bad one named on stderr with what to do."""
    bad = 0
    for path in sorted((ROOT / "tests" / "mutants").glob("*.mutant")):
        try:
            m = parse(path)
            count = (ROOT / m["file"]).read_text().count(m["find"])
        except (ValueError, OSError) as e:
            print(f"mutation: {path.name}: {e}", file=sys.stderr)
            bad += 1
            continue
        if count != 1:
            print(f"mutation: {path.name}: its find text occurs {count} times in {m['file']} "
                  "(once expected): re-anchor it on the code as it is now", file=sys.stderr)
            bad += 1
    return 2 if bad else 0


def main():
    if sys.argv[1:] == ["--check"]:
        return check_all()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=str(ROOT / "build"), help="configured build directory")
    ap.add_argument("--only", default="", help="regex on mutant names")
    ap.add_argument("--jobs", type=int, default=2, help="ctest -j")
    ap.add_argument("--markdown", help="also write the table to this file")
    ap.add_argument("--first-only", action="store_true",
                    help="run only each mutant's first tests (triage)")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip the unmutated suite run (only on a tree known to be green)")
    a = ap.parse_args()
    for sig in (signal.SIGTERM, signal.SIGHUP):  # as Ctrl-C: the finally blocks restore
        signal.signal(sig, signal.default_int_handler)
    build = pathlib.Path(a.build).resolve()
    if not (build / "CTestTestfile.cmake").exists():
        print(f"mutation: {build} is not a configured build (run scripts/setup.sh)",
              file=sys.stderr)
        return 2
    restore_backups(build)
    try:
        mutants = [parse(p) for p in sorted((ROOT / "tests" / "mutants").glob("*.mutant"))
                   if re.search(a.only, p.stem)]
    except ValueError as e:
        print(f"mutation: {e}", file=sys.stderr)
        return 2
    ok, log = build_tree(build)
    if not ok:
        print("mutation: the unmutated tree does not build:\n" + log, file=sys.stderr)
        return 2
    start = time.monotonic()
    if not a.no_baseline:  # a test failing anyway would "kill" every mutant
        try:
            failed = ctest(build, a.jobs, [])
        except CtestError as e:
            print(f"mutation: {e}", file=sys.stderr)
            return 2
        if failed:
            print("mutation: the unmutated suite fails (" + ", ".join(failed) + "); fix it first",
                  file=sys.stderr)
            return 2
        print(f"baseline: the unmutated suite passes ({time.monotonic() - start:.0f} s)", flush=True)
    rows, status = [], 0
    try:
        for i, m in enumerate(mutants, 1):
            result, detail, secs = run_mutant(m, build, a.jobs, a.first_only)
            print(f"[{i}/{len(mutants)}] {result:8s} {m['name']} ({secs:.0f} s): "
                  f"{detail.splitlines()[0] if detail else ''}", flush=True)
            if result == "bad":
                print(detail, file=sys.stderr)
                status = 2
            elif result in ("survived", "not-first") and status == 0:
                status = 1
            rows.append((m, result, detail, secs))
    finally:
        build_tree(build)  # the build matches the restored sources again
    total = time.monotonic() - start
    killed = sum(r[1] == "killed" for r in rows)
    what = "killed by their first tests" if a.first_only else "killed"
    summary = (f"{killed} of {len(rows)} mutants {what} in {total / 60:.1f} min "
               f"({time.strftime('%Y-%m-%d')}, ctest -j{a.jobs})")
    print(summary)
    if a.markdown:
        lines = [summary, "", "| mutant | bug | result | caught by | s |", "|---|---|---|---|---|"]
        for m, result, detail, secs in rows:
            caught = detail.splitlines()[0] if result == "killed" else "-"
            lines.append(f"| `{m['name']}` | {m['why']} | {result} | {caught} | {secs:.0f} |")
        pathlib.Path(a.markdown).write_text("\n".join(lines) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
