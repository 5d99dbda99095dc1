#!/usr/bin/env python3
"""The GPU checks as one prepared command, for a GPU machine lent for minutes (issue 25).

  scripts/gpu_check.sh --pack [--llmc DIR]      here: build for sm_90, fill build/gpu_bundle
  scripts/gpu_check.sh --run OUT [--deadline S] [--stages A,B]  there: the plan on the GPU
  scripts/gpu_check.sh --rehearse OUT [--deadline S] here: the same plan on the CUDA emulation
  scripts/gpu_check.sh --file OUT                here: OUT's results.json and summary.md, as they
                                                 came, into docs/gpu_runs/DATE-COMMIT/

The machine (the library's device notes): one H200, 15 minutes of device time in all, 10 per
command, nothing installed of ours, `python3` with PyTorch and CUDA's libraries in its
packages, at most 8 files back from OUT, and a command killed at its limit. So:

- --pack (scripts/gpu_pack.py) does here everything that needs no GPU: the sm_90 binaries and
  the libraries they need that the GPU machine lacks (build/gpu_bundle/bin, lib.tar.xz), token
  shards of tinyshakespeare, the CPU's losses for the training stage (cpu_losses.json), and
  with --llmc DIR (a checkout or git directory of karpathy/llm.c) llm.c's train_gpt2cu compiled
  for sm_90. Carry build/gpu_bundle.
- --run OUT runs the stages below in order of the value of what each measures, each under its
  own time limit and all under --deadline (default 450 s: inside a 600 s command, and leaving
  of a session's 15 device minutes enough for the machine's start and a second call that
  reruns what failed with --stages).
  A stage that the deadline leaves too little time is skipped, saying so.
- OUT holds three files, each rewritten (atomically) before and after every stage, so a run
  killed at any moment returns everything measured until then: results.json (one object per
  stage: name, status pass/fail/skipped/timeout, or running if it was killed in it, seconds,
  figures, reason), summary.md (the same for people) and logs.tar.gz (every log so far).
- Without a GPU, --run runs the preflight and skips every GPU stage with the reason.
- --rehearse OUT runs the same plan here: the emulated binaries stand in for the GPU ones, a
  fake nvidia-smi for the driver's, the shapes are tiny. tests/gpu_check/rehearsal_test.py runs
  it in CI and kills it at random moments.

Stages (limits in seconds):
  preflight  30   nvidia-smi, driver, CUDA runtime, host CPU; ldd of every binary, the missing
                  libraries found in the GPU image's Python packages (only our binaries see them)
  kernels    90   tests/unit/cuda_backend_test.cc on the GPU; a skipped test is a failure
  reference  60   the PyTorch fixtures on the CUDA backend (ZT_TEST_DEVICE=cuda)
  training   60   20 steps of shakespeare-llama against the CPU's losses (relative 1e-4)
  gpt2       75   GPT-2 124M, T 1024, micro-batch 8, bf16, stage 0, our flash attention:
                  tokens/s, MFU, memory; the last step profiled per op beside the roofline budget
                  (logs/roofline_gpt2.md)
  attention  45   the same run with cuDNN's attention (--attention cudnn): tokens/s, each
                  attention op's profiled time beside the flash kernels', the losses beside
                  theirs (bf16 tolerance)
  tinyllama  180  TinyLlama-1.1B, T 2048, --attention auto (cuDNN's where it loads, as a user
                  gets it): stage 0; stage 2 with the optimizer on the CPU, with and without the
                  delayed parameter update; then stage 0 with our flash kernels: step time,
                  MFU, peak memory (tracker, driver, estimator); stage 0's last step profiled
                  per op beside the roofline budget (logs/roofline_tinyllama.md)
  pytorch    150  the same GPT-2 and TinyLlama steps in PyTorch (benchmarks/torch_step.py)
  llmc       90   llm.c's train_gpt2cu on GPT-2 124M's shapes, with cuDNN's attention (where
                  --pack could build it) and with its own; ours over the faster of them
  sanitizer  90   compute-sanitizer memcheck and racecheck on some kernel tests
  kernel_times 120  Nsight Compute on GPT-2: the attention kernels in detail, every kernel timed
"""
import argparse
import csv
import ctypes
import glob
import io
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

from gpu_runs import BUNDLE, ROOT, SHAPES, TRAIN_CONFIG, capture, losses, metrics, train_args

DEFAULT_DEADLINE_S = 450
PEAK_BF16 = 989.4e12  # dense bf16 FLOP/s of an H100/H200 SXM (NVIDIA's datasheet)
STATUSES = ("pending", "running", "pass", "fail", "skipped", "timeout")
LOG_TAIL = 1 << 20  # bytes of each log in logs.tar.gz

# Both backends compute in fp32 (cuBLASLt COMPUTE_32F, no TF32) and differ only in the order of
# their sums (u = 6e-8 a rounding, sums of a few thousand terms): over 20 Adam steps we expect
# about 1e-6 (the emulation, which keeps the kernels' order: 7e-8 over 10 steps at T = 64). A 1%
# error in every update moves the losses ~1e-3.
TRAIN_RTOL = 1e-4
FAKE_SMI = """#!/bin/sh
# gpu_check --rehearse: stands in for the driver's nvidia-smi.
case "$*" in
  *-lms*) while :; do echo 1234; sleep 0.2; done ;;
  *-L*) echo "GPU 0: NVIDIA H200 (emulated) (UUID: GPU-00000000)" ;;
  *--query-gpu*) echo "NVIDIA H200 (emulated), 143771, 580.00.00" ;;
  *) echo "nvidia-smi (emulated by gpu_check --rehearse)" ;;
esac
"""


