#!/usr/bin/env python3
"""Plain numpy forward of a GGUF llama-architecture model, to measure how far
llama.cpp's CPU logits are from exact math on the same (dequantized) weights.

The weights are dequantized exactly (gguf.quants.dequantize); everything else is
float64 ("exact") or, with --emulate, mimics llama.cpp's CPU arithmetic: matmul
inputs rounded to 8-bit blocks of 32 (Q8_1 for Q4_1 weights, Q8_0 for Q8_0
weights) and K/V stored as f16.

Compares against full logit rows from kiln-golden-dump for the prompts of
tests/fixtures/smollm2_q4_1_golden.json (prompt + greedy tokens as one sequence)
and prints max/mean |diff| of logits and log-probs and argmax agreement. The
numbers go into docs/reference.md and the fixture's tolerance notes.

Usage: scripts/golden-numpy.py [--model GGUF] [--bin DIR] [--emulate] [--json OUT]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType
from gguf.quants import dequantize

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("golden", HERE / "golden.py")
golden = importlib.util.module_from_spec(spec)
assert spec.loader
spec.loader.exec_module(golden)


class Model:
    """Dequantized llama weights + hyperparameters from GGUF metadata."""

    def __init__(self, path: str):
        r = GGUFReader(path)
        f = {k: v.contents() for k, v in r.fields.items() if not k.startswith("tokenizer.ggml.")}
        a = f["general.architecture"]
        self.n_layer = f[f"{a}.block_count"]
        self.n_head = f[f"{a}.attention.head_count"]
        self.n_kv = f[f"{a}.attention.head_count_kv"]
        self.dim = f[f"{a}.embedding_length"]
        self.head_dim = self.dim // self.n_head
        self.theta = float(f[f"{a}.rope.freq_base"])
        self.eps = float(f[f"{a}.attention.layer_norm_rms_epsilon"])
        self.w, self.qtype = {}, {}
        for t in r.tensors:
            self.w[t.name] = dequantize(t.data, t.tensor_type).astype(np.float64)
            self.qtype[t.name] = t.tensor_type
        if "output.weight" not in self.w:  # tied embeddings
            self.w["output.weight"] = self.w["token_embd.weight"]
            self.qtype["output.weight"] = self.qtype["token_embd.weight"]


def quant_rows_q8(x: np.ndarray) -> np.ndarray:
    """Round each block of 32 values to int8 with a per-block scale (as Q8_0/Q8_1 do).

    The scale is stored as f16 in both formats; Q8_1's extra sum term does not
    change the rounded values, so one model covers both.
    """
    shp = x.shape
    b = x.reshape(-1, 32)
    amax = np.abs(b).max(axis=1, keepdims=True)
    d = amax / 127.0
    inv = np.where(d > 0, 1.0 / np.where(d > 0, d, 1), 0.0)
    v = b * inv
    q = np.sign(v) * np.floor(np.abs(v) + 0.5)  # roundf: halves away from zero
    d16 = d.astype(np.float16).astype(np.float64)
    return (q * d16).reshape(shp)


class Forward:
    def __init__(self, m: Model, emulate: bool):
        self.m, self.emulate = m, emulate

    def linear(self, x: np.ndarray, name: str) -> np.ndarray:
        if self.emulate and self.m.qtype[name] != GGMLQuantizationType.F32:
            x = quant_rows_q8(x)
        return x @ self.m.w[name].T

    def rmsnorm(self, x: np.ndarray, name: str) -> np.ndarray:
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.m.eps) * self.m.w[name]

    def rope(self, x: np.ndarray) -> np.ndarray:
        # x: (T, heads, head_dim); rotate adjacent pairs (2i, 2i+1) by pos * theta^(-2i/d).
        t, _, hd = x.shape
        inv = self.m.theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
        ang = np.arange(t, dtype=np.float64)[:, None] * inv[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = np.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    def attention(self, x: np.ndarray, i: int) -> np.ndarray:
        m, t = self.m, x.shape[0]
        p = f"blk.{i}."
        q = self.rope(self.linear(x, p + "attn_q.weight").reshape(t, m.n_head, m.head_dim))
        k = self.rope(self.linear(x, p + "attn_k.weight").reshape(t, m.n_kv, m.head_dim))
        v = self.linear(x, p + "attn_v.weight").reshape(t, m.n_kv, m.head_dim)
        if self.emulate:
            k = k.astype(np.float16).astype(np.float64)
            v = v.astype(np.float16).astype(np.float64)
        group = m.n_head // m.n_kv
        mask = np.triu(np.full((t, t), -np.inf), 1)
        out = np.empty((t, m.n_head, m.head_dim))
        for h in range(m.n_head):
            s = q[:, h, :] @ k[:, h // group, :].T / np.sqrt(m.head_dim) + mask
            s = np.exp(s - s.max(axis=1, keepdims=True))
            out[:, h, :] = (s / s.sum(axis=1, keepdims=True)) @ v[:, h // group, :]
        return self.linear(out.reshape(t, m.dim), p + "attn_output.weight")

    def ffn(self, x: np.ndarray, i: int) -> np.ndarray:
        p = f"blk.{i}."
        g = self.linear(x, p + "ffn_gate.weight")
        u = self.linear(x, p + "ffn_up.weight")
        return self.linear(g / (1.0 + np.exp(-g)) * u, p + "ffn_down.weight")

    def logits(self, ids: list[int]) -> np.ndarray:
        x = self.m.w["token_embd.weight"][ids]
        for i in range(self.m.n_layer):
            x = x + self.attention(self.rmsnorm(x, f"blk.{i}.attn_norm.weight"), i)
            x = x + self.ffn(self.rmsnorm(x, f"blk.{i}.ffn_norm.weight"), i)
        return self.linear(self.rmsnorm(x, "output_norm.weight"), "output.weight")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.environ.get("KILN_MODEL", golden.DEFAULT_MODEL))
    ap.add_argument("--bin", help="llama.cpp bin dir (default: run scripts/build-llama-cpp.sh)")
    ap.add_argument("--fixture", default=str(golden.REPO / "tests/fixtures/smollm2_q4_1_golden.json"))
    ap.add_argument("--write-fixture", action="store_true",
                    help="add the exact_f64 logits and the comparison to the fixture")
    ap.add_argument("--json", help="also write the comparison here")
    args = ap.parse_args()

    path = Path(args.fixture)
    fixture = json.loads(path.read_text())
    model = Model(args.model)
    d = golden.Dumper(golden.find_bin(args.bin) / "kiln-golden-dump", args.model, golden.N_CTX)
    n_vocab = d.meta()["n_vocab"]
    report = {}
    for case in fixture["cases"]:
        n = len(case["prompt_ids"])
        ids = case["prompt_ids"] + case["greedy"]["ids"][:-1]
        ref, _ = d.eval(ids, golden.THREADS, 1, n_vocab)
        ref = ref.astype(np.float64)
        exact = Forward(model, emulate=False).logits(ids)
        res = {"tokens": len(ids)}
        for mode, ours in (("exact_f64", exact), ("emulate_q8_act_f16_kv", Forward(model, emulate=True).logits(ids))):
            res[mode] = golden.row_stats(ref, ours)
            top5 = [len(set(np.argsort(-a)[:5]) & set(np.argsort(-b)[:5])) for a, b in zip(ref, ours)]
            res[mode]["top5_overlap_min"] = int(min(top5))
        report[case["name"]] = res
        print(case["name"], json.dumps(res), file=sys.stderr)
        case["exact_f64"] = {
            "prompt_logits": [{"lse": round(golden.logsumexp(r), 4), "top": golden.top_k(r, golden.TOP_PROMPT)}
                              for r in exact[:n]],
            "greedy_steps": [{"lse": round(golden.logsumexp(r), 4), "top": golden.top_k(r, golden.TOP_GEN)}
                             for r in exact[n - 1:]],
        }
    d.close()
    if args.write_fixture:
        fixture["exact_f64_reference"] = {
            "what": "numpy float64 forward on exactly dequantized GGUF weights (scripts/golden-numpy.py); "
                    "per case: exact_f64.prompt_logits (same positions as prompt_logits) and "
                    "exact_f64.greedy_steps (teacher-forced on greedy.ids, same rows as greedy.steps)",
            "command": "python3 scripts/golden-numpy.py --write-fixture",
            "llama_cpp_vs_exact": report,
        }
        path.write_text(json.dumps(fixture, ensure_ascii=False, separators=(",", ":")) + "\n")
        print(f"updated {path} ({path.stat().st_size} bytes)", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
