// Decode products of 16-bit weights for 2 to 8 input rows on the tensor
// cores: the forms of gemv.cu (norm, swiglu, add, rope), for steps such as
// speculative verification (a token and its proposals) and small batches.
// The CUDA-core kernels of gemv.cu do 2·rows·cols FMAs per weight they
// read; from a few rows on, that work and re-reading x outgrow the weight
// stream, and a 5-row step of the 8B cost 1.7x a 1-row step. Here one
// mma.sync m16n8k16 applies 16 weight rows to all (up to 8) input rows at
// once.
//
// Input. x arrives as 16-bit rows, already normalized for the norm forms
// (the host runs elementwise.cu's rms_norm into a scratch buffer first).
// Normalizing inside, as gemv.cu does, made every block re-read all of the
// f32 x and g and sum its squares before its first product: on the 8B's
// QKV and gate/up products that prologue cost as much as a third of the
// weight stream, and 5 rows took 1.48x the 1-row products; with the norm
// kernel in front they take 1.16x (scripts/gpu/kernels/gemv_rows.cu).
//
// Layout. A block has SPLIT warps over the same MT·16 output features
// (rope: MT·8 rotation pairs, both features of a pair in one tile), each
// warp over its own slice of the columns; their partial sums meet in shared
// memory and warp 0 finishes. In a warp, lane (g, q) = (lane / 4, lane % 4)
// streams 16 bytes (8 columns c..c+7, c = c0 + 8q) of weight rows g and
// g + 8 of each tile and the same 8 columns of input row g. The mma's k
// order is free as long as A and B agree, so those 8 columns feed two mmas
// directly from the loaded registers: the first takes columns c..c+3 as its
// k pairs (2q, 2q+1) and (2q+8, 2q+9), the second c+4..c+7. No shared
// memory or shuffles on the way in; a warp step covers 32 columns and 64
// contiguous bytes of each of 16·MT weight rows. The first weights are
// requested before the wait for the previous kernel (no kernel of a step
// writes weights), so they arrive while it drains.
#include "gemv_out.cuh"
#include "mma.cuh"

// Column steps whose weight loads are issued before their mmas.
#ifndef TC_UNROLL
#define TC_UNROLL 4
#endif

// Block shapes: MT m16 tiles per warp (the x a lane loads serves 16·MT
// weight rows), SPLIT warps per block over slices of the columns. The host
// picks one per product (`tc_shape_for` in gpu.rs).
template <typename T, int NT, int OUT, int MT, int SPLIT>
__device__ void gemv_tc(const T* w, const T* x, const float* bias, void* yout, int rows, int cols, int ystride,
                        const RopeOut& ro) {
    static_assert(NT >= 2 && NT <= 8, "gemv_tc: 2 to 8 input rows");
    constexpr int NM = OUT == OUT_SWIGLU ? 2 : 1;
    constexpr int U = TC_UNROLL / NM > 0 ? TC_UNROLL / NM : 1;
    constexpr int PER_TILE = OUT == OUT_ROPE ? 8 : 16;
    __shared__ float red[SPLIT][MT * NM * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gq = lane >> 2, q = lane & 3;
    const int f0 = blockIdx.x * MT * PER_TILE;

    // wr[m][n][h]: weight row h ? g + 8 : g of tile m, part n (clamped to
    // the last row; what a clamped row adds is never stored).
    const T* wr[MT][NM][2];
#pragma unroll
    for (int m = 0; m < MT; m++) {
        if constexpr (OUT == OUT_ROPE) {
            int hh, ia, ib;
            rope_pair(ro, min(f0 + m * 8 + gq, rows - 1), hh, ia, ib);
            wr[m][0][0] = w + ((size_t)hh * ro.hd + ia) * cols;
            wr[m][0][1] = w + ((size_t)hh * ro.hd + ib) * cols;
        } else {
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = min(f0 + m * 16 + gq + 8 * h, rows - 1);
#pragma unroll
                for (int n = 0; n < NM; n++) wr[m][n][h] = w + (size_t)(r + n * rows) * cols;
            }
        }
    }
    const bool has_x = gq < NT;
    const T* xg = x + (size_t)(has_x ? gq : 0) * cols;

    // This warp's slice of the columns, in 32-column steps.
    const int per = (cols + 32 * SPLIT - 1) / (32 * SPLIT) * 32;
    const int kb = min(cols, warp * per), ke = min(cols, kb + per);

    // Weight rows of 32·U columns from c0 (zeros past the slice).
    Raw16<8> wv[U][MT][NM][2];
    auto load_w = [&](int c0) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u + 8 * q;
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int n = 0; n < NM; n++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        if (c < ke) {
                            wv[u][m][n][h] = load_raw<T, 8>(wr[m][n][h] + c);
                        } else {
#pragma unroll
                            for (int e = 0; e < 4; e++) wv[u][m][n][h].w[e] = 0u;
                        }
                    }
        }
    };
    load_w(kb);
    pdl_wait();
    if (!GEMV_LATE) pdl_launch();

    float acc[MT][NM][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NM; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[m][n][e] = 0.f;

    for (int c0 = kb; c0 < ke; c0 += 32 * U) {
        if (c0 != kb) load_w(c0);
        uint32_t xb[U][4];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int c = c0 + 32 * u + 8 * q;
            if (c < ke && has_x) {
                const Raw16<8> r = load_raw<T, 8>(xg + c);
#pragma unroll
                for (int e = 0; e < 4; e++) xb[u][e] = r.w[e];
            } else {
#pragma unroll
                for (int e = 0; e < 4; e++) xb[u][e] = 0u;
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int m = 0; m < MT; m++)
#pragma unroll
                for (int n = 0; n < NM; n++)
#pragma unroll
                    for (int half = 0; half < 2; half++) {
                        const uint32_t a[4] = {wv[u][m][n][0].w[2 * half], wv[u][m][n][1].w[2 * half],
                                               wv[u][m][n][0].w[2 * half + 1], wv[u][m][n][1].w[2 * half + 1]};
                        mma16816<T>(acc[m][n], a, xb[u][2 * half], xb[u][2 * half + 1]);
                    }
    }
    if (GEMV_LATE) pdl_launch();

    // Partial sums meet in shared memory; warp 0 finishes.
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NM; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) red[warp][(m * NM + n) * 4 + e][lane] = acc[m][n][e];
    __syncthreads();
    if (warp != 0) return;
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int n = 0; n < NM; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float s = 0.f;
#pragma unroll
                for (int k = 0; k < SPLIT; k++) s += red[k][(m * NM + n) * 4 + e][lane];
                acc[m][n][e] = s;
            }
    // acc[m][n][e]: weight row g (e < 2) or g + 8 of tile m, input row 2q + e % 2.
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const int t = 2 * q + j;
        if (t >= NT) continue;
