#!/usr/bin/env python3
"""Writes the tiny reference fixtures (tests/fixtures/): GPT-2, LLaMA (GQA), and the
LLaMA-family variants people fine-tune today: Qwen2 (biases on q, k, v), Mistral (a sliding
window longer than the batch), LLaMA with tied embeddings and every bias, and heads sized
apart from the width (config.json's head_dim: wider, as Qwen3's, and narrower, as
Mistral-Nemo's).

For each model: random (seeded) non-trivial weights, one batch of B=2, T=8, and from
PyTorch + Hugging Face transformers computed in float64:
  logits, the mean cross-entropy loss (ignore_index=-100), every parameter's gradient,
  and the losses of 10 AdamW steps on the same batch.
Everything is stored as float32 (ids as int64). Deterministic and rerunnable:

    python3 scripts/make_reference.py [OUT_DIR] [--only NAME,...]   # default: tests/fixtures

--only rebuilds the named fixtures alone, so the others keep the bits they were made with.
"""
import copy
import json
import math
import os
import shutil
import sys
import tempfile

import torch
import torch.nn.functional as F
import transformers
import struct

from safetensors import safe_open
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM)

SEED = 1234
B, T = 2, 8
N_IGNORED = 3
IGNORE_INDEX = -100
ADAMW = dict(lr=1e-2, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.1)
ADAMW_STEPS = 10
W_STD, NORM_STD, BIAS_STD = 0.2, 0.1, 0.1


ST_DTYPES = {torch.float32: "F32", torch.int64: "I64"}


def save_sorted(tensors, path, metadata):
    """Writes a safetensors file with tensors and metadata in sorted order.

    safetensors.torch.save_file orders __metadata__ by a hash map, so its bytes change
    between runs; this writer keeps the fixture byte-for-byte reproducible. Layout: u64 LE
    header length, JSON header (space-padded to 8 bytes), then the data in header order.
    """
    header = {"__metadata__": dict(sorted(metadata.items()))}
    blobs, offset = [], 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.numpy().tobytes()  # little-endian on every platform we run
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)
    os.replace(tmp, path)
    with safe_open(path, "pt") as f:  # the reference implementation must accept it
        for name in tensors:
            assert torch.equal(f.get_tensor(name), tensors[name]), name


def patch_llama_for_float64(family="llama"):
    """Makes HF LLaMA (or `family`: qwen2, mistral, whose modules copy LLaMA's) compute in the
    model's dtype (float64 here) end to end.

    transformers 5.x hard-codes float32 in three places even for a float64 model: RMSNorm
    upcasts to float32, the rotary embedding builds inv_freq/cos/sin in float32, and eager
    attention runs softmax in float32. Same math, without those casts.
    """
    import importlib
    import torch.nn as nn
    ml = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    prefix = {"llama": "Llama", "qwen2": "Qwen2", "mistral": "Mistral"}[family]

    def rmsnorm_forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))

    def rotary_forward(self, x, position_ids):
        rp = self.config.rope_parameters
        theta = rp["rope_theta"]
        dim = self.inv_freq.shape[0] * 2  # head_dim
        inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        if rp.get("rope_type") == "llama3":  # transformers' _compute_llama3_parameters
            factor, low, high = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
            old = rp["original_max_position_embeddings"]
            wavelen = 2 * math.pi / inv_freq
            scaled = torch.where(wavelen > old / low, inv_freq / factor, inv_freq)
            smooth = (old / wavelen - low) / (high - low)
            smoothed = (1 - smooth) * scaled / factor + smooth * scaled
            medium = ~(wavelen < old / high) * ~(wavelen > old / low)
            inv_freq = torch.where(medium, smoothed, scaled)
        freqs = position_ids[..., None].to(torch.float64) * inv_freq.to(x.device)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)

    def eager_attention(module, query, key, value, attention_mask, scaling, dropout=0.0,
                        **kwargs):
        key_states = ml.repeat_kv(key, module.num_key_value_groups)
        value_states = ml.repeat_kv(value, module.num_key_value_groups)
        w = torch.matmul(query, key_states.transpose(2, 3)) * scaling
        if attention_mask is not None:
            w = w + attention_mask
        w = nn.functional.softmax(w, dim=-1)
        w = nn.functional.dropout(w, p=dropout, training=module.training)
        out = torch.matmul(w, value_states).transpose(1, 2).contiguous()
        return out, w

    getattr(ml, prefix + "RMSNorm").forward = rmsnorm_forward
    getattr(ml, prefix + "RotaryEmbedding").forward = rotary_forward
    ml.eager_attention_forward = eager_attention


