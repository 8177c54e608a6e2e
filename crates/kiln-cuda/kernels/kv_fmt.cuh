// How the attention kernels and the KV write read and write one side (K or
// V) of the paged cache: `KvPlain<T>` (the model's 16-bit type,
// `[block][kv head][slot][hd]`, the layout every f16 kernel always had)
// and the quantized `KvQ8` (GGML's q8_0: x = d·q, q a signed byte) and
// `KvQ4` (q4_0: x = d·(q − 8), q a nibble), 32 values per scale `d` (f16).
//
// Device layout of a quantized pool. Cache block b of a pool is one run of
// bytes: first the quants of its nkv·bs rows (`[kv head][slot]`, QB bytes a
// row: hd for q8_0, hd/2 for q4_0, value 2k in the low nibble of byte k and
// 2k+1 in the high one), then the scales of those rows (`[kv head][slot]
// [hd/32]` f16). Split rather than GGML's interleaved 34- or 18-byte
// blocks because the readers take a few consecutive values per lane: with
// the quants of a row contiguous a lane's values are one aligned 2-, 4- or
// 8-byte load (interleaved blocks of 34 or 18 bytes put them at odd
// offsets, forcing byte loads), the scale a lane needs is one aligned
// 2-byte load shared by the lanes of its 32 values, and the tile loader's
// 8 values are one load too. A cache block stays one contiguous run, so
// the host tier copies it whole.
//
// Rotation. As on the CPU (kiln-kernels' attention/quant.rs), a quantized
// side stores each head rotated by the orthonormal Walsh-Hadamard
// transform H over the head (64, 128 or 256 values), which spreads a few
// large channels over all of them so that no 32-value block gets a coarse
// scale from one outlier. The KV write rotates before quantizing; the
// decode kernel rotates the query (Hq·Hk = q·k) and its output over a
// rotated V (H is its own inverse); the prompt tiles rotate the loaded
// rows back as they dequantize them.
#pragma once
#include "common.cuh"
#include "mma.cuh"

template <typename T> struct KvPlain {
    using Elem = T;
    static constexpr bool quant = false, q4 = false;
    template <int N> using Raw = Raw16<N>;
    // N values of row (blk, kvh, slot) from value d0.
    template <int HD, int N>
    static __device__ __forceinline__ Raw16<N> load(const T* p, size_t blk, int kvh, int slot, int nkv, int bs,
                                                     int d0) {
        return load_raw<T, N>(p + ((blk * nkv + kvh) * bs + slot) * HD + d0);
    }
    template <int N> static __device__ __forceinline__ void unpack(const Raw16<N>& r, float* o) {
        unpack_raw<T, N>(r, o);
    }
};

// Bytes of quants of an HD-value row, and of its scales.
template <int HD, bool Q4> struct KvRowBytes {
    static constexpr int QB = Q4 ? HD / 2 : HD;
    static constexpr int SB = HD / 16;
};

// The quants and scale pointers of row (blk, kvh, slot) of a quantized pool.
template <int HD, bool Q4>
__device__ __forceinline__ const uint8_t* kvq_row(const void* p, size_t blk, int kvh, int slot, int nkv, int bs,
                                                  const __half** scales) {
    using B = KvRowBytes<HD, Q4>;
    const size_t rows = (size_t)nkv * bs, row = (size_t)kvh * bs + slot;
    const uint8_t* base = reinterpret_cast<const uint8_t*>(p) + blk * rows * (B::QB + B::SB);
    *scales = reinterpret_cast<const __half*>(base + rows * B::QB + row * B::SB);
    return base + row * B::QB;
}

// Asks L2 for the start of row (blk, kvh, slot) of one side stored as F
// (its quants when quantized: one line holds a q8_0 row at head dim 128).
template <typename F, int HD>
__device__ __forceinline__ void kv_prefetch_row(const typename F::Elem* p, size_t blk, int kvh, int slot, int nkv,
                                                int bs) {
    if constexpr (F::quant) {
        const __half* sc;
        prefetch_l2(kvq_row<HD, F::q4>(p, blk, kvh, slot, nkv, bs, &sc));
    } else {
        prefetch_l2(p + ((blk * nkv + kvh) * bs + slot) * HD);
    }
}

// N (2, 4 or 8) quantized values kept as loaded, with their scale.
template <int N> struct RawQ {
    uint32_t w[N <= 4 ? 1 : 2];
    float d;
};

