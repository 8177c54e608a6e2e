// Products of quantized weights with 9 to 32 input rows (the steps of 9 to
// 32 streams' decoding) on the tensor cores, the weights dequantized
// straight into mma.sync's A fragments: no shared memory and no barrier.
// Same contract, grid and K splits as mmq.cu: y[t] (+)= W · x[t] for 16-bit
// input rows x (n × cols), f32 outputs (row t at t · ystride).
//
// The order of K inside an mma is free as long as both operands use the
// same one. Lane (g, c) of a warp (g = lane / 4, c = lane % 4) holds, per
// m16n8k16, the weights of rows g and g + 8 at k slots 2c, 2c + 1, 2c + 8,
// 2c + 9, and the inputs of column g at the same slots. Here the slots of
// lane c at step j of a K tile are 4 consecutive columns of quarter c of
// the tile's half superblock (quant_formats.cuh's Part: 32 weights in two
// runs of 16): run j / 4, values 4 (j % 4) .. + 3. So a lane fetches its
// rows' parts of each tile (the 4 lanes of a row together read the row's
// whole tile), turns 4 quants into two f16 pairs per step by one byte
// permute, a subtraction and a fused multiply-add per pair
// (mmq_common.cuh's dequant_pairs, into registers). The block stages each input tile by
// cp.async into shared memory in that order (one barrier per tile), so that
// a lane reads the inputs of two steps of an n8 tile as 16 bytes and a warp
// 512 consecutive bytes (read from global memory by each lane, 8 bytes from
// 8 rows per load, the same products ran 1.2-1.8x slower at 32-128 rows: L1
// serves such a load line by line).
//
// Each weight is dequantized once per block of input rows (8 · NT of them),
// where mmq.cu's 64 × 16 and 64 × 32 blocks dequantize every weight tile
// into shared memory, wait at a barrier and read it back by ldmatrix.
// A warp covers 16 · MT weight rows × 8 · NT input rows; a block 4 warps
// along the rows. The entries are the forms that measured faster than
// mmq.cu's (MT = 2 by NT = 2 or 4: 9 to 32 rows; docs/cuda.md).
#include "mmq_common.cuh"

#define MMQR_WARPS 4

template <int FMT, int MT, int NT>
__device__ void mmqr(const uint8_t* w, size_t S, const __half* x, float* y, int rows, int cols, int n, int ystride,
                     int tiles, bool atomic, bool accumulate, int rb, int tb, int kz) {
    constexpr int BM = 16 * MT * MMQR_WARPS, BN = 8 * NT;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, c = lane & 3;
    const int row0 = rb * BM + warp * 16 * MT, t0 = tb * BN;
    const int nsb = (cols + 255) >> 8, ktiles = (cols + MMQ_BK - 1) / MMQ_BK;
    const int kt0 = kz * tiles, kt1 = min(ktiles, kt0 + tiles);
    if (kt0 >= kt1) return;
    // A warp past the last row still stages its share of the inputs.
    const bool live = row0 < rows;
    // The input tile in fragment order: [buffer][n8 tile][step pair][lane]
    // × 8 values (the lane's 4 inputs of two consecutive steps), so that a
    // lane reads a step pair's inputs of one n8 tile as 16 bytes and a warp
    // 512 consecutive bytes.
    __shared__ __align__(16) __half xs[2 * NT * 4 * 32 * 8];
    auto stage = [&](int kt, int buf) {
#pragma unroll
        for (int m = 0; m < NT; m++) {
            const int slot = tid + 128 * m;
            const int ni = slot >> 7, jp = (slot >> 5) & 3, l = slot & 31;
            const int t = t0 + ni * 8 + (l >> 2);
            const int col =
                (kt >> 1) * 256 + Part<FMT>::lo(4 * (kt & 1) + (l & 3)) + (jp >> 1) * Part<FMT>::HI + 8 * (jp & 1);
            cp_async16(xs + ((buf * NT * 4 * 32) + slot) * 8, x + (size_t)min(t, n - 1) * cols + min(col, cols - 8),
                       t < n && col < cols);
        }
        cp_async_commit();
    };

    // Superblock rows of this lane's weight rows (mi, g + 8h); rows past the
    // end repeat the last (not stored).
    size_t prow[MT][2];
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int h = 0; h < 2; h++) prow[mi][h] = (size_t)min(row0 + mi * 16 + g + 8 * h, rows - 1) * nsb;
    float acc[MT][NT][4];
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int ni = 0; ni < NT; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.f;

    auto fetch = [&](Part<FMT> (&pt)[MT][2], int kt) {
        const int p = 4 * (kt & 1) + c;
#pragma unroll
        for (int mi = 0; mi < MT; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) pt[mi][h].fetch(w, S, prow[mi][h] + (kt >> 1), p);
    };
    // The products of a tile: its parts in `pt`, its inputs in buffer `buf`.
    auto tile = [&](Part<FMT> (&pt)[MT][2], int buf) {
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int o[MT][2][4];
            __half2 s[MT][2], cc[MT][2];
#pragma unroll
            for (int mi = 0; mi < MT; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    if (k == 0) pt[mi][h].prep();
                    pt[mi][h].ints(k, o[mi][h]);
                    s[mi][h] = __float2half2_rn(pt[mi][h].s[k]);
                    cc[mi][h] = __float2half2_rn(-pt[mi][h].c[k]);
                }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                // The inputs of this lane's columns lo(p) + k · HI + 4i .. + 3.
                uint32_t b[NT][2];
#pragma unroll
                for (int ni = 0; ni < NT; ni++) {
                    const uint4 v = *reinterpret_cast<const uint4*>(
                        xs + ((buf * NT + ni) * 4 * 32 + (2 * k + (i >> 1)) * 32 + lane) * 8);
                    b[ni][0] = (i & 1) ? v.z : v.x, b[ni][1] = (i & 1) ? v.w : v.y;
                }
#pragma unroll
                for (int mi = 0; mi < MT; mi++) {
                    uint32_t a[4];
                    dequant_pairs<FMT>((uint32_t)o[mi][0][i], s[mi][0], cc[mi][0], a[0], a[2]);
                    dequant_pairs<FMT>((uint32_t)o[mi][1][i], s[mi][1], cc[mi][1], a[1], a[3]);
#pragma unroll
                    for (int ni = 0; ni < NT; ni++) mma16816<__half>(acc[mi][ni], a, b[ni][0], b[ni][1]);
                }
            }
        }
    };

    // Two sets of parts: the next tile's loads in flight over this one's
    // products. Tiles past the end fetch the last again (never used).
    Part<FMT> pa[MT][2], pb[MT][2];
    fetch(pa, kt0);
    stage(kt0, 0);
    // Waits for tile kt's inputs and stages tile kt + 1's into the other
    // buffer (whose readers, tile kt - 1's, passed the barrier).
    auto next = [&](int kt) {
        cp_async_wait_all();
        __syncthreads();
        if (kt + 1 < kt1) stage(kt + 1, (kt - kt0 + 1) & 1);
    };
    for (int kt = kt0; kt < kt1; kt += 2) {
        fetch(pb, min(kt + 1, kt1 - 1));
        next(kt);
        if (live) tile(pa, (kt - kt0) & 1);
        if (kt + 1 >= kt1) break;
        fetch(pa, min(kt + 2, kt1 - 1));
        next(kt + 1);
        if (live) tile(pb, (kt - kt0 + 1) & 1);
    }
    if (!live) return;

