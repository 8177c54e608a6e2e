// GGUF K-quant and 32-block weights used in place: decode products read the quantized
// blocks (under a third of the bytes of f16 for Q4_K), prompt chunks
// dequantize a matrix to 16 bits for cuBLAS, the embedding dequantizes its
// rows.
//
// Formats (superblocks of 256 values):
// - Q4K: the GGUF block as it is (144 bytes: d, dmin, 12 bytes of packed
//   6-bit scales and mins, 128 bytes of nibbles); w = d·sc·q − dmin·m.
// - Q6K: GGUF's 210-byte block is not 16-byte aligned, so the host repacks
//   a matrix of S superblocks into planes: ql [S][128], qh [S][64],
//   scales [S][16] (int8), d [S] (f16); w = d·sc·(q − 32).
// - Q5K: the GGUF block as it is (176 bytes: d, dmin and the 12 scale bytes
//   as Q4K's, 32 bytes of fifth bits, 128 bytes of nibbles);
//   w = d·sc·q − dmin·m with q in 0..31.
// - Q3K: GGUF's 110-byte block split into planes: qs [S][64] (2-bit),
//   hmask [S][32] (third bits), scales [S][12] (16 packed 6-bit, biased by
//   32), d [S] (f16); w = d·(sc − 32)·(q − 4) with q = low | hbit << 2.
// - Q2K: GGUF's 84-byte block split into planes: qs [S][64], scales [S][16]
//   (low nibble scale, high nibble min), d and dmin [S][2] (f16);
//   w = d·sc·q − dmin·m with q in 0..3.
// - Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (32-value blocks, taken 8 to a superblock
//   of 256): the host splits a matrix of S superblocks into planes: the
//   quants [S][8 · 32 or 8 · 16 bytes], for Q5_x the fifth bits [S][8 · 4
//   bytes], then d [8 S] (f16), then for Q4_1 and Q5_1 m [8 S] (f16).
//   Q8_0: w = d·q (q signed); Q4_0: w = d·q − 8d; Q4_1: w = d·q + m;
//   Q5_0: w = d·q − 16d; Q5_1: w = d·q + m.
// - MXFP4 (gpt-oss's experts): planes of codes [S][8 · 16 bytes] and scale
//   bytes [8 S]; w = 2^(e−128)·q with q the signed quant −12..12 of a code
//   (quant_formats.cuh).
// The 32-value formats also take rows that end inside a superblock (gpt-oss's
// 2880): the host pads each row with zero blocks to whole superblocks
// (S counts the padded ones) and the kernels skip the padding's parts,
// whose inputs lie past the row.
// Either way a weight is s·q − c for a small integer q and constants s, c
// per run of 16 weights.
//
// Decode products use integer dot products: the input rows are first
// quantized in blocks of 32 to two int8 digits (`quant_act*`: x ≈ dx·(xh +
// xl/254), about 15 bits, so the products match f32 arithmetic to ~1e-5 of
// the block's largest input; one digit alone left logits ~3% off on random
// models), plus the sum of every 16 dequantized inputs, sx. A run of 16
// weights then contributes
//     Σ w·x = s·dx·(Σ q·xh + Σ q·xl / 254) − c·sx
// with each Σ four __dp4a instructions. Per weight that is well under one
// instruction, so the products can stay bound by memory (a float version
// that decoded each weight and multiplied it in f32 was issue-bound at a
// third of the bandwidth on the 8B Q4_K_M). A warp computes several output
// features so that the input loads are shared.
//
// Work split: 8 lanes per superblock; part p (0..7) of a superblock is 32
// weights in two runs of 16 (`lo` at LO(p), the other 16, 32 or 64
// further on), each run inside one scale group and one 32-input block.
#include "gemv_out.cuh"
#include "lora.cuh"
#include "quant_formats.cuh"

