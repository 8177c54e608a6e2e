#!/usr/bin/env bash
set -uo pipefail
cd "$(dirname "$0")/.."
R=${OUT:?}
. scripts/gpu/lib.sh
B=/tmp/ks8; M=/tmp/kiln-models; mkdir -p $M
unpack $B .gpu-s/*.xz
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$R/gpu.txt"
V=$B/ggml-vocab-qwen2.gguf
$B/random-model --meta $V --out $M/oss-20b.gguf --arch gpt-oss --layers 24 --hidden 2880 --heads 64 --kv-heads 8 --head-dim 64 --ff 2880 \
    --experts 32 --experts-used 4 --expert-ff 2880 --type Q8_0 --embd-type Q8_0 --expert-type MXFP4 --head-type Q8_0 2>&1 | tail -n 1 &
$B/random-model --meta $V --out $M/smol-q41.gguf --arch llama --layers 30 --hidden 576 --heads 9 --kv-heads 3 --ff 1536 --type Q4_1 --embd-type Q8_0 2>&1 | tail -n 1
for round in 1 2; do
    for v in kiln-main kiln; do
        echo "== smol $v round $round"
        timeout 60 $B/$v bench $M/smol-q41.gguf --device cuda --prompt-lens 128,512 --gen-len 64 --iterations 3 \
            --no-bandwidth 2>&1 | grep -E "^ +[0-9]+ +64" | tee -a "$R/smol-$v.txt"
    done
done
wait
timeout 80 $B/kiln bench $M/oss-20b.gguf --device cuda --prompt-lens 512 --gen-len 128 --iterations 3 --no-bandwidth 2>&1 \
    | grep -E "^ +512 +128" | tee -a "$R/oss.txt"
