#!/usr/bin/env python3
"""Writes reference vectors for kiln's SentencePiece Unigram tokenizer
(`tokenizer.ggml.model = "t5"`, XLM-RoBERTa's vocabulary).

The vocabulary is llama.cpp's `ggml-vocab-nomic-bert-moe.gguf` (XLM-R's 250 002
pieces with its precompiled normalization map), from the directory that
`scripts/fetch-vocab-vectors.sh` prints. Inputs: llama.cpp's SentencePiece and
WordPiece vector inputs, multilingual and whitespace cases, and random strings
from a fixed seed. Outputs: the ids llama.cpp's own Unigram tokenizer
(`llama-tokenize --no-bos --no-parse-special`, no BOS/EOS) gives for each,
in llama.cpp's `.inp` / `.out` format.

  scripts/make-unigram-vectors.py VOCAB_DIR LLAMA_BIN_DIR OUT_PREFIX
"""
import os
import random
import subprocess
import sys

SEP = "\n__ggml_vocab_test__\n"

OWN = [
    "Hello, World! How are you?",
    "Äpfel, Crème brûlée, naïve café, Ångström, İstanbul, ΣΊΣΥΦΟΣ",
    "e\u0301te\u0301 combining accents",
    "我想在apple工作1314151天～ 日本語のテキスト 한국어 텍스트",
    "Numbers: 3 33 333 3333 3.14159 1,000,000 -42 +7 1e10 ½ ² ①",
    "Full-width ＡＢＣ　１２３ and ﬁ ligature, ㍿ ™ …",
    "Whitespace\u00a0kinds\u2003em\u3000ideographic  double   triple",
    "   leading and trailing   ",
    "\t\ttabs\tand\nnewlines\n\n",
    "Control\u0000chars\u0007and\ufffdreplacement\u200bzero\ufeffwidth",
    "Emoji: 🚀 😶\u200d🌫️ ✅ 🦙🦙 👍🏽 🇩🇪",
    "нещо на Български Ελληνικά עברית العربية हिन्दी ไทย",
    "a\u2581b \u2581word ▁▁ marker characters",
    "<s> literal </s> specials <mask> <pad> <unk>",
    "query: what is the capital of France? passage: Paris is the capital of France.",
    "https://example.com/path?query=1&other=two#frag user@example.org",
    "fn main() { println!(\"{}\", x.len()); } // code",
    "pneumonoultramicroscopicsilicovolcanoconiosis " * 3,
]

PIECES = ["a", "ab", "Un", "able", "é", "e\u0301", "\u0301", "ß", "İ", "我", "工作", "ア", "ｱ", "한", "!", ",",
          "$", "¿", "—", "·", " ", "  ", "\t", "\n", "\u00a0", "\u200d", "\u3000", "\ufffd", "🚀", "1", "23",
          "½", "\u2581", "<s>", "x", "Ｆ", "ﬁ"]


def cases(vocab_dir):
    out = []
    for name in ("llama-spm", "bert-bge"):
        with open(os.path.join(vocab_dir, f"ggml-vocab-{name}.gguf.inp"), encoding="utf-8") as f:
            out.extend(f.read().split(SEP))
    out.extend(OWN)
    rng = random.Random(20261126)
    out.extend("".join(rng.choice(PIECES) for _ in range(1 + i % 24)) for i in range(300))
    # `.inp` separates cases by the marker line: a case may not hold it.
    return [c for c in out if SEP.strip() not in c]


def main():
    vocab_dir, bin_dir, prefix = sys.argv[1:4]
    model = os.path.join(vocab_dir, "ggml-vocab-nomic-bert-moe.gguf")
    env = dict(os.environ, LD_LIBRARY_PATH=bin_dir)
    texts = cases(vocab_dir)
    lines = []
    for t in texts:
        r = subprocess.run(
            [os.path.join(bin_dir, "llama-tokenize"), "-m", model, "--stdin", "--ids", "--no-bos",
             "--no-parse-special", "--log-disable"],
            input=t.encode(), capture_output=True, env=env, check=True)
        ids = r.stdout.decode().strip().splitlines()[-1].strip("[]")
        lines.append(" ".join(x.strip() for x in ids.split(",") if x.strip()))
    with open(prefix + ".inp", "w", encoding="utf-8") as f:
        f.write(SEP.join(texts))
    with open(prefix + ".out", "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(texts)} cases -> {prefix}.inp/.out")


if __name__ == "__main__":
    main()
