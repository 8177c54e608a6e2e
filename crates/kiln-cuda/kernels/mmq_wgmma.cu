// The tensor-core quantized products of mmq.cu on Hopper's warpgroup
// instructions (wgmma, sm_90a; built only for compute capability 9.0 and
// loaded only there: src/gpu.rs). Same contract, grid, K splits and forms
// as mmq.cu: y[t] (+)= W · x[t] for 16-bit input rows x (n × cols), f32
// outputs (row t at t · ystride); a block computes BM = 64 · WG weight rows
// by BN input rows, one warpgroup (4 warps, 128 threads) per 64 weight rows.
//
// What changes against mma.sync: a warpgroup multiplies its 64 weight rows
// by all BN inputs with one asynchronous instruction per 16 columns of K
// (m64nBNk16), reading both operands from shared memory itself, so no warp
// spends instructions on ldmatrix fragments or on one mma per 16 × 8 × 16;
// and the product of a K tile runs while the same warps dequantize the next
// tile into the other buffer (wgmma.commit_group before the dequantizing,
// wgmma.wait_group after it).
//
// Shared tiles are in the instruction's no-swizzle K-major layout: core
// matrices of 8 rows × 8 values (128 contiguous bytes), the 16 of a row
// group along K next to each other (leading byte offset 128), row groups
// 2048 bytes apart (stride byte offset). A run of 16 dequantized weights is
// two 16-byte stores into two core matrices; the threads of a quarter warp
// store into 8 different rows of one core matrix (no bank conflicts), so
// part i of a thread is row item % BM, quarter item / BM (mmq.cu: item / 4,
// item % 4). Writes by ordinary stores and cp.async reach the tensor cores'
// reads through fence.proxy.async before the barrier.
#include "mmq_common.cuh"

// Offset in halves of value k of row r in a tile of 128 values per row.
__device__ __forceinline__ int mmqw_off(int r, int k) { return (r >> 3) * 1024 + (k >> 3) * 64 + (r & 7) * 8 + (k & 7); }

// The shared-memory matrix descriptor of a no-swizzle K-major tile at `p`.
__device__ __forceinline__ uint64_t mmqw_desc(const __half* p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(2048 >> 4) << 32);
}

