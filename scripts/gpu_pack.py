#!/usr/bin/env python3
"""scripts/gpu_check.sh --pack [--llmc DIR]: fills build/gpu_bundle here with everything the GPU
run needs that a GPU does not (scripts/gpu_check.py's docstring has the plan): the sm_90
binaries, the libraries the GPU machine lacks (lib.tar.xz), tinyshakespeare's shards (Llama 2
tokens, and bytes for the tiny presets), the CPU's losses for the training stage, and with
--llmc llm.c's train_gpt2cu compiled for sm_90. Fails when the bundle and the tracked tree pass
BUNDLE_LIMIT_MIB (the device tool carries at most 64 MiB).
"""
import glob
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile

from gpu_runs import BUNDLE, ROOT, SHAPES, TRAIN_CONFIG, capture, losses, train_args

BUNDLE_LIMIT_MIB = 60  # with the working tree, under the device tool's 64 MiB


def pack(llmc_dir):
    bins = ["zerotrain", "zerotrain_emu", "tests/cuda_backend_test", "tests/cuda_backend_emu_test",
            "tests/reference_test", "tests/reference_emu_test"]
    build = os.path.join(ROOT, "build")
    subprocess.run(["cmake", "--build", build, "--target"] + [os.path.basename(b) for b in bins],
                   check=True)
    shutil.rmtree(BUNDLE, ignore_errors=True)
    for d in ("bin", "data"):
        os.makedirs(os.path.join(BUNDLE, d))

    def strip(path, into):
        subprocess.run(["strip", "--strip-unneeded", "-o",
                        os.path.join(into, os.path.basename(path)), path], check=True)

    libs = set()
    for b in bins:
        strip(os.path.join(build, b), os.path.join(BUNDLE, "bin"))
        libs |= set(re.findall(r"=> (/\S+)", capture(["ldd", os.path.join(build, b)])[1]))
    # Every library ldd resolves except glibc's, the compiler runtime (newer on the GPU
    # machine) and CUDA's own (the GPU machine's match its driver).
    skip = re.compile(r"/lib(c|m|dl|pthread|rt|stdc\+\+|gcc_s|cudart|cublas|cublasLt|nccl|cuda)"
                      r"\.so")
    with tempfile.TemporaryDirectory() as lib_dir:
        for lib in sorted(libs):
            if not skip.search(lib):
                strip(lib, lib_dir)
        with tarfile.open(os.path.join(BUNDLE, "lib.tar.xz"), "w:xz") as t:
            t.add(lib_dir, arcname="lib")
    shared = os.path.join(ROOT, "..", "shared", "data")
    text = os.path.join(shared, "tinyshakespeare.txt")
    subprocess.run([os.path.join(build, "zerotrain"), "prepare", "--tokenizer",
                    os.path.join(shared, "llama2_tokenizer.model"), "--input", text, "--out",
                    os.path.join(BUNDLE, "data")], check=True, stdout=subprocess.DEVNULL)
    # The rehearsal's tiny models: the text's first 64 KiB as byte tokens, in an llm.c shard
    # (data/shard.h: 256 int32 of header, magic 20240520, version 1, the count; uint16 tokens).
    tokens = open(text, "rb").read(65536)
    os.makedirs(os.path.join(BUNDLE, "bytes"))
    with open(os.path.join(BUNDLE, "bytes", "train_000000.bin"), "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, len(tokens)) + bytes(4 * 253))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
    # The CPU's losses for the training stage, here, so the device's minutes go to the GPU.
    cpu = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in SHAPES:
            run_dir = os.path.join(tmp, mode)
            subprocess.run(train_args(os.path.join(build, "zerotrain"), "cpu",
                                      SHAPES[mode]["training"], run_dir, TRAIN_CONFIG),
                           check=True, stdout=subprocess.DEVNULL)
            cpu[mode] = losses(run_dir)
    with open(os.path.join(BUNDLE, "cpu_losses.json"), "w") as f:
        json.dump(cpu, f)
    # The device's copy of the tree has no .git: the commit the binaries were built from, and
    # whether the tree had changes beside it, travel in the bundle (gpu_check's results name it).
    with open(os.path.join(BUNDLE, "commit.json"), "w") as f:
        json.dump(tree_commit(), f)
    if llmc_dir:
        build_llmc(llmc_dir)
    tracked = sum(os.path.getsize(os.path.join(ROOT, p)) for p in subprocess.run(
        ["git", "-C", ROOT, "ls-files"], capture_output=True, text=True).stdout.split()
        if os.path.isfile(os.path.join(ROOT, p)))
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(BUNDLE) for f in fs)
    mib = (size + tracked) / 2**20
    print(f"bundle: {BUNDLE}, {size / 2**20:.1f} MiB; with the tracked tree {mib:.1f} MiB "
          f"(limit {BUNDLE_LIMIT_MIB})")
    if mib > BUNDLE_LIMIT_MIB:
        print(f"error: over {BUNDLE_LIMIT_MIB} MiB", file=sys.stderr)
        return 1
    return 0