// Input rows for the products, quantized: grid (n, cols / 256), 256
// threads; each warp takes one block of 32 inputs of row t. The normed form
// reads row xrows[t] (or t) of the f32 residual x and applies RMSNorm · g
// first (every block sums the squares of its whole row: a few KiB from L2);
// the plain form reads a 16-bit row.
template <bool NORM>
__device__ void quant_act(const void* xin, const float* g, const uint32_t* xrows, int cols, float eps, int8_t* xq,
                          int8_t* xl, float* dx, float* sx) {
    __shared__ float sm[32];
    const int t = blockIdx.x;
    const size_t r = xrows ? xrows[t] : t;
    float inv = 1.f;
    if constexpr (NORM) {
        // Whole rows of 256-multiples: 16-byte loads, several in flight.
        const float4* x = reinterpret_cast<const float4*>(reinterpret_cast<const float*>(xin) + r * cols);
        float ss = 0.f;
#pragma unroll 4
        for (int i = threadIdx.x; i < cols / 4; i += blockDim.x) {
            const float4 v = x[i];
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
        inv = rsqrtf(block_sum(ss, sm) / cols + eps);
    }
    const int lane = threadIdx.x & 31;
    const int b = blockIdx.y * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (b >= cols / 32) return;
    const int c = 32 * b + lane;
    float v;
    if constexpr (NORM) {
        v = reinterpret_cast<const float*>(xin)[r * cols + c] * inv * g[c];
    } else {
        v = __half2float(reinterpret_cast<const __half*>(xin)[r * cols + c]);
    }
    float amax = fabsf(v);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = amax / 127.f;
    const float u = d > 0.f ? v / d : 0.f;
    const int q = __float2int_rn(u);
    const int ql = __float2int_rn((u - (float)q) * 254.f);
    xq[(size_t)t * cols + c] = (int8_t)q;
    xl[(size_t)t * cols + c] = (int8_t)ql;
    float part = d * ((float)q + (float)ql * (1.f / 254.f));
#pragma unroll
    for (int o = 8; o > 0; o >>= 1) part += __shfl_xor_sync(0xffffffffu, part, o);
    if (lane == 0) dx[(size_t)t * (cols / 32) + b] = d;
    if ((lane & 15) == 0) sx[(size_t)t * (cols / 16) + 2 * b + (lane >> 4)] = part;
}

// With `lo.desc` (a decode step whose product has LoRA adapters) the grid
// has lo.parts · lo.tr blocks more per row (blockIdx.y from lo.first = cols
// / 256 on): each runs the shrink of one rank of one part (lora.cuh) on the
// same input, the normed one in the normed form, in parallel with the
// quantizer's blocks. The product's shrink then needs no launch of its own.
// The shrink blocks do their own PDL wait, after loading their factors.
__device__ __forceinline__ bool quant_act_shrink(const void* xin, const float* g, int cols, float eps,
                                                 const LoraShrink& lo, bool norm) {
    if (lo.desc == nullptr || (int)blockIdx.y < lo.first) return false;
    // One row per blockIdx.x: the shrink's row index is blockIdx.x.
    const int k = blockIdx.x * lo.parts * lo.tr + (blockIdx.y - lo.first);
    const float* xf = norm ? reinterpret_cast<const float*>(xin) : nullptr;
    const __half* xh = norm ? nullptr : reinterpret_cast<const __half*>(xin);
    return lora_shrink_extra<__half>(lo, xh, xf, g, eps, cols, k + lo.first);
}

extern "C" __global__ void quant_act_norm(const float* x, const float* g, const uint32_t* xrows, int cols, float eps,
                                          int8_t* xq, int8_t* xl, float* dx, float* sx, LoraShrink lo) {
    if (quant_act_shrink(x, g, cols, eps, lo, true)) return;
    pdl_begin();
    quant_act<true>(x, g, xrows, cols, eps, xq, xl, dx, sx);
}
extern "C" __global__ void quant_act_f16(const __half* a, int cols, int8_t* xq, int8_t* xl, float* dx, float* sx,
                                         LoraShrink lo) {
    if (quant_act_shrink(a, nullptr, cols, 0.f, lo, false)) return;
    pdl_begin();
    quant_act<false>(a, nullptr, nullptr, cols, 0.f, xq, xl, dx, sx);
}

// A run of 16 weights' quants `q` (four words of 4) dotted with both
// digits of the inputs, as 254·Σq·xh + Σq·xl: |Σq·xh| ≤ 16·127·127 (Q8_0;
// 16·63·127 for the others), so the sum fits an int: one conversion.
__device__ __forceinline__ float run_dot(const int* q, int4 xh, int4 xs) {
    int hi = __dp4a(q[0], xh.x, 0), lo = __dp4a(q[0], xs.x, 0);
    hi = __dp4a(q[1], xh.y, hi), lo = __dp4a(q[1], xs.y, lo);
    hi = __dp4a(q[2], xh.z, hi), lo = __dp4a(q[2], xs.z, lo);
    hi = __dp4a(q[3], xh.w, hi), lo = __dp4a(q[3], xs.w, lo);
    return (float)(254 * hi + lo);
}

// The decode products of gemv.cu with a K-quant W (`cols` a multiple of
// 256) over quantized inputs: a warp computes F output features (4; 2 for
// SwiGLU, whose features read two rows each), 4 superblocks per step.
template <int FMT, int NT, int OUT, int F>
__device__ void gemvq(const uint8_t* w, size_t S, const int8_t* xq, const int8_t* xl, const float* dx,
                      const float* sx, const float* bias, void* yout, int rows, int cols, int ystride) {
    constexpr bool GLU = OUT == OUT_SWIGLU || OUT == OUT_SWIGLU_OAI;
    constexpr int NM = GLU ? 2 * F : F;  // weight rows read
    const int lane = threadIdx.x & 31, p = lane & 7;
    const int r0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * F;
    if (r0 >= rows) return;
    const int nsb = (cols + 255) >> 8;
    size_t wrow[NM];
#pragma unroll
    for (int m = 0; m < NM; m++) {
        const int f = min(r0 + m % F, rows - 1);  // a missing last feature repeats one (not stored)
        wrow[m] = (size_t)(m < F ? f : rows + f) * nsb;
    }
    float acc[NM][NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int m = 0; m < NM; m++) acc[m][t] = 0.f;
    // One superblock of this lane's part (sb < nsb).
    auto step = [&](int sb) {
        Part<FMT> part[NM];
#pragma unroll
        for (int m = 0; m < NM; m++) part[m].load(w, S, wrow[m] + sb, p);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int c = sb * 256 + Part<FMT>::lo(p) + k * Part<FMT>::HI;
            int q[NM][4];
#pragma unroll
            for (int m = 0; m < NM; m++) part[m].ints(k, q[m]);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                const int4 xh = *reinterpret_cast<const int4*>(xq + (size_t)t * cols + c);
                const int4 xs = *reinterpret_cast<const int4*>(xl + (size_t)t * cols + c);
                const float d = dx[(size_t)t * (cols >> 5) + (c >> 5)];
                const float su = sx[(size_t)t * (cols >> 4) + (c >> 4)];
#pragma unroll
                for (int m = 0; m < NM; m++) {
                    const float dot = run_dot(q[m], xh, xs);
                    acc[m][t] += part[m].s[k] * (d * (1.f / 254.f)) * dot - part[m].c[k] * su;
                }
            }
        }
    };
    // A row that ends inside a superblock skips its padding blocks; the
    // loop of an aligned row carries no check. (Its last superblock after
    // the loop instead made the lanes that hold it a step longer than the
    // others: gpt-oss-20b's shape decoded 400 tok/s against 436, H200.)
    if (Part<FMT>::RAGGED && (cols & 255)) {
#pragma unroll 2
        for (int sb = lane >> 3; sb < nsb; sb += 4)
            if (sb * 256 + Part<FMT>::lo(p) < cols) step(sb);
    } else {
#pragma unroll 2
        for (int sb = lane >> 3; sb < nsb; sb += 4) step(sb);
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
#pragma unroll
        for (int f = 0; f < F; f++) {
            float v[2];
            v[0] = warp_sum(acc[f][t]);
            v[1] = GLU ? warp_sum(acc[NM - F + f][t]) : 0.f;
            if (lane == 0 && r0 + f < rows) {
                // The gated units' biases: gate's at r, up's at rows + r.
                if (GLU && bias) v[0] += bias[r0 + f], v[1] += bias[rows + r0 + f];
                gemv_store<__half, OUT, 2>(v, GLU ? nullptr : bias, yout, t, r0 + f, ystride);
            }
        }
    }
}

