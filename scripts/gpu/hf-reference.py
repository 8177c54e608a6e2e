#!/usr/bin/env python3
"""Writes a random-weight Hugging Face checkpoint and transformers' outputs on it,
for `cuda-check --hf DIR` (docs/cuda.md). Runs on the GPU machine (PyTorch,
transformers); nothing is downloaded.

usage: hf-reference.py OUT_DIR --arch llama|qwen2 [--dtype bfloat16|float32]
         [--layers 4 --hidden 896 --ff 4864 --heads 14 --kv-heads 2 --vocab 32000]

OUT_DIR gets config.json + model.safetensors (transformers' save_pretrained),
ref.json (the prompt's token ids, 32 greedy continuation tokens, the dtype)
and ref-logits.f32 (little-endian f32 logits of every prompt position).
"""
import argparse
import json
import os

import torch
import transformers

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--arch", choices=["llama", "qwen2"], default="llama")
p.add_argument("--dtype", default="bfloat16")
p.add_argument("--layers", type=int, default=4)
p.add_argument("--hidden", type=int, default=896)
p.add_argument("--ff", type=int, default=4864)
p.add_argument("--heads", type=int, default=14)
p.add_argument("--kv-heads", type=int, default=2)
p.add_argument("--vocab", type=int, default=32000)
p.add_argument("--prompt", type=int, default=100)
p.add_argument("--seed", type=int, default=0)
a = p.parse_args()

torch.manual_seed(a.seed)
common = dict(
    vocab_size=a.vocab,
    hidden_size=a.hidden,
    intermediate_size=a.ff,
    num_hidden_layers=a.layers,
    num_attention_heads=a.heads,
    num_key_value_heads=a.kv_heads,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    rope_theta=10000.0,
    tie_word_embeddings=False,
    torch_dtype=a.dtype,
)
if a.arch == "llama":
    cfg = transformers.LlamaConfig(**common)
    model = transformers.LlamaForCausalLM(cfg)
else:
    cfg = transformers.Qwen2Config(**common)
    model = transformers.Qwen2ForCausalLM(cfg)
dtype = getattr(torch, a.dtype)
# Random init draws weights with std 0.02; scale the norms' weights away
# from 1 and give the biases values so that every tensor matters.
with torch.no_grad():
    for name, t in model.named_parameters():
        if name.endswith("norm.weight"):
            t.uniform_(0.5, 1.5)
        elif name.endswith(".bias"):
            t.normal_(0.0, 0.5)
        else:
            t.normal_(0.0, 1.0 / (t.shape[-1] ** 0.5))
model = model.to(dtype).to("cuda").eval()
os.makedirs(a.out, exist_ok=True)
model.save_pretrained(a.out, safe_serialization=True)
g = torch.Generator().manual_seed(a.seed + 1)
tokens = torch.randint(0, a.vocab, (a.prompt,), generator=g).tolist()
with torch.no_grad():
    ids = torch.tensor([tokens], device="cuda")
    logits = model(ids).logits[0].float().cpu()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    out = model.generate(ids, max_new_tokens=32, do_sample=False)[0, len(tokens):].tolist()
logits.numpy().astype("<f4").tofile(os.path.join(a.out, "ref-logits.f32"))
with open(os.path.join(a.out, "ref.json"), "w") as f:
    json.dump({"tokens": tokens, "greedy": out, "dtype": a.dtype}, f)
print(f"wrote {a.out}: {a.arch} {a.layers} layers, hidden {a.hidden}, {a.dtype}; logits {tuple(logits.shape)}")
