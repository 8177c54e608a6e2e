// Shared helpers of kiln's CUDA kernels: element conversion for the two
// 16-bit weight types, vector loads, warp and block reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

template <typename T> __device__ __forceinline__ float to_f(T x);
template <> __device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

// N 16-bit values kept as they are in registers (N even, at most 8).
template <int N> struct Raw16 {
    uint32_t w[N / 2];
};

// Loads N consecutive 16-bit values (aligned to N elements) unconverted.
template <typename T, int N> __device__ __forceinline__ Raw16<N> load_raw(const T* p) {
    static_assert(N == 2 || N == 4 || N == 8, "load_raw: 2, 4 or 8 values");
    Raw16<N> r;
    if constexpr (N == 8) {
        const uint4 u = *reinterpret_cast<const uint4*>(p);
        r.w[0] = u.x, r.w[1] = u.y, r.w[2] = u.z, r.w[3] = u.w;
    } else if constexpr (N == 4) {
        const uint2 u = *reinterpret_cast<const uint2*>(p);
        r.w[0] = u.x, r.w[1] = u.y;
    } else {
        r.w[0] = *reinterpret_cast<const uint32_t*>(p);
    }
    return r;
}

// The N values of a Raw16 as floats.
template <typename T, int N> __device__ __forceinline__ void unpack_raw(const Raw16<N>& r, float* o) {
#pragma unroll
    for (int k = 0; k < N / 2; k++) {
        const uint32_t w = r.w[k];
        const T* h = reinterpret_cast<const T*>(&w);
        o[2 * k] = to_f(h[0]);
        o[2 * k + 1] = to_f(h[1]);
    }
}

// Loads N consecutive 16-bit values as floats, 16 bytes at a time where N
// allows, else 8 or 4 (callers keep `p` aligned to N elements).
template <typename T, int N> __device__ __forceinline__ void load_f(const T* p, float* o) {
    constexpr int C = N % 8 == 0 ? 8 : (N % 4 == 0 ? 4 : (N % 2 == 0 ? 2 : 1));
    if constexpr (C == 1) {
#pragma unroll
        for (int e = 0; e < N; e++) o[e] = to_f(p[e]);
    } else {
#pragma unroll
        for (int k = 0; k < N / C; k++) unpack_raw<T, C>(load_raw<T, C>(p + C * k), o + C * k);
    }
}

struct SumOp {
    static constexpr float id = 0.f;
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
    static constexpr float id = -INFINITY;
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename Op> __device__ __forceinline__ float warp_reduce(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Reduction over the whole block (blockDim.x a multiple of 32, at most
// 1024); every thread must call it; `sm` holds 32 floats.
template <typename Op> __device__ __forceinline__ float block_reduce(float v, float* sm) {
    v = warp_reduce<Op>(v);
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) sm[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < (int)(blockDim.x >> 5) ? sm[lane] : Op::id;
        v = warp_reduce<Op>(v);
        if (lane == 0) sm[0] = v;
    }
    __syncthreads();
    const float r = sm[0];
    __syncthreads();
    return r;
}

__device__ __forceinline__ float warp_sum(float v) { return warp_reduce<SumOp>(v); }
__device__ __forceinline__ float block_sum(float v, float* sm) { return block_reduce<SumOp>(v, sm); }
__device__ __forceinline__ float block_max(float v, float* sm) { return block_reduce<MaxOp>(v, sm); }

// The first key a query at position ctx - 1 sees: ctx - window with a
// sliding window (its last `window` positions, itself included), else 0.
__device__ __forceinline__ int window_start(int ctx, int window) { return window > 0 ? max(0, ctx - window) : 0; }

// Folds query head h's attention sink (gpt-oss: one logit per head in
// every softmax's denominator, with a zero value) into a result's max M and
// sum L: updates L and returns the factor for the unnormalised output.
// `sinks` null: no sink (1).
__device__ __forceinline__ float fold_sink(const float* sinks, int h, float M, float& L) {
    if (sinks == nullptr) return 1.f;
    const float s = sinks[h], m2 = fmaxf(M, s);
    const float f = M == -INFINITY ? 0.f : __expf(M - m2);
    L = L * f + __expf(s - m2);
    return f;
}

// The split length for a row of `len` keys from `lo` on: the step's
// `split_len` (planned for its longest row), or with a sliding window
// (len at most the window, however deep the context) the grid's splits
// shared out over the window, at least 64 keys each.
__device__ __forceinline__ int window_split(int len, int split_len, int window) {
    return window > 0 ? min(split_len, max(64, (len + (int)gridDim.z - 1) / (int)gridDim.z)) : split_len;
}

// Split-K key range of a decode row with `ctx` keys: split `sp` (the
// grid's z) takes keys k0..k1-1; `n` splits hold keys (the grid may have
// more: the others exit).
struct SplitRange {
    int k0, k1, n;
};
__device__ __forceinline__ SplitRange split_range(int ctx, int split_len, int sp) {
    const int k0 = sp * split_len;
    return {k0, min(ctx, k0 + split_len), min((int)gridDim.z, (ctx + split_len - 1) / split_len)};
}

// Split-K handshake: publishes what this block wrote for its split, then
// says (to every thread) whether it is the last of the `n` blocks sharing
// `counter` to arrive; that block resets the counter and may read the
// others' partials. Every thread of the block must call it.
__device__ __forceinline__ bool split_last(uint32_t* counter, unsigned n) {
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1u) == n - 1;
        if (last) *counter = 0;
    }
    __syncthreads();
    if (!last) return false;
    __threadfence();
    return true;
}

// Programmatic dependent launch (sm_90+). The host launches every kernel
// with programmatic stream serialization, so a kernel's blocks may be
// scheduled while the previous kernel is still draining. Every entry point
// calls pdl_wait before it reads anything a kernel of the step writes: it
// waits until the previous grid has finished and its writes are visible (so
// a kernel never reads a predecessor's output early; and since every kernel
// waits, a grid cannot finish before the one two launches back). Before it,
// a kernel may only prefetch (prefetch_l2) or read what no kernel of the
// step writes. pdl_launch lets the next grid be placed: at the start for
// most kernels (pdl_begin), after the main loop for the decode products and
// the decode attention (GEMV_LATE, ATTN_LATE), so that the next kernel's
// blocks arrive for the tail. Without the launch attribute (or before
// sm_90) both instructions do nothing.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_begin() {
    pdl_wait();
    pdl_launch();
}

// Brings the L2 line (128 bytes) holding `p` in from device memory without
// waiting for it. The decode attention uses it before `pdl_wait` on the K/V
// of earlier steps, which no kernel of the step writes: a block placed while
// the previous kernel drains then finds its keys in L2. A prefetch never returns a value,
// so one of a line a later kernel writes costs bandwidth, never correctness.
__device__ __forceinline__ void prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// Instantiates `name##_f16` and `name##_bf16` entry points of a templated
// device function `name<T>`; `params` may name the element type as `T`.
#define KILN_BOTH(name, params, args)                                                          \
    namespace name##_f16_ns {                                                                 \
    using T = __half;                                                                         \
    extern "C" __global__ void name##_f16 params { pdl_begin(); name<T> args; }               \
    }                                                                                         \
    namespace name##_bf16_ns {                                                                \
    using T = __nv_bfloat16;                                                                  \
    extern "C" __global__ void name##_bf16 params { pdl_begin(); name<T> args; }              \
    }
