// What the tensor-core quantized products share (mmq.cu: weights through
// shared memory; mmq_reg.cu: weights into the mma's registers): the K tile,
// the weight tiles fetched ahead, the dequantizing of quants to f16 pairs
// and the store of a result.
#pragma once
#include "mma.cuh"
#include "quant_formats.cuh"

#define MMQ_BK 128
// Weight tiles in flight per thread (fetched ahead of their dequantizing).
#define MMQ_AHEAD 3

// Quants q0..q3 (the bytes of v, q0 lowest) as the f16 pairs s·q − c of
// (q0, q1) into `lo2` and (q2, q3) into `hi2` (c: the offset negated).
// Signed quants (Q8_0) are biased by 128 into bytes 0..255 first; 0x64
// over a byte b is the f16 1024 + b (exact for b < 1024), so one exact
// subtraction and one fused multiply-add (one rounding) give the weights.
template <int FMT>
__device__ __forceinline__ void dequant_pairs(uint32_t v, __half2 s, __half2 neg_c, uint32_t& lo2, uint32_t& hi2) {
    // The f16 pair (1024, 1024), or (1152, 1152) for signed quants, as bits
    // (a constant: a conversion here would run per call).
    const uint32_t bias_bits = Part<FMT>::SIGNED ? 0x64806480u : 0x64006400u;
    const __half2 bias = *reinterpret_cast<const __half2*>(&bias_bits);
    if (Part<FMT>::SIGNED) v ^= 0x80808080u;
    uint32_t lo = __byte_perm(v, 0x64646464u, 0x5140), hi = __byte_perm(v, 0x64646464u, 0x7362);
    __half2 wl = __hfma2(__hsub2(*reinterpret_cast<__half2*>(&lo), bias), s, neg_c);
    __half2 wh = __hfma2(__hsub2(*reinterpret_cast<__half2*>(&hi), bias), s, neg_c);
    lo2 = *reinterpret_cast<uint32_t*>(&wl);
    hi2 = *reinterpret_cast<uint32_t*>(&wh);
}

// Run k of `part` (16 weights) as f16: the first 8 into `lo8`, the next 8
// into `hi8` (8 consecutive halves each).
template <int FMT> __device__ __forceinline__ void dequant_run(const Part<FMT>& part, int k, __half* lo8, __half* hi8) {
    int o[4];
    part.ints(k, o);
    const __half2 s = __float2half2_rn(part.s[k]);
    const __half2 c = __float2half2_rn(-part.c[k]);
    uint32_t h[8];
#pragma unroll
    for (int i = 0; i < 4; i++) dequant_pairs<FMT>((uint32_t)o[i], s, c, h[2 * i], h[2 * i + 1]);
    *reinterpret_cast<uint4*>(lo8) = make_uint4(h[0], h[1], h[2], h[3]);
    *reinterpret_cast<uint4*>(hi8) = make_uint4(h[4], h[5], h[6], h[7]);
}

// The same into 16 consecutive halves at `dst`.
template <int FMT> __device__ __forceinline__ void dequant_run(const Part<FMT>& part, int k, __half* dst) {
    dequant_run(part, k, dst, dst + 8);
}

// One output of a product: added atomically (K split over blocks), added,
// or stored.
__device__ __forceinline__ void mmq_store(float* dst, float v, bool atomic, bool accumulate) {
    if (atomic)
        atomicAdd(dst, v);
    else if (accumulate)
        *dst += v;
    else
        *dst = v;
}
