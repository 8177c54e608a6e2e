// Decode attention by KV group on the tensor cores. The query heads that
// share a KV head (up to 16 of them) are the 16 rows of one mma tile, so a
// block reads each K and V row of its key range once for the whole group:
// the per-head kernel (attention.cu) reads it once per query head, which at
// a group of 4 (Llama-3-8B) is 4x the L2 traffic. A block of 4 warps takes
// one decode row, one KV group (or 16 of its heads) and one split of the
// keys; its keys come into shared memory 64 at a time with cp.async (all of
// a tile's loads in flight at once, no registers held for them), and each
// warp takes 16 of them: S = Q·Kᵀ and O += P·V are mma.sync m16n8k16 with
// an online softmax per row (head), as in attention_tc.cu. The warps' (m,
// l, O) are merged in shared memory; with several splits the last block of
// the row and group to finish merges the splits of all its heads at once.
//
// Q and P enter the mma as 16-bit pairs hi + lo (lo = the rounding error of
// hi), each product taken twice: the scores and the weighting of V keep
// about f32's precision in Q and P, as the per-head kernel's float
// arithmetic does (K and V are stored 16-bit either way). Rounding Q and P
// to 16 bits once moved a random-weight Q4_K model's greedy tokens off the
// CPU path's after 12 of 48 (the per-head kernel: 48 of 48). The extra
// products cost nothing measurable: the kernel waits on memory.
#include "mma.cuh"

#define GRP_ROWS 16  // query heads per block: one mma row tile
#define GRP_WARPS 4
#define GRP_KEYS (16 * GRP_WARPS)  // keys per tile, 16 per warp
// Most splits per (row, head): `plan::MAX_SPLITS` (two per lane in the merge).
#define GRP_MAX_SPLITS 64

// Before the wait for the previous kernel: this block's K and V rows into
// L2 (as attn_prefetch in attention.cu; keys of earlier steps, and a
// prefetch of the newest one only costs bandwidth).
template <typename T, int HD>
__device__ __forceinline__ void group_prefetch(const T* kc, const T* vc, const uint32_t* pos, const uint32_t* tab,
                                               const uint32_t* tables, const uint32_t* rows, int nkv, int kvh,
                                               int bs, int split_len) {
    constexpr int LINES = HD * (int)sizeof(T) / 128;
    const int t = rows[blockIdx.x], ctx = (int)pos[t] + 1;
    const int k0 = blockIdx.z * split_len, k1 = min(ctx, k0 + split_len);
    const uint32_t* table = tables + tab[t];
    for (int i = threadIdx.x; i < (k1 - k0) * LINES; i += blockDim.x) {
        const int j = k0 + i / LINES;
        const size_t at = (((size_t)table[j / bs] * nkv + kvh) * bs + j % bs) * HD + (i % LINES) * (128 / sizeof(T));
        prefetch_l2(kc + at);
        prefetch_l2(vc + at);
    }
}

