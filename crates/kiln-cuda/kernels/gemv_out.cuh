// The end of a decode product (gemv.cu, quant.cu): lane 0 of the warp for
// output feature r has the finished dot products v[m] for input row t and
// stores them in the kernel's form. Output row t starts at t * ystride
// (ystride > rows when the launch fills a slice of a wider output, e.g. the
// V rows of a fused QKV whose weights have another format).
#pragma once
#include "common.cuh"

#define OUT_STORE 0
#define OUT_SWIGLU 1
#define OUT_ADD 2
#define OUT_ROPE 3

// Where the QKV product of a decode step puts its results when RoPE and the
// paged-KV write are fused into it (OUT_ROPE; see gemv.cu): rotated Q rows
// into the f32 output, rotated K and plain V into the caches at each row's
// slot. Laid out as `RopeOut` in gpu.rs.
struct RopeOut {
    const uint32_t* pos;
    const uint32_t* slots;
    const float* cos_t;
    const float* sin_t;
    void* kc;
    void* vc;
    int nh, nkv, hd, neox, bs;
};

template <typename T, int OUT, int NM>
__device__ __forceinline__ void gemv_store(const float* v, const float* bias, void* yout, int t, int r, int ystride) {
    const size_t at = (size_t)t * ystride + r;
    if constexpr (OUT == OUT_STORE) {
        reinterpret_cast<float*>(yout)[at] = v[0] + (bias ? bias[r] : 0.f);
    } else if constexpr (OUT == OUT_SWIGLU) {
        const float gate = v[0];
        reinterpret_cast<T*>(yout)[at] = from_f<T>(gate / (1.f + __expf(-gate)) * v[NM - 1]);
    } else {
        reinterpret_cast<float*>(yout)[at] += v[0];
    }
}