class Killed(Exception):
    pass


class Plan:
    """The run's state: the stages' results, where logs go, the deadline, and how to write OUT."""

    def __init__(self, mode, out, deadline):
        self.mode, self.out, self.deadline = mode, os.path.abspath(out), deadline
        self.t0 = time.monotonic()
        self.work = tempfile.mkdtemp(prefix="zt_gpu_check_")
        self.logs = os.path.join(self.work, "logs")
        os.makedirs(self.logs)
        os.makedirs(self.out, exist_ok=True)
        self.stages = []
        self.gpu = False
        self.gpu_kind = "h100"  # benchmarks/gpu_roofline.py --gpu: read by the preflight
        self.lib_path = os.path.join(self.work, "lib")
        self.header = {"mode": mode, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "commit": bundle_commit(), "deadline_s": deadline}

    def left(self):
        return self.deadline - (time.monotonic() - self.t0)

    def env(self, **extra):
        """The environment of our binaries: the bundle's libraries and those preflight found."""
        e = dict(os.environ, LD_LIBRARY_PATH=with_system_path(self.lib_path), ZT_SOURCE_DIR=ROOT,
                 **extra)
        e.setdefault("OMP_NUM_THREADS", str(os.cpu_count()))
        return e

    def sh(self, log, argv, limit, env=None, cwd=None, stdout=None):
        """Runs argv, its output in logs/LOG (or its stdout to the file `stdout`, its stderr to
        the log), killed with its process group after `limit` seconds. Returns the exit code,
        or None when it timed out."""
        with open(os.path.join(self.logs, log), "ab") as f:
            f.write(("$ " + " ".join(argv) + "\n").encode())
            f.flush()
            try:
                p = subprocess.Popen(argv, stdout=stdout or f,
                                     stderr=f if stdout else subprocess.STDOUT, env=env, cwd=cwd,
                                     preexec_fn=child_setup)
            except OSError as e:
                f.write(f"cannot start: {e}\n".encode())
                return 127
            try:
                return p.wait(timeout=max(1.0, limit))
            except subprocess.TimeoutExpired:
                kill_group(p)
                f.write(f"\n[gpu_check: killed after {limit:.0f} s]\n".encode())
                return None
            except BaseException:  # Killed: the child goes with us, at once
                kill_group(p, hard=True)
                raise

    def write(self):
        """Rewrites results.json, summary.md and logs.tar.gz in OUT, each atomically."""
        doc = dict(self.header, elapsed_s=round(time.monotonic() - self.t0, 1), stages=self.stages)
        atomic_write(os.path.join(self.out, "results.json"),
                     json.dumps(doc, indent=1).encode())
        atomic_write(os.path.join(self.out, "summary.md"), summary(doc).encode())
        tmp = os.path.join(self.out, ".logs.tar.gz.tmp")
        with tarfile.open(tmp, "w:gz") as t:  # each log's last MiB: the archive must come back
            for name in sorted(os.listdir(self.logs)):
                with open(os.path.join(self.logs, name), "rb") as f:
                    f.seek(max(0, os.fstat(f.fileno()).st_size - LOG_TAIL))
                    data = f.read()
                info = tarfile.TarInfo("logs/" + name)
                info.size, info.mtime = len(data), int(time.time())
                t.addfile(info, io.BytesIO(data))
        os.replace(tmp, os.path.join(self.out, "logs.tar.gz"))


def with_system_path(lib_path):
    """lib_path before the machine's own LD_LIBRARY_PATH (the driver's libcuda, say)."""
    return os.pathsep.join(p for p in (lib_path, os.environ.get("LD_LIBRARY_PATH", "")) if p)


def child_setup():
    """In each child: its own process group (killed as one), and killed with us: a command the
    device tool kills must leave nothing holding the GPU (PR_SET_PDEATHSIG, Linux)."""
    os.setpgid(0, 0)
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG


def bundle_commit():
    """The commit the bundle was packed from, "+ changes" when the tracked tree had changes
    then (scripts/gpu_pack.py writes commit.json: the device's copy of the tree has no .git)."""
    try:
        c = json.load(open(os.path.join(BUNDLE, "commit.json")))
        return c["commit"] + (" + changes" if c["dirty"] else "")
    except (OSError, ValueError, KeyError, TypeError):
        return "unknown"


def kill_group(p, hard=False):
    for sig in (signal.SIGKILL,) if hard else (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=3)
            return
        except subprocess.TimeoutExpired:
            pass


def atomic_write(path, data):
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def summary(doc):
    lines = [f"# gpu_check --{doc['mode']} {doc['started']}, commit {doc['commit']}", "",
             f"deadline {doc['deadline_s']} s, elapsed {doc['elapsed_s']} s", "",
             "| stage | status | seconds | figures / reason |", "|---|---|---|---|"]
    for s in doc["stages"]:
        figs = "; ".join(f"{k} {fmt(v)}" for k, v in s["figures"].items())
        text = "; ".join(x for x in (figs, s["reason"]) if x)
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']} | {text} |")
    return "\n".join(lines) + "\n"


def fmt(v):
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} {fmt(x)}" for k, x in v.items()) + "}"
    return str(v)


# ---- the stages: each takes the plan, its result (figures to fill) and its time limit, and
# returns (status, reason) ----