// The final outputs of heads h0 .. h0 + nq - 1 of one row from their
// splits' partials (`prow`: the first head's partial row), by the whole
// block: one warp per head weighs the splits (lane s and s + 32 take split
// s), then each thread sums 4 output elements of one head over the splits,
// all heads at once. `sw` holds GRP_ROWS × (GRP_MAX_SPLITS + 1) floats.
template <typename T, int HD>
__device__ __forceinline__ void merge_splits(const float* part_o, const float* part_ml, size_t prow, size_t stride,
                                             int nq, int nsplit, float* sw, T* out) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* tot = sw + GRP_ROWS * GRP_MAX_SPLITS;
    for (int r = warp; r < nq; r += GRP_WARPS) {
        const float* ml = part_ml + (prow + r) * stride * 2;
        const bool a = lane < nsplit, b = lane + 32 < nsplit;
        const float m0 = a ? __ldcg(ml + 2 * lane) : -INFINITY, l0 = a ? __ldcg(ml + 2 * lane + 1) : 0.f;
        const float m1 = b ? __ldcg(ml + 2 * lane + 64) : -INFINITY, l1 = b ? __ldcg(ml + 2 * lane + 65) : 0.f;
        const float M = warp_reduce<MaxOp>(fmaxf(m0, m1));
        const float w0 = m0 == -INFINITY ? 0.f : __expf(m0 - M), w1 = m1 == -INFINITY ? 0.f : __expf(m1 - M);
        const float L = warp_sum(l0 * w0 + l1 * w1);
        sw[r * GRP_MAX_SPLITS + lane] = w0;
        sw[r * GRP_MAX_SPLITS + lane + 32] = w1;
        if (lane == 0) tot[r] = L > 0.f ? 1.f / L : 0.f;
    }
    __syncthreads();
    constexpr int Q4 = HD / 4;  // threads per head
    for (int i = threadIdx.x; i < nq * Q4; i += blockDim.x) {
        const int r = i / Q4, d = (i % Q4) * 4;
        const float* po = part_o + (prow + r) * stride * HD + d;
        const float* w = sw + r * GRP_MAX_SPLITS;
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 16
        for (int s = 0; s < nsplit; s++) {
            const float4 v = __ldcg(reinterpret_cast<const float4*>(po + (size_t)s * HD));
            o.x += w[s] * v.x;
            o.y += w[s] * v.y;
            o.z += w[s] * v.z;
            o.w += w[s] * v.w;
        }
        const float inv = tot[r];
        T* y = out + (size_t)r * HD + d;
        y[0] = from_f<T>(o.x * inv);
        y[1] = from_f<T>(o.y * inv);
        y[2] = from_f<T>(o.z * inv);
        y[3] = from_f<T>(o.w * inv);
    }
}

