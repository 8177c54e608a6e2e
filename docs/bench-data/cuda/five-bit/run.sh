set -u
BIN=.gpu-ab STEPS=check OUT=$OUT/chk timeout 330 scripts/gpu/run-checks.sh > $OUT/chk.log 2>&1
echo "PASS: $(grep -c PASS $OUT/chk/check.txt)  FAIL: $(grep -c FAIL $OUT/chk/check.txt)"
grep -E "FAIL|rror|panick" $OUT/chk/check.txt | head -20
awk '/^model .*q5/{p=1} /^model /{if($0 !~ /q5/) p=0} p' $OUT/chk/check.txt | grep -E "^model|PASS|FAIL" | head -40
M=/tmp/kiln-models; R=/tmp/kiln-bin/random-model
$R --out $M/q5k.gguf --meta .gpu-ab/smollm2-meta.gguf --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ff 14336 --type Q5_K --embd-type Q6_K --more-bits Q6_K | tail -1
$R --out $M/q4k.gguf --meta .gpu-ab/smollm2-meta.gguf --layers 32 --hidden 4096 --heads 32 --kv-heads 8 --ff 14336 --type Q4_K --embd-type Q6_K --more-bits Q6_K | tail -1
ls -la $M/q5k.gguf $M/q4k.gguf
for v in q5k q4k q5k-dequant; do
  m=${v%-dequant}; env=""; [ "$v" = q5k-dequant ] && env="KILN_CUDA_DEQUANT=1"
  env $env /tmp/kiln-bin/kiln bench $M/$m.gguf --device cuda --prompt-lens 16,512 --gen-len 128 --iterations 3 --ctx-sweep 2048 --sweep-gen 64 > $OUT/bench-$v.txt 2>&1
  echo "== $v"; grep -E "^ +\*?[0-9]+ |decode|tok/s" $OUT/bench-$v.txt | head -12
done
nvidia-smi --query-gpu=memory.used --format=csv
