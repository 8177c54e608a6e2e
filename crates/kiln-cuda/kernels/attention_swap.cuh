// Decode attention by KV group with the keys as the mma's rows
// (attention_group.cu, both KV sides quantized, up to 8 query heads per KV
// head, f16 activations). attention_group.cuh puts a group's query heads in
// the 16 rows of an m16n8k16 tile: the 8B's groups of 4 heads fill a
// quarter of it, Q's fragments are read from shared memory again for every
// 16 keys, and K and V are dequantized value by value into the B operand.
// Under Nsight Compute at 32k keys that kernel issued ~1900 instructions per
// warp and 16 keys, 27 of them mma, and ran at the same speed over q8_0,
// q4_0 and f16 caches: instruction-bound (docs/cuda.md).
//
// Here the products are transposed: Sᵀ = K·Qᵀ (16 keys × 8 heads) and
// Oᵀ += Vᵀ·Pᵀ (16 values × 8 heads per m-tile), so
// - Qᵀ (the B operand: 8 heads) stays in registers for the whole block;
// - the reduction index of each product can be permuted freely as long as
//   both operands agree: K's dimensions are taken in an order in which a
//   lane's fragment values are 8 consecutive bytes of one key row (one
//   32-value block: one scale), and the keys of Pᵀ are the rows of Sᵀ;
// - the output dimensions are a store-time choice: lane (g, c) holds
//   dimensions DPT·g .. DPT·g + DPT - 1 (DPT = HD / 8) of heads 2c and
//   2c + 1, so its V values of a key are DPT/2 or DPT consecutive bytes;
// - quants become f16 with byte permutes and one f16 subtraction (1024 +
//   x has x in the mantissa): K's ints exactly, its scale applied to each
//   32-value block's partial scores in f32; V's as d·x rounded to f16, the
//   bits group_chunk's RawV gives.
// P enters the product as hi + lo 16-bit parts as in group_chunk (its
// transposes by movmatrix), Q as the hi + lo parts group_load_q stores.
// attention_group.cu's attn_group8_* has each warp walk its own 16-key
// tiles (stage_raw_pair with ROWS = 16, attention_group.cuh), so its loop
// has no block barriers.
// H200, 8B shape, q8_0 cache, decode at 32k keys: 166.7 → 186.7 tok/s
// (0.79x of depth 128); Nsight Compute: 31.0M → 13.1M warp instructions
// per layer's kernel (BENCHMARKS.md, "Quantized KV cache on CUDA").
#pragma once
#include "attention_group.cuh"

// Heads per block the transposed products take (one n8 tile).
#define SWAP_HEADS 8

template <typename T> struct IsHalf {
    static constexpr bool value = false;
};
template <> struct IsHalf<__half> {
    static constexpr bool value = true;
};

__device__ __forceinline__ uint32_t h2u(__half2 h) { return *reinterpret_cast<uint32_t*>(&h); }
__device__ __forceinline__ __half2 u2h(uint32_t u) { return *reinterpret_cast<__half2*>(&u); }

// The transpose of an 8×8 matrix of 16-bit values held one pair per lane
// (row lane / 4, columns 2 (lane % 4), +1) in the same layout.
__device__ __forceinline__ uint32_t movmatrix_t(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}

// Two int8 (bytes 0 and 2 of t, as stored) as f16: 1024 + (x + 128) has
// x + 128 in the mantissa, exactly.
__device__ __forceinline__ __half2 q8_pair(uint32_t t) {
    return __hsub2(u2h((t & 0x00FF00FFu) ^ 0x64806480u), __half2half2(__ushort_as_half(0x6480)));  // 1152
}
// Two 4-bit quants (the low nibbles of bytes 0 and 2 of t) as f16, less 8.
__device__ __forceinline__ __half2 q4_pair_lo(uint32_t t) {
    return __hsub2(u2h((t & 0x000F000Fu) | 0x64006400u), __half2half2(__ushort_as_half(0x6408)));  // 1032
}
// The same of the high nibbles: 1024 + 16x, scaled by 1/16, less 72.
__device__ __forceinline__ __half2 q4_pair_hi(uint32_t t) {
    return __hfma2(u2h((t & 0x00F000F0u) | 0x64006400u), __half2half2(__ushort_as_half(0x2C00)),  // 1/16
                   __half2half2(__ushort_as_half(0xD480)));                                        // -72
}