def preflight(plan, res, limit):
    if plan.mode == "rehearse":
        fake = os.path.join(plan.work, "fake_bin")
        os.makedirs(fake)
        with open(os.path.join(fake, "nvidia-smi"), "w") as f:
            f.write(FAKE_SMI)
        os.chmod(os.path.join(fake, "nvidia-smi"), 0o755)
        os.environ["PATH"] = fake + os.pathsep + os.environ["PATH"]
    smi = capture(["nvidia-smi", "-L"])
    plan.gpu = smi[0] == 0 and "GPU " in smi[1]
    res["figures"]["gpu"] = smi[1].strip().splitlines()[0] if plan.gpu else "none"
    if plan.gpu:
        q = capture(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                     "--format=csv,noheader"])[1].strip()
        res["figures"]["nvidia_smi"] = q
        # The roofline's memory roof follows the GPU: an H100's 3.35 TB/s, an H200's 4.8; any
        # other GPU is held to the H100's, and the figure says so.
        kind = next((k for k in ("h100", "h200") if k in q.lower()), None)
        plan.gpu_kind = kind or "h100"
        res["figures"]["roofline_gpu"] = kind or f"h100 (not an H100 or H200: {q.split(',')[0]})"
    res["figures"]["nvcc"] = (re.findall(r"release [\d.]+", capture(["nvcc", "--version"])[1])
                              or ["none"])[0]
    cpu = open("/proc/cpuinfo").read()
    model = re.findall(r"model name\s*:\s*(.*)", cpu) or ["?"]
    flags = (re.findall(r"flags\s*:\s*(.*)", cpu) or [""])[0].split()
    res["figures"]["cpu"] = f"{model[0]} x {os.cpu_count()}, " + " ".join(
        f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags)
    # Libraries: the bundle's, then CUDA's from the toolkit or the Python packages (NCCL,
    # cuBLASLt, the runtime), for our binaries only: python3, nvcc and nvidia-smi keep theirs.
    bins = sorted(glob.glob(os.path.join(BUNDLE, "bin", "*")) +
                  glob.glob(os.path.join(BUNDLE, "llmc", "train_gpt2cu*")))
    missing = missing_libs(plan, bins, plan.lib_path)
    found = {}
    for lib in sorted(missing):
        for d in lib_dirs():
            if os.path.exists(os.path.join(d, lib)):
                found[lib] = d
                break
    plan.lib_path = os.pathsep.join([plan.lib_path] + sorted(set(found.values())))
    # cuDNN is opened at run time (--attention cudnn or auto), and opens NVRTC for the kernels it
    # compiles, so ldd names neither: their folders go last on the path, so that they change no
    # library ldd resolved.
    for lib in ("libcudnn.so.9", "libnvrtc.so.13"):
        d = next((d for d in lib_dirs() if os.path.exists(os.path.join(d, lib))), None)
        res["figures"][lib] = (os.path.realpath(os.path.join(d, lib)) if d
                               else "not found: --attention cudnn may fail")
        if d and d not in plan.lib_path.split(os.pathsep):
            plan.lib_path = os.pathsep.join([plan.lib_path, d])
    still = missing_libs(plan, bins, plan.lib_path)
    # The CUDA libraries our trainer will load, by their real file names (their full versions).
    env = dict(os.environ, LD_LIBRARY_PATH=with_system_path(plan.lib_path))
    for name, path in re.findall(r"^\s*(lib(?:cudart|cublasLt|nccl)\.so\S*) => (/\S+)",
                                 capture(["ldd", os.path.join(BUNDLE, "bin", "zerotrain")],
                                         env)[1], re.M):
        res["figures"][name] = os.path.realpath(path)
    if still:
        return "fail", ("missing libraries: " + ", ".join(sorted(still)) +
                        " (searched the toolkit and python3's site-packages/nvidia)")
    return "pass", "" if plan.gpu else "no GPU: `nvidia-smi -L` lists none"


def missing_libs(plan, bins, lib_path):
    """The libraries ldd finds for none of `bins` with LD_LIBRARY_PATH=lib_path (ldd's output
    goes to the preflight's log)."""
    env = dict(os.environ, LD_LIBRARY_PATH=with_system_path(lib_path))
    out = set()
    with open(os.path.join(plan.logs, "preflight.log"), "a") as log:
        for b in bins:
            text = capture(["ldd", b], env)[1]
            log.write(f"$ LD_LIBRARY_PATH={lib_path} ldd {b}\n{text}\n")
            out |= set(re.findall(r"^\s*(\S+) => not found", text, re.M))
    return out


def lib_dirs():
    dirs = ["/usr/local/cuda/lib64", "/usr/local/cuda/lib",
            "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/local/nvidia/lib64"]
    code = "import site; print('\\n'.join(site.getsitepackages()))"
    for sp in capture(["python3", "-c", code])[1].split():
        dirs += sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib")))
    return [d for d in dirs if os.path.isdir(d)]


def gtest_stage(binary, extra_env, filt):
    def stage(plan, res, limit):
        name = res["name"]
        exe = os.path.join(BUNDLE, "bin", binary.replace("_test", "_emu_test")
                           if plan.mode == "rehearse" else binary)
        report = os.path.join(plan.work, name + ".json")
        argv = [exe, "--gtest_color=no", f"--gtest_output=json:{report}"]
        if plan.mode == "rehearse" and filt:
            argv.append("--gtest_filter=" + filt)
        rc = plan.sh(name + ".log", argv, limit, env=plan.env(**extra_env))
        if rc is None:
            return "timeout", f"over {limit:.0f} s"
        counts = gtest_counts(report)
        res["figures"].update(counts)
        if rc != 0 or not counts:
            return "fail", f"exit {rc}"
        if counts["skipped"]:  # a real-GPU test skips when it sees no device: not a pass
            return "fail", f"{counts['skipped']} tests skipped"
        return "pass", ""
    return stage


