// An experiment (scripts/gpu/kernels/mmq_forms.cu `ring`), slower than
// mmq.cu at 33-128 rows on an H200: docs/cuda.md, "Tried and dropped".
// Products of quantized weights with 33 to 128 input rows on the tensor
// cores: mmq_reg.cu's weights-into-registers scheme, with every K tile's
// raw quantized bytes (and its inputs) staged by cp.async into a ring of
// STAGES shared buffers, so that STAGES - 1 tiles are in flight while one is
// multiplied, at no register cost. Same contract, grid and K splits as
// mmq.cu: y[t] (+)= W · x[t] for 16-bit input rows x (n × cols), f32
// outputs (row t at t · ystride).
//
// A warp covers 16 · MT weight rows × 8 · NT input rows; a block WR warps
// along the rows by WC along the inputs (each weight is dequantized WC
// times per block). The raw tile of a weight row is `Raw<FMT>::CHUNKS`
// 16-byte chunks; a lane reads its rows' parts from there (the lanes of a
// row read the same header: a broadcast) and dequantizes them into the A
// fragments as mmq_reg.cu does. Inputs are staged in mmq_reg.cu's fragment
// order.
#include "mmq_common.cuh"

// How one weight row's bytes of one K tile (half a superblock) are staged,
// and a lane's Part read back from them.
template <int FMT> struct Raw;

// Q4K: the superblock's 16-byte header (d, dmin, scales), then the tile's
// four 16-byte quarters of nibbles.
template <> struct Raw<FMT_Q4K> {
    static constexpr int CHUNKS = 5;
    __device__ static const uint8_t* src(const uint8_t* w, size_t /*S*/, size_t sb, int half, int j) {
        const uint8_t* b = w + sb * 144;
        return j == 0 ? b : b + 16 + 64 * half + 16 * (j - 1);
    }
    __device__ static void part(Part<FMT_Q4K>& pt, const uint4* row, int half, int c) {
        pt.h = row[0];
        pt.q = row[1 + c];
        pt.part = 4 * half + c;
    }
};

__device__ __forceinline__ void cp_async_wait_pending(int n) {
    // cp.async.wait_group takes an immediate.
    if (n <= 0)
        asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    else if (n == 1)
        asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    else if (n == 2)
        asm volatile("cp.async.wait_group 2;\n" ::: "memory");
    else if (n == 3)
        asm volatile("cp.async.wait_group 3;\n" ::: "memory");
    else if (n == 4)
        asm volatile("cp.async.wait_group 4;\n" ::: "memory");
    else
        asm volatile("cp.async.wait_group 5;\n" ::: "memory");
}

// Shared bytes of one block of the product.
template <int FMT, int WR, int WC, int MT, int NT, int STAGES> constexpr int mmqs_smem() {
    return STAGES * (16 * MT * WR * Raw<FMT>::CHUNKS * 16 + 8 * NT * WC * MMQ_BK * 2);
}