template <int N> __device__ __forceinline__ void load_bytes(const uint8_t* p, uint32_t* w) {
    if constexpr (N == 1) {
        w[0] = *p;
    } else if constexpr (N == 2) {
        w[0] = *reinterpret_cast<const uint16_t*>(p);
    } else if constexpr (N == 4) {
        w[0] = *reinterpret_cast<const uint32_t*>(p);
    } else {
        const uint2 u = *reinterpret_cast<const uint2*>(p);
        w[0] = u.x, w[1] = u.y;
    }
}

struct KvQ8 {
    using Elem = uint8_t;
    static constexpr bool quant = true, q4 = false;
    template <int N> using Raw = RawQ<N>;
    template <int HD, int N>
    static __device__ __forceinline__ RawQ<N> load(const uint8_t* p, size_t blk, int kvh, int slot, int nkv, int bs,
                                                   int d0) {
        const __half* s;
        const uint8_t* q = kvq_row<HD, false>(p, blk, kvh, slot, nkv, bs, &s);
        RawQ<N> r;
        load_bytes<N>(q + d0, r.w);
        r.d = __half2float(s[d0 / 32]);
        return r;
    }
    template <int N> static __device__ __forceinline__ void unpack(const RawQ<N>& r, float* o) {
#pragma unroll
        for (int e = 0; e < N; e++) o[e] = r.d * (float)(int8_t)(r.w[e / 4] >> (8 * (e % 4)));
    }
};

struct KvQ4 {
    using Elem = uint8_t;
    static constexpr bool quant = true, q4 = true;
    template <int N> using Raw = RawQ<N>;
    template <int HD, int N>
    static __device__ __forceinline__ RawQ<N> load(const uint8_t* p, size_t blk, int kvh, int slot, int nkv, int bs,
                                                   int d0) {
        const __half* s;
        const uint8_t* q = kvq_row<HD, true>(p, blk, kvh, slot, nkv, bs, &s);
        RawQ<N> r;
        load_bytes<N / 2>(q + d0 / 2, r.w);
        r.d = __half2float(s[d0 / 32]);
        return r;
    }
    template <int N> static __device__ __forceinline__ void unpack(const RawQ<N>& r, float* o) {
#pragma unroll
        for (int e = 0; e < N; e++) o[e] = r.d * (float)((int)((r.w[0] >> (4 * e)) & 15u) - 8);
    }
};

// Writes values 2i and 2i+1 of a row of hd values (`x0`, `x1`; thread i of
// a block whose first hd/2 threads own the row, the rest passing zeros, the
// block a multiple of 32 threads: each half-warp holds one 32-value block).
template <typename F, typename T>
__device__ __forceinline__ void kv_store_pair(typename F::Elem* p, size_t blk, int kvh, int slot, int nkv, int bs,
                                              int hd, int i, float x0, float x1) {
    const bool on = 2 * i < hd;
    if constexpr (!F::quant) {
        if (on) {
            T* r = p + ((blk * nkv + kvh) * bs + slot) * hd + 2 * i;
            r[0] = from_f<T>(x0);
            r[1] = from_f<T>(x1);
        }
    } else {
        constexpr bool q4 = F::q4;
        const size_t rows = (size_t)nkv * bs, row = (size_t)kvh * bs + slot;
        const int qb = q4 ? hd / 2 : hd, sb = hd / 16;
        uint8_t* base = p + blk * rows * (qb + sb);
        __half* scales = reinterpret_cast<__half*>(base + rows * qb + row * sb);
        uint8_t* q = base + row * qb;
        float d;
        if constexpr (!q4) {
            float a = fmaxf(fabsf(x0), fabsf(x1));
#pragma unroll
            for (int o = 8; o > 0; o >>= 1) a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, o));
            d = a / 127.f;
            const float id = d != 0.f ? 1.f / d : 0.f;
            if (on) {
                const int q0 = (int)roundf(x0 * id), q1 = (int)roundf(x1 * id);
                *reinterpret_cast<uint16_t*>(q + 2 * i) = (uint16_t)((q0 & 255) | ((q1 & 255) << 8));
            }
        } else {
            // The value of largest magnitude, with its sign, maps to -8.
            float m = fabsf(x1) > fabsf(x0) ? x1 : x0;
#pragma unroll
            for (int o = 8; o > 0; o >>= 1) {
                const float n = __shfl_xor_sync(0xffffffffu, m, o);
                if (fabsf(n) > fabsf(m)) m = n;
            }
            d = m / -8.f;
            const float id = d != 0.f ? 1.f / d : 0.f;
            if (on) {
                const int q0 = min(15, max(0, __float2int_rz(x0 * id + 8.5f)));
                const int q1 = min(15, max(0, __float2int_rz(x1 * id + 8.5f)));
                q[i] = (uint8_t)(q0 | (q1 << 4));
            }
        }
        if (on && i % 16 == 0) scales[i / 16] = __float2half_rn(d);
    }
}