def gtest_counts(path):
    try:
        doc = json.load(open(path))
    except (OSError, ValueError):
        return {}
    tests = [t for s in doc.get("testsuites", []) for t in s.get("testsuite", [])]
    return {"tests": len(tests),
            "failed": sum(1 for t in tests if t.get("failures")),
            "skipped": sum(1 for t in tests if t.get("result") == "SKIPPED")}


def zerotrain(plan):
    return os.path.join(BUNDLE, "bin", "zerotrain" + ("_emu" if plan.mode == "rehearse" else ""))


def worst_rel(pairs):
    """The largest |a - b| / |a| over (reference a, measured b) pairs; NaN when any pair gives
    NaN, or has a loss missing (None: a NaN loss in metrics.jsonl) or a zero reference (a run
    that diverged must fail: Python's max keeps a NaN only when it comes first, and NaN >
    tolerance is False), inf when there are none. Callers fail unless worst <= tol."""
    rels = [abs(a - b) / abs(a) if a and b is not None else math.nan for a, b in pairs]
    return math.nan if any(math.isnan(r) for r in rels) else max(rels, default=math.inf)


def training(plan, res, limit):
    shape = SHAPES[plan.mode]["training"]
    run_dir = os.path.join(plan.work, "training")
    argv = train_args(zerotrain(plan), "cuda", shape, run_dir, TRAIN_CONFIG)
    rc = plan.sh("training.log", argv, limit, env=plan.env())
    cpu = json.load(open(os.path.join(BUNDLE, "cpu_losses.json")))[plan.mode]
    gpu = losses(run_dir)
    res["figures"]["steps"] = len(gpu)
    if rc is None:
        return "timeout", f"over {limit:.0f} s"
    if rc != 0 or len(gpu) != len(cpu) or not gpu:
        return "fail", f"exit {rc}, {len(gpu)} losses for the CPU's {len(cpu)}"
    worst = worst_rel(zip(cpu, gpu))
    res["figures"].update(final_loss_cpu=cpu[-1], final_loss_cuda=gpu[-1], worst_rel=worst)
    return ("pass", "") if worst <= TRAIN_RTOL else ("fail", f"worst {worst:.1e} > {TRAIN_RTOL}")


def mfu(tokens_per_s, psi, L, C, T):
    """Model FLOPs utilisation of a bf16 step: 6Ψ + 12·L·C·T FLOPs per token (PaLM, Chowdhery
    et al. 2022, appendix B) over the H100/H200's dense bf16 peak."""
    return tokens_per_s * (6 * psi + 12 * L * C * T) / PEAK_BF16


def verdict(bad):
    """A stage's (status, reason) from its list of failures."""
    return ("fail", "; ".join(bad)) if bad else ("pass", "")


def bench_config(stage, micro_batch, offload, dpu):
    c = {"train_micro_batch_size_per_gpu": micro_batch, "gradient_accumulation_steps": 1,
         "bf16": {"enabled": True}, "gradient_clipping": 1.0,
         "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}},
         "zero_optimization": {"stage": stage}}
    if offload:
        c["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if dpu:
        c["zerotrain"] = {"delayed_param_update": {"enabled": True, "warmup_steps": 2}}
    return c


def bench(plan, name, shape, stage, offload, dpu, attention, limit):
    """One timed run of ours on the GPU with `attention` (--attention), the driver's memory
    sampled: its figures. The last step of GPT-2's runs and of TinyLlama's stage-0 run runs under
    the flops profiler (every op timed alone, left out of the averages): the attention ops'
    times are among the figures, and for the `gpt2` and `tinyllama` runs
    benchmarks/gpu_roofline.py puts every op's beside the roofline budget
    (logs/roofline_gpt2.md, logs/roofline_tinyllama.md)."""
    _, L, C, T, B, steps_run, _ = shape
    run_dir = os.path.join(plan.work, name)
    config = bench_config(stage, B, offload, dpu)
    profiled = name.startswith("gpt2") or name == "tinyllama"
    model = "tinyllama" if name.startswith("tinyllama") else "gpt2"
    profile = os.path.join(run_dir, "flops_profile.txt")
    if profiled:
        config["flops_profiler"] = {"enabled": True, "profile_step": steps_run,
                                    "output_file": profile}
    argv = train_args(zerotrain(plan), "cuda", shape, run_dir, config) + [
        "--memory_report", "--attention", attention]
    smi_log = open(os.path.join(run_dir, "driver_mib.txt"), "w")
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,"
                            "nounits", "-lms", "200"], stdout=smi_log, stderr=subprocess.DEVNULL,
                           preexec_fn=child_setup)
    try:
        rc = plan.sh(name + ".log", argv, limit, env=plan.env())
    finally:
        kill_group(smi)
        smi_log.close()
    if rc is None:
        return {"status": "timeout"}
    if rc != 0:
        return {"status": f"exit {rc}"}
    steps = metrics(run_dir)[3:-1] if profiled else metrics(run_dir)[3:]
    rep = json.load(open(os.path.join(run_dir, "memory_report_rank0.json")))
    roofline, attention_ms = None, {}
    if profiled and os.path.exists(profile):
        sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
        from gpu_roofline import read_measured
        attention_ms = {op: ms for op, ms in read_measured(profile).items()
                        if op.startswith("attention")}
    if profiled and os.path.exists(profile) and name == model:
        rc = plan.sh(f"roofline_{model}.md", ["python3", os.path.join(ROOT, "benchmarks",
                     "gpu_roofline.py"), "--gpu", plan.gpu_kind, "--model", model, "--batch",
                     str(B), "--measured", profile], min(30, max(1.0, plan.left())))
        roofline = f"logs/roofline_{model}.md" if rc == 0 else f"gpu_roofline.py: exit {rc}"
    if not steps:
        return {"status": "no steps past the warm-up"}
    tps = sum(s["tokens_per_s"] for s in steps) / len(steps)
    drv = [int(x) for x in open(os.path.join(run_dir, "driver_mib.txt")) if x.strip().isdigit()]
    gib = 2**30
    # What --attention resolved to, from the header line ("... attention cuDNN 9.x | ..."):
    # auto falls back to our flash kernels where cuDNN does not load or has no engine.
    header = open(os.path.join(plan.logs, name + ".log"), errors="replace").read()
    used = re.search(r"attention (.+?) \|", header)
    return {"status": "ok", "attention": used.group(1) if used else "?", "tokens_per_s": tps,
            "step_ms": sum(s["step_ms"] for s in steps) / len(steps),
            "mfu": mfu(tps, rep["psi"], L, C, T),
            "peak_gib_tracked": rep["device_peak_bytes"] / gib,
            "peak_gib_driver": max(drv, default=0) / 1024,
            "peak_gib_estimated": rep["device_predicted_bytes"] / gib,
            "losses": [r["loss"] for r in metrics(run_dir)],
            **({"roofline": roofline, "attention_ms": attention_ms} if profiled else {})}


