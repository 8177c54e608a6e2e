// Decode-sized products (1 to 8 input rows): reading W once at full
// bandwidth is the whole job, so the neighbours of each product are fused
// into it rather than run as kernels of their own.
//
// One warp per output feature; each lane streams 16 bytes of W per step and
// applies them to all NT inputs (x stays in L1/L2). cols must be a multiple
// of 8 (the host checks). Four forms (gemv_tc.cu has the same on the tensor
// cores, for 2 to 8 rows):
// - gemv_norm:   y[t] = W · rmsnorm(x[rows[t]]) ⊙ g (+ bias). x is the f32
//                residual stream; the norm's sum of squares is gathered in
//                the same pass (every warp reads all of x anyway), and the
//                scale 1/rms applied to the finished dot product.
// - gemv_swiglu: the same input; W is [gate; up] (2·rows × cols) and the
//                warp for feature j computes both, writing silu(gate)·up as
//                the 16-bit input of the down projection.
// - gemv_add:    x[t] += W · a[t] for a 16-bit input a: the residual add.
// - gemv_rope:   the QKV product of gemv_norm with what rope_store does
//                after it (models without Q/K norms): the warp for pair r
//                computes the two features a RoPE rotation mixes (i and
//                i + hd/2, or 2i and 2i + 1), rotates them at the row's
//                position and writes Q to y, K and V (the same pairing,
//                unrotated) into the paged caches at the row's slot: one
//                kernel per layer fewer.
#include "gemv_out.cuh"
#include "lora.cuh"

// Output features per warp for NT input rows: one for decode-sized steps,
// four from 3 rows on. Each x value a lane loads is then used for four W
// rows instead of one: with one feature per warp, x (NT f32 rows, re-read
// from L1 by every warp) outweighed W from 3 rows on, and a 5-row step of
// the 8B (speculative verification of 4 tokens) cost 2.1x a 1-row step.
// The host's `dense_features_per_warp` must agree.
__host__ __device__ constexpr int gemv_fr(int nt, int out) { return out == OUT_ROPE || nt < 3 ? 1 : 4; }
// The wide entries of the stored form (gemv_norm_w_*, 1 and 2 rows): two
// features per warp. Its f32 input and norm weights are 64 bytes of L1
// reads per 16 bytes of W at one feature; with two, the 8B's head, QKV and
// [gate; up] stores stream W at 3.4-4.5 TB/s instead of 3.0-3.4. They need
// the rows to fill the GPU with half the warps: the host takes them from
// plan::GEMV_WIDE_BLOCKS_PER_SM blocks per multiprocessor (plan::gemv_wide).
constexpr int GEMV_FR_WIDE = 2;

// FR: output features per warp (gemv_fr, or GEMV_FR_WIDE for the wide
// entries below).
template <typename T, int NT, bool NORM, int OUT, int FR = gemv_fr(NT, OUT)>
__device__ void gemv(const T* w, const void* xin, const float* g, const uint32_t* xrows, const float* bias, void* yout,
                     int rows, int cols, int ystride, float eps, const RopeOut& ro) {
    constexpr int NM = OUT == OUT_SWIGLU || OUT == OUT_ROPE ? 2 : 1;
    const int lane = threadIdx.x & 31;
    const int r0 = (blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5)) * FR;
    if (r0 >= rows) return;
    // wr[f][m]: feature r0 + f's row of part m (a feature past the last
    // reads the last one's and stores nothing).
    const T* wr[FR][NM];
#pragma unroll
    for (int f = 0; f < FR; f++) {
        const int r = min(r0 + f, rows - 1);
        if constexpr (OUT == OUT_ROPE) {
            int hh, ia, ib;
            rope_pair(ro, r, hh, ia, ib);
            wr[f][0] = w + ((size_t)hh * ro.hd + ia) * cols;
            wr[f][NM - 1] = w + ((size_t)hh * ro.hd + ib) * cols;
        } else {
#pragma unroll
            for (int m = 0; m < NM; m++) wr[f][m] = w + (size_t)(r + m * rows) * cols;
        }
    }
    const float* xf32[NT];
    const T* x16[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const size_t xr = xrows ? xrows[t] : t;
        xf32[t] = reinterpret_cast<const float*>(xin) + xr * cols;
        x16[t] = reinterpret_cast<const T*>(xin) + xr * cols;
    }
    float acc[FR][NM][NT], ss[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        ss[t] = 0.f;
#pragma unroll
        for (int f = 0; f < FR; f++)
#pragma unroll
            for (int m = 0; m < NM; m++) acc[f][m][t] = 0.f;
    }
