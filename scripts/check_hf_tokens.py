#!/usr/bin/env python3
"""A model whose tokenizer is not sentencepiece, end to end (issue 50): scripts/prepare_hf_tokens.py
makes shards with a tokenizer.json through the `tokenizers` package, and zerotrain trains on
them and prints its sample through the same tokenizer.json.

- the shards hold [BOS] + what `tokenizers` encodes, in llm.c's uint16 format (read back here
  by the format's definition), the last tenth in val_000000.bin;
- `zerotrain train --tokenizer MODEL_DIR` trains two steps on them and samples, exit 0;
- bad input (no tokenizer.json, a val fraction out of range, an empty input, a shard that
  cannot be written) exits 2 with the
  reason; a --sample_prompt or `zerotrain prepare` that zerotrain cannot encode is refused
  (exit 2) with the script's name.

    python3 scripts/check_hf_tokens.py [--zerotrain build/zerotrain]

Needs `tokenizers` (.venv/ from scripts/setup.sh --python); exits 77 (ctest's "skipped") without.
"""
import argparse
import json
import pathlib
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    from tokenizers import Tokenizer
except ImportError as e:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from venv_or_skip import reexec_in_venv_or_skip

    reexec_in_venv_or_skip(e, "tokenizers")

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
        "caf\u00e9 \u00fcber \U0001F600\n") * 40


def read_shard(path):
    data = pathlib.Path(path).read_bytes()
    magic, version, n = struct.unpack_from("<3i", data)
    assert (magic, version) == (20240520, 1), f"{path}: header {magic}, {version}"
    assert len(data) == 1024 + 2 * n, f"{path}: {len(data)} bytes for {n} tokens"
    return list(struct.unpack_from(f"<{n}H", data, 1024))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zerotrain", default=str(ROOT / "build/zerotrain"))
    a = ap.parse_args()
    prepare = [sys.executable, str(ROOT / "scripts/prepare_hf_tokens.py")]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        model = tmp / "model"  # a Hugging Face directory: tokenizer.json and config.json
        model.mkdir()
        shutil.copy(ROOT / "tests/fixtures/hf_tokenizers/metaspace/tokenizer.json", model)
        (model / "config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
        (tmp / "a.txt").write_text(TEXT, encoding="utf-8")
        r = subprocess.run(prepare + ["--tokenizer", str(model), "--input", str(tmp / "a.txt"),
                                      "--out", str(tmp / "shards")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        want = [1] + Tokenizer.from_file(str(model / "tokenizer.json")).encode(
            TEXT, add_special_tokens=False).ids
        train, val = read_shard(tmp / "shards/train_000000.bin"), read_shard(tmp / "shards/val_000000.bin")
        assert train + val == want, "the shards do not hold [BOS] + what tokenizers encodes"
        assert len(val) == round(0.1 * len(want)), (len(val), len(want))

        (tmp / "ds.json").write_text('{"train_micro_batch_size_per_gpu": 2}')
        run = [a.zerotrain, "train", "--model", "shakespeare-llama", "--deepspeed",
               str(tmp / "ds.json"), "--seq_len", "16", "--steps", "2", "--val_every", "0",
               "--train_data", str(tmp / "shards/train_*.bin"), "--tokenizer", str(model),
               "--threads", "1"]
        r = subprocess.run(run + ["--sample_tokens", "4", "--run_dir", str(tmp / "run")],
                           capture_output=True, text=True)
        assert r.returncode == 0 and "sample:" in r.stdout, r.stdout + r.stderr
        r = subprocess.run(run + ["--sample_prompt", "Hi", "--run_dir", str(tmp / "run2")],
                           capture_output=True, text=True)
        assert r.returncode == 2 and "prepare_hf_tokens.py" in r.stderr, r.stdout + r.stderr

        r = subprocess.run([a.zerotrain, "prepare", "--tokenizer", str(model), "--input",
                            str(tmp / "a.txt"), "--out", str(tmp / "p")], capture_output=True,
                           text=True)
        assert r.returncode == 2 and "prepare_hf_tokens.py" in r.stderr, r.stdout + r.stderr

        (tmp / "empty.txt").write_text("")
        for args, why in (
                (["--tokenizer", str(tmp), "--input", str(tmp / "a.txt")], "no tokenizer.json"),
                (["--tokenizer", str(model), "--input", str(tmp / "a.txt"), "--val-fraction", "0.9"],
                 "--val-fraction"),
                (["--tokenizer", str(model), "--input", str(tmp / "empty.txt")], "is empty")):
            r = subprocess.run(prepare + args + ["--out", str(tmp / "bad")], capture_output=True,
                               text=True)
            assert r.returncode == 2 and why in r.stderr, (args, r.stderr)
        # A shard that cannot be written (its temporary name taken by a directory): exit 2.
        (tmp / "taken/train_000000.bin.tmp").mkdir(parents=True)
        r = subprocess.run(prepare + ["--tokenizer", str(model), "--input", str(tmp / "a.txt"),
                                      "--out", str(tmp / "taken")], capture_output=True, text=True)
        assert r.returncode == 2 and "cannot write" in r.stderr, r.stderr
    print("OK: prepare_hf_tokens.py shards hold what tokenizers encodes; zerotrain trains and "
          "samples on them; bad input exits 2")


if __name__ == "__main__":
    main()
