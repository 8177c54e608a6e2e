// Products of quantized weights with prompt-sized inputs (more rows than
// the decode products of quant.cu take) on the tensor cores, reading the
// quantized blocks in place: y[t] (+)= W · x[t] for 16-bit input rows x
// (n × cols) and f32 outputs (row t at t · ystride).
//
// A block computes a tile of BM = 32 · WM weight rows by BN = 16 · WN input
// rows with 2 · WM warps (WM × 2, each 32 weight rows by BN/2 input rows),
// walking K in tiles of 128 values (half a superblock). The forms: 64 weight
// rows by 16, 32 or 64 inputs (4 warps), 128 by 64 or 128 (8 warps): the
// taller tile reads each input tile once for twice the weight rows, the
// wider one dequantizes each weight once for twice the inputs. Per K tile:
// - each thread fetches two `Part`s (quant_formats.cuh: a quarter of one
//   row's half superblock, 32 weights in two runs of 16) straight from the
//   quantized matrix into registers, AHEAD tiles ahead of their use
//   (`prep` computes the scales only then): the dense entries fetch 1 tile
//   ahead (MMQ_DENSE_AHEAD), the expert-grouped ones MMQ_AHEAD = 3;
// - the input tile (BN × 128 16-bit values) comes in by cp.async, also one
//   tile ahead, into the other of two shared buffers;
// - the loaded parts are dequantized to f16 into shared memory: a run of 16
//   quants is 16 bytes, each pair of them becomes the half2 (1024 + q0,
//   1024 + q1) by one byte permute, then an exact subtraction of 1024 and
//   one fused s·q − c (one rounding to f16) give the weights;
// - mma.sync m16n8k16 (f16 in, f32 accumulate) over the tile, fragments
//   read with ldmatrix (rows padded by 16 bytes: no bank conflicts).
// The weights are the mma's A operand (16 weight rows per fragment) and
// the inputs its B operand (8 input rows), so a step of 16 rows wastes
// nothing. The grid's x walks the input tiles, so the blocks that share a
// weight tile run together and read it from DRAM once. K is split over the
// grid's z where that fills the GPU's waves of blocks better
// (plan::mmq_splits), the blocks adding their partial sums into y
// atomically (the host zeroes y first unless the product accumulates).
#include "mmq_common.cuh"

// Row stride of the shared tiles in halves: 16 bytes of padding.
#define MMQ_LDS (MMQ_BK + 8)

__device__ __forceinline__ void ldsm_x4(uint32_t* r, const __half* p) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}
__device__ __forceinline__ void ldsm_x2(uint32_t* r, const __half* p) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}