// A warp's running state: Oᵀ of its 8 heads (o[mt]: rows DPT·g + 2mt and
// + 1, heads 2c and 2c + 1, as the mma's C), and the heads' maxima and
// this lane's part of their sums.
template <int HD> struct SwapAcc {
    float o[HD / 16][4];
    float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;
    __device__ __forceinline__ SwapAcc() {
#pragma unroll
        for (int m = 0; m < HD / 16; m++) o[m][0] = o[m][1] = o[m][2] = o[m][3] = 0.f;
    }
};

// Qᵀ as B fragments, hi and lo parts: k-step 2b + h takes dimensions
// 32b + 8c + 4h .. + 3 of head g (b0: the first two, b1: the next two).
template <int HD> struct SwapQ {
    uint32_t b[HD / 16][2][2];
};
template <int HD> __device__ __forceinline__ void swap_load_q(const unsigned char* qbuf, SwapQ<HD>& q) {
    constexpr int LD = GroupShape<__half, HD>::LD;
    const __half* qs = reinterpret_cast<const __half*>(qbuf);
    const int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        const int col = 32 * (ks / 2) + 8 * c + 4 * (ks % 2);
#pragma unroll
        for (int part = 0; part < 2; part++) {
            const __half* row = qs + (part * GRP_ROWS + g) * LD + col;
            q.b[ks][part][0] = ld32(row);
            q.b[ks][part][1] = ld32(row + 2);
        }
    }
}

// K of a raw tile (GroupRawTile) as A fragments: `frag(b, wk, a)` gives
// k-steps 2b and 2b + 1 (a[h]) of keys wk + g (regs 0, 2) and wk + g + 8
// (1, 3): the ints of 32-value block b, unscaled; `scales(r)` the f16
// scales of key row r.
template <typename F, int HD, int ROWS = GRP_KEYS> struct SwapRawK {
    using R = GroupRawTile<F, HD>;
    const uint8_t* t;
    __device__ __forceinline__ void frag(int b, int wk, uint32_t (&a)[2][4]) const {
        const int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
#pragma unroll
        for (int sel = 0; sel < 2; sel++) {
            const uint8_t* row = t + (wk + g + 8 * sel) * R::QP;
            if constexpr (F::q4) {
                // Byte i holds values 2i (low nibble) and 2i + 1.
                const uint32_t w = ld32(row + 16 * b + 4 * c);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint32_t lo = __byte_perm(w, 0u, 0x4040 + 0x0101 * (2 * h));
                    const uint32_t hi = __byte_perm(w, 0u, 0x4040 + 0x0101 * (2 * h + 1));
                    const __half2 one_16 = __halves2half2(__ushort_as_half(0x3C00), __ushort_as_half(0x2C00));
                    const __half2 off = __halves2half2(__ushort_as_half(0xE408), __ushort_as_half(0xD480));  // -1032, -72
                    a[h][sel] = h2u(__hfma2(u2h((lo & 0x00F0000Fu) | 0x64006400u), one_16, off));
                    a[h][2 + sel] = h2u(__hfma2(u2h((hi & 0x00F0000Fu) | 0x64006400u), one_16, off));
                }
            } else {
                const uint2 w = *reinterpret_cast<const uint2*>(row + 32 * b + 8 * c);
                const uint32_t x[2] = {w.x ^ 0x80808080u, w.y ^ 0x80808080u};
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    a[h][sel] = h2u(__hsub2(u2h(__byte_perm(x[h], 0x64646464u, 0x4140)),
                                            __half2half2(__ushort_as_half(0x6480))));
                    a[h][2 + sel] = h2u(__hsub2(u2h(__byte_perm(x[h], 0x64646464u, 0x4342)),
                                                __half2half2(__ushort_as_half(0x6480))));
                }
            }
        }
    }
    __device__ __forceinline__ const __half* scales(int r) const {
        return reinterpret_cast<const __half*>(t + ROWS * R::QP + r * R::B::SB);
    }
};

