// The end of a decode product (gemv.cu, gemv_tc.cu, quant.cu): the thread
// holding the finished dot products v[m] of output feature r for input row
// t stores them in the kernel's form. Output row t starts at t * ystride
// (ystride > rows when the launch fills a slice of a wider output, e.g. the
// V rows of a fused QKV whose weights have another format).
#pragma once
#include "common.cuh"

#define OUT_STORE 0
#define OUT_SWIGLU 1
#define OUT_ADD 2
#define OUT_ROPE 3
// gpt-oss's clamped SwiGLU (v[0] gate, v[NM - 1] up): min(g, 7)·σ(1.702·min(g, 7))·(clamp(u, ±7) + 1).
#define OUT_SWIGLU_OAI 4

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
    } else if constexpr (OUT == OUT_SWIGLU_OAI) {
        const float g = fminf(v[0], 7.f), u = fminf(fmaxf(v[NM - 1], -7.f), 7.f);
        reinterpret_cast<T*>(yout)[at] = from_f<T>(g / (1.f + __expf(-1.702f * g)) * (u + 1.f));
    } else {
        reinterpret_cast<float*>(yout)[at] += v[0];
    }
}

// The two QKV features of rotation pair r (features ia, ib of head hh).
__device__ __forceinline__ void rope_pair(const RopeOut& ro, int r, int& hh, int& ia, int& ib) {
    const int half = ro.hd / 2, i = r % half;
    hh = r / half;
    ia = ro.neox ? i : 2 * i;
    ib = ro.neox ? i + half : 2 * i + 1;
}

template <typename T, int NM>
__device__ __forceinline__ void rope_out(const RopeOut& ro, const float* v, const float* bias, float* y, int t, int r,
                                         int ystride) {
    int hh, ia, ib;
    rope_pair(ro, r, hh, ia, ib);
    const size_t fa = (size_t)hh * ro.hd + ia, fb = (size_t)hh * ro.hd + ib;
    const float a = v[0] + (bias ? bias[fa] : 0.f), b = v[NM - 1] + (bias ? bias[fb] : 0.f);
    const int half = ro.hd / 2, i = r % half;
    if (hh >= ro.nh + ro.nkv) {
        const int kvh = hh - ro.nh - ro.nkv;
        const size_t slot = ro.slots[t];
        const size_t base = (((slot / ro.bs) * ro.nkv + kvh) * ro.bs + slot % ro.bs) * ro.hd;
        reinterpret_cast<T*>(ro.vc)[base + ia] = from_f<T>(a);
        reinterpret_cast<T*>(ro.vc)[base + ib] = from_f<T>(b);
        return;
    }
    const size_t p = ro.pos[t];
    const float c = ro.cos_t[p * half + i], s = ro.sin_t[p * half + i];
    const float ra = a * c - b * s, rb = a * s + b * c;
    if (hh < ro.nh) {
        y[(size_t)t * ystride + fa] = ra;
        y[(size_t)t * ystride + fb] = rb;
        return;
    }
    const int kvh = hh - ro.nh;
    const size_t slot = ro.slots[t];
    const size_t base = (((slot / ro.bs) * ro.nkv + kvh) * ro.bs + slot % ro.bs) * ro.hd;
    reinterpret_cast<T*>(ro.kc)[base + ia] = from_f<T>(ra);
    reinterpret_cast<T*>(ro.kc)[base + ib] = from_f<T>(rb);
}

// When the next kernel may be placed (programmatic dependent launch): by
// default once a block has read its weights, so that the next kernel's
// blocks arrive for this product's tail; with GEMV_LATE 0 at the start, as
// every other kernel. Placed at the start, the attention's blocks sat on
// registers for the whole of the 8B's QKV product and their K/V prefetch
// (attention.cu) was evicted before use; placed late, the 8B decodes 2%
// faster (docs/cuda.md).
#ifndef GEMV_LATE
#define GEMV_LATE 1
#endif