def tree_commit():
    """{"commit": short hash of HEAD, "dirty": tracked files differ from it}, here at pack time."""
    head = capture(["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"])
    status = capture(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])
    return {"commit": head[1].strip() if head[0] == 0 else "",
            "dirty": status[0] != 0 or bool(status[1].strip())}


def cudnn_frontend_include(build):
    """The cuDNN frontend headers the build used (model/CMakeLists.txt), or None."""
    cache = capture(["cmake", "-L", "-N", build])[1]
    m = re.search(r"^ZT_CUDNN_FRONTEND_DIR:PATH=(.+)$", cache, re.M)
    dirs = ([m.group(1)] if m else []) + sorted(
        glob.glob(os.path.join(build, "_deps", "cudnn_frontend-*", "include")))
    return next((d for d in dirs if os.path.isfile(os.path.join(d, "cudnn_frontend.h"))), None)


def build_llmc(src):
    """Compiles llm.c's train_gpt2.cu for sm_90 here, so the device's minutes go to running it:
    train_gpt2cu with llm.c's own attention kernels, and train_gpt2cu_cudnn with cuDNN's (llm.c's
    `make USE_CUDNN=1`, its fastest GPT-2 and the one issue 51 compares with), where the build's
    cuDNN frontend headers and cudnn.h are here."""
    out = os.path.join(BUNDLE, "llmc")
    os.makedirs(out)
    with tempfile.TemporaryDirectory() as tmp:
        if os.path.isdir(os.path.join(src, "llmc")):
            shutil.copy(os.path.join(src, "train_gpt2.cu"), tmp)
            shutil.copytree(os.path.join(src, "llmc"), os.path.join(tmp, "llmc"))
        else:  # a bare git directory (the fetch tool's mirror)
            archive = subprocess.run(["git", "--git-dir", src, "archive", "HEAD", "train_gpt2.cu",
                                      "llmc"], capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        # Two edits to the copy: CUDA 13's cudaMemAdvise takes a cudaMemLocation, not a device
        # number (llm.c's OOM fallback to managed memory, never taken here, predates that); and
        # no NVML (its GPU-utilisation line), which this machine cannot link.
        edit(os.path.join(tmp, "llmc", "cuda_utils.cuh"),
             "cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId)",
             "cudaMemAdviseSetPreferredLocation, cudaMemLocation{cudaMemLocationTypeHost, 0})")
        edit(os.path.join(tmp, "llmc", "mfu.h"), "__has_include(<nvml.h>)", "0")
        nvcc = ["nvcc", "-O3", "-t=0", "--use_fast_math", "-std=c++17", "-DENABLE_BF16",
                "--generate-code", "arch=compute_90,code=sm_90"]
        subprocess.run(nvcc + ["train_gpt2.cu", "-lcublas", "-lcublasLt", "-o",
                               os.path.join(out, "train_gpt2cu")], cwd=tmp, check=True)
        frontend = cudnn_frontend_include(os.path.join(ROOT, "build"))
        if not frontend or capture(["sh", "-c", "echo '#include <cudnn.h>' | nvcc -x cu -E -"])[0]:
            print("llm.c with cuDNN not built: no cuDNN frontend headers in build/_deps or no "
                  "cudnn.h for nvcc (the llmc stage runs llm.c's own kernels only)")
            return
        # The frontend (1.32) compiles cuDNN's kernels through NVRTC: llm.c's Makefile predates
        # that and links only -lcudnn.
        cudnn = nvcc + ["-DENABLE_CUDNN", "-I" + frontend]
        try:
            subprocess.run(cudnn + ["-c", "llmc/cudnn_att.cpp", "-o", "cudnn_att.o"], cwd=tmp,
                           check=True)
            subprocess.run(cudnn + ["train_gpt2.cu", "cudnn_att.o", "-lcublas", "-lcublasLt",
                                    "-lcudnn", "-lnvrtc", "-o",
                                    os.path.join(out, "train_gpt2cu_cudnn")], cwd=tmp, check=True)
        except subprocess.CalledProcessError as e:  # the llmc stage then fails, saying why
            print(f"llm.c with cuDNN not built: {e} (the llmc stage runs llm.c's own kernels only)")


def edit(path, old, new):
    text = open(path).read()
    if old not in text:
        raise ValueError(f"{path} no longer holds {old!r}: look at llm.c's change")
    open(path, "w").write(text.replace(old, new))