// Two output features per warp (QUANT_FEATURES_PER_WARP in gpu.rs): one
// per warp was 2% slower on the 8B (299.5 vs 305.6 tok/s, docs/cuda.md).
#define GEMVQ_ENTRY(KIND, OUT, FN, FMT, NT) GEMVQ_ENTRY_F(KIND, OUT, FN, FMT, NT, 2)
#define GEMVQ_ENTRY_F(KIND, OUT, FN, FMT, NT, F)                                                                 \
    extern "C" __global__ void gemvq_##KIND##_##F##x##NT##_##FN(const uint8_t* w, unsigned long long S,              \
                                                         const int8_t* xq, const int8_t* xl, const float* dx,    \
                                                         const float* sx, const float* bias, void* y, int rows,  \
                                                         int cols, int ystride) {                                \
        pdl_begin();                                                                                             \
        gemvq<FMT, NT, OUT, F>(w, S, xq, xl, dx, sx, bias, y, rows, cols, ystride);                              \
    }
#define GEMVQ_ROWS(KIND, OUT, FN, FMT)                                                                           \
    GEMVQ_ENTRY(KIND, OUT, FN, FMT, 1)                                                                           \
    GEMVQ_ENTRY(KIND, OUT, FN, FMT, 2)                                                                           \
    GEMVQ_ENTRY(KIND, OUT, FN, FMT, 3)                                                                           \
    GEMVQ_ENTRY(KIND, OUT, FN, FMT, 4)                                                                           \
    GEMVQ_ENTRY(KIND, OUT, FN, FMT, 5)                                                                           \
    GEMVQ_ENTRY(KIND, OUT, FN, FMT, 6)                                                                           \
    GEMVQ_ENTRY(KIND, OUT, FN, FMT, 7)                                                                           \
    GEMVQ_ENTRY(KIND, OUT, FN, FMT, 8)
