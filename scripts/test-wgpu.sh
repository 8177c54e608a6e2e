#!/usr/bin/env bash
# The wgpu backend's lints and tests on Mesa's lavapipe (Vulkan on the CPU):
# installs Debian's mesa-vulkan-drivers and libvulkan1 with apt-get when no
# Vulkan driver is there, then clippy and rustdoc with `--features wgpu` and
# `cargo test -p kiln-wgpu --features wgpu` (the naga MSL translation of
# every kernel, the shared tiny-model cases, the default model against the
# CPU backend). Run by .ci/run; by hand: scripts/test-wgpu.sh [CARGO TEST ARGS].
set -euo pipefail
cd "$(dirname "$0")/.."

if ! ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1; then
  echo "== installing mesa-vulkan-drivers (lavapipe) and libvulkan1 with apt-get"
  command -v apt-get >/dev/null || { echo "error: a Vulkan driver is needed (Debian: apt-get install mesa-vulkan-drivers libvulkan1)" >&2; exit 1; }
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  { $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq mesa-vulkan-drivers libvulkan1 >/dev/null; } \
    || { echo "error: apt-get install mesa-vulkan-drivers libvulkan1 failed (above)" >&2; exit 1; }
fi
# Only lavapipe, whatever else the machine has: the CI numbers are the CPU
# driver's, the same everywhere.
icd=$(ls /usr/share/vulkan/icd.d/lvp_icd*.json | head -n1)
export VK_ICD_FILENAMES="$icd" VK_DRIVER_FILES="$icd"
# Mesa's WSI probes for a display and says so on stderr when none is set.
export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-$(mktemp -d)}"
export KILN_WGPU_BACKEND=vulkan

echo "== cargo clippy -p kiln-wgpu -p kiln --features wgpu (warnings denied)"
cargo clippy -p kiln-wgpu -p kiln-engine -p kiln --features wgpu --all-targets -- -D warnings
echo "== cargo doc -p kiln-wgpu --features wgpu (warnings denied)"
RUSTDOCFLAGS="-D warnings" cargo doc -p kiln-wgpu --features wgpu --no-deps
echo "== cargo test -p kiln-wgpu --features wgpu"
cargo test -p kiln-wgpu --features wgpu --no-fail-fast "$@"