// V of a raw tile as A fragments of Vᵀ: this lane's values of keys
// wk + 2c, +1, +8, +9 (`load`), then per m-tile (`frag`) rows DPT·g + 2mt
// (regs 0, 2) and + 1 (1, 3), keys 2c, 2c + 1 (0, 1) and 2c + 8, + 9 (2, 3),
// scaled.
template <typename F, int HD, int ROWS = GRP_KEYS> struct SwapRawV {
    using R = GroupRawTile<F, HD>;
    static constexpr int DPT = HD / 8;                       // values per lane and key
    static constexpr int WORDS = (F::q4 ? DPT / 2 : DPT) / 4;  // their bytes, in words
    uint32_t w[4][WORDS];
    __half2 d01, d89;
    __device__ __forceinline__ void load(const uint8_t* t, int wk) {
        const int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
        constexpr int BYTES = WORDS * 4;
        __half d[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int r = wk + 2 * c + (k & 1) + 8 * (k >> 1);
            const uint8_t* src = t + r * R::QP + BYTES * g;
            if constexpr (WORDS == 4) {
                const uint4 u = *reinterpret_cast<const uint4*>(src);
                w[k][0] = u.x, w[k][1] = u.y, w[k][2] = u.z, w[k][3] = u.w;
            } else if constexpr (WORDS == 2) {
                const uint2 u = *reinterpret_cast<const uint2*>(src);
                w[k][0] = u.x, w[k][1] = u.y;
            } else {
                w[k][0] = ld32(src);
            }
            d[k] = reinterpret_cast<const __half*>(t + ROWS * R::QP + r * R::B::SB)[DPT * g / 32];
        }
        d01 = __halves2half2(d[0], d[1]);
        d89 = __halves2half2(d[2], d[3]);
    }
    __device__ __forceinline__ void frag(int mt, uint32_t (&a)[4]) const {
#pragma unroll
        for (int k2 = 0; k2 < 2; k2++) {
            const __half2 d = k2 ? d89 : d01;
            if constexpr (F::q4) {
                // Value DPT·g + 2mt is byte mt's low nibble, + 1 its high one.
                const int word = mt / 4, p = mt % 4;
                const uint32_t t = __byte_perm(w[2 * k2][word], w[2 * k2 + 1][word], p | (4 + p) << 8);
                a[2 * k2] = h2u(__hmul2(q4_pair_lo(t), d));
                a[2 * k2 + 1] = h2u(__hmul2(q4_pair_hi(t), d));
            } else {
                const int word = mt / 2, p = 2 * (mt % 2);
                const uint32_t x = w[2 * k2][word], y = w[2 * k2 + 1][word];
                a[2 * k2] = h2u(__hmul2(q8_pair(__byte_perm(x, y, p | (4 + p) << 8)), d));
                a[2 * k2 + 1] = h2u(__hmul2(q8_pair(__byte_perm(x, y, (p + 1) | (5 + p) << 8)), d));
            }
        }
    }
};

// One warp's 16 keys of a raw tile `t` (K at t, V at t + KRAW), smem rows
// wk.., key indices j0.., those from k1 on masked; the caller checks j0 <
// k1, warp-uniformly.
template <typename KF, typename VF, int HD, int ROWS = GRP_KEYS>
__device__ __forceinline__ void swap_chunk(const uint8_t* t, int kraw, const SwapQ<HD>& q, int wk, int j0, int k1,
                                           SwapAcc<HD>& a) {
    const int g = (threadIdx.x & 31) >> 2;
    const SwapRawK<KF, HD, ROWS> ks{t};
    float s[4] = {0.f, 0.f, 0.f, 0.f};
    const __half* dg = ks.scales(wk + g);
    const __half* dg8 = ks.scales(wk + g + 8);
#pragma unroll
    for (int b = 0; b < HD / 32; b++) {
        uint32_t af[2][4];
        ks.frag(b, wk, af);
        float cb[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int h = 0; h < 2; h++)
#pragma unroll
            for (int part = 0; part < 2; part++) mma16816<__half>(cb, af[h], q.b[2 * b + h][part][0], q.b[2 * b + h][part][1]);
        const float x = __half2float(dg[b]), y = __half2float(dg8[b]);
        s[0] = fmaf(x, cb[0], s[0]);
        s[1] = fmaf(x, cb[1], s[1]);
        s[2] = fmaf(y, cb[2], s[2]);
        s[3] = fmaf(y, cb[3], s[3]);
    }
    if (j0 + g >= k1) s[0] = s[1] = -INFINITY;
    if (j0 + g + 8 >= k1) s[2] = s[3] = -INFINITY;
    // Maxima of heads 2c and 2c + 1 over the 16 keys (the 8 lanes of a c).
    float m0 = fmaxf(s[0], s[2]), m1 = fmaxf(s[1], s[3]);
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, off));
        m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, off));
    }
    const float na = fmaxf(a.ma, m0), nb = fmaxf(a.mb, m1);  // finite: key j0 is below k1
    const float ca = __expf(a.ma - na), cb = __expf(a.mb - nb);
    a.ma = na;
    a.mb = nb;
    a.la *= ca;
    a.lb *= cb;