#define GEMVQ_ALL(FN, FMT)                                                                                       \
    GEMVQ_ROWS(store, OUT_STORE, FN, FMT)                                                                        \
    GEMVQ_ROWS(swiglu, OUT_SWIGLU, FN, FMT)                                                                      \
    GEMVQ_ROWS(add, OUT_ADD, FN, FMT)
// f16 activations only: quantized GGUFs run in f16 (a bf16 checkpoint has
// no quantized matrices to keep).
GEMVQ_ALL(q4k, FMT_Q4K)
GEMVQ_ALL(q6k, FMT_Q6K)
GEMVQ_ALL(q8_0, FMT_Q8_0)
GEMVQ_ALL(q4_0, FMT_Q4_0)
GEMVQ_ALL(q4_1, FMT_Q4_1)
GEMVQ_ALL(q5k, FMT_Q5K)
GEMVQ_ALL(q5_0, FMT_Q5_0)
GEMVQ_ALL(q5_1, FMT_Q5_1)
GEMVQ_ALL(q3k, FMT_Q3K)
GEMVQ_ALL(q2k, FMT_Q2K)
GEMVQ_ALL(mxfp4, FMT_MXFP4)

// Expert-batched decode products (a mixture of experts' picks, all in one
// launch): grid.y is the pick; pick j reads the matrix of expert ids[j]
// (its base address wptrs[ids[j]]; every expert has the same shape, S
// superblocks) against quantized input row j / xdiv (xdiv = top_k: the
// token's row) into output row j: the gated unit of [gate; up] in 16 bits
// (SwiGLU, or gpt-oss's clamped form), with expert e's biases at bias +
// e · 2 rows when bias is set. (The down products and their weighted sum
// are gemvq_moe_down's.)
template <int FMT, int OUT>
__device__ void gemvq_ids(const unsigned long long* wptrs, const uint32_t* ids, const float* bias, int xdiv, size_t S,
                          const int8_t* xq, const int8_t* xl, const float* dx, const float* sx, void* y, int rows,
                          int cols, int ystride) {
    const int j = blockIdx.y;
    const size_t t = (size_t)(j / xdiv);
    const uint32_t ex = ids[j];
    const uint8_t* w = reinterpret_cast<const uint8_t*>(wptrs[ex]);
    const float* b = bias ? bias + (size_t)ex * 2 * rows : nullptr;
    char* yo = reinterpret_cast<char*>(y) + (size_t)j * ystride * 2;
    gemvq<FMT, 1, OUT, 2>(w, S, xq + t * cols, xl + t * cols, dx + t * (cols >> 5), sx + t * (cols >> 4), b, yo, rows,
                          cols, ystride);
}
#define GEMVQ_IDS(KIND, OUT, FN, FMT)                                                                            \
    extern "C" __global__ void gemvq_ids_##KIND##_##FN(const unsigned long long* wptrs, const uint32_t* ids,     \
                                                       const float* bias, int xdiv, unsigned long long S,        \
                                                       const int8_t* xq, const int8_t* xl, const float* dx,      \
                                                       const float* sx, void* y, int rows, int cols,             \
                                                       int ystride) {                                            \
        pdl_begin();                                                                                             \
        gemvq_ids<FMT, OUT>(wptrs, ids, bias, xdiv, S, xq, xl, dx, sx, y, rows, cols, ystride);                  \
    }
