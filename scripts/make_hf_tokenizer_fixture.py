#!/usr/bin/env python3
"""Fixtures for zerotrain's reading of Hugging Face tokenizer.json files (data/hf_vocab.h):
two small tokenizers trained with the `tokenizers` package on the start of tinyshakespeare,
in the two shapes checkpoints ship, and what `tokenizers` decodes for a few texts.

- tests/fixtures/hf_tokenizers/byte_level/tokenizer.json: byte-level BPE (GPT-2, Llama 3,
  Qwen2): a ByteLevel pre-tokenizer and decoder, one special token <|endoftext|>;
- tests/fixtures/hf_tokenizers/metaspace/tokenizer.json: sentencepiece-style BPE as
  transformers converts Llama 2's and Mistral's (a "▁" prefix, byte fallback tokens <0xNN>,
  the decoder Replace ▁ -> space, ByteFallback, Fuse, Strip one leading space), <unk> <s> </s>;
- tests/fixtures/hf_tokenizer_reference.json: per tokenizer and text, the ids `tokenizers`
  encodes and the text it decodes (special tokens skipped), with a BOS or special token first.

    python3 scripts/make_hf_tokenizer_fixture.py [--text ../shared/data/tinyshakespeare.txt]

Deterministic: the same files on every run. Needs `tokenizers` (.venv/ from setup.sh --python).
"""
import argparse
import json
import pathlib
import sys

try:
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
except ImportError as e:
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from venv_or_skip import reexec_in_venv_or_skip

    reexec_in_venv_or_skip(e, "tokenizers")

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEXTS = [
    "Hello world",
    "First Citizen:\nBefore we proceed any further, hear me speak.",
    "  two leading spaces, tabs\tand a trailing space ",
    "caf\u00e9 na\u00efve \u00fcber \u2014 \u4e2d\u6587 and an emoji \U0001F600!",
]


def byte_level(text):
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator([text], trainers.BpeTrainer(
        vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"], show_progress=False))
    return t, t.token_to_id("<|endoftext|>")


def metaspace(text):
    # Train the merges on pieces, then lay the vocabulary out as Llama 2's: <unk> <s> </s>, the
    # 256 byte-fallback pieces, then the learned ones.
    base = Tokenizer(models.BPE(unk_token="<unk>"))
    base.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"),
                                            normalizers.Replace(" ", "\u2581")])
    base.train_from_iterator([text], trainers.BpeTrainer(
        vocab_size=300, limit_alphabet=60, special_tokens=["<unk>"], show_progress=False))
    spec = json.loads(base.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece, _ in sorted(spec["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(piece, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in spec["merges"]]
    t = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True))
    t.normalizer = base.normalizer
    t.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                   decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    t.add_special_tokens(["<unk>", "<s>", "</s>"])
    return t, 1


def byte_piece(tok, name, b):
    """The id of the piece that stands for the single byte b."""
    if name == "metaspace":
        return tok.token_to_id(f"<0x{b:02X}>")
    return tok.token_to_id(BYTE_CHARS[b])


def bytes_to_unicode():
    """GPT-2's table: the character a byte-level piece writes for each byte."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


BYTE_CHARS = bytes_to_unicode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", default=str(ROOT.parent / "shared/data/tinyshakespeare.txt"))
    ap.add_argument("--out", default=str(ROOT / "tests/fixtures"))
    a = ap.parse_args()
    text = pathlib.Path(a.text).read_text(encoding="utf-8")[:20000]
    out = pathlib.Path(a.out)
    reference = {"made_by": "scripts/make_hf_tokenizer_fixture.py", "tokenizers": []}
    for name, make in (("byte_level", byte_level), ("metaspace", metaspace)):
        tok, first = make(text)
        (out / "hf_tokenizers" / name).mkdir(parents=True, exist_ok=True)
        tok.save(str(out / "hf_tokenizers" / name / "tokenizer.json"), pretty=True)
        cases = []
        for s in TEXTS:
            ids = [first] + tok.encode(s, add_special_tokens=False).ids
            cases.append({"text": s, "ids": ids,
                          "decoded": tok.decode(ids, skip_special_tokens=True)})
        # Invalid UTF-8 (a character cut short, a stray continuation byte, 0xFF, an overlong form,
        # a surrogate) between text:
        # what `tokenizers` makes of it (U+FFFD), built from single-byte pieces.
        for raw in (b"a\xe2\x82 b", b"\x80x\xff\xf0\x9f\x98", b"ok \xe2\x82\xac",
                    b"\xe0\x80\x80z\xed\xa0\x80"):
            ids = [first] + [byte_piece(tok, name, b) for b in raw]
            cases.append({"bytes": raw.hex(), "ids": ids,
                          "decoded": tok.decode(ids, skip_special_tokens=True)})
        reference["tokenizers"].append({
            "path": f"hf_tokenizers/{name}/tokenizer.json",
            "vocab_size": tok.get_vocab_size(with_added_tokens=True), "cases": cases})
    (out / "hf_tokenizer_reference.json").write_text(json.dumps(reference, indent=1) + "\n")


if __name__ == "__main__":
    main()