def bench_stage(runs, shape_key=None, attention="flash"):
    """A stage of timed runs (name, ZeRO stage, optimizer offloaded, delayed update[, attention
    of this run, else `attention`]), the limit shared among those left."""
    def stage(plan, res, limit):
        shape = SHAPES[plan.mode][shape_key or res["name"]]
        t_end = time.monotonic() + limit
        bad = []
        for i, (name, zstage, offload, dpu, *impl) in enumerate(runs):
            left = t_end - time.monotonic()
            if left < 5:
                bad.append(f"{name}: no time left")
                continue
            asked = (impl or [attention])[0]
            fig = bench(plan, name, shape, zstage, offload, dpu, asked, left / (len(runs) - i))
            res["figures"][name] = fig
            plan.write()
            if fig["status"] != "ok":
                bad.append(f"{name}: {fig['status']}")
            elif asked == "auto" and plan.mode == "run" and fig["attention"].startswith("flash"):
                bad.append(f"{name}: --attention auto ran {fig['attention']}, not cuDNN's "
                           f"(its figures are flash's)")
        return verdict(bad)
    return stage


# Losses of two bf16 runs whose attention differs by rounding (P and dS rounded to 16 bits in
# each, in different orders): 8 steps of GPT-2 from one initialisation stay within 1e-2.
ATTENTION_RTOL = 1e-2


def attention(plan, res, limit):
    """GPT-2's gpt2 run again with cuDNN's attention, beside the flash run's figures."""
    if plan.mode == "rehearse":
        return "skipped", "cuDNN attention needs a GPU (the emulation cannot run it)"
    status, reason = bench_stage([("gpt2_cudnn", 0, False, False)], "gpt2", "cudnn")(
        plan, res, limit)
    flash = next((s["figures"].get("gpt2", {}) for s in plan.stages if s["name"] == "gpt2"), {})
    cudnn = res["figures"].get("gpt2_cudnn", {})
    if status != "pass" or flash.get("status") != "ok":
        return status if status != "pass" else "fail", reason or "no flash run to compare with"
    res["figures"]["cudnn_vs_flash_tokens_per_s"] = cudnn["tokens_per_s"] / flash["tokens_per_s"]
    worst = worst_rel(zip(flash["losses"], cudnn["losses"]))
    res["figures"]["worst_loss_rel"] = worst
    if not worst <= ATTENTION_RTOL:
        return "fail", f"losses differ by {worst:.1e} > {ATTENTION_RTOL}"
    return "pass", ""


def pytorch(plan, res, limit):
    python = "python3"
    device = "cuda"
    if plan.mode == "rehearse":
        venv = os.path.join(ROOT, ".venv", "bin", "python3")
        python, device = (venv if os.path.exists(venv) else "python3"), "cpu"
    t_end = time.monotonic() + limit
    if capture([python, "-c", "import torch, transformers"], timeout=min(60, limit))[0] != 0:
        return "skipped", f"{python} cannot import torch and transformers"
    bad = []
    runs = [("gpt2", False), ("tinyllama", False)]
    if plan.mode == "run":  # compiling takes ~50 s even for a tiny model
        runs.append(("gpt2", True))
    for key, compile_ in runs:
        model, L, C, T, B, steps, _ = SHAPES[plan.mode][key]
        name = f"torch_{key}" + ("_compile" if compile_ else "")
        left = t_end - time.monotonic()
        if left < 10:
            bad.append(f"{name}: no time left")
            continue
        out = os.path.join(plan.work, name + ".json")
        argv = [python, os.path.join(ROOT, "benchmarks", "torch_step.py"), "--model", model,
                "--batch", str(B), "--seq", str(T), "--steps", str(steps), "--device", device]
        with open(out, "w") as f:
            rc = plan.sh(name + ".log", argv + (["--compile"] if compile_ else []), left,
                         env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=f)
        try:
            fig = json.loads(open(out).read().strip().splitlines()[-1])
            fig["mfu"] = mfu(fig["tokens_per_s"], fig["psi"], L, C, T)
            res["figures"][name] = {k: fig[k] for k in ("tokens_per_s", "step_ms", "mfu",
                                                        "peak_bytes", "warmup_s", "torch")}
        except (OSError, ValueError, IndexError, KeyError):
            bad.append(f"{name}: {'timeout' if rc is None else f'exit {rc}'}")
        plan.write()
    return verdict(bad)