#define GEMVQ_IDS_ALL(FN, FMT)                                                                                   \
    GEMVQ_IDS(swiglu, OUT_SWIGLU, FN, FMT)                                                                       \
    GEMVQ_IDS(swiglu_oai, OUT_SWIGLU_OAI, FN, FMT)
GEMVQ_IDS_ALL(q4k, FMT_Q4K)
GEMVQ_IDS_ALL(q6k, FMT_Q6K)
GEMVQ_IDS_ALL(q8_0, FMT_Q8_0)
GEMVQ_IDS_ALL(q4_0, FMT_Q4_0)
GEMVQ_IDS_ALL(q4_1, FMT_Q4_1)
GEMVQ_IDS_ALL(q5k, FMT_Q5K)
GEMVQ_IDS_ALL(q5_0, FMT_Q5_0)
GEMVQ_IDS_ALL(q5_1, FMT_Q5_1)
GEMVQ_IDS_ALL(q3k, FMT_Q3K)
GEMVQ_IDS_ALL(q2k, FMT_Q2K)
GEMVQ_IDS_ALL(mxfp4, FMT_MXFP4)

// A decode step's expert down products and their weighted sum into the
// residual in one launch (the moe_combine of the picks folded in): grid
// (rows / 2, n), GEMV_WARPS warps per block. A block computes 2 output
// features of token t over every one of its k picks: its 16 groups of 8
// lanes take the (pick, superblock) pairs in turn, so that an expert as
// narrow as 3 superblocks (768 columns) still fills every lane, and the
// block's warps add their sums in shared memory. Pick j reads the matrix
// of expert ids[t·k + j] (base address wptrs[...], S superblocks) against
// its own quantized row t·k + j and is weighed by wts[t·k + j]; x[t] is
// the f32 residual (`rows` wide). With `bias`, expert e's output biases at
// bias + e · rows are added likewise, weighed.
template <int FMT>
__device__ void gemvq_moe_down(const unsigned long long* wptrs, const uint32_t* ids, const float* wts,
                               const float* bias, int k, size_t S, const int8_t* xq, const int8_t* xl,
                               const float* dx, const float* sx, float* x, int rows, int cols) {
    constexpr int F = 2;
    __shared__ float part_sum[8][F];
    const int lane = threadIdx.x & 31, p = lane & 7, warp = threadIdx.x >> 5;
    const int groups = (int)(blockDim.x >> 3), g0 = (int)(threadIdx.x >> 3);
    const int t = blockIdx.y, r0 = blockIdx.x * F;
    const int nsb = (cols + 255) >> 8, pairs = k * nsb;
    const bool tail = Part<FMT>::RAGGED && (cols & 255);  // rows end inside a superblock
    float acc[F] = {0.f, 0.f};
#pragma unroll 2
    for (int pr = g0; pr < pairs; pr += groups) {
        const int j = pr / nsb, sb = pr - j * nsb;
        if (tail && sb * 256 + Part<FMT>::lo(p) >= cols) continue;  // a padding block
        const size_t pick = (size_t)t * k + j;
        const uint8_t* w = reinterpret_cast<const uint8_t*>(wptrs[ids[pick]]);
        const float wj = wts[pick];
        Part<FMT> part[F];
#pragma unroll
        for (int m = 0; m < F; m++) part[m].load(w, S, (size_t)min(r0 + m, rows - 1) * nsb + sb, p);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int c = sb * 256 + Part<FMT>::lo(p) + h * Part<FMT>::HI;
            const int4 xh = *reinterpret_cast<const int4*>(xq + pick * cols + c);
            const int4 xs = *reinterpret_cast<const int4*>(xl + pick * cols + c);
            const float d = dx[pick * (cols >> 5) + (c >> 5)] * (1.f / 254.f);
            const float su = sx[pick * (cols >> 4) + (c >> 4)];
#pragma unroll
            for (int m = 0; m < F; m++) {
                int q[4];
                part[m].ints(h, q);
                acc[m] += wj * (part[m].s[h] * d * run_dot(q, xh, xs) - part[m].c[h] * su);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < F; m++) {
        const float v = warp_sum(acc[m]);
        if (lane == 0) part_sum[warp][m] = v;
    }
    __syncthreads();
    if (threadIdx.x < F && r0 + (int)threadIdx.x < rows) {
        const int r = r0 + (int)threadIdx.x;
        float v = 0.f;
        for (int w = 0; w < (int)(blockDim.x >> 5); w++) v += part_sum[w][threadIdx.x];
        if (bias)
            for (int j = 0; j < k; j++) v += wts[(size_t)t * k + j] * bias[(size_t)ids[(size_t)t * k + j] * rows + r];
        x[(size_t)t * rows + r] += v;
    }
}
#define GEMVQ_MOE_DOWN(FN, FMT)                                                                                  \
    extern "C" __global__ void gemvq_moe_down_##FN(const unsigned long long* wptrs, const uint32_t* ids,        \
                                                   const float* wts, const float* bias, int k,                   \
                                                   unsigned long long S, const int8_t* xq, const int8_t* xl,     \
                                                   const float* dx, const float* sx, float* x, int rows,         \
                                                   int cols) {                                                   \
        pdl_begin();                                                                                             \
        gemvq_moe_down<FMT>(wptrs, ids, wts, bias, k, S, xq, xl, dx, sx, x, rows, cols);                         \
    }