template <int FMT, int WR, int WC, int MT, int NT, int STAGES>
__device__ void mmqs(const uint8_t* w, size_t S, const __half* x, float* y, int rows, int cols, int n, int ystride,
                     int tiles, bool atomic, bool accumulate, int rb, int tb, int kz) {
    constexpr int THREADS = 32 * WR * WC, BM = 16 * MT * WR, BN = 8 * NT * WC, NB = BN / 8;
    constexpr int CH = Raw<FMT>::CHUNKS;
    constexpr int WCHUNKS = BM * CH, XCHUNKS = NB * 4 * 32;
    constexpr int STAGE = WCHUNKS + XCHUNKS;  // 16-byte chunks per stage
    extern __shared__ __align__(16) unsigned char mmq_smem[];
    uint4* ring = reinterpret_cast<uint4*>(mmq_smem);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wr = warp % WR, wc = warp / WR;
    const int g = lane >> 2, c = lane & 3;
    const int row0 = rb * BM, t0 = tb * BN;
    const int nsb = (cols + 255) >> 8, ktiles = (cols + MMQ_BK - 1) / MMQ_BK;
    const int kt0 = kz * tiles, kt1 = min(ktiles, kt0 + tiles);
    if (kt0 >= kt1) return;
    const bool live = row0 + wr * 16 * MT < rows;

    // Stage tile kt: the raw rows [BM][CH], then the inputs in fragment
    // order [n8 tile][step pair][lane] (mmq_reg.cu).
    auto stage = [&](int kt) {
        uint4* buf = ring + ((kt - kt0) % STAGES) * STAGE;
        for (int s = tid; s < WCHUNKS; s += THREADS) {
            const int r = s / CH, j = s - r * CH;
            const size_t sb = (size_t)min(row0 + r, rows - 1) * nsb + (kt >> 1);
            cp_async16(buf + s, Raw<FMT>::src(w, S, sb, kt & 1, j), true);
        }
        for (int s = tid; s < XCHUNKS; s += THREADS) {
            const int ni = s >> 7, jp = (s >> 5) & 3, l = s & 31;
            const int t = t0 + ni * 8 + (l >> 2);
            const int col =
                (kt >> 1) * 256 + Part<FMT>::lo(4 * (kt & 1) + (l & 3)) + (jp >> 1) * Part<FMT>::HI + 8 * (jp & 1);
            cp_async16(buf + WCHUNKS + s, x + (size_t)min(t, n - 1) * cols + min(col, cols - 8), t < n && col < cols);
        }
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int ni = 0; ni < NT; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[mi][ni][e] = 0.f;

    auto tile = [&](int kt) {
        const uint4* buf = ring + ((kt - kt0) % STAGES) * STAGE;
        const __half* xs = reinterpret_cast<const __half*>(buf + WCHUNKS);
        Part<FMT> pt[MT][2];
#pragma unroll
        for (int mi = 0; mi < MT; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                Raw<FMT>::part(pt[mi][h], buf + (wr * 16 * MT + mi * 16 + g + 8 * h) * CH, kt & 1, c);
                pt[mi][h].prep();
            }
#pragma unroll
        for (int k = 0; k < 2; k++) {
            int o[MT][2][4];
            __half2 s[MT][2], cc[MT][2];
#pragma unroll
            for (int mi = 0; mi < MT; mi++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    pt[mi][h].ints(k, o[mi][h]);
                    s[mi][h] = __float2half2_rn(pt[mi][h].s[k]);
                    cc[mi][h] = __float2half2_rn(-pt[mi][h].c[k]);
                }
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint32_t b[NT][2];
#pragma unroll
                for (int ni = 0; ni < NT; ni++) {
                    const uint4 v = *reinterpret_cast<const uint4*>(
                        xs + ((wc * NT + ni) * 4 * 32 + (2 * k + (i >> 1)) * 32 + lane) * 8);
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

    // The ring: STAGES - 1 tiles in flight before the first product; each
    // step waits for its tile, passes the barrier (every warp is done with
    // the buffer the previous step read) and refills that buffer.
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (kt0 + s < kt1) stage(kt0 + s);
        cp_async_commit();
    }
    for (int kt = kt0; kt < kt1; kt++) {
        cp_async_wait_pending(STAGES - 2);
        __syncthreads();
        if (kt + STAGES - 1 < kt1) stage(kt + STAGES - 1);
        cp_async_commit();
        if (live) tile(kt);
    }
    if (!live) return;

#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int ni = 0; ni < NT; ni++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = row0 + wr * 16 * MT + mi * 16 + g + (e >> 1) * 8;
                const int t = t0 + (wc * NT + ni) * 8 + 2 * c + (e & 1);
                if (r < rows && t < n) mmq_store(y + (size_t)t * ystride + r, acc[mi][ni][e], atomic, accumulate);
            }
}