def gpt2_model():
    cfg = GPT2Config(vocab_size=67, n_positions=16, n_embd=32, n_layer=2, n_head=4,
                     activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True,
                     # the default 50256 lies outside the tiny vocabulary
                     bos_token_id=66, eos_token_id=66)
    cfg._attn_implementation = "eager"
    return GPT2LMHeadModel(cfg)


def eager(config_class, model_class, **config):
    """A transformers model of `config`, on eager attention (the float64 patch replaces it)."""
    cfg = config_class(**config)
    cfg._attn_implementation = "eager"
    return model_class(cfg)


def llama_model():
    return eager(LlamaConfig, LlamaForCausalLM, vocab_size=71, hidden_size=32,
                 intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-5,
                 rope_theta=10000.0, tie_word_embeddings=False, attention_bias=False,
                 mlp_bias=False)


def qwen2_model():
    return eager(Qwen2Config, Qwen2ForCausalLM, vocab_size=73, hidden_size=32,
                 intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-6,
                 rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False)


def mistral_model():
    return eager(MistralConfig, MistralForCausalLM, vocab_size=67, hidden_size=32,
                 intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=1, max_position_embeddings=64, sliding_window=24,
                 rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)


def llama_biased_tied_model():
    return eager(LlamaConfig, LlamaForCausalLM, vocab_size=59, hidden_size=32,
                 intermediate_size=24, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-5,
                 rope_theta=500000.0, tie_word_embeddings=True, attention_bias=True,
                 mlp_bias=True)


def llama3_scaled_model():
    # head_dim 16 at theta 1e4: wavelengths 6.3 to 19869 against the band (16, 64) of
    # original_max_position_embeddings 64 / high 4, / low 1: one frequency kept, two blended,
    # five divided by the factor.
    return eager(LlamaConfig, LlamaForCausalLM, vocab_size=61, hidden_size=32,
                 intermediate_size=40, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, max_position_embeddings=128, rms_norm_eps=1e-5,
                 rope_theta=10000.0,
                 rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
                 tie_word_embeddings=True)


def llama_wide_heads_model():
    # head_dim 12 apart from hidden 32 / 4 heads (Qwen3's shape: queries 48 wide, wider than the
    # residual stream), with GQA.
    return eager(LlamaConfig, LlamaForCausalLM, vocab_size=53, hidden_size=32,
                 intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=12, max_position_embeddings=32,
                 rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)


def mistral_narrow_heads_model():
    # Mistral-Nemo's shape in small: head_dim 6 apart from hidden 32 / 4 heads (queries 24 wide,
    # narrower than the residual stream).
    return eager(MistralConfig, MistralForCausalLM, vocab_size=61, hidden_size=32,
                 intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=1, head_dim=6, max_position_embeddings=64,
                 sliding_window=None, rms_norm_eps=1e-5, rope_theta=1000000.0,
                 tie_word_embeddings=False)


def is_norm_weight(name):
    return any(k in name for k in ("ln_", "norm")) and name.endswith("weight")


@torch.no_grad()
def reinit(model):
    """Matrices/embeddings ~ N(0, 0.2); norm weights ~ 1 + N(0, 0.1); biases ~ N(0, 0.1)."""
    for name, p in model.named_parameters():  # tied weights appear once
        if name.endswith("bias"):
            p.normal_(0.0, BIAS_STD)
        elif is_norm_weight(name):
            p.normal_(0.0, NORM_STD).add_(1.0)
        else:
            p.normal_(0.0, W_STD)


def loss_fn(model, input_ids, targets):
    logits = model(input_ids=input_ids).logits  # (B, T, V)
    v = logits.shape[-1]
    loss = F.cross_entropy(logits.reshape(-1, v), targets.reshape(-1),
                           ignore_index=IGNORE_INDEX)
    return logits, loss


def make_batch(vocab, gen):
    input_ids = torch.randint(0, vocab, (B, T), generator=gen, dtype=torch.int64)
    targets = torch.randint(0, vocab, (B, T), generator=gen, dtype=torch.int64)
    ignored = torch.randperm(B * T, generator=gen)[:N_IGNORED]
    targets.view(-1)[ignored] = IGNORE_INDEX
    return input_ids, targets


