"""What scripts/gpu_check.py trains on the GPU and how its losses are read, shared with
scripts/gpu_pack.py, which records the CPU's losses for the same runs at pack time."""
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUNDLE = os.path.join(ROOT, "build", "gpu_bundle")

# The shapes of each mode: (model, layers, width, T, micro-batch, steps, data). The data is
# tinyshakespeare in Llama 2's tokens ("data") or in bytes ("bytes", for the tiny presets'
# 256-token vocabularies).
SHAPES = {
    "run": {"training": ("shakespeare-llama", 4, 128, 256, 4, 20, "data"),
            "gpt2": ("gpt2-124m", 12, 768, 1024, 8, 8, "data"),
            "tinyllama": ("tinyllama-1.1b", 22, 2048, 2048, 1, 8, "data")},
    "rehearse": {"training": ("tiny-llama", 2, 64, 32, 4, 3, "bytes"),
                 "gpt2": ("tiny-gpt2", 2, 64, 64, 2, 5, "bytes"),
                 "tinyllama": ("tiny-llama", 2, 64, 64, 2, 5, "bytes")},
}
TRAIN_CONFIG = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
                "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}


def capture(argv, env=None, timeout=20):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
        return p.returncode, p.stdout + p.stderr
    except (OSError, subprocess.SubprocessError) as e:
        return 127, str(e)


def train_args(exe, device, shape, run_dir, config):
    """`zerotrain train` of `shape` on tinyshakespeare's shards, `config` its ds_config."""
    model, _, _, T, _, steps, data = shape
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "ds.json"), "w") as f:
        json.dump(config, f)
    return [exe, "train", "--device", device, "--model", model, "--seq_len", str(T),
            "--steps", str(steps), "--val_every", "0", "--sample_tokens", "0",
            "--deepspeed", os.path.join(run_dir, "ds.json"),
            "--train_data", os.path.join(BUNDLE, data, "train_*.bin"), "--run_dir", run_dir]


def metrics(run_dir):
    """The step records of run_dir/metrics.jsonl (a last line cut by a kill is left out)."""
    out = []
    try:
        for line in open(os.path.join(run_dir, "metrics.jsonl")):
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if "loss" in rec:
                out.append(rec)
    except OSError:
        pass
    return out


def losses(run_dir):
    return [r["loss"] for r in metrics(run_dir)]