def llmc(plan, res, limit):
    """llm.c's train_gpt2cu on our GPT-2 shapes: with cuDNN's attention where --pack built it
    (the baseline issue 51 compares with), then with llm.c's own kernels; ours over the faster."""
    exe = os.path.join(BUNDLE, "llmc", "train_gpt2cu")
    if plan.mode == "rehearse":
        return "skipped", "llm.c's train_gpt2cu needs a GPU"
    if not os.path.exists(exe):
        return "skipped", "not packed (--pack --llmc DIR)"
    _, _, _, T, B, steps, _ = SHAPES["run"]["gpt2"]
    data = os.path.join(BUNDLE, "data")
    runs = [("llmc", exe)]  # with cuDNN first: the comparison issue 51 asks for
    if os.path.exists(exe + "_cudnn"):
        runs.insert(0, ("llmc_cudnn", exe + "_cudnn"))
    t_end, failed = time.monotonic() + limit, []
    for i, (name, binary) in enumerate(runs):
        rc = plan.sh(f"{name}.log", [binary, "-e", "d12", "-b", str(B), "-t", str(T), "-x",
                                     str(steps), "-v", "100000", "-m", "1", "-s", "0", "-z", "0",
                                     "-i", f"{data}/train_*.bin", "-j", f"{data}/val_*.bin"],
                     (t_end - time.monotonic()) / (len(runs) - i), env=plan.env(), cwd=plan.work)
        text = open(os.path.join(plan.logs, f"{name}.log"), errors="replace").read()
        # llm.c prints "step    4/8 | loss ... | ... ms | ..."; its tok/s is a moving average
        # that includes earlier steps, so ours is B*T over the mean step time past the warm-up.
        ms = [float(m) for m in re.findall(r"^step\s.*?\|\s*([\d.]+) ms", text, re.M)][3:]
        if ms:
            mean = sum(ms) / len(ms)
            res["figures"][name] = {"step_ms": mean, "tokens_per_s": B * T / (mean / 1e3)}
        if rc != 0 or not ms:
            failed.append(f"{name}: " + ("timeout" if rc is None else f"exit {rc}, "
                                         f"{len(ms)} timed steps"))
    ours = [s["figures"].get(k, {}).get("tokens_per_s") for s in plan.stages
            for k in ("gpt2", "gpt2_cudnn") if s["name"] in ("gpt2", "attention")]
    ours = max((t for t in ours if t), default=None)
    llmc_runs = [n for n in ("llmc_cudnn", "llmc") if n in res["figures"]]
    best = max(llmc_runs, key=lambda n: res["figures"][n]["tokens_per_s"], default=None)
    if ours and best:
        res["figures"].update(ours_vs_llmc_best=ours / res["figures"][best]["tokens_per_s"],
                              llmc_best=best)
    if len(runs) == 1:
        failed.append("no llm.c built with cuDNN in the bundle (--pack said why it could not)")
    return ("fail", "; ".join(failed)) if failed else ("pass", "")


def sanitizer(plan, res, limit):
    if plan.mode == "rehearse":
        return "skipped", "compute-sanitizer needs a GPU"
    tool = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.path.exists(tool):
        return "skipped", "no compute-sanitizer"
    exe = os.path.join(BUNDLE, "bin", "cuda_backend_test")
    bad = []
    for kind in ("memcheck", "racecheck"):
        rc = plan.sh(f"sanitizer_{kind}.log", [tool, "--tool", kind, "--error-exitcode", "3",
                                               exe, "--gtest_filter=" + SANITIZED],
                     limit / 2, env=plan.env())
        log = open(os.path.join(plan.logs, f"sanitizer_{kind}.log"), errors="replace").read()
        if "Device not supported" in log:  # gVisor machines (the device notes): not our fault
            return "skipped", f"compute-sanitizer {kind}: Device not supported on this machine"
        res["figures"][kind] = {None: "timeout", 0: "clean",
                                3: "errors found"}.get(rc, f"exit {rc}")
        if rc != 0:
            bad.append(f"{kind}: {res['figures'][kind]}")
    return verdict(bad)


NCU_SECTIONS = ("SpeedOfLight", "Occupancy", "LaunchStats", "ComputeWorkloadAnalysis",
                "MemoryWorkloadAnalysis", "WarpStateStats")


