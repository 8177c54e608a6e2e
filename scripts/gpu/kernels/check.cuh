// What the kernel harnesses here share: CK(call) exits with the file, line,
// call and CUDA's message when a runtime call fails; graph_median_ms times
// a captured launch sequence; fill_half writes small pseudo-random
// weights.
#pragma once
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_fp16.h>

#define CK(x)                                                                                                    \
    do {                                                                                                         \
        cudaError_t e_ = (x);                                                                                    \
        if (e_ != cudaSuccess) {                                                                                 \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                  \
            exit(1);                                                                                             \
        }                                                                                                        \
    } while (0)

// The median of `reps` replays (after 3 unmeasured ones), in ms, of the CUDA
// graph that `record()` captures on stream `s`.
template <typename F> float graph_median_ms(cudaStream_t s, F&& record, int reps) {
    cudaGraph_t gr;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    record();
    CK(cudaStreamEndCapture(s, &gr));
    CK(cudaGraphInstantiate(&ge, gr, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int r = 0; r < 3; r++) CK(cudaGraphLaunch(ge, s));
    std::vector<float> ts;
    for (int r = 0; r < reps; r++) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        ts.push_back(ms);
    }
    std::sort(ts.begin(), ts.end());
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(gr));
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    return ts[reps / 2];
}

// p[i] = a pseudo-random value in [-0.02, 0.02) from a hash of i and `seed`.
__global__ void fill_half(__half* p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = __float2half(((h & 0xffff) / 65536.f - 0.5f) * 0.04f);
    }
}
