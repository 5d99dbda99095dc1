#!/usr/bin/env python3
"""scripts/gpu_check.sh on this machine: --pack, a whole --rehearse, three rehearsals killed at
random moments, --run without a GPU, and bad arguments (issue 25).

What a GPU session brings back is OUT, at most 8 files of the device tool's names, whenever
the command is killed. So after each run, killed or not, OUT must hold a valid results.json
(every stage with a known status), summary.md and logs.tar.gz and nothing else. A whole
rehearsal passes every stage it can run here; without a GPU, --run skips every GPU stage,
saying why, and passes none. The kill moments come from a seed printed first
(ZT_GPU_CHECK_SEED=N reruns them).
"""
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_check.sh")
sys.path.insert(0, os.path.join(ROOT, "scripts"))  # gpu_check and the modules it imports
import gpu_check  # noqa: E402
NAMES = [s[0] for s in gpu_check.STAGES]
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, flush=True)


def validate(out, label):
    """OUT as the device tool would bring it back: returns results.json's document."""
    entries = sorted(os.listdir(out))
    check(len(entries) <= 8, f"{label}: {len(entries)} entries in OUT: {entries}")
    for e in entries:
        path = os.path.join(out, e)
        check(os.path.isfile(path), f"{label}: {e} is not a plain file")
        check(re.fullmatch(r"[A-Za-z0-9._-]+", e), f"{label}: {e} is not a name that comes back")
        check(os.path.getsize(path) <= 16 << 20, f"{label}: {e} is over 16 MiB")
    try:
        doc = json.load(open(os.path.join(out, "results.json")))
    except (OSError, ValueError) as e:
        check(False, f"{label}: results.json: {e}")
        return None
    check([s["name"] for s in doc["stages"]] == NAMES, f"{label}: stages {doc['stages']}")
    for s in doc["stages"]:
        check(s["status"] in gpu_check.STATUSES, f"{label}: {s['name']} status {s['status']}")
        check(isinstance(s["seconds"], (int, float)) and isinstance(s["figures"], dict) and
              isinstance(s["reason"], str), f"{label}: {s['name']} malformed: {s}")
    summary = open(os.path.join(out, "summary.md")).read()
    check(summary.startswith("# gpu_check"), f"{label}: summary.md starts {summary[:40]!r}")
    for n in NAMES:
        check(f"| {n} |" in summary, f"{label}: summary.md has no row for {n}")
    with tarfile.open(os.path.join(out, "logs.tar.gz")) as t:
        t.getmembers()
    return doc


def rehearse(out, kill_after=None, sig=signal.SIGKILL):
    p = subprocess.Popen(["bash", SCRIPT, "--rehearse", out], start_new_session=True,
                         stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                         env=dict(os.environ, TMPDIR=os.path.dirname(out)))
    if kill_after is not None:
        try:
            p.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, sig)
    return p.wait()


