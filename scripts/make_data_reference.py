#!/usr/bin/env python3
"""Writes the reference fixtures for tests/unit/data_test.cc from independent sources.

- tests/fixtures/tokenizer_reference.json: ids and decodes from Python's `sentencepiece`
  package for a few strings (ASCII, unicode, emoji byte fallback, newlines, spaces).
- tests/fixtures/shard_u16.bin, shard_u32.bin: token shards written exactly as llm.c's
  dev/data/data_common.py write_datafile does (256 int32 header, then the tokens), with
  numpy; tests/fixtures/shard_reference.json holds their tokens.

Usage: python3 scripts/make_data_reference.py [--tokenizer PATH]
Rerun after changing it; never hand-edit the fixtures.
"""
import argparse
import json
import os

import numpy as np
import sentencepiece as spm

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
DEFAULT_TOKENIZER = os.path.join(ROOT, "..", "shared", "data", "llama2_tokenizer.model")

# llm.c's HEADERS_INFO (dev/data/data_common.py).
HEADERS_INFO = {
    "gpt-2": {"magic": 20240520, "version": 1, "token_dtype": np.uint16},
    "llama-3": {"magic": 20240801, "version": 7, "token_dtype": np.uint32},
}

STRINGS = [
    "Hello world",
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n",
    "héllo wörld, naïve café",
    "日本語のテキスト 世界",
    "llamas 🦙 and emoji 🎉!",
    "  two leading spaces and trailing  ",
    "tabs\tand\r\nCRLF",
    "",
]


def write_datafile(filename, toks, model_desc):
    """llm.c's writer: a header of 256 int32 (magic, version, ntok), then the tokens."""
    info = HEADERS_INFO[model_desc]
    header = np.zeros(256, dtype=np.int32)
    header[0] = info["magic"]
    header[1] = info["version"]
    header[2] = len(toks)
    toks_np = np.array(toks, dtype=info["token_dtype"])
    with open(filename, "wb") as f:
        f.write(header.tobytes())
        f.write(toks_np.tobytes())


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tokenizer", default=DEFAULT_TOKENIZER)
    args = parser.parse_args()
    os.makedirs(FIXTURES, exist_ok=True)

    sp = spm.SentencePieceProcessor(model_file=args.tokenizer)
    cases = []
    for text in STRINGS:
        ids = sp.encode(text)
        cases.append({"text": text, "ids": ids, "decoded": sp.decode(ids)})
    tok_ref = {
        "tokenizer": "llama2_tokenizer.model",
        "sentencepiece_version": spm.__version__,
        "vocab_size": sp.vocab_size(),
        "bos_id": sp.bos_id(),
        "eos_id": sp.eos_id(),
        "cases": cases,
    }
    with open(os.path.join(FIXTURES, "tokenizer_reference.json"), "w", encoding="utf-8") as f:
        json.dump(tok_ref, f, ensure_ascii=False, indent=1)
        f.write("\n")

    rng = np.random.default_rng(20240520)
    u16 = rng.integers(0, 50257, size=500).tolist()  # GPT-2 vocabulary
    u32 = rng.integers(0, 128256, size=200).tolist()  # LLaMA-3 vocabulary (> 65,536)
    u32[0] = 128255  # make sure ids above uint16 are present
    write_datafile(os.path.join(FIXTURES, "shard_u16.bin"), u16, "gpt-2")
    write_datafile(os.path.join(FIXTURES, "shard_u32.bin"), u32, "llama-3")
    shard_ref = {
        "shard_u16.bin": {"magic": 20240520, "version": 1, "vocab_size": 50257, "tokens": u16},
        "shard_u32.bin": {"magic": 20240801, "version": 7, "vocab_size": 128256, "tokens": u32},
    }
    with open(os.path.join(FIXTURES, "shard_reference.json"), "w") as f:
        json.dump(shard_ref, f)
        f.write("\n")
    print(f"wrote fixtures to {FIXTURES}")


if __name__ == "__main__":
    main()
