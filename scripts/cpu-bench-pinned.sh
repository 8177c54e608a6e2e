#!/usr/bin/env bash
# Side-by-side CPU benchmark of kiln and llama.cpp pinned to 2 physical cores.
set -u
cd "$(dirname "$0")"
export LD_LIBRARY_PATH=$PWD/llama
lscpu | grep -E "Model name|Thread|Core|Socket|Flags" | cut -c1-200
grep -q avx512_vnni /proc/cpuinfo && echo "avx512_vnni: yes" || echo "avx512_vnni: NO (kiln runs scalar)"
# Two logical CPUs on different physical cores.
CPUS=$(lscpu -p=cpu,core | grep -v '^#' | awk -F, '!seen[$2]++ {print $1}' | head -2 | paste -sd,)
C1=$(echo $CPUS | cut -d, -f1)
echo "pinned to CPUs $CPUS (single-thread runs: $C1)"
./random-model --meta smol-meta.gguf --out /tmp/r.gguf
M=/tmp/r.gguf
T="taskset -c $CPUS"
for round in 1 2; do
  echo "=== round $round: 2 threads, pp512 / tg128"
  $T llama/llama-bench -m $M -t 2 -p 512 -n 128 -r 3 -o md 2>&1 | grep -E "pp|tg"
  $T ./forward-bench $M 512 128 2
done
echo "=== 1 thread"
taskset -c $C1 llama/llama-bench -m $M -t 1 -p 512 -n 128 -r 3 -o md 2>&1 | grep -E "pp|tg"
taskset -c $C1 ./forward-bench $M 512 128 1
echo "=== decode at depth (2 threads)"
$T llama/llama-bench -m $M -t 2 -p 0 -n 64 -d 128,2048 -r 3 -o md 2>&1 | grep -E "tg"
$T ./forward-bench $M 128 64 2
$T ./forward-bench $M 2048 64 2
echo "=== prefill chunk sweep (engine, 1024-token prompt, 2 threads)"
$T ./chunk-sweep $M 1024 2 2
