// What the two forms of the tensor-core quantized products share (mmq.cu:
// mma.sync on any sm_80+ GPU; mmq_wgmma.cu: wgmma on Hopper): the K tile,
// the weight tiles fetched ahead, and the dequantizing of a run of 16
// quants to f16.
#pragma once
#include "mma.cuh"
#include "quant_formats.cuh"

#define MMQ_BK 128
// Weight tiles in flight per thread (fetched ahead of their dequantizing).
#define MMQ_AHEAD 3

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's cp.async groups are in flight
// (0: cp_async_wait_all).
template <int N> __device__ __forceinline__ void cp_async_wait() {
    if constexpr (N == 0)
        cp_async_wait_all();
    else
        asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Run k of `part` (16 weights) as f16: the first 8 into `lo8`, the next 8
// into `hi8` (8 consecutive halves each).
template <int FMT> __device__ __forceinline__ void dequant_run(const Part<FMT>& part, int k, __half* lo8, __half* hi8) {
    int o[4];
    part.ints(k, o);
    // Signed quants (Q8_0) are biased by 128 into bytes 0..255 first.
    constexpr float BIAS = Part<FMT>::SIGNED ? 1152.f : 1024.f;
    const __half2 bias = __float2half2_rn(BIAS);
    const __half2 s = __float2half2_rn(part.s[k]);
    const __half2 c = __float2half2_rn(-part.c[k]);
    uint32_t h[8];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const uint32_t v = Part<FMT>::SIGNED ? (uint32_t)o[i] ^ 0x80808080u : (uint32_t)o[i];
        // 0x64 over a byte b: the f16 1024 + b (exact for b < 1024).
        uint32_t lo = __byte_perm(v, 0x64646464u, 0x5140), hi = __byte_perm(v, 0x64646464u, 0x7362);
        __half2 ql = __hsub2(*reinterpret_cast<__half2*>(&lo), bias);
        __half2 qh = __hsub2(*reinterpret_cast<__half2*>(&hi), bias);
        __half2 wl = __hfma2(ql, s, c), wh = __hfma2(qh, s, c);
        h[2 * i] = *reinterpret_cast<uint32_t*>(&wl);
        h[2 * i + 1] = *reinterpret_cast<uint32_t*>(&wh);
    }
    *reinterpret_cast<uint4*>(lo8) = make_uint4(h[0], h[1], h[2], h[3]);
    *reinterpret_cast<uint4*>(hi8) = make_uint4(h[4], h[5], h[6], h[7]);
}

// The same into 16 consecutive halves at `dst`.
template <int FMT> __device__ __forceinline__ void dequant_run(const Part<FMT>& part, int k, __half* dst) {
    dequant_run(part, k, dst, dst + 8);
}