// The tensor-core product (see the top of this file). WM: 32-row weight
// tiles (warps) along M (2 or 4: BM = 32 · WM); WN: 8-row input tiles per
// warp (1, 2, 4 or 8: BN = 16 · WN). This block's tile: weight rows from
// rb · BM, input rows from tb · BN, K tiles kz · tiles onwards.
// SA: buffers of dequantized weights (2: the next tile's dequantized while
// others multiply this one; 1: a second barrier per tile between them, for
// less shared memory).
template <int FMT, int WM, int WN, int AHEAD = MMQ_AHEAD, int SA = 2>
__device__ void mmq(const uint8_t* w, size_t S, const __half* x, float* y, int rows, int cols, int n, int ystride,
                    int tiles, bool atomic, bool accumulate, int rb, int tb, int kz) {
    constexpr int BM = 32 * WM, BN = 16 * WN, THREADS = 64 * WM;
    constexpr int PARTS = BM * 4 / THREADS;  // parts per thread and tile
    extern __shared__ __align__(16) unsigned char mmq_smem[];
    __half* sa = reinterpret_cast<__half*>(mmq_smem);  // [SA][BM][MMQ_LDS]
    __half* sb = sa + SA * BM * MMQ_LDS;               // [2][BN][MMQ_LDS]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 1, wn = warp & 1;
    const int r0 = rb * BM, t0 = tb * BN;
    // A ragged row (quant.cu's header) ends in its last tile: the padding's
    // weights are zeros and its inputs are loaded as zeros.
    const int nsb = (cols + 255) >> 8, ktiles = (cols + MMQ_BK - 1) / MMQ_BK;
    const int kt0 = kz * tiles, kt1 = min(ktiles, kt0 + tiles);
    if (kt0 >= kt1) return;

    // This thread's parts of each tile: row pr[i] of the block, quarter pj[i].
    int pr[PARTS], pj[PARTS];
    size_t prow[PARTS];
#pragma unroll
    for (int i = 0; i < PARTS; i++) {
        const int item = tid + i * THREADS;
        pr[i] = item >> 2, pj[i] = item & 3;
        prow[i] = (size_t)min(r0 + pr[i], rows - 1) * nsb;  // rows past the end repeat the last (not stored)
    }
    // A ring of MMQ_AHEAD sets of parts: set u holds the tile that the
    // step of ring position u dequantizes next, fetched MMQ_AHEAD tiles
    // before.
    Part<FMT> ring[AHEAD][PARTS];
    auto fetch_parts = [&](Part<FMT>* part, int kt) {
#pragma unroll
        for (int i = 0; i < PARTS; i++) part[i].fetch(w, S, prow[i] + (kt >> 1), 4 * (kt & 1) + pj[i]);
    };
    auto store_parts = [&](Part<FMT>* part, int kt, int buf) {
        const int half0 = 128 * (kt & 1);
#pragma unroll
        for (int i = 0; i < PARTS; i++) {
            const int p = 4 * (kt & 1) + pj[i];
            part[i].prep();
            __half* row = sa + (buf * BM + pr[i]) * MMQ_LDS;
#pragma unroll
            for (int k = 0; k < 2; k++) dequant_run(part[i], k, row + Part<FMT>::lo(p) + k * Part<FMT>::HI - half0);
        }
    };
    // The input tile: BN rows × 128 values = BN · 16 chunks of 16 bytes.
    auto load_x = [&](int kt, int buf) {
#pragma unroll
        for (int c = tid; c < BN * 16; c += THREADS) {
            const int r = c >> 4, off = (c & 15) * 8;
            const int t = t0 + r;
            const int col = kt * MMQ_BK + off;
            const __half* src = x + (size_t)min(t, n - 1) * cols + min(col, cols - 8);
            cp_async16(sb + (buf * BN + r) * MMQ_LDS + off, src, t < n && col < cols);
        }
        cp_async_commit();
    };

    float acc[2][WN][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < WN; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.f;

    // Tiles past the end fetch the last one again (hits in L1, never used).
    fetch_parts(ring[0], kt0);
    load_x(kt0, 0);
    store_parts(ring[0], kt0, 0);
#pragma unroll
    for (int u = 0; u < AHEAD; u++) fetch_parts(ring[u], min(kt0 + 1 + u, kt1 - 1));
    // One step: the products of tile kt (shared buffer `buf`), meanwhile the
    // next input tile; then the next weight tile (fetched MMQ_AHEAD steps
    // ago into `part`) dequantized into the other buffer, and `part`
    // refilled with the tile MMQ_AHEAD further on.
    auto step = [&](int kt, Part<FMT>* part) {
        const int buf = (kt - kt0) & 1, abuf = SA == 2 ? buf : 0;
        const bool more = kt + 1 < kt1;
        cp_async_wait_all();
        __syncthreads();
        if (more) load_x(kt + 1, buf ^ 1);
        const __half* a_base = sa + (abuf * BM + wm * 32 + (lane & 15)) * MMQ_LDS + (lane >> 4) * 8;
        const __half* b_base = sb + buf * BN * MMQ_LDS;
#pragma unroll
        for (int ks = 0; ks < MMQ_BK / 16; ks++) {
            uint32_t a[2][4], b[WN][2];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) ldsm_x4(a[mi], a_base + mi * 16 * MMQ_LDS + ks * 16);
            if constexpr (WN == 1) {
                // Lanes 0-15: rows 0-7 at k 0 and 8.
                ldsm_x2(b[0], b_base + (wn * 8 + (lane & 7)) * MMQ_LDS + ks * 16 + ((lane >> 3) & 1) * 8);
            } else {
#pragma unroll
                for (int nj = 0; nj < WN / 2; nj++) {
                    uint32_t r[4];
                    const int nrow = wn * 8 * WN + nj * 16 + (lane >> 4) * 8 + (lane & 7);
                    ldsm_x4(r, b_base + nrow * MMQ_LDS + ks * 16 + ((lane >> 3) & 1) * 8);
                    b[2 * nj][0] = r[0], b[2 * nj][1] = r[1], b[2 * nj + 1][0] = r[2], b[2 * nj + 1][1] = r[3];
                }
            }
#pragma unroll
            for (int mi = 0; mi < 2; mi++)
#pragma unroll
                for (int ni = 0; ni < WN; ni++) mma16816<__half>(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
        }
        if (more) {
            if (SA == 1) __syncthreads();  // every warp is done with the one buffer
            store_parts(part, kt + 1, SA == 2 ? buf ^ 1 : 0);
            fetch_parts(part, min(kt + 1 + AHEAD, kt1 - 1));
        }
    };
    for (int kt = kt0; kt < kt1; kt += AHEAD) {
#pragma unroll
        for (int u = 0; u < AHEAD; u++)
            if (kt + u < kt1) step(kt + u, ring[u]);
    }

    // C fragment: weight rows g and g + 8, input rows 2c and 2c + 1.
    const int g = lane >> 2, cq = lane & 3;
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int ni = 0; ni < WN; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = r0 + wm * 32 + mi * 16 + g + (e >> 1) * 8;
                const int t = t0 + wn * 8 * WN + ni * 8 + 2 * cq + (e & 1);
                if (r < rows && t < n) mmq_store(y + (size_t)t * ystride + r, acc[mi][ni][e], atomic, accumulate);
            }
}