#pragma unroll
    for (int m = 0; m < HD / 16; m++) {
        a.o[m][0] *= ca;
        a.o[m][1] *= cb;
        a.o[m][2] *= ca;
        a.o[m][3] *= cb;
    }
    s[0] = __expf(s[0] - na);
    s[1] = __expf(s[1] - nb);
    s[2] = __expf(s[2] - na);
    s[3] = __expf(s[3] - nb);
    a.la += s[0] + s[2];
    a.lb += s[1] + s[3];
    // Pᵀ's B fragments (keys 2c, 2c + 1 | + 8, + 9 of head g) are the
    // transposes of Sᵀ's 8×8 halves.
    uint32_t h0, l0, h1, l1;
    split2<__half>(s[0], s[1], h0, l0);
    split2<__half>(s[2], s[3], h1, l1);
    const uint32_t ph0 = movmatrix_t(h0), ph1 = movmatrix_t(h1), pl0 = movmatrix_t(l0), pl1 = movmatrix_t(l1);
    SwapRawV<VF, HD, ROWS> vs;
    vs.load(t + kraw, wk);
#pragma unroll
    for (int m = 0; m < HD / 16; m++) {
        uint32_t av[4];
        vs.frag(m, av);
        mma16816<__half>(a.o[m], av, ph0, ph1);
        mma16816<__half>(a.o[m], av, pl0, pl1);
    }
}

// Over a rotated V: a warp's Oᵀ rotated back (the orthonormal
// Walsh-Hadamard transform, its own inverse) over dimension d = DPT·g + j:
// the bits of j in registers, those of g across lanes 4 apart.
template <int HD> __device__ __forceinline__ void swap_acc_rotate(SwapAcc<HD>& a) {
    constexpr int DPT = HD / 8;
    // x(j, head): j = 2m + e sits in o[m][2e + head].
#pragma unroll
    for (int bit = 1; bit < DPT; bit *= 2) {
#pragma unroll
        for (int j = 0; j < DPT; j++) {
            if ((j & bit) == 0) {
#pragma unroll
                for (int hd = 0; hd < 2; hd++) {
                    float& x0 = a.o[j / 2][2 * (j % 2) + hd];
                    float& x1 = a.o[(j + bit) / 2][2 * ((j + bit) % 2) + hd];
                    const float u = x0, v = x1;
                    x0 = u + v;
                    x1 = u - v;
                }
            }
        }
    }
    acc_lane_butterflies<HD / 16, 8, 4>(a.o, (threadIdx.x & 31) >> 2);
    acc_scale<HD / 16>(a.o, rsqrtf((float)HD));
}

// A warp's state into the block's merge area in group_write_warps' layout
// (heads 0..7; group_combine reads only heads below nq ≤ 8). Starts with a
// barrier.
template <int HD>
__device__ __forceinline__ void swap_write_warps(SwapAcc<HD>& a, unsigned char* merge, float (*sm_m)[GRP_ROWS],
                                                 float (*sm_l)[GRP_ROWS]) {
    constexpr int DPT = HD / 8;
    const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        a.la += __shfl_xor_sync(0xffffffffu, a.la, off);
        a.lb += __shfl_xor_sync(0xffffffffu, a.lb, off);
    }
    __syncthreads();  // every warp is done with the tiles `merge` overlaps
    float* so = reinterpret_cast<float*>(merge) + (size_t)warp * GRP_ROWS * HD;
#pragma unroll
    for (int m = 0; m < HD / 16; m++) {
        const int d = DPT * g + 2 * m;
        so[2 * c * HD + d] = a.o[m][0];
        so[(2 * c + 1) * HD + d] = a.o[m][1];
        so[2 * c * HD + d + 1] = a.o[m][2];
        so[(2 * c + 1) * HD + d + 1] = a.o[m][3];
    }
    if (g == 0) {
        sm_m[warp][2 * c] = a.ma;
        sm_m[warp][2 * c + 1] = a.mb;
        sm_l[warp][2 * c] = a.la;
        sm_l[warp][2 * c + 1] = a.lb;
    }
}