def build(name, make_model, out_dir, seed, patch=None):
    torch.manual_seed(seed)
    model = make_model()
    reinit(model)
    model.eval()  # dropout is 0 anyway; eval makes it explicit
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(seed + 1)
    input_ids, targets = make_batch(vocab, gen)

    folder = os.path.join(out_dir, name)
    os.makedirs(folder, exist_ok=True)
    # config.json and model.safetensors exactly as save_pretrained writes them (float32,
    # HF names; for tied GPT-2 save_pretrained drops lm_head.weight).
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        for f in ("config.json", "model.safetensors"):
            shutil.copyfile(os.path.join(tmp, f), os.path.join(folder, f))

    # Reference in float64.
    ref = copy.deepcopy(model).double()
    if patch is not None:
        with torch.no_grad():
            unpatched = ref(input_ids=input_ids).logits
        patch()
    logits, loss = loss_fn(ref, input_ids, targets)
    loss.backward()
    if patch is not None:  # same math: differs from HF's float32 casts at float32 precision
        diff = (logits.detach() - unpatched).abs().max().item()
        assert diff < 1e-5, f"{name}: float64 patch changed logits by {diff}"
    tensors = {
        "input_ids": input_ids.contiguous(),
        "targets": targets.contiguous(),
        "logits": logits.detach().float().contiguous(),
        "loss": loss.detach().float().reshape(1),
    }
    for pname, p in ref.named_parameters():
        tensors["grad." + pname] = p.grad.detach().float().contiguous()

    # AdamW from the same initial weights on the same batch; loss recorded before each step.
    opt_model = copy.deepcopy(model).double()
    opt = torch.optim.AdamW(opt_model.parameters(), lr=ADAMW["lr"],
                            betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"],
                            weight_decay=ADAMW["weight_decay"])
    losses = []
    for _ in range(ADAMW_STEPS):
        opt.zero_grad(set_to_none=True)
        _, l = loss_fn(opt_model, input_ids, targets)
        losses.append(l.item())
        l.backward()
        opt.step()
    tensors["adamw_losses"] = torch.tensor(losses, dtype=torch.float32)
    tensors["adamw_hparams"] = torch.tensor(
        [ADAMW["lr"], ADAMW["beta1"], ADAMW["beta2"], ADAMW["eps"], ADAMW["weight_decay"]],
        dtype=torch.float32)

    settings = {
        "model": name, "seed": seed, "B": B, "T": T, "n_ignored": N_IGNORED,
        "ignore_index": IGNORE_INDEX, "compute_dtype": "float64", "store_dtype": "float32",
        "init": f"matrices/embeddings N(0,{W_STD}); norm weights 1+N(0,{NORM_STD}); "
                f"biases N(0,{BIAS_STD})",
        "loss": "cross_entropy(logits.view(-1,V), targets.view(-1), ignore_index=-100), mean",
        "adamw": ADAMW, "adamw_steps": ADAMW_STEPS, "grad_clip": None,
        "adamw_losses": "loss before each step",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "script": "scripts/make_reference.py",
    }
    metadata = {"settings": json.dumps(settings, sort_keys=True)}
    metadata.update({k: json.dumps(v) if not isinstance(v, str) else v
                     for k, v in settings.items()})
    save_sorted(tensors, os.path.join(folder, "reference.safetensors"), metadata)

    # Sanity: the saved weights reload into a model that reproduces the float32 forward.
    reloaded = type(model).from_pretrained(folder, attn_implementation="eager").eval()
    with torch.no_grad():
        a = model(input_ids=input_ids).logits
        b = reloaded(input_ids=input_ids).logits
    assert torch.equal(a, b), f"{name}: reloaded weights differ"
    print(f"{name}: loss={loss.item():.6f} adamw_losses[0,-1]={losses[0]:.6f},"
          f"{losses[-1]:.6f} params={sum(p.numel() for p in model.parameters())}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = os.path.join(here, "..", "tests", "fixtures")
    only = None
    if "--only" in sys.argv:
        only = set(sys.argv[sys.argv.index("--only") + 1].split(","))
        del sys.argv[sys.argv.index("--only"):sys.argv.index("--only") + 2]
    out_dir = sys.argv[1] if len(sys.argv) > 1 else out_dir
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    fixtures = [
        ("tiny_gpt2", gpt2_model, SEED, None),
        ("tiny_llama", llama_model, SEED + 100, patch_llama_for_float64),
        ("tiny_qwen2", qwen2_model, SEED + 200, lambda: patch_llama_for_float64("qwen2")),
        ("tiny_mistral", mistral_model, SEED + 300, lambda: patch_llama_for_float64("mistral")),
        ("tiny_llama_biased_tied", llama_biased_tied_model, SEED + 400, patch_llama_for_float64),
        ("tiny_llama3_rope_scaled", llama3_scaled_model, SEED + 500, patch_llama_for_float64),
        ("tiny_llama_wide_heads", llama_wide_heads_model, SEED + 600, patch_llama_for_float64),
        ("tiny_mistral_narrow_heads", mistral_narrow_heads_model, SEED + 700,
         lambda: patch_llama_for_float64("mistral")),
    ]
    for name, make, seed, patch in fixtures:
        if only is None or name in only:
            build(name, make, out_dir, seed, patch=patch)


if __name__ == "__main__":
    main()