#pragma unroll(NT * NM * FR <= 2 ? 4 : 2)
    for (int c = lane * 8; c < cols; c += 32 * 8) {
        float wf[FR][NM][8];
#pragma unroll
        for (int f = 0; f < FR; f++)
#pragma unroll
            for (int m = 0; m < NM; m++) load_f<T, 8>(wr[f][m] + c, wf[f][m]);
        float gf[8];
        if constexpr (NORM) {
            const float4 g0 = *reinterpret_cast<const float4*>(g + c), g1 = *reinterpret_cast<const float4*>(g + c + 4);
            gf[0] = g0.x, gf[1] = g0.y, gf[2] = g0.z, gf[3] = g0.w, gf[4] = g1.x, gf[5] = g1.y, gf[6] = g1.z, gf[7] = g1.w;
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float xf[8];
            if constexpr (NORM) {
                const float4 a = *reinterpret_cast<const float4*>(xf32[t] + c);
                const float4 b = *reinterpret_cast<const float4*>(xf32[t] + c + 4);
                xf[0] = a.x, xf[1] = a.y, xf[2] = a.z, xf[3] = a.w, xf[4] = b.x, xf[5] = b.y, xf[6] = b.z, xf[7] = b.w;
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    ss[t] += xf[e] * xf[e];
                    xf[e] *= gf[e];
                }
            } else {
                load_f<T, 8>(x16[t] + c, xf);
            }
#pragma unroll
            for (int f = 0; f < FR; f++)
#pragma unroll
                for (int m = 0; m < NM; m++)
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[f][m][t] += wf[f][m][e] * xf[e];
        }
    }
    if (GEMV_LATE) pdl_launch();
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float inv = 1.f;
        if constexpr (NORM) inv = rsqrtf(warp_sum(ss[t]) / cols + eps);
#pragma unroll
        for (int f = 0; f < FR; f++) {
            float v[NM];
#pragma unroll
            for (int m = 0; m < NM; m++) v[m] = warp_sum(acc[f][m][t]) * inv;
            if (lane == 0 && r0 + f < rows) {
                if constexpr (OUT == OUT_ROPE)
                    rope_out<T, NM>(ro, v, bias, reinterpret_cast<float*>(yout), t, r0 + f, ystride);
                else
                    gemv_store<T, OUT, NM>(v, bias, yout, t, r0 + f, ystride);
            }
        }
    }
}

#define GEMV_ENTRY_FR(KIND, NORM, OUT, SUF, TY, NT, FR)                                                          \
    extern "C" __global__ void gemv_##KIND##_##NT##_##SUF(const TY* w, const void* x, const float* g,            \
                                                         const uint32_t* xrows, const float* bias, void* y,      \
                                                         int rows, int cols, int ystride, float eps) {           \
        pdl_wait();                                                                                              \
        if (!GEMV_LATE) pdl_launch();                                                                            \
        gemv<TY, NT, NORM, OUT, FR>(w, x, g, xrows, bias, y, rows, cols, ystride, eps, RopeOut{});               \
    }
#define GEMV_ENTRY(KIND, NORM, OUT, SUF, TY, NT) GEMV_ENTRY_FR(KIND, NORM, OUT, SUF, TY, NT, gemv_fr(NT, OUT))
// The same with a LoRA shrink on the product's input in the blocks from
// lo.first on (lora.cuh; the normed residual for gemv_norm, the 16-bit rows
// for gemv_add), which do their own PDL wait: entries of their own, so that
// the products without adapters compile exactly as before.
#define GEMV_LORA_ENTRY_FR(KIND, NORM, OUT, SUF, TY, NT, FR)                                                     \
    extern "C" __global__ void gemv_##KIND##_lora_##NT##_##SUF(const TY* w, const void* x, const float* g,       \
                                                              const uint32_t* xrows, const float* bias, void* y, \
                                                              int rows, int cols, int ystride, float eps,        \
                                                              LoraShrink lo) {                                   \
        if (lora_shrink_extra<TY>(lo, NORM ? nullptr : reinterpret_cast<const TY*>(x),                          \
                                  NORM ? reinterpret_cast<const float*>(x) : nullptr, g, eps, cols, blockIdx.x)) \
            return;                                                                                              \
        pdl_wait();                                                                                              \
        if (!GEMV_LATE) pdl_launch();                                                                            \
        gemv<TY, NT, NORM, OUT, FR>(w, x, g, xrows, bias, y, rows, cols, ystride, eps, RopeOut{});               \
    }