GEMVQ_MOE_DOWN(q4k, FMT_Q4K)
GEMVQ_MOE_DOWN(q6k, FMT_Q6K)
GEMVQ_MOE_DOWN(q8_0, FMT_Q8_0)
GEMVQ_MOE_DOWN(q4_0, FMT_Q4_0)
GEMVQ_MOE_DOWN(q4_1, FMT_Q4_1)
GEMVQ_MOE_DOWN(q5k, FMT_Q5K)
GEMVQ_MOE_DOWN(q5_0, FMT_Q5_0)
GEMVQ_MOE_DOWN(q5_1, FMT_Q5_1)
GEMVQ_MOE_DOWN(q3k, FMT_Q3K)
GEMVQ_MOE_DOWN(q2k, FMT_Q2K)
GEMVQ_MOE_DOWN(mxfp4, FMT_MXFP4)

// The 16 weights of run k as floats.
template <int FMT> __device__ __forceinline__ void run_values(const Part<FMT>& part, int k, float* f) {
    int q[4];
    part.ints(k, q);
#pragma unroll
    for (int e = 0; e < 16; e++) {
        const int b = (q[e >> 2] >> (8 * (e & 3))) & 0xFF;
        f[e] = part.s[k] * (float)(Part<FMT>::SIGNED ? (int)(int8_t)b : b) - part.c[k];
    }
}