def kernel_times(plan, res, limit):
    """Nsight Compute on GPT-2 (flash attention): first the tensor-core attention kernels in
    detail, every layer's forward then the first dQ and dK/dV (logs/ncu_attention.txt: speed
    of light, occupancy, launch, warp stalls), then every kernel of one step timed alone, summed per kernel name
    (logs/kernel_times_gpt2.md, the raw CSV beside it). ncu replays each kernel alone at the
    GPU's own clocks (--clock-control none), so launch gaps do not count here."""
    if plan.mode == "rehearse":
        return "skipped", "Nsight Compute needs a GPU"
    tool = shutil.which("ncu") or "/usr/local/cuda/bin/ncu"
    if not os.path.exists(tool):
        return "skipped", "no ncu"
    t_end = time.monotonic() + limit
    shape = SHAPES[plan.mode]["gpt2"]
    shape = shape[:5] + (1,) + shape[6:]
    run_dir = os.path.join(plan.work, "kernel_times")
    argv = train_args(zerotrain(plan), "cuda", shape, run_dir,
                      bench_config(0, shape[4], False, False)) + ["--attention", "flash"]
    sections = [a for sec in NCU_SECTIONS for a in ("--section", sec)]
    # The forward kernels of all layers come first, then each layer's dQ and dK/dV: 14 launches
    # hold the first of each.
    layers = shape[1]
    rc = plan.sh("ncu_attention.txt", [tool, "--clock-control", "none", "--kernel-name",
                                       "regex:mma_(forward|backward_dq|backward_dkv)_kernel",
                                       "--launch-count", str(layers + 2)] + sections + argv,
                 min(60, limit / 2), env=plan.env())
    log = open(os.path.join(plan.logs, "ncu_attention.txt"), errors="replace").read()
    if "ERR_NVGPUCTRPERM" in log:
        return "skipped", "ncu may not read the GPU's counters on this machine (ERR_NVGPUCTRPERM)"
    res["figures"]["attention_detail"] = {None: "timeout", 0: "logs/ncu_attention.txt"}.get(
        rc, f"exit {rc}")
    csv_path = os.path.join(plan.logs, "ncu_gpt2.csv")
    with open(csv_path, "wb") as out:
        rc = plan.sh("ncu_gpt2.log", [tool, "--clock-control", "none", "--csv", "--page", "raw",
                                      "--print-units", "base", "--metrics",
                                      "gpu__time_duration.sum"] + argv,
                     t_end - time.monotonic(), env=plan.env(), stdout=out)
    if rc is None:
        return "timeout", "the per-kernel times ran out of time"

    def num(r, key):
        try:
            return float((r.get(key) or "").replace(",", ""))
        except ValueError:
            return None
    step = [r for r in csv.DictReader(line for line in open(csv_path, errors="replace")
                                      if line.startswith('"'))
            if num(r, "gpu__time_duration.sum") is not None]
    if rc != 0 or not step:
        return "fail", f"exit {rc}, {len(step)} kernels profiled"
    by_name = {}
    for r in step:
        name = re.sub(r"\(anonymous namespace\)::|<unnamed>::|^void ", "", r["Kernel Name"])
        name = re.split(r"[<(]", name)[0][:70]
        agg = by_name.setdefault(name, [0, 0.0])
        agg[0] += 1
        agg[1] += num(r, "gpu__time_duration.sum")
    total = sum(ns for _, ns in by_name.values())
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][1])
    lines = ["| kernel | calls | ms | share |", "|---|---|---|---|"] + [
        f"| {name} | {calls} | {ns / 1e6:.3f} | {ns / total:.1%} |"
        for name, (calls, ns) in ranked]
    lines.append(f"\nKernels in the run (one step and the setup's): {len(step)}, "
                 f"{total / 1e6:.3f} ms, each replayed alone.")
    with open(os.path.join(plan.logs, "kernel_times_gpt2.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    res["figures"].update(kernel_ms=round(total / 1e6, 3), kernels=len(step),
                          top={n: round(ns / 1e6, 3) for n, (_, ns) in ranked[:6]})
    return "pass", ""


SANITIZED = ("CudaVsCpu.Matmul:CudaVsCpu.NormsForwardBackward:CudaVsCpu.RopeAndGqaAttention:"
             "CudaVsCpu.EmbeddingActivationsCrossEntropyAdamW")
REHEARSED = "CudaVsCpu.Matmul:CudaVsCpu.RopeAndGqaAttention:CudaVsCpu.TinyLlamaTrainsAsOnTheCpu"

# (name, limit in seconds, needs a GPU, function), in the order of the value of what each measures.
STAGES = [
    ("preflight", 30, False, preflight),
    ("kernels", 90, True, gtest_stage("cuda_backend_test", {}, REHEARSED)),
    ("reference", 60, True, gtest_stage("reference_test", {"ZT_TEST_DEVICE": "cuda"},
                                        "Reference.Tiny*")),
    ("training", 60, True, training),
    ("gpt2", 75, True, bench_stage([("gpt2", 0, False, False)])),
    ("attention", 45, True, attention),
    ("tinyllama", 180, True, bench_stage([("tinyllama", 0, False, False),
                                          ("tinyllama_offload", 2, True, False),
                                          ("tinyllama_offload_dpu", 2, True, True),
                                          ("tinyllama_flash", 0, False, False, "flash")],
                                         attention="auto")),
    ("pytorch", 150, True, pytorch),
    ("llmc", 90, True, llmc),
    ("sanitizer", 90, True, sanitizer),
    ("kernel_times", 120, True, kernel_times),
]


def run(mode, out, deadline, only=None):
    if not os.path.exists(os.path.join(BUNDLE, "bin", "zerotrain")):
        print("error: no bundle in build/gpu_bundle; run scripts/gpu_check.sh --pack first",
              file=sys.stderr)
        return 2
    plan = Plan(mode, out, deadline)
    plan.stages = [{"name": n, "status": "pending", "seconds": 0, "figures": {}, "reason": ""}
                   for n, *_ in STAGES]

    def on_signal(sig, _):
        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # once: the report comes first
            signal.signal(s, signal.SIG_IGN)
        raise Killed(signal.Signals(sig).name)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        plan.write()  # first, so that OUT is valid from the start
        # The bundle's libraries travel compressed (OpenBLAS alone is 36 MiB).
        with tarfile.open(os.path.join(BUNDLE, "lib.tar.xz")) as t:
            t.extractall(plan.work, filter="data")
        failed = run_stages(plan, only)
    except Killed as k:
        for res in plan.stages:
            if res["status"] == "running":
                res.update(status="timeout", reason=f"killed by {k}")
        plan.write()
        return 124
    finally:
        shutil.rmtree(plan.work, ignore_errors=True)
    print(f"results: {plan.out}/summary.md, results.json, logs.tar.gz")
    return 1 if failed or not plan.gpu else 0  # no GPU: nothing was measured


def file_results(out, runs_dir=os.path.join(ROOT, "docs", "gpu_runs")):
    """Copies OUT's results.json and summary.md, byte for byte, into
    docs/gpu_runs/<the run's start date>-<its commit>[-k]/ (k counts the runs of one day and
    commit), so that a figure in docs/gpu_results.md names the file it came from. Exit 2 when
    OUT holds no readable results.json."""
    try:
        doc = json.load(open(os.path.join(out, "results.json")))
        date, commit = doc["started"][:10], doc["commit"]
        name = f"{date}-" + (re.sub(r"[^A-Za-z0-9]+", "-", commit).strip("-") or "unknown")
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"error: --file {out}: no readable results.json with its start and commit ({e}); "
              "give the OUT folder a --run brought back", file=sys.stderr)
        return 2
    dest, k = os.path.join(runs_dir, name), 1
    while os.path.exists(dest):
        k += 1
        dest = os.path.join(runs_dir, f"{name}-{k}")
    os.makedirs(dest)
    for f in ("results.json", "summary.md"):
        if os.path.exists(os.path.join(out, f)):
            shutil.copyfile(os.path.join(out, f), os.path.join(dest, f))
    print(f"filed: {dest}")
    return 0