#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int ni = 0; ni < NT; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = row0 + mi * 16 + g + (e >> 1) * 8;
                const int t = t0 + ni * 8 + 2 * c + (e & 1);
                if (r < rows && t < n) mmq_store(y + (size_t)t * ystride + r, acc[mi][ni][e], atomic, accumulate);
            }
}

// Entries mmqr_{fmt}_{MT}x{NT}: 16 · MT weight rows per warp (64 · MT per
// block of 4 warps) by 8 · NT input rows; arguments as mmq.cu's.
// (MMQ_NO_ENTRIES: the templates only, for scripts/gpu/kernels/mmq_forms.cu.)
#ifndef MMQ_NO_ENTRIES
#define MMQR_ENTRY(FN, FMT, MT, NT)                                                                              \
    extern "C" __global__ void __launch_bounds__(32 * MMQR_WARPS)                                                \
        mmqr_##FN##_##MT##x##NT(const uint8_t* w, unsigned long long S, const __half* x, float* y, int rows,      \
                                int cols, int n, int ystride, int tiles, int atomic, int accumulate) {           \
        pdl_begin();                                                                                             \
        mmqr<FMT, MT, NT>(w, S, x, y, rows, cols, n, ystride, tiles, atomic != 0, accumulate != 0, blockIdx.y,   \
                          blockIdx.x, blockIdx.z);                                                               \
    }
#define MMQR_FMT(FN, FMT)                                                                                        \
    MMQR_ENTRY(FN, FMT, 2, 2)                                                                                    \
    MMQR_ENTRY(FN, FMT, 2, 4)
MMQR_FMT(q4k, FMT_Q4K)
MMQR_FMT(q6k, FMT_Q6K)
MMQR_FMT(q8_0, FMT_Q8_0)
MMQR_FMT(q4_0, FMT_Q4_0)
MMQR_FMT(q4_1, FMT_Q4_1)
MMQR_FMT(q5k, FMT_Q5K)
MMQR_FMT(q5_0, FMT_Q5_0)
MMQR_FMT(q5_1, FMT_Q5_1)
MMQR_FMT(q3k, FMT_Q3K)
MMQR_FMT(q2k, FMT_Q2K)
MMQR_FMT(mxfp4, FMT_MXFP4)
#endif