// Superblocks [s0, s0 + n) of a matrix of S (rows of `cols` values, in
// whole superblocks; s0 starts a row) to 16-bit values, row-major `cols`
// apart, the padding of a ragged row left out. A block of 256 threads
// dequantizes 32 superblocks (one part per thread) into shared memory,
// then writes them out 16 bytes per thread in order: each warp stores 512
// contiguous bytes per instruction. (Storing each part's runs straight
// from its thread leaves every 32-byte sector half written per
// instruction: 1.9x slower, scripts/gpu/kernels/dq_overlap.cu.)
template <int FMT, typename T>
__device__ void dequant(const uint8_t* w, size_t S, size_t s0, size_t n, int cols, T* out) {
    __shared__ uint4 tile[32 * 32];  // 32 superblocks of 256 16-bit values
    const size_t sb0 = (size_t)blockIdx.x * 32;
    const size_t nsb = (size_t)(cols + 255) >> 8;
    {
        const int ls = threadIdx.x >> 3, p = threadIdx.x & 7;
        const size_t sb = sb0 + ls;
        const int c0 = (int)(sb % nsb) * 256;
        if (sb < n && !(Part<FMT>::RAGGED && c0 + Part<FMT>::lo(p) >= cols)) {
            Part<FMT> part;
            part.load(w, S, s0 + sb, p);
#pragma unroll
            for (int k = 0; k < 2; k++) {
                float f[16];
                run_values(part, k, f);
                T v[16];
#pragma unroll
                for (int e = 0; e < 16; e++) v[e] = from_f<T>(f[e]);
                uint4* o = tile + ls * 32 + (Part<FMT>::lo(p) + k * Part<FMT>::HI) / 8;
                o[0] = *reinterpret_cast<const uint4*>(v);
                o[1] = *reinterpret_cast<const uint4*>(v + 8);
            }
        }
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const int c = j * 256 + threadIdx.x, ls = c >> 5, off = (c & 31) * 8;
        const size_t sb = sb0 + ls;
        const size_t row = sb / nsb;
        const int col = (int)(sb % nsb) * 256 + off;
        if (sb < n && col < cols) *reinterpret_cast<uint4*>(out + row * cols + col) = tile[c];
    }
}

// x[t] = row tokens[t] of a quantized table of `d` columns (S superblocks).
// Grid: one block per token, d / 32 threads.
template <int FMT>
__device__ void embedq(const uint8_t* table, size_t S, const uint32_t* tokens, float* x, int d) {
    const int p = threadIdx.x & 7;
    const int nsb = (d + 255) >> 8;
    const int sbi = threadIdx.x >> 3;
    if (sbi >= nsb || (Part<FMT>::RAGGED && sbi * 256 + Part<FMT>::lo(p) >= d)) return;
    Part<FMT> part;
    part.load(table, S, (size_t)tokens[blockIdx.x] * nsb + sbi, p);
    float* o = x + (size_t)blockIdx.x * d + sbi * 256;
#pragma unroll
    for (int k = 0; k < 2; k++) run_values(part, k, o + Part<FMT>::lo(p) + k * Part<FMT>::HI);
}

#define QUANT_FMT(FN, FMT)                                                                                       \
    extern "C" __global__ void dequant_##FN##_f16(const uint8_t* w, unsigned long long S, unsigned long long s0, \
                                                  unsigned long long n, int cols, __half* out) {                 \
        pdl_begin();                                                                                             \
        dequant<FMT, __half>(w, S, s0, n, cols, out);                                                            \
    }                                                                                                            \
    extern "C" __global__ void dequant_##FN##_bf16(const uint8_t* w, unsigned long long S,                       \
                                                   unsigned long long s0, unsigned long long n, int cols,        \
                                                   __nv_bfloat16* out) {                                         \
        pdl_begin();                                                                                             \
        dequant<FMT, __nv_bfloat16>(w, S, s0, n, cols, out);                                                     \
    }                                                                                                            \
    extern "C" __global__ void embed_##FN(const uint8_t* table, unsigned long long S, const uint32_t* tokens,    \
                                          float* x, int d) {                                                     \
        pdl_begin();                                                                                             \
        embedq<FMT>(table, S, tokens, x, d);                                                                     \
    }
QUANT_FMT(q4k, FMT_Q4K)
QUANT_FMT(q6k, FMT_Q6K)
QUANT_FMT(q8_0, FMT_Q8_0)
QUANT_FMT(q4_0, FMT_Q4_0)
QUANT_FMT(q4_1, FMT_Q4_1)
QUANT_FMT(q5k, FMT_Q5K)
QUANT_FMT(q5_0, FMT_Q5_0)
QUANT_FMT(q5_1, FMT_Q5_1)
QUANT_FMT(q3k, FMT_Q3K)
QUANT_FMT(q2k, FMT_Q2K)
QUANT_FMT(mxfp4, FMT_MXFP4)