template <typename T, int HD>
__device__ void attn_group(const float* qkv, const T* kc, const T* vc, const uint32_t* pos, const uint32_t* tab,
                           const uint32_t* tables, const uint32_t* rows, float* part_o, float* part_ml,
                           uint32_t* counters, T* out, int nh, int nkv, int bs, int split_len, float scale) {
    constexpr int LD = HD + 8;  // padded row, in elements (16-byte aligned, fewer bank conflicts)
    constexpr int KS = HD / 16; // k-steps of Q·Kᵀ
    constexpr int ND = HD / 8;  // n-tiles of O
    // The K and V tile; after the loop, the warps' partial outputs.
    constexpr int TILE_BYTES = 2 * GRP_KEYS * LD * (int)sizeof(T);
    static_assert(GRP_WARPS * GRP_ROWS * HD * (int)sizeof(float) <= TILE_BYTES, "warp partials");
    static_assert(GRP_ROWS * (GRP_MAX_SPLITS + 1) * (int)sizeof(float) <= TILE_BYTES, "split weights");
    __shared__ __align__(16) unsigned char sm_tile[TILE_BYTES];
    __shared__ __align__(16) T qs[2][GRP_ROWS * LD];  // Q's hi and lo parts
    __shared__ float sm_m[GRP_WARPS][GRP_ROWS], sm_l[GRP_WARPS][GRP_ROWS];
    __shared__ bool last;
    T* ks = reinterpret_cast<T*>(sm_tile);
    T* vs = ks + GRP_KEYS * LD;

    const int group = nh / nkv, chunks = (group + GRP_ROWS - 1) / GRP_ROWS;
    const int kvh = blockIdx.y / chunks, h0 = kvh * group + (blockIdx.y % chunks) * GRP_ROWS;
    const int nq = min(GRP_ROWS, kvh * group + group - h0);  // heads of this block
    const int t = rows[blockIdx.x], sp = blockIdx.z;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int ctx = (int)pos[t] + 1;
    const int k0 = sp * split_len, k1 = min(ctx, k0 + split_len);
    // Splits holding keys of this row (the grid may have more).
    const int nsplit = min((int)gridDim.z, (ctx + split_len - 1) / split_len);
    if (sp >= nsplit) return;
    const size_t stride = gridDim.z;  // partials per (row, head)
    const uint32_t* table = tables + tab[t];

    auto load_tile = [&](int kt) {
        for (int i = tid; i < GRP_KEYS * HD / 8; i += blockDim.x) {
            const int key = i / (HD / 8), ch = i % (HD / 8), j = kt + key;
            const bool ok = j < k1;
            const size_t at = ok ? (((size_t)table[j / bs] * nkv + kvh) * bs + j % bs) * HD + ch * 8 : 0;
            cp_async16(&ks[key * LD + ch * 8], kc + at, ok);
            cp_async16(&vs[key * LD + ch * 8], vc + at, ok);
        }
    };
    load_tile(k0);
    const size_t width = (size_t)(nh + 2 * nkv) * HD;
    for (int i = tid; i < GRP_ROWS * HD; i += blockDim.x) {
        const int r = i / HD, d = i % HD;
        const float q = r < nq ? qkv[(size_t)t * width + (size_t)(h0 + r) * HD + d] * scale : 0.f;
        const T hi = from_f<T>(q);
        qs[0][r * LD + d] = hi;
        qs[1][r * LD + d] = from_f<T>(q - to_f(hi));
    }
    __syncthreads();
    float o[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;  // rows (heads) g and g + 8
    const int wk = warp * 16;  // this warp's keys within a tile

    for (int kt = k0; kt < k1; kt += GRP_KEYS) {
        cp_async_wait_all();
        __syncthreads();
        if (kt + wk < k1) {  // warp-uniform: mma.sync needs all 32 lanes
            float s[2][4];
#pragma unroll
            for (int n = 0; n < 2; n++) {
                s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
                for (int k = 0; k < KS; k++) {
                    const T* kr = &ks[(wk + n * 8 + g) * LD + k * 16 + 2 * c];
                    const uint32_t b0 = ld32(kr), b1 = ld32(kr + 8);
#pragma unroll
                    for (int part = 0; part < 2; part++) {
                        const T* q = &qs[part][g * LD + k * 16 + 2 * c];
                        const uint32_t a[4] = {ld32(q), ld32(q + 8 * LD), ld32(q + 8), ld32(q + 8 * LD + 8)};
                        mma16816<T>(s[n], a, b0, b1);
                    }
                }
            }
            // Keys past the split are masked; key kt + wk is in range, so
            // the new maxima are finite.
            float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
            for (int n = 0; n < 2; n++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    if (kt + wk + n * 8 + 2 * c + e >= k1) s[n][e] = s[n][2 + e] = -INFINITY;
                    mxa = fmaxf(mxa, s[n][e]);
                    mxb = fmaxf(mxb, s[n][2 + e]);
                }
            }
#pragma unroll
            for (int off = 1; off < 4; off <<= 1) {
                mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, off));
                mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, off));
            }
            const float na = fmaxf(ma, mxa), nb = fmaxf(mb, mxb);
            const float ca = __expf(ma - na), cb = __expf(mb - nb);
            ma = na;
            mb = nb;
            la *= ca;
            lb *= cb;
#pragma unroll
            for (int n = 0; n < ND; n++) {
                o[n][0] *= ca;
                o[n][1] *= ca;
                o[n][2] *= cb;
                o[n][3] *= cb;
            }
#pragma unroll
            for (int n = 0; n < 2; n++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    s[n][e] = __expf(s[n][e] - na);
                    s[n][2 + e] = __expf(s[n][2 + e] - nb);
                    la += s[n][e];
                    lb += s[n][2 + e];
                }
            }
            uint32_t pf[4], pl[4];
            split2<T>(s[0][0], s[0][1], pf[0], pl[0]);
            split2<T>(s[0][2], s[0][3], pf[1], pl[1]);
            split2<T>(s[1][0], s[1][1], pf[2], pl[2]);
            split2<T>(s[1][2], s[1][3], pf[3], pl[3]);
            const uint16_t* v16 = reinterpret_cast<const uint16_t*>(vs) + (wk + 2 * c) * LD;
#pragma unroll
            for (int n = 0; n < ND; n++) {
                const int d = n * 8 + g;
                const uint32_t b0 = join16(v16[d], v16[LD + d]);
                const uint32_t b1 = join16(v16[8 * LD + d], v16[9 * LD + d]);
                mma16816<T>(o[n], pf, b0, b1);
                mma16816<T>(o[n], pl, b0, b1);
            }
        }
        __syncthreads();  // every warp is done with the tile
        if (kt + GRP_KEYS < k1) load_tile(kt + GRP_KEYS);
    }
    pdl_launch();  // as ATTN_LATE in attention.cu
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) {
        la += __shfl_xor_sync(0xffffffffu, la, off);
        lb += __shfl_xor_sync(0xffffffffu, lb, off);
    }
    // The warps' partials (the tile area is free: the loop ended on a barrier).
    float* so = reinterpret_cast<float*>(sm_tile) + (size_t)warp * GRP_ROWS * HD;
