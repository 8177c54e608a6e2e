#!/usr/bin/env bash
# A/B on the H200: f16 prompt tiles (prefill) and submit part sizes (decode), base = f32 tiles, doubling parts.
set -uo pipefail
. scripts/gpu/lib.sh
B=/tmp/kab; M=/tmp/kiln-models; mkdir -p $B $M
unpack $B .gpu-ab/kiln-new.xz .gpu-ab/kiln-base.xz .gpu-ab/random-model.xz .gpu-ab/smollm2-meta.gguf
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
export KILN_WGPU_BACKEND=vulkan
meta=$B/smollm2-meta.gguf
$B/kiln-new list-devices > $OUT/devices.txt 2>&1; cat $OUT/devices.txt | grep wgpu
bench() { # name model env... -- args
  local tag=$1 m=$2; shift 2
  local f=$OUT/$m.txt
  echo "== $tag: $*" >> $f
  env "$@" >> $f 2>&1
  echo "$m $tag: $(grep -E '^ +512 ' $f | tail -1 | tr -s ' ' | cut -c1-120)"
}
P="--device wgpu --prompt-lens 512 --gen-len 128 --iterations 3"
for m in ${MODELS:-q15-q4km q05-f16 l8b-f16 l8b-q4km}; do
  case $m in
    q05-f16) gen $m --meta $meta $SHAPE_059 --type F16 --embd-type F16 ;;
    *) gen $m --meta $meta ${MODEL_ARGS[$m]} ;;
  esac
  case $m in
    l8b-*) vars="base new new-f32 smax32 fold1 fold4"; reps=1 ;;
    *) vars="base new smax16 smax32 smax64"; reps=2 ;;
  esac
  for r in $(seq $reps); do for v in $vars; do
    case $v in
      base) bench base $m X=1 timeout 100 $B/kiln-base bench $M/$m.gguf $P ;;
      new) bench new $m X=1 timeout 100 $B/kiln-new bench $M/$m.gguf $P ;;
      new-f32) bench new-f32 $m KILN_WGPU_F16=0 timeout 100 $B/kiln-new bench $M/$m.gguf $P ;;
      smax*) bench $v $m KILN_WGPU_SUBMIT_MAX=${v#smax} timeout 100 $B/kiln-new bench $M/$m.gguf $P ;;
      fold*) bench $v $m KILN_WGPU_F16_FOLD=${v#fold} timeout 100 $B/kiln-new bench $M/$m.gguf $P ;;
    esac
  done; done
  for v in base new; do timeout 100 $B/kiln-$v run $M/$m.gguf "The capital of France is" --raw -n 24 --temperature 0 --device wgpu 2>/dev/null > /tmp/greedy-$v.txt; done
  cmp -s /tmp/greedy-base.txt /tmp/greedy-new.txt && echo "== $m greedy base/new same" >> $OUT/$m.txt || { echo "== $m greedy base/new DIFFERENT" >> $OUT/$m.txt; cat /tmp/greedy-base.txt /tmp/greedy-new.txt >> $OUT/$m.txt; }
  grep greedy $OUT/$m.txt
  [ $m = l8b-f16 ] && KILN_WGPU_PROFILE=1 $B/kiln-new bench $M/$m.gguf --device wgpu --prompt-lens 512 --gen-len 4 --iterations 1 > $OUT/prof-$m.txt 2>&1
done