def main():
    seed = int(os.environ.get("ZT_GPU_CHECK_SEED", time.time_ns() % 100000))
    print(f"seed {seed} (ZT_GPU_CHECK_SEED={seed} reruns these kill moments)", flush=True)
    rng = random.Random(seed)
    # A loss comparison fails on a NaN wherever it comes (a diverged GPU run).
    nan = float("nan")
    for pairs in ([(1.0, nan), (2.0, 2.0)], [(2.0, 2.0), (1.0, nan)], [(nan, 1.0)],
                  [(2.0, 2.0), (1.0, None)]):  # None: a NaN loss as metrics.jsonl writes it
        check(not gpu_check.worst_rel(pairs) <= 1.0, f"worst_rel passes NaN in {pairs}")
    check(abs(gpu_check.worst_rel([(2.0, 2.5), (4.0, 4.4)]) - 0.25) < 1e-12, "worst_rel's value")
    subprocess.run(["bash", SCRIPT, "--pack"], check=True)
    tmp = tempfile.mkdtemp(prefix="zt_rehearsal_")

    out = os.path.join(tmp, "whole")
    t = time.monotonic()
    rc = rehearse(out)
    whole = time.monotonic() - t
    print(f"whole rehearsal: exit {rc} in {whole:.1f} s", flush=True)
    doc = validate(out, "whole")
    check(rc == 0, f"whole rehearsal exit {rc}")
    # torch may be absent; the rest need a GPU
    allowed_skips = {"pytorch", "llmc", "sanitizer", "attention", "kernel_times"}
    for s in doc["stages"] if doc else []:
        ok = s["status"] == "pass" or (s["status"] == "skipped" and s["name"] in allowed_skips
                                        and s["reason"])
        check(ok, f"whole: {s['name']} {s['status']} ({s['reason']})")
    # What the device's copy cannot ask git (it has no .git): the commit packed, changes marked.
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    check(doc and doc["commit"].split(" ")[0] == head,
          f"whole: commit {doc and doc['commit']!r}, HEAD {head}")
    check(doc and doc["deadline_s"] == gpu_check.DEFAULT_DEADLINE_S and
          doc["elapsed_s"] <= doc["deadline_s"], f"whole: deadline and elapsed {doc and doc}")
    pre = doc["stages"][0]["figures"] if doc else {}
    check(pre.get("roofline_gpu") == "h200", f"whole: the fake H200 read as {pre}")
    # --file: results.json and summary.md as they came, under DATE-COMMIT, a second one beside.
    runs = os.path.join(tmp, "gpu_runs")
    for k in (1, 2):
        check(gpu_check.file_results(out, runs) == 0, "--file of the whole rehearsal")
    if doc:
        name = doc["started"][:10] + "-" + (
            re.sub(r"[^A-Za-z0-9]+", "-", doc["commit"]).strip("-") or "unknown")
        for d in (name, name + "-2"):
            for f in ("results.json", "summary.md"):
                got = os.path.join(runs, d, f)
                check(os.path.exists(got) and open(got, "rb").read() ==
                      open(os.path.join(out, f), "rb").read(), f"--file: {d}/{f} not as it came")

    for i, sig in enumerate((signal.SIGKILL, signal.SIGTERM, signal.SIGKILL)):
        at = rng.uniform(0.5, whole)
        out = os.path.join(tmp, f"killed{i}")
        rc = rehearse(out, at, sig)
        doc = validate(out, f"killed by {sig.name} at {at:.1f} s")
        states = {s["name"]: s["status"] for s in doc["stages"]} if doc else {}
        print(f"killed by {sig.name} at {at:.1f} s: exit {rc}, {states}", flush=True)
        if sig == signal.SIGTERM and rc == 124:  # it had time to say where it was stopped
            check("running" not in states.values(), f"SIGTERM left a stage running: {states}")

    # Bad input: a clear error naming it, exit 2, before any work.
    not_a_dir = os.path.join(tmp, "a_file")
    open(not_a_dir, "w").close()
    for argv, says in ((["--run", not_a_dir], "is not a directory"),
                       (["--rehearse", os.path.join(tmp, "d"), "--deadline", "5"],
                        "leaves no time for the preflight"),
                       (["--pack", "--llmc", tmp], "neither a checkout of karpathy/llm.c"),
                       (["--rehearse", os.path.join(tmp, "d"), "--llmc", tmp],
                        "--llmc goes with --pack"),
                       (["--rehearse", os.path.join(tmp, "d"), "--stages", "gpt2,nope"],
                        "--stages: no stage nope"),
                       (["--rehearse", os.path.join(tmp, "d"), "--stages", ""],
                        "--stages: name at least one stage"),
                       (["--pack", "--stages", "gpt2"], "--stages goes with --run"),
                       (["--file", os.path.join(tmp, "d")], "no readable results.json")):
        p = subprocess.run(["bash", SCRIPT] + argv, capture_output=True, text=True)
        check(p.returncode == 2 and says in p.stderr, f"{argv}: exit {p.returncode}, {p.stderr}")
    check(not os.path.exists(os.path.join(tmp, "d")), "a refused run made its OUT")

    # --stages: the preflight and the stages named run, the others are skipped, saying why.
    out = os.path.join(tmp, "some")
    rc = subprocess.run(["bash", SCRIPT, "--rehearse", out, "--stages", "training"],
                        stdout=subprocess.DEVNULL).returncode
    doc = validate(out, "--stages training")
    check(rc == 0, f"--stages training exits {rc}")
    for s in doc["stages"] if doc else []:
        want = "pass" if s["name"] in ("preflight", "training") else "skipped"
        check(s["status"] == want and (want == "pass" or "--stages" in s["reason"]),
              f"--stages training: {s['name']} {s['status']} ({s['reason']})")

    if not shutil.which("nvidia-smi") or subprocess.run(["nvidia-smi", "-L"]).returncode != 0:
        out = os.path.join(tmp, "run")
        rc = subprocess.run(["bash", SCRIPT, "--run", out], stdout=subprocess.DEVNULL).returncode
        doc = validate(out, "--run without a GPU")
        check(rc == 1, f"--run without a GPU exits {rc}, not 1")
        for s in doc["stages"][1:] if doc else []:
            check(s["status"] == "skipped" and "no GPU" in s["reason"],
                  f"--run without a GPU: {s['name']} {s['status']} ({s['reason']})")
    shutil.rmtree(tmp, ignore_errors=True)  # with the work folders killed runs left
    print("FAILED" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