__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// Keeps the compiler from moving the accumulators' uses across the
// asynchronous product.
template <int R> __device__ __forceinline__ void acc_fence(float* d) {
#pragma unroll
    for (int i = 0; i < R; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// D (64 × N, f32, N / 2 registers a thread) += A (64 × 16) · B (N × 16)ᵀ,
// both f16 K-major in shared memory. D's layout is mma.sync's C fragment,
// repeated: warp w of the warpgroup holds rows 16w .. 16w + 15, register
// 4j + e row g + 8 (e / 2), column 8j + 2 (lane % 4) + e % 2 (g = lane / 4).
template <int N> __device__ __forceinline__ void wgmma_f16(float* d, uint64_t a, uint64_t b);
template <> __device__ __forceinline__ void wgmma_f16<16>(float* d, uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "l"(a), "l"(b), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_f16<32>(float* d, uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(a), "l"(b), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_f16<64>(float* d, uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_f16<128>(float* d, uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(1));
}

template <int FMT, int WG, int BN, int AHEAD = MMQ_AHEAD, int XST = 2, int MAP = 1>
__device__ void mmqw(const uint8_t* w, size_t S, const __half* x, float* y, int rows, int cols, int n, int ystride,
                     int tiles, bool atomic, bool accumulate, int rb, int tb, int kz) {
    constexpr int BM = 64 * WG, THREADS = 128 * WG;
    constexpr int PARTS = BM * 4 / THREADS;  // parts per thread and tile
    extern __shared__ __align__(128) unsigned char mmqw_smem[];
    __half* sa = reinterpret_cast<__half*>(mmqw_smem);  // [2][BM × 128]
    __half* sb = sa + 2 * BM * MMQ_BK;                  // [XST][BN × 128]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wg = warp >> 2, wq = warp & 3;
    const int r0 = rb * BM, t0 = tb * BN;
    const int nsb = (cols + 255) >> 8, ktiles = (cols + MMQ_BK - 1) / MMQ_BK;
    const int kt0 = kz * tiles, kt1 = min(ktiles, kt0 + tiles);
    if (kt0 >= kt1) return;

    int pr[PARTS], pj[PARTS];
    size_t prow[PARTS];
#pragma unroll
    for (int i = 0; i < PARTS; i++) {
        const int item = tid + i * THREADS;
        if (MAP)
            pr[i] = item % BM, pj[i] = item / BM;
        else
            pr[i] = item >> 2, pj[i] = item & 3;
        prow[i] = (size_t)min(r0 + pr[i], rows - 1) * nsb;  // rows past the end repeat the last (not stored)
    }
    Part<FMT> ring[AHEAD][PARTS];
    auto fetch_parts = [&](Part<FMT>* part, int kt) {
#pragma unroll
        for (int i = 0; i < PARTS; i++) part[i].fetch(w, S, prow[i] + (kt >> 1), 4 * (kt & 1) + pj[i]);
    };
    auto store_parts = [&](Part<FMT>* part, int kt, int buf) {
        const int half0 = 128 * (kt & 1);
        __half* tile = sa + buf * BM * MMQ_BK;
#pragma unroll
        for (int i = 0; i < PARTS; i++) {
            const int p = 4 * (kt & 1) + pj[i];
            part[i].prep();
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const int col = Part<FMT>::lo(p) + k * Part<FMT>::HI - half0;
                dequant_run(part[i], k, tile + mmqw_off(pr[i], col), tile + mmqw_off(pr[i], col + 8));
            }
        }
    };
    // The input tile: BN rows × 16 chunks of 8 values; a quarter warp's
    // chunks are 8 rows of one core matrix.
    auto load_x = [&](int kt, int buf) {
        __half* tile = sb + buf * BN * MMQ_BK;
#pragma unroll
        for (int c = tid; c < BN * 16; c += THREADS) {
            const int r = (c & 7) | ((c >> 7) << 3), kb = (c >> 3) & 15;
            const int t = t0 + r, col = kt * MMQ_BK + kb * 8;
            const __half* src = x + (size_t)min(t, n - 1) * cols + min(col, cols - 8);
            cp_async16(tile + mmqw_off(r, kb * 8), src, t < n && col < cols);
        }
        cp_async_commit();
    };

    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) acc[i] = 0.f;

    fetch_parts(ring[0], kt0);
#pragma unroll
    for (int u = 0; u < XST - 1; u++) {
        if (kt0 + u < kt1) load_x(kt0 + u, u);
        else cp_async_commit();
    }
    store_parts(ring[0], kt0, 0);
#pragma unroll
    for (int u = 0; u < AHEAD; u++) fetch_parts(ring[u], min(kt0 + 1 + u, kt1 - 1));
    // One step: tile kt's product (buffer `buf`) issued; meanwhile the next
    // input tile comes in and the next weight tile is dequantized into the
    // other buffer; then the product is waited for, so that the next step
    // may overwrite this buffer.
    auto step = [&](int kt, Part<FMT>* part) {
        const int buf = (kt - kt0) & 1, xbuf = (kt - kt0) % XST;
        const bool more = kt + 1 < kt1;
        cp_async_wait<XST - 2>();
        fence_proxy_async();
        __syncthreads();
        if (kt + XST - 1 < kt1) load_x(kt + XST - 1, (kt - kt0 + XST - 1) % XST);
        else if (XST > 2) cp_async_commit();
        const __half* a_t = sa + buf * BM * MMQ_BK + wg * 64 * MMQ_BK;
        const __half* b_t = sb + xbuf * BN * MMQ_BK;
        wg_fence();
        acc_fence<BN / 2>(acc);
#pragma unroll
        for (int ks = 0; ks < MMQ_BK / 16; ks++) wgmma_f16<BN>(acc, mmqw_desc(a_t + ks * 128), mmqw_desc(b_t + ks * 128));
        wg_commit();
        if (more) {
            store_parts(part, kt + 1, buf ^ 1);
            fetch_parts(part, min(kt + 1 + AHEAD, kt1 - 1));
        }
        wg_wait0();
        acc_fence<BN / 2>(acc);
    };
    for (int kt = kt0; kt < kt1; kt += AHEAD) {
#pragma unroll
        for (int u = 0; u < AHEAD; u++)
            if (kt + u < kt1) step(kt + u, ring[u]);
    }

    const int g = lane >> 2, cq = lane & 3;
#pragma unroll
    for (int i = 0; i < BN / 2; i++) {
        const int j = i >> 2, e = i & 3;
        const int r = r0 + wg * 64 + wq * 16 + g + (e >> 1) * 8;
        const int t = t0 + j * 8 + 2 * cq + (e & 1);
        if (r >= rows || t >= n) continue;
        float* dst = y + (size_t)t * ystride + r;
        if (atomic)
            atomicAdd(dst, acc[i]);
        else if (accumulate)
            *dst += acc[i];
        else
            *dst = acc[i];
    }
}

// (MMQ_NO_ENTRIES: the templates only, for scripts/gpu/kernels/mmq_forms.cu.)
#ifndef MMQ_NO_ENTRIES
// Entries mmqw_{fmt}_{WG}x{BN / 16}: the forms of plan::MMQ_FORMS (64 × 16,
// 32, 64; 128 × 64, 128), arguments as mmq.cu's.
#define MMQW_ENTRY(FN, FMT, WG, BN)                                                                              \
    extern "C" __global__ void __launch_bounds__(128 * WG)                                                       \
        mmqw_##FN##_##WG##x##BN(const uint8_t* w, unsigned long long S, const __half* x, float* y, int rows,      \
                                int cols, int n, int ystride, int tiles, int atomic, int accumulate) {           \
        pdl_begin();                                                                                             \
        mmqw<FMT, WG, BN>(w, S, x, y, rows, cols, n, ystride, tiles, atomic != 0, accumulate != 0, blockIdx.y,   \
                          blockIdx.x, blockIdx.z);                                                               \
    }
#define MMQW_FMT(FN, FMT)                                                                                        \
    MMQW_ENTRY(FN, FMT, 1, 16)                                                                                   \
    MMQW_ENTRY(FN, FMT, 1, 32)                                                                                   \
    MMQW_ENTRY(FN, FMT, 1, 64)                                                                                   \
    MMQW_ENTRY(FN, FMT, 2, 64)                                                                                   \
    MMQW_ENTRY(FN, FMT, 2, 128)
MMQW_FMT(q4k, FMT_Q4K)
MMQW_FMT(q6k, FMT_Q6K)
MMQW_FMT(q8_0, FMT_Q8_0)
MMQW_FMT(q4_0, FMT_Q4_0)
MMQW_FMT(q4_1, FMT_Q4_1)
MMQW_FMT(q5k, FMT_Q5K)
MMQW_FMT(q5_0, FMT_Q5_0)
MMQW_FMT(q5_1, FMT_Q5_1)
MMQW_FMT(q3k, FMT_Q3K)
MMQW_FMT(q2k, FMT_Q2K)
MMQW_FMT(mxfp4, FMT_MXFP4)
#endif
