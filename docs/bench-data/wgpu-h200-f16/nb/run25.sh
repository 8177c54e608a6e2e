#!/usr/bin/env bash
# A/B on the H200: tiled products without branches around their reads (nb) against HEAD 25780bd (new);
# first submitted part sizes for decode.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln-new.xz .gpu-ab/kiln-nb.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export KILN_WGPU_BACKEND=vulkan
meta=$B/smollm2-meta.gguf
bench() { # tag model env... cmd
  local tag=$1 m=$2; shift 2
  local f=$OUT/$m.txt
  echo "== $tag: $*" >> $f
  env "$@" >> $f 2>&1
  echo "$m $tag: $(grep -E '^ +512 ' $f | tail -1 | tr -s ' ' | cut -c1-120)"
}
P="--device wgpu --prompt-lens 512 --gen-len 128 --iterations 3"
for m in ${MODELS:-l8b-f16 l8b-q4km q15-q4km q05-f16}; do
  case $m in
    q05-f16) gen $m --meta $meta $SHAPE_059 --type F16 --embd-type F16 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  case $m in
    l8b-*) vars="new nb new nb" ;;
    *) vars="new nb fs0 fs4 fs16 fs32 new nb" ;;
  esac
  for v in $vars; do
    case $v in
      new|nb) bench $v $m KILN_WGPU_F16_FOLD=1 timeout 100 $B/kiln-$v bench $M/$m.gguf $P ;;
      fs*) bench $v $m KILN_WGPU_FIRST_SUBMIT=${v#fs} timeout 100 $B/kiln-nb bench $M/$m.gguf $P ;;
    esac
  done
  for v in new nb; do timeout 100 $B/kiln-$v run $M/$m.gguf "The capital of France is" --raw -n 24 --temperature 0 --device wgpu 2>/dev/null > /tmp/greedy-$v.txt; done
  cmp -s /tmp/greedy-new.txt /tmp/greedy-nb.txt && echo "== $m greedy new/nb same" >> $OUT/$m.txt || { echo "== $m greedy new/nb DIFFERENT" >> $OUT/$m.txt; cat /tmp/greedy-new.txt /tmp/greedy-nb.txt >> $OUT/$m.txt; }
  grep greedy $OUT/$m.txt
done
