// An experiment (scripts/gpu/kernels/mmq_forms.cu `wg`, sm_90a), correct
// but slower than mmq.cu at 33-64 rows on an H200: docs/cuda.md, "Tried
// and dropped".
// Products of Q4_K weights with 33 to 64 input rows on Hopper's warpgroup
// tensor-core instruction (wgmma, sm_90a): y[t] (+)= W · x[t], the same
// contract, grid and K splits as mmq.cu.
//
// A warpgroup (4 warps) multiplies 64 · MW weight rows by 64 input rows
// with `wgmma.mma_async m64n64k16`, its A operand (the weights) in
// registers, its B operand (the inputs) read by the tensor cores straight
// from shared memory. Each lane dequantizes its rows' quants into the A
// fragment (rows g and g + 8 of its warp's 16, k slots 2c, 2c + 1, 2c + 8,
// 2c + 9: bytes 2c, 2c + 1, 2c + 8, 2c + 9 of the row's 16 quant bytes
// that hold the step's 16 weights as low or high nibbles), so the inputs
// stay in their natural order. Every K tile's raw quant rows and inputs
// come in by cp.async into a ring of STAGES buffers; the inputs in the
// layout of 8 × 16-byte core matrices that the no-swizzle K-major
// descriptor reads: core matrix (8 inputs, 8 k) at ((t / 8) · 16 + k / 8)
// · 128 bytes, so the next core matrix along K is 128 bytes on and along N
// 2048.
#include "mmq_common.cuh"

__device__ __forceinline__ uint64_t wg_desc(const void* p, uint32_t lbo, uint32_t sbo) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((a & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Waits until at most N of this thread's cp.async groups are pending.
template <int N> __device__ __forceinline__ void cp_async_wait_n() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// d (32 f32 per thread) += A (registers) · B (descriptor), 64 × 64 × 16.
__device__ __forceinline__ void wgmma_m64n64k16_rs(float* d, const uint32_t* a, uint64_t desc) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(1));
}

// Shared bytes of a block: STAGES × (the raw rows, 80 bytes each, and the
// 64 input rows' 256 bytes).
template <int WG, int MW, int STAGES> constexpr int mmqw_smem() {
    return STAGES * (64 * MW * WG * 80 + 64 * 256) + 64 * MW * WG * 32;
}