#pragma unroll
    for (int n = 0; n < ND; n++) {
        const int d = n * 8 + 2 * c;
        so[g * HD + d] = o[n][0];
        so[g * HD + d + 1] = o[n][1];
        so[(g + 8) * HD + d] = o[n][2];
        so[(g + 8) * HD + d + 1] = o[n][3];
    }
    if (c == 0) {
        sm_m[warp][g] = ma;
        sm_m[warp][g + 8] = mb;
        sm_l[warp][g] = la;
        sm_l[warp][g + 8] = lb;
    }
    __syncthreads();
    // Partial results are indexed by list position, the output by row.
    const size_t prow = (size_t)blockIdx.x * nh + h0, orow = (size_t)t * nh + h0;
    const float* sall = reinterpret_cast<const float*>(sm_tile);
    for (int i = tid; i < nq * HD; i += blockDim.x) {
        const int r = i / HD, d = i % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < GRP_WARPS; w++) M = fmaxf(M, sm_m[w][r]);
        float L = 0.f, O = 0.f;
#pragma unroll
        for (int w = 0; w < GRP_WARPS; w++) {
            const float f = sm_m[w][r] == -INFINITY ? 0.f : __expf(sm_m[w][r] - M);
            L += sm_l[w][r] * f;
            O += sall[((size_t)w * GRP_ROWS + r) * HD + d] * f;
        }
        if (nsplit == 1) {
            out[(orow + r) * HD + d] = from_f<T>(L > 0.f ? O / L : 0.f);
        } else {
            part_o[((prow + r) * stride + sp) * HD + d] = O;
            if (d == 0) {
                part_ml[((prow + r) * stride + sp) * 2] = M;
                part_ml[((prow + r) * stride + sp) * 2 + 1] = L;
            }
        }
    }
    if (nsplit == 1) return;
    // Publish this split, then let the last one to finish merge them all
    // (a counter per row and block of heads, reset by that block).
    __threadfence();
    __syncthreads();
    if (tid == 0) {
        last = atomicAdd(&counters[prow], 1u) == (unsigned)nsplit - 1;
        if (last) counters[prow] = 0;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    // (The tile area is free again: the warp partials were read before the
    // barriers above.)
    merge_splits<T, HD>(part_o, part_ml, prow, stride, nq, nsplit, reinterpret_cast<float*>(sm_tile),
                        out + orow * HD);
}

#define GROUP_ENTRY(SUF, TY, HD)                                                                                   \
    extern "C" __global__ void __launch_bounds__(GRP_WARPS * 32)                                                  \
        attn_group_##HD##_##SUF(const float* qkv, const TY* kc, const TY* vc, const uint32_t* pos,               \
                                const uint32_t* tab, const uint32_t* tables, const uint32_t* rows,               \
                                float* part_o, float* part_ml, uint32_t* counters, TY* out, int nh, int nkv,     \
                                int bs, int split_len, float scale) {                                            \
        const int chunks = (nh / nkv + GRP_ROWS - 1) / GRP_ROWS;                                                 \
        group_prefetch<TY, HD>(kc, vc, pos, tab, tables, rows, nkv, blockIdx.y / chunks, bs, split_len);         \
        pdl_wait();                                                                                              \
        attn_group<TY, HD>(qkv, kc, vc, pos, tab, tables, rows, part_o, part_ml, counters, out, nh, nkv, bs,     \
                           split_len, scale);                                                                    \
    }
GROUP_ENTRY(f16, __half, 64)
GROUP_ENTRY(f16, __half, 128)
GROUP_ENTRY(bf16, __nv_bfloat16, 64)
GROUP_ENTRY(bf16, __nv_bfloat16, 128)
