#!/usr/bin/env python3
"""A training run with DeepSpeed's "tensorboard" and "csv_monitor" sections on, read back with
TensorBoard's own reader (tensorboard.backend.event_processing.event_accumulator): every
scalar tag holds what metrics.jsonl holds (rounded to float32, as TensorBoard's simple_value
stores it), at the samples seen (step x train_batch_size), and the CSVs hold the same values.

    python3 scripts/check_tensorboard.py [--zerotrain build/zerotrain]

Needs tensorboard (`scripts/setup.sh --python` puts it in .venv/, or `pip install tensorboard`);
exits 77 (ctest's "skipped", saying why) where it is missing, 1 on a mismatch.
"""
import argparse
import csv
import json
import os
import pathlib
import random
import struct
import subprocess
import sys
import tempfile

try:
    from tensorboard.backend.event_processing import event_accumulator
except ImportError as e:
    from venv_or_skip import reexec_in_venv_or_skip

    reexec_in_venv_or_skip(e, "tensorboard")


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zerotrain",
                    default=str(pathlib.Path(__file__).resolve().parent.parent / "build/zerotrain"))
    a = ap.parse_args()
    B, T, steps = 2, 16, 4
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        d = pathlib.Path(tmp)
        rng = random.Random(0)
        tokens = [rng.randrange(256) for _ in range(4000)]
        for name in ("train_000000.bin", "val_000000.bin"):  # llm.c uint16 shards
            with open(d / name, "wb") as f:
                f.write(struct.pack("<3i", 20240520, 1, len(tokens)) + bytes(4 * 253))
                f.write(struct.pack(f"<{len(tokens)}H", *tokens))
        monitor = {"enabled": True, "output_path": str(d / "logs"), "job_name": "job"}
        (d / "ds.json").write_text(json.dumps({
            "train_micro_batch_size_per_gpu": B, "gradient_accumulation_steps": 1,
            "wall_clock_breakdown": True, "tensorboard": monitor,
            "csv_monitor": {**monitor, "job_name": "csv"},
            "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}}))
        p = subprocess.run([a.zerotrain, "train", "--model", "tiny-llama", "--seq_len", str(T),
                            "--steps", str(steps), "--val_every", "2", "--val_sequences", str(B),
                            "--sample_tokens", "0", "--deepspeed", str(d / "ds.json"),
                            "--train_data", str(d / "train_*.bin"),
                            "--val_data", str(d / "val_*.bin"), "--run_dir", str(d / "run")],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print(f"FAIL: zerotrain train exited {p.returncode}:\n{p.stderr}")
            return 1
        recs = [json.loads(l) for l in open(d / "run" / "metrics.jsonl")]
        train = [r for r in recs if "loss" in r]
        want = {"Train/Samples/train_loss": [(r["step"] * B, r["loss"]) for r in train],
                "Train/Samples/lr": [(r["step"] * B, r["lr"]) for r in train],
                "Train/Samples/grad_norm": [(r["step"] * B, r["grad_norm"]) for r in train],
                "Train/Samples/elapsed_time_ms_forward":
                    [(r["step"] * B, r["forward_ms"]) for r in train],
                "Train/Samples/val_loss": [(r["step"] * B, r["val_loss"]) for r in recs
                                           if "val_loss" in r]}
        ea = event_accumulator.EventAccumulator(str(d / "logs" / "job"))
        ea.Reload()
        tags = ea.Tags()["scalars"]
        for tag, rows in want.items():
            got = [(e.step, e.value) for e in ea.Scalars(tag)] if tag in tags else []
            if [(x, f32(v)) for x, v in rows] != got:
                failures.append(f"{tag}: TensorBoard reads {got}, metrics.jsonl has {rows}")
            path = d / "logs" / "csv" / (tag.replace("/", "_") + ".csv")
            with open(path) as f:
                body = list(csv.reader(f))[1:]
            if [(int(x), float(v)) for x, v in body] != rows:
                failures.append(f"{path.name}: {body}, metrics.jsonl has {rows}")
        print(f"TensorBoard's reader: {len(tags)} scalar tags, {len(train)} steps and "
              f"{len(want['Train/Samples/val_loss'])} validations checked against "
              "metrics.jsonl and the CSVs")
    for f in failures:
        print("FAIL:", f)
    print("FAILED" if failures else "all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