// SWAP: the descriptor's two offsets the other way round (a harness check).
template <int WG, int MW, int STAGES, bool SWAP = false>
__device__ void mmqw_q4k(const uint8_t* w, const __half* x, float* y, int rows, int cols, int n, int ystride,
                         int tiles, bool atomic, bool accumulate, int rb, int tb, int kz) {
    static_assert(STAGES >= 3, "a tile in use, the next dequantized, one in flight");
    constexpr int THREADS = 128 * WG, BM = 64 * MW * WG, BN = 64;
    constexpr int CH = 5;  // per raw row: the superblock's header, then the tile's 64 quant bytes
    constexpr int WCH = BM * CH, XCH = BN * 16, STAGE = WCH + XCH;  // 16-byte chunks
    constexpr int WPT = (WCH + THREADS - 1) / THREADS, XPT = XCH / THREADS;
    extern __shared__ __align__(16) unsigned char mmq_smem[];
    uint4* ring = reinterpret_cast<uint4*>(mmq_smem);
    // The tile's scales and negated offsets per row: 4 groups × (s, −c) as f16 pairs.
    uint4* table = ring + STAGES * STAGE;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wgi = warp >> 2, wq = warp & 3;
    const int g = lane >> 2, c = lane & 3;
    const int row0 = rb * BM, t0 = tb * BN;
    const int nsb = (cols + 255) >> 8, ktiles = (cols + MMQ_BK - 1) / MMQ_BK;
    const int kt0 = kz * tiles, kt1 = min(ktiles, kt0 + tiles);
    if (kt0 >= kt1) return;

    // This thread's copies, their sources at superblock 0 / column 0.
    const uint8_t* wsrc[WPT];
    int wq_off[WPT];  // 0 for a header, else 1 (the quarter moves 64 bytes with the tile's half)
#pragma unroll
    for (int i = 0; i < WPT; i++) {
        const int s = min(tid + i * THREADS, WCH - 1), r = s / CH, j = s - r * CH;
        wsrc[i] = w + (size_t)min(row0 + r, rows - 1) * nsb * 144 + (j == 0 ? 0 : 16 + 16 * (j - 1));
        wq_off[i] = j != 0;
    }
    const __half* xsrc[XPT];
    int xdst[XPT];
    bool xok[XPT];
#pragma unroll
    for (int i = 0; i < XPT; i++) {
        const int s = tid + i * THREADS, t = s >> 4, kc = s & 15;
        xsrc[i] = x + (size_t)min(t0 + t, n - 1) * cols + kc * 8;
        xdst[i] = WCH + ((t >> 3) * 16 + kc) * 8 + (t & 7);
        xok[i] = t0 + t < n;
    }
    auto stage = [&](int kt) {
        uint4* buf = ring + ((kt - kt0) % STAGES) * STAGE;
        const size_t sbo = (size_t)(kt >> 1) * 144 + 64 * (kt & 1);
#pragma unroll
        for (int i = 0; i < WPT; i++)
            if (WCH % THREADS == 0 || tid + i * THREADS < WCH)
                cp_async16(buf + tid + i * THREADS, wsrc[i] + (wq_off[i] ? sbo : (size_t)(kt >> 1) * 144), true);
#pragma unroll
        for (int i = 0; i < XPT; i++) cp_async16(buf + xdst[i], xsrc[i] + kt * MMQ_BK, xok[i]);
    };

    float acc[MW][32];
#pragma unroll
    for (int m = 0; m < MW; m++)
#pragma unroll
        for (int e = 0; e < 32; e++) acc[m][e] = 0.f;

    // Tile kt's A fragments, all 8 steps, into `a` (its raw rows landed and
    // every thread passed a barrier since).
    auto dequant = [&](int kt, uint32_t (&a)[8][MW][4]) {
        const uint4* buf = ring + ((kt - kt0) % STAGES) * STAGE;
        const int half = kt & 1;
        // The scale table: one thread per (row, chunk of 64), both of the
        // chunk's groups.
        for (int item = tid; item < BM * 2; item += THREADS) {
            const int r = item >> 1, ch = item & 1;
            float sv[2], cv[2];
            k4_scales(buf[r * CH], 4 * half + 2 * ch, sv, cv);
            const __half2 s0 = __float2half2_rn(sv[0]), c0 = __float2half2_rn(-cv[0]);
            const __half2 s1 = __float2half2_rn(sv[1]), c1 = __float2half2_rn(-cv[1]);
            table[r * 2 + ch] =
                make_uint4(*reinterpret_cast<const uint32_t*>(&s0), *reinterpret_cast<const uint32_t*>(&c0),
                           *reinterpret_cast<const uint32_t*>(&s1), *reinterpret_cast<const uint32_t*>(&c1));
        }
        __syncthreads();
#pragma unroll
        for (int m = 0; m < MW; m++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int row = wgi * 64 * MW + m * 64 + wq * 16 + g + 8 * h;
                const uint4 tb2[2] = {table[row * 2], table[row * 2 + 1]};
#pragma unroll
                for (int st = 0; st < 8; st++) {
                    // Step st: k 16 · st .. + 15 of the tile = chunk st / 4
                    // of 64, run (st / 2) % 2 (low or high nibbles) of its
                    // 32 bytes, bytes 16 · (st % 2) .. + 15.
                    const int j = 1 + 2 * (st >> 2) + (st & 1), nib = (st >> 1) & 1, ca = st >> 2;
                    const uint4 v = buf[row * CH + j];
                    const uint32_t lo = (c >> 1) ? v.y : v.x, hi = (c >> 1) ? v.w : v.z;
                    uint32_t u = __byte_perm(lo, hi, (c & 1) ? 0x7632 : 0x5410);
                    u = (nib ? u >> 4 : u) & 0x0F0F0F0Fu;
                    const uint32_t sb = nib ? tb2[ca].z : tb2[ca].x, cb = nib ? tb2[ca].w : tb2[ca].y;
                    dequant_pairs<FMT_Q4K>(u, *reinterpret_cast<const __half2*>(&sb),
                                           *reinterpret_cast<const __half2*>(&cb), a[st][m][h], a[st][m][2 + h]);
                }
            }
    };
    auto issue = [&](int kt, uint32_t (&a)[8][MW][4]) {
        const uint4* xs = ring + ((kt - kt0) % STAGES) * STAGE + WCH;
        wg_fence();
#pragma unroll
        for (int st = 0; st < 8; st++) {
            const uint64_t desc =
                SWAP ? wg_desc(xs + 2 * st * 8, 2048, 128) : wg_desc(xs + 2 * st * 8, 128, 2048);
#pragma unroll
            for (int m = 0; m < MW; m++) wgmma_m64n64k16_rs(acc[m], a[st][m], desc);
        }
        wg_commit();
    };
    // Tile kt's products go out from `cur`; then (tile kt - 1's products
    // done, its buffer and fragments free) the ring takes tile kt + STAGES
    // - 1 and tile kt + 1 is dequantized into `nxt` while kt's run.
    auto step = [&](int kt, uint32_t (&cur)[8][MW][4], uint32_t (&nxt)[8][MW][4]) {
        issue(kt, cur);
        wg_wait<1>();
        if (kt + 1 >= kt1) return;
        cp_async_wait_n<STAGES - 3>();
        fence_proxy_async();
        __syncthreads();
        if (kt + STAGES - 1 < kt1) stage(kt + STAGES - 1);
        cp_async_commit();
        dequant(kt + 1, nxt);
    };

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (kt0 + s < kt1) stage(kt0 + s);
        cp_async_commit();
    }
    uint32_t fa[8][MW][4], fb[8][MW][4];
    cp_async_wait_n<STAGES - 2>();
    fence_proxy_async();
    __syncthreads();
    dequant(kt0, fa);
    for (int kt = kt0; kt < kt1; kt += 2) {
        step(kt, fa, fb);
        if (kt + 1 < kt1) step(kt + 1, fb, fa);
    }
    wg_wait<0>();

#pragma unroll
    for (int m = 0; m < MW; m++)
#pragma unroll
        for (int jn = 0; jn < 8; jn++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = row0 + wgi * 64 * MW + m * 64 + wq * 16 + g + 8 * (e >> 1);
                const int t = t0 + jn * 8 + 2 * c + (e & 1);
                if (r < rows && t < n) mmq_store(y + (size_t)t * ystride + r, acc[m][4 * jn + e], atomic, accumulate);
            }
}