#pragma unroll
        for (int m = 0; m < MT; m++) {
            if constexpr (OUT == OUT_ROPE) {
                const int p = f0 + m * 8 + gq;
                if (p < rows) {
                    const float v[2] = {acc[m][0][j], acc[m][0][2 + j]};
                    rope_out<T, 2>(ro, v, bias, reinterpret_cast<float*>(yout), t, p, ystride);
                }
            } else {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = f0 + m * 16 + gq + 8 * h;
                    if (r < rows) {
                        float v[NM];
#pragma unroll
                        for (int n = 0; n < NM; n++) v[n] = acc[m][n][2 * h + j];
                        gemv_store<T, OUT, NM>(v, bias, yout, t, r, ystride);
                    }
                }
            }
        }
    }
}

// Entries gemv_tc{MT}x{SPLIT}_{form}_{rows}_{type}: x is 16-bit (for the
// norm forms, the normalized rows).
#define GEMV_TC_ENTRY(MT, SPLIT, KIND, OUT, SUF, TY, NT)                                                         \
    extern "C" __global__ void __launch_bounds__(SPLIT * 32)                                                     \
        gemv_tc##MT##x##SPLIT##_##KIND##_##NT##_##SUF(const TY* w, const TY* x, const float* bias, void* y,      \
                                                      int rows, int cols, int ystride) {                         \
        gemv_tc<TY, NT, OUT, MT, SPLIT>(w, x, bias, y, rows, cols, ystride, RopeOut{});                          \
    }
// rows: rotation pairs (half the QKV features).
#define GEMV_TC_ROPE_ENTRY(MT, SPLIT, SUF, TY, NT)                                                               \
    extern "C" __global__ void __launch_bounds__(SPLIT * 32)                                                     \
        gemv_tc##MT##x##SPLIT##_rope_##NT##_##SUF(const TY* w, const TY* x, const float* bias, void* y,          \
                                                  int rows, int cols, int ystride, RopeOut ro) {                 \
        gemv_tc<TY, NT, OUT_ROPE, MT, SPLIT>(w, x, bias, y, rows, cols, ystride, ro);                            \
    }
#define GEMV_TC_ROWS(M, ...)                                                                                     \
    M(__VA_ARGS__, 2) M(__VA_ARGS__, 3) M(__VA_ARGS__, 4) M(__VA_ARGS__, 5) M(__VA_ARGS__, 6) M(__VA_ARGS__, 7)  \
        M(__VA_ARGS__, 8)
#define GEMV_TC_ALL(MT, SPLIT, SUF, TY)                                                                          \
    GEMV_TC_ROWS(GEMV_TC_ENTRY, MT, SPLIT, norm, OUT_STORE, SUF, TY)                                             \
    GEMV_TC_ROWS(GEMV_TC_ENTRY, MT, SPLIT, swiglu, OUT_SWIGLU, SUF, TY)                                          \
    GEMV_TC_ROWS(GEMV_TC_ENTRY, MT, SPLIT, add, OUT_ADD, SUF, TY)                                                \
    GEMV_TC_ROWS(GEMV_TC_ROPE_ENTRY, MT, SPLIT, SUF, TY)
// The shapes of `TC_SHAPES` in gpu.rs. A kernel bench may include this
// file for its templates alone.
#ifndef GEMV_NO_ENTRIES
GEMV_TC_ALL(2, 8, f16, __half)
GEMV_TC_ALL(2, 8, bf16, __nv_bfloat16)
GEMV_TC_ALL(1, 8, f16, __half)
GEMV_TC_ALL(1, 8, bf16, __nv_bfloat16)
#endif