// Weight tiles fetched ahead by the dense entries: 1 (fewer registers) ran
// 2-8% faster than 3 at most products alone (scripts/gpu/kernels/
// mmq_forms.cu) and, on an H200 8B Q4_K_M, 64-stream serving +1.8/+2.8%,
// steps of 48/64/128 rows 1.8-4.4% faster, 96 rows 1.8% slower
// (docs/cuda.md). The expert-grouped entries keep MMQ_AHEAD (unmeasured).
#define MMQ_DENSE_AHEAD 1

// (MMQ_NO_ENTRIES: the templates only, for scripts/gpu/kernels/mmq_forms.cu.)
#ifndef MMQ_NO_ENTRIES
// The 128 × 128 form keeps one buffer of dequantized weights (SA = 1;
// plan.rs's mmq_smem agrees): 104 KB of shared memory instead of 139, two
// blocks per multiprocessor instead of one. On an H200 the 8B's Q4_K
// gate/up at 96 and 128 rows took 145 and 147 µs against 164 and 167,
// Q6_K 158 against 187-193 (docs/cuda.md); the 128 × 64 form was slower
// with one (gate/up at 64 rows 112 against 103 µs: three blocks of it fit,
// but each waits at two barriers per tile).
#define MMQ_ENTRY(FN, FMT, WM, WN)                                                                               \
    extern "C" __global__ void __launch_bounds__(64 * WM)                                                        \
        mmq_##FN##_##WM##x##WN(const uint8_t* w, unsigned long long S, const __half* x, float* y, int rows,       \
                               int cols, int n, int ystride, int tiles, int atomic, int accumulate) {            \
        pdl_begin();                                                                                             \
        mmq<FMT, WM, WN, MMQ_DENSE_AHEAD, (16 * WN >= 128 ? 1 : 2)>(                                             \
            w, S, x, y, rows, cols, n, ystride, tiles, atomic != 0, accumulate != 0, blockIdx.y, blockIdx.x,     \
            blockIdx.z);                                                                                         \
    }
/* Grouped by expert (a mixture of experts' prompt rows): blockIdx.x is a
   tile of `tiles` (tiles[0] of them, tiles[1 + i] = expert << 16 | its
   index within the expert: backend/moe.rs or moe_sort in elementwise.cu),
   blockIdx.y a block of weight rows. Expert e's rows starts[e]..starts[e + 1]
   of x (gathered by expert) go through the matrix at wptrs[e] (every expert
   S superblocks) into the same rows of y; the whole K range in one block.
   Blocks past the tiles exit (the grid is sized for the most there can be).
   Consecutive blocks are one expert's tiles over the same weight rows. */
#define MMQ_IDS(FN, FMT, WN)                                                                                     \
    extern "C" __global__ void __launch_bounds__(128)                                                            \
        mmq_ids_##FN##_##WN(const unsigned long long* wptrs, const uint32_t* starts, const uint32_t* tiles,      \
                            unsigned long long S, const __half* x, float* y, int rows, int cols, int ystride) {  \
        pdl_begin();                                                                                             \
        if (blockIdx.x >= tiles[0]) return;                                                                      \
        const uint32_t tile = tiles[1 + blockIdx.x];                                                             \
        const int ex = (int)(tile >> 16), s0 = (int)starts[ex], cnt = (int)starts[ex + 1] - s0;                  \
        mmq<FMT, 2, WN>(reinterpret_cast<const uint8_t*>(wptrs[ex]), S, x + (size_t)s0 * cols,                   \
                        y + (size_t)s0 * ystride, rows, cols, cnt, ystride, (cols + MMQ_BK - 1) / MMQ_BK, false, \
                        false,                                                                                   \
                        blockIdx.y, (int)(tile & 0xffffu), 0);                                                   \
    }
#define MMQ_FMT(FN, FMT)                                                                                         \
    MMQ_ENTRY(FN, FMT, 2, 1)                                                                                     \
    MMQ_ENTRY(FN, FMT, 2, 2)                                                                                     \
    MMQ_ENTRY(FN, FMT, 2, 4)                                                                                     \
    MMQ_ENTRY(FN, FMT, 4, 4)                                                                                     \
    MMQ_ENTRY(FN, FMT, 4, 8)                                                                                     \
    MMQ_IDS(FN, FMT, 1)                                                                                          \
    MMQ_IDS(FN, FMT, 2)                                                                                          \
    MMQ_IDS(FN, FMT, 4)
MMQ_FMT(q4k, FMT_Q4K)
MMQ_FMT(q6k, FMT_Q6K)
MMQ_FMT(q8_0, FMT_Q8_0)
MMQ_FMT(q4_0, FMT_Q4_0)
MMQ_FMT(q4_1, FMT_Q4_1)
MMQ_FMT(q5k, FMT_Q5K)
MMQ_FMT(q5_0, FMT_Q5_0)
MMQ_FMT(q5_1, FMT_Q5_1)
MMQ_FMT(q3k, FMT_Q3K)
MMQ_FMT(q2k, FMT_Q2K)
MMQ_FMT(mxfp4, FMT_MXFP4)
#endif
