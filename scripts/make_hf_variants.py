#!/usr/bin/env python3
"""The tiny fixtures as transformers saves them in other forms, for --init_from (issue 9).

From tests/fixtures/tiny_llama and tiny_gpt2 (make_reference.py), transformers' own
save_pretrained writes, into tests/fixtures/<name>_<dtype>_sharded/:
  - the model in bf16 and in fp32, sharded (max_shard_size 10KB: several
    model-0000k-of-0000n.safetensors and model.safetensors.index.json), config.json;
  - reference.safetensors: the logits transformers computes from those saved weights (loaded
    back with from_pretrained, upcast to float64) on the fixture's input_ids.
Then zerotrain must load each directory and give these logits (tests/unit/reference_test.cc).

    python3 scripts/make_hf_variants.py    # needs torch, transformers, safetensors
"""
import pathlib
import shutil

import torch
import transformers
from safetensors.torch import load_file, save_file

FIX = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures"


def main():
    torch.manual_seed(0)
    for name in ["tiny_llama", "tiny_gpt2"]:
        ids = load_file(str(FIX / name / "reference.safetensors"))["input_ids"]
        for dtype, tag in [(torch.bfloat16, "bf16"), (torch.float32, "fp32")]:
            out = FIX / f"{name}_{tag}_sharded"
            shutil.rmtree(out, ignore_errors=True)
            model = transformers.AutoModelForCausalLM.from_pretrained(str(FIX / name),
                                                                      dtype=torch.float32)
            model.to(dtype).save_pretrained(str(out), max_shard_size="10KB")
            shards = sorted(out.glob("model-*.safetensors"))
            assert len(shards) > 1 and (out / "model.safetensors.index.json").exists(), out
            back = transformers.AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float64)
            back.eval()
            with torch.no_grad():
                logits = back(input_ids=ids).logits.float()
            save_file({"logits": logits.contiguous(), "input_ids": ids},
                      str(out / "reference.safetensors"))
            for extra in ["generation_config.json"]:
                (out / extra).unlink(missing_ok=True)
            print(f"wrote {out}: {len(shards)} shards")


if __name__ == "__main__":
    main()