def run_stages(plan, only=None):
    """Runs STAGES in order (the preflight and those in `only`, when given), OUT rewritten
    around each. True when one failed."""
    failed = False
    for (name, limit, needs_gpu, fn), res in zip(STAGES, plan.stages):
        limit = min(limit, plan.left())
        if only and name != "preflight" and name not in only:
            res.update(status="skipped", reason="not asked for (--stages)")
            continue
        if needs_gpu and not plan.gpu:
            res.update(status="skipped", reason="no GPU: `nvidia-smi -L` lists none")
            continue
        if limit < 10:
            res.update(status="skipped",
                       reason=f"the deadline ({plan.deadline:.0f} s) left {limit:.0f} s")
            continue
        res["status"] = "running"
        plan.write()
        t = time.monotonic()
        try:
            status, reason = fn(plan, res, limit)
        except Exception as e:  # a stage's own failure: the others' figures stay
            status, reason = "fail", f"{type(e).__name__}: {e}"
        res.update(status=status, reason=reason, seconds=round(time.monotonic() - t, 1))
        failed |= status in ("fail", "timeout")
        plan.write()
        print(f"{name}: {status} ({res['seconds']} s) {reason}", flush=True)
    plan.write()
    return failed


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n", 2)[2])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--pack", action="store_true")
    g.add_argument("--run", metavar="OUT")
    g.add_argument("--rehearse", metavar="OUT")
    g.add_argument("--file", metavar="OUT", help="copy a run's results into docs/gpu_runs/")
    ap.add_argument("--llmc", metavar="DIR", help="with --pack: llm.c's checkout or git directory")
    ap.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE_S,
                    help="seconds for the whole plan")
    ap.add_argument("--stages", metavar="A,B", help="with --run/--rehearse: only these stages "
                    "(the preflight always runs), to rerun what failed on fewer device minutes")
    a = ap.parse_args()
    out = a.run or a.rehearse
    # Bad input stops here, before any work (argparse's own errors exit 2 too).
    if a.llmc and not a.pack:
        ap.error("--llmc goes with --pack (the bundle carries llm.c's binary)")
    if a.llmc and not (os.path.isfile(os.path.join(a.llmc, "train_gpt2.cu")) or
                       capture(["git", "--git-dir", a.llmc, "cat-file", "-e",
                                "HEAD:train_gpt2.cu"])[0] == 0):
        ap.error(f"--llmc {a.llmc}: neither a checkout of karpathy/llm.c (no train_gpt2.cu) nor "
                 "its git directory; give either")
    if out and os.path.exists(out) and not os.path.isdir(out):
        ap.error(f"OUT {out} is not a directory; give a directory (it is made if missing)")
    if a.deadline < STAGES[0][1]:
        ap.error(f"--deadline {a.deadline:g} s leaves no time for the preflight "
                 f"({STAGES[0][1]} s); give at least that (default {DEFAULT_DEADLINE_S:g})")
    only = None
    if a.stages is not None:
        if a.pack or a.file:
            ap.error("--stages goes with --run or --rehearse")
        only = set(filter(None, a.stages.split(",")))
        if not only:
            ap.error("--stages: name at least one stage")
        if "attention" in only:
            only.add("gpt2")  # cuDNN's run is compared with the flash run of gpt2
    unknown = sorted((only or set()) - {n for n, *_ in STAGES})
    if unknown:
        ap.error(f"--stages: no stage {', '.join(unknown)}; the stages are "
                 + ", ".join(n for n, *_ in STAGES))
    if a.file:
        return file_results(a.file)
    if a.pack:
        import gpu_pack  # scripts/gpu_pack.py: only --pack builds
        try:
            return gpu_pack.pack(a.llmc)
        except (subprocess.CalledProcessError, ValueError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return run("run" if a.run else "rehearse", out, a.deadline, only)


if __name__ == "__main__":
    sys.exit(main())
