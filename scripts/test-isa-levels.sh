#!/usr/bin/env bash
# Runs the kernel and model tests once per CPU instruction-set level this
# machine supports (KILN_CPU_ISA caps the level; docs/architecture.md).
# Usage: scripts/test-isa-levels.sh [extra cargo test args]
set -euo pipefail
flags=$(grep -m1 '^flags' /proc/cpuinfo || true)
has() { for f in "$@"; do [[ " $flags " == *" $f "* ]] || return 1; done; }
levels=(scalar)
has avx2 fma f16c && levels+=(avx2)
has avx2 fma f16c avx_vnni && levels+=(avx2-vnni)
has avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni && levels+=(avx512)
for isa in "${levels[@]}"; do
    echo "== KILN_CPU_ISA=$isa"
    KILN_CPU_ISA=$isa cargo test -p kiln-kernels -p kiln-models "$@"
done
