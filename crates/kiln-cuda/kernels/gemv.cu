// y (n × rows, f32) = x (n × cols) · Wᵀ for a handful of rows of x (decode
// steps): reading W once at full bandwidth is the whole job. One warp per
// output feature; each lane streams 16 bytes of W per step and applies them
// to all n inputs (x stays in L1/L2). cols must be a multiple of 8 (the
// host checks; cuBLAS takes the rest).
#include "common.cuh"

template <typename T, int NT>
__device__ void gemv(const T* w, const T* x, float* y, int rows, int cols) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const T* wr = w + (size_t)r * cols;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.f;
#pragma unroll 4
    for (int c = lane * 8; c < cols; c += 32 * 8) {
        float wf[8];
        load_f<T, 8>(wr + c, wf);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float xf[8];
            load_f<T, 8>(x + (size_t)t * cols + c, xf);
#pragma unroll
            for (int e = 0; e < 8; e++) acc[t] += wf[e] * xf[e];
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const float v = warp_sum(acc[t]);
        if (lane == 0) y[(size_t)t * rows + r] = v;
    }
}

#define GEMV_ENTRY(SUF, TY, NT)                                                                        \
    extern "C" __global__ void gemv_##NT##_##SUF(const TY* w, const TY* x, float* y, int rows, int cols) { \
        gemv<TY, NT>(w, x, y, rows, cols);                                                              \
    }
#define GEMV_ALL(SUF, TY)                                                                              \
    GEMV_ENTRY(SUF, TY, 1)                                                                             \
    GEMV_ENTRY(SUF, TY, 2)                                                                             \
    GEMV_ENTRY(SUF, TY, 3)                                                                             \
    GEMV_ENTRY(SUF, TY, 4)                                                                             \
    GEMV_ENTRY(SUF, TY, 5)                                                                             \
    GEMV_ENTRY(SUF, TY, 6)                                                                             \
    GEMV_ENTRY(SUF, TY, 7)                                                                             \
    GEMV_ENTRY(SUF, TY, 8)
GEMV_ALL(f16, __half)
GEMV_ALL(bf16, __nv_bfloat16)
