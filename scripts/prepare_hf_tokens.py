#!/usr/bin/env python3
"""Token shards for a model whose tokenizer is not sentencepiece (Llama 3, Qwen2, GPT-2 style
byte-level BPE): `zerotrain prepare` encodes with sentencepiece only, so this script encodes
with the model's own Hugging Face `tokenizer.json` through the `tokenizers` package and writes
the shards `zerotrain prepare` would: each input file one document, [BOS] + its tokens, the
last --val-fraction of all tokens in val_000000.bin, the rest in train_000000.bin, ... (llm.c's
format, docs/data.md: uint16 tokens for vocabularies up to 65,536, else uint32).

    python3 scripts/prepare_hf_tokens.py --tokenizer MODEL_DIR[/tokenizer.json] \
        --input FILE[,FILE...] --out DIR [--val-fraction 0.1] [--max-shard-tokens N] [--bos ID]

BOS is config.json's bos_token_id beside the tokenizer (or --bos; -1: none). Needs `tokenizers`
(`scripts/setup.sh --python` puts it in .venv/, which this script then uses); exits 2 on bad
input with what was wrong, 77 when `tokenizers` is missing.
"""
import argparse
import array
import json
import math
import os
import pathlib
import struct
import sys

try:
    from tokenizers import Tokenizer
except ImportError as e:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from venv_or_skip import reexec_in_venv_or_skip

    reexec_in_venv_or_skip(e, "tokenizers")

HEADER_INTS = 256
FORMATS = {2: (20240520, 1, "H"), 4: (20240801, 7, "I")}  # bytes per token: magic, version


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


def write_shard(path, tokens, token_bytes):
    """llm.c's shard: 256 int32 of header (magic, version, count), then the tokens; written to
    PATH.tmp and renamed, so a failed write never replaces a good shard."""
    magic, version, code = FORMATS[token_bytes]
    header = [0] * HEADER_INTS
    header[:3] = magic, version, len(tokens)
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack(f"<{HEADER_INTS}i", *header))
            array.array(code, tokens).tofile(f)  # little-endian on x86-64, as the format
        os.replace(tmp, path)
    except OSError as e:  # a full disk, a read-only directory: the good shard stays
        try:
            os.unlink(tmp)
        except OSError:
            pass
        fail(f"cannot write {path} ({e}); free space or choose another --out")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json, or the directory holding it")
    ap.add_argument("--input", required=True, help="UTF-8 text files, comma-separated")
    ap.add_argument("--out", required=True, help="output directory (created)")
    ap.add_argument("--val-fraction", type=float, default=0.1)
    ap.add_argument("--max-shard-tokens", type=int, default=100_000_000)
    ap.add_argument("--bos", type=int, default=None, help="BOS id (-1: none); default config.json's")
    a = ap.parse_args()

    path = pathlib.Path(a.tokenizer)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        fail(f"--tokenizer '{a.tokenizer}': no tokenizer.json there; give the model directory "
             "or its tokenizer.json")
    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as e:  # tokenizers raises its own exception type
        fail(f"--tokenizer '{path}' is not a Hugging Face tokenizer.json ({e})")
    if not 0 <= a.val_fraction <= 0.5:
        fail(f"--val-fraction must be in [0, 0.5], got {a.val_fraction} (e.g. 0.1 for 10%)")
    if a.max_shard_tokens < 2:
        fail(f"--max-shard-tokens must be >= 2, got {a.max_shard_tokens}")
    bos = a.bos
    config = path.parent / "config.json"
    if bos is None and config.is_file():
        try:
            bos = json.loads(config.read_text()).get("bos_token_id")
        except (OSError, ValueError, AttributeError) as e:
            fail(f"{config} cannot be read as a model's config.json ({e}); pass --bos")
        if isinstance(bos, list):  # as zerotrain reads it: the first
            bos = bos[0] if bos else None
    if bos is not None and not isinstance(bos, int):
        fail(f"{config}: bos_token_id {bos!r} is not a token id; pass --bos")
    bos = -1 if bos is None else bos
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if bos >= vocab:
        fail(f"BOS id {bos} is outside the tokenizer's {vocab} tokens; pass --bos")

    # Text that spells a special token ("<|endoftext|>") is text, as `zerotrain prepare` encodes.
    tok.encode_special_tokens = True
    tokens = array.array("I")  # 4 bytes a token, as zerotrain prepare holds them
    for name in a.input.split(","):
        try:
            text = pathlib.Path(name).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            fail(f"--input '{name}' cannot be read as UTF-8 text ({e})")
        if not text:
            fail(f"--input '{name}' is empty")
        if bos >= 0:
            tokens.append(bos)
        tokens.extend(tok.encode(text, add_special_tokens=False).ids)
    n_val = math.floor(a.val_fraction * len(tokens) + 0.5)  # C++ llround, as zerotrain prepare
    n_train = len(tokens) - n_val
    if n_train < 2 or (a.val_fraction > 0 and n_val < 2):
        fail(f"{len(tokens)} tokens split into {n_train} train and {n_val} val tokens; each part "
             "needs at least 2. Give more text or change --val-fraction.")

    out = pathlib.Path(a.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        fail(f"cannot create --out '{out}': {e}")
    token_bytes = 2 if vocab <= 65536 else 4
    written = []
    for i, at in enumerate(range(0, n_train, a.max_shard_tokens)):
        written.append(out / f"train_{i:06d}.bin")
        write_shard(str(written[-1]), tokens[at:min(at + a.max_shard_tokens, n_train)], token_bytes)
    if n_val:
        written.append(out / "val_000000.bin")
        write_shard(str(written[-1]), tokens[n_train:], token_bytes)
    # What an earlier run left beyond these shards would join the train_*.bin and val_*.bin globs.
    for stale in list(out.glob("train_*.bin")) + list(out.glob("val_*.bin")):
        if stale not in written:
            stale.unlink()
    print(f"{len(tokens)} tokens ({vocab}-token {path.name}, BOS {bos}): {n_train} train in "
          f"{len(written) - (1 if n_val else 0)} shard(s), {n_val} val, in {out}")


if __name__ == "__main__":
    main()