#define GEMV_LORA_ENTRY(KIND, NORM, OUT, SUF, TY, NT)                                                            \
    GEMV_LORA_ENTRY_FR(KIND, NORM, OUT, SUF, TY, NT, gemv_fr(NT, OUT))
// rows: rotation pairs (half the QKV features).
#define GEMV_ROPE_ENTRY(SUF, TY, NT)                                                                             \
    extern "C" __global__ void gemv_rope_##NT##_##SUF(const TY* w, const void* x, const float* g,               \
                                                     const float* bias, void* y, int rows, int cols, int ystride, \
                                                     float eps, RopeOut ro) {                                    \
        pdl_wait();                                                                                              \
        if (!GEMV_LATE) pdl_launch();                                                                            \
        gemv<TY, NT, true, OUT_ROPE>(w, x, g, nullptr, bias, y, rows, cols, ystride, eps, ro);                   \
    }
// ENTRY (GEMV_ENTRY or GEMV_LORA_ENTRY) for 1 to 8 input rows.
#define GEMV_ROWS(ENTRY, KIND, NORM, OUT, SUF, TY)                                                               \
    ENTRY(KIND, NORM, OUT, SUF, TY, 1)                                                                           \
    ENTRY(KIND, NORM, OUT, SUF, TY, 2)                                                                           \
    ENTRY(KIND, NORM, OUT, SUF, TY, 3)                                                                           \
    ENTRY(KIND, NORM, OUT, SUF, TY, 4)                                                                           \
    ENTRY(KIND, NORM, OUT, SUF, TY, 5)                                                                           \
    ENTRY(KIND, NORM, OUT, SUF, TY, 6)                                                                           \
    ENTRY(KIND, NORM, OUT, SUF, TY, 7)                                                                           \
    ENTRY(KIND, NORM, OUT, SUF, TY, 8)
#define GEMV_ROPE_ROWS(SUF, TY)                                                                                  \
    GEMV_ROPE_ENTRY(SUF, TY, 1)                                                                                  \
    GEMV_ROPE_ENTRY(SUF, TY, 2)                                                                                  \
    GEMV_ROPE_ENTRY(SUF, TY, 3)                                                                                  \
    GEMV_ROPE_ENTRY(SUF, TY, 4)                                                                                  \
    GEMV_ROPE_ENTRY(SUF, TY, 5)                                                                                  \
    GEMV_ROPE_ENTRY(SUF, TY, 6)                                                                                  \
    GEMV_ROPE_ENTRY(SUF, TY, 7)                                                                                  \
    GEMV_ROPE_ENTRY(SUF, TY, 8)
#define GEMV_ALL(SUF, TY)                                                                                        \
    GEMV_ROWS(GEMV_ENTRY, norm, true, OUT_STORE, SUF, TY)                                                        \
    GEMV_ROWS(GEMV_ENTRY, swiglu, true, OUT_SWIGLU, SUF, TY)                                                     \
    GEMV_ROWS(GEMV_ENTRY, add, false, OUT_ADD, SUF, TY)                                                          \
    GEMV_ROWS(GEMV_LORA_ENTRY, norm, true, OUT_STORE, SUF, TY)                                                   \
    GEMV_ROWS(GEMV_LORA_ENTRY, add, false, OUT_ADD, SUF, TY)                                                     \
    GEMV_ROPE_ROWS(SUF, TY)                                                                                      \
    GEMV_ENTRY_FR(norm_w, true, OUT_STORE, SUF, TY, 1, GEMV_FR_WIDE)                                             \
    GEMV_ENTRY_FR(norm_w, true, OUT_STORE, SUF, TY, 2, GEMV_FR_WIDE)                                             \
    GEMV_LORA_ENTRY_FR(norm_w, true, OUT_STORE, SUF, TY, 1, GEMV_FR_WIDE)                                        \
    GEMV_LORA_ENTRY_FR(norm_w, true, OUT_STORE, SUF, TY, 2, GEMV_FR_WIDE)
// A kernel bench may include this file for its templates alone.
#ifndef GEMV_NO_ENTRIES
GEMV_ALL(f16, __half)
GEMV_ALL(bf16, __nv_bfloat16)
#endif