// The normalized Walsh-Hadamard transform of N values held M consecutive
// ones per lane by N/M consecutive lanes (lane bits below log2(N/M) give
// the position; every lane of the warp calls it), in place.
template <int M, int N> __device__ __forceinline__ void wht_lanes(float* x) {
    static_assert((M & (M - 1)) == 0 && (N & (N - 1)) == 0 && N >= M && N / M <= 32, "wht_lanes: powers of two");
#pragma unroll
    for (int h = 1; h < M; h *= 2) {
#pragma unroll
        for (int i = 0; i < M; i++) {
            if ((i & h) == 0) {
                const float a = x[i], b = x[i + h];
                x[i] = a + b;
                x[i + h] = a - b;
            }
        }
    }
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int h = 1; h < N / M; h *= 2) {
#pragma unroll
        for (int e = 0; e < M; e++) {
            const float o = __shfl_xor_sync(0xffffffffu, x[e], h);
            x[e] = (lane & h) ? o - x[e] : x[e] + o;
        }
    }
    const float scale = rsqrtf((float)N);
#pragma unroll
    for (int e = 0; e < M; e++) x[e] *= scale;
}

// The same transform of rows of shared memory: `x[0..n)` (n a power of two),
// by the block's threads (all of them call it); barriers before and after.
__device__ __forceinline__ void wht_shared(float* x, int n) {
    __syncthreads();
    for (int h = 1; h < n; h *= 2) {
        for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
            const int j = (i / h) * 2 * h + i % h;
            const float a = x[j], b = x[j + h];
            x[j] = a + b;
            x[j + h] = a - b;
        }
        __syncthreads();
    }
    const float scale = rsqrtf((float)n);
    for (int i = threadIdx.x; i < n; i += blockDim.x) x[i] *= scale;
    __syncthreads();
}

// One key's row for the prompt tiles, by the 4 lanes of a quad (`part` =
// lane % 4 takes values part·HD/4 ..): loaded (zeros unless `ok`),
// dequantized and rotated back where quantized, stored as T at `dst`.
template <typename F, typename T, int HD>
__device__ __forceinline__ void kv_tile_row(const typename F::Elem* p, bool ok, size_t blk, int kvh, int slot,
                                            int nkv, int bs, int part, T* dst) {
    constexpr int P = HD / 4;
    if constexpr (!F::quant) {
#pragma unroll
        for (int c = 0; c < P / 8; c++) {
            const int d = part * P + 8 * c;
            uint4 u = make_uint4(0, 0, 0, 0);
            if (ok) u = *reinterpret_cast<const uint4*>(p + ((blk * nkv + kvh) * bs + slot) * HD + d);
            *reinterpret_cast<uint4*>(dst + d) = u;
        }
    } else {
        float f[P];
#pragma unroll
        for (int c = 0; c < P / 8; c++) {
            if (ok) {
                F::template unpack<8>(F::template load<HD, 8>(p, blk, kvh, slot, nkv, bs, part * P + 8 * c), f + 8 * c);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++) f[8 * c + e] = 0.f;
            }
        }
        wht_lanes<P, HD>(f);
#pragma unroll
        for (int c = 0; c < P / 8; c++) {
            uint4 u;
            uint32_t* w = reinterpret_cast<uint32_t*>(&u);
#pragma unroll
            for (int k = 0; k < 4; k++) w[k] = pack2<T>(f[8 * c + 2 * k], f[8 * c + 2 * k + 1]);
            *reinterpret_cast<uint4*>(dst + part * P + 8 * c) = u;
        }
    }
}

// The side formats by element type, for kv_quant.cu's -DKV_KF/-DKV_VF.
template <typename T> using KvSideF16 = KvPlain<T>;
template <typename T> using KvSideQ8 = KvQ8;
template <typename T> using KvSideQ4 = KvQ4;
