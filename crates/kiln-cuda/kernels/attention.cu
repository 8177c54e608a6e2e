// Attention over the paged KV cache, for prefill chunks and decode alike.
//
// The query rows are listed in rows[] (decode rows; prefill tiles go to
// attention_tc.cu). Every query row t attends to keys 0..=pos[t] of its sequence (causal; a
// chunk's own keys were written by rope_store before this runs), or with a
// sliding window (`window` > 0) to its last `window` of them. Its block
// table starts at tables[tab[t]]. Work is split three ways: query row, query
// head, and a range of keys (split-K, "flash decoding"), so that a single
// decoding sequence still fills the GPU. Within a block, each of the 4 warps
// takes every 4th key, several keys per iteration; a warp computes a q·k
// with its 32 lanes (HD/32 consecutive elements each) and keeps an online
// softmax (running max m, sum l, unnormalised output). With one split the block writes the final
// row; otherwise it writes (m, l, o), and the last block of the row and head
// to finish (a counter per row and head, reset by that block) merges them:
// no second kernel. Splits that start past a row's context exit at once
// (a captured decode graph sizes its split for a whole bucket of lengths).
#include "kv_fmt.cuh"

#define ATTN_WARPS 4
// Most splits per (row, head): `plan::MAX_SPLITS`, at most the block's threads.
#define ATTN_MAX_SPLITS 64
static_assert(ATTN_MAX_SPLITS <= ATTN_WARPS * 32, "one split per thread in the merge");

// Before the wait for the previous kernel (the one writing this step's Q and
// newest K/V): this block's K and V rows into L2, the lines of a row shared
// out over the query heads of its KV group. The rows are those of earlier
// steps (the newest key's may be fetched before its write; a prefetch only
// costs bandwidth), and the row lists, positions and block tables were
// copied in before the step. The block then starts on L2 latency instead
// of memory latency, which at a few iterations per block is most of its
// time: the 0.59B decodes 5-7% faster. ATTN_PF 0 turns it off.
#ifndef ATTN_PF
#define ATTN_PF 1
#endif

// As GEMV_LATE (gemv_out.cuh): the output projection's blocks are placed once
// this kernel's blocks have read their keys, not at its start, where they
// would hold the registers of attention blocks not yet placed.
#ifndef ATTN_LATE
#define ATTN_LATE 1
#endif

template <typename T, int HD>
__device__ __forceinline__ void attn_prefetch(const T* kc, const T* vc, const uint32_t* pos, const uint32_t* tab,
                                              const uint32_t* tables, const uint32_t* rows, int nh, int nkv, int bs,
                                              int split_len, int window) {
    if (!ATTN_PF) return;
    constexpr int LINES = HD * (int)sizeof(T) / 128;  // 128-byte lines per K or V row
    const int group = nh / nkv, kvh = blockIdx.y / group, gi = blockIdx.y % group;
    const int t = rows[blockIdx.x], ctx = (int)pos[t] + 1, lo = window_start(ctx, window);
    split_len = window_split(ctx - lo, split_len, window);
    const int k0 = lo + blockIdx.z * split_len, k1 = min(ctx, k0 + split_len);
    const uint32_t* table = tables + tab[t];
    for (int i = threadIdx.x + gi * blockDim.x; i < (k1 - k0) * LINES; i += blockDim.x * group) {
        const int j = k0 + i / LINES;
        const size_t at = (((size_t)table[j / bs] * nkv + kvh) * bs + j % bs) * HD + (i % LINES) * (128 / sizeof(T));
        prefetch_l2(kc + at);
        prefetch_l2(vc + at);
    }
}

// attn_prefetch for a quantized side (or two): each key's quant rows (the
// scales, 1/16 of the bytes, are left to the loads).
template <typename KF, typename VF, int HD>
__device__ __forceinline__ void attn_prefetch_q(const typename KF::Elem* kc, const typename VF::Elem* vc,
                                                const uint32_t* pos, const uint32_t* tab, const uint32_t* tables,
                                                const uint32_t* rows, int nh, int nkv, int bs, int split_len,
                                                int window) {
    if (!ATTN_PF) return;
    const int group = nh / nkv, kvh = blockIdx.y / group, gi = blockIdx.y % group;
    const int t = rows[blockIdx.x], ctx = (int)pos[t] + 1, lo = window_start(ctx, window);
    split_len = window_split(ctx - lo, split_len, window);
    const int k0 = lo + blockIdx.z * split_len, k1 = min(ctx, k0 + split_len);
    const uint32_t* table = tables + tab[t];
    for (int i = threadIdx.x + gi * blockDim.x; i < k1 - k0; i += blockDim.x * group) {
        const int j = k0 + i;
        const size_t blk = table[j / bs];
        kv_prefetch_row<KF, HD>(kc, blk, kvh, j % bs, nkv, bs);
        kv_prefetch_row<VF, HD>(vc, blk, kvh, j % bs, nkv, bs);
    }
}

// KF, VF: how K and V are stored (kv_fmt.cuh); KvPlain<T> for both is the
// f16/bf16 cache, the same loads as ever.
template <typename T, typename KF, typename VF, int HD>
__device__ void attn_split(const float* qkv, const typename KF::Elem* kc, const typename VF::Elem* vc, const uint32_t* pos, const uint32_t* tab,
                           const uint32_t* tables, const uint32_t* rows, float* part_o, float* part_ml,
                           uint32_t* counters, T* out, int nh, int nkv, int bs, int split_len, float scale,
                           int window, const float* sinks) {
    constexpr int EPL = HD / 32;
    __shared__ float sm_ml[ATTN_WARPS][2];
    __shared__ float sm_o[ATTN_WARPS][HD];
    const int t = rows[blockIdx.x], h = blockIdx.y, sp = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kvh = h / (nh / nkv);
    const int ctx = (int)pos[t] + 1, lo = window_start(ctx, window);
    const SplitRange sr = split_range(ctx - lo, window_split(ctx - lo, split_len, window), sp);
    const int k0 = lo + sr.k0, k1 = lo + sr.k1, nsplit = sr.n;
    if (sp >= nsplit) return;
    const size_t stride = gridDim.z;  // partials per (row, head)
    const uint32_t* table = tables + tab[t];

    float q[EPL];
    const float* qp = qkv + (size_t)t * (nh + 2 * nkv) * HD + (size_t)h * HD + lane * EPL;
#pragma unroll
    for (int e = 0; e < EPL; e++) q[e] = qp[e] * scale;
    // Rotated keys: the query rotated alike (kv_fmt.cuh).
    if constexpr (KF::quant) wht_lanes<EPL, HD>(q);

    float m = -INFINITY, l = 0.f, acc[EPL];
#pragma unroll
    for (int e = 0; e < EPL; e++) acc[e] = 0.f;
    // U keys per warp and iteration (keys j, j + 4, ...: the warps stay
    // interleaved), their K and V rows loaded together before any is used:
    // one key at a time left a single load in flight per warp, so long
    // contexts ran at a fraction of the memory bandwidth. The U dot
    // products reduce independently (their shuffles overlap) and the online
    // softmax is updated once per group. The rows stay 16-bit in registers
    // until used, which puts twice the keys in flight for the registers that
    // float rows took: 8B decode at depth 2048 +1.6% (docs/cuda.md). Twice
    // that again at head dimension 128 (96 registers) was 2% slower.
    constexpr int U = HD <= 64 ? 16 : (HD <= 128 ? 8 : 4);
    for (int j0 = k0 + warp; j0 < k1; j0 += ATTN_WARPS * U) {
        typename KF::template Raw<EPL> kr[U];
        typename VF::template Raw<EPL> vr[U];
        float s[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int j = j0 + u * ATTN_WARPS;
            if (j < k1) {
                const size_t blk = table[j / bs];
                kr[u] = KF::template load<HD, EPL>(kc, blk, kvh, j % bs, nkv, bs, lane * EPL);
                vr[u] = VF::template load<HD, EPL>(vc, blk, kvh, j % bs, nkv, bs, lane * EPL);
            } else {
                kr[u] = typename KF::template Raw<EPL>{};
                vr[u] = typename VF::template Raw<EPL>{};
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kf[EPL];
            KF::template unpack<EPL>(kr[u], kf);
            float d = 0.f;
#pragma unroll
            for (int e = 0; e < EPL; e++) d += q[e] * kf[e];
            s[u] = d;
        }
#pragma unroll
        for (int u = 0; u < U; u++) s[u] = warp_sum(s[u]);
        // Key j0 is always in range: mn is finite.
        float mn = m;
#pragma unroll
        for (int u = 0; u < U; u++)
            if (j0 + u * ATTN_WARPS < k1) mn = fmaxf(mn, s[u]);
        const float corr = __expf(m - mn);
        l *= corr;
#pragma unroll
        for (int e = 0; e < EPL; e++) acc[e] *= corr;
#pragma unroll
        for (int u = 0; u < U; u++) {
            if (j0 + u * ATTN_WARPS < k1) {
                const float p = __expf(s[u] - mn);
                l += p;
                float vf[EPL];
                VF::template unpack<EPL>(vr[u], vf);
#pragma unroll
                for (int e = 0; e < EPL; e++) acc[e] += p * vf[e];
            }
        }
        m = mn;
    }
    if (ATTN_LATE) pdl_launch();
    // Over rotated values the output is rotated: back (H is its own inverse).
    if constexpr (VF::quant) wht_lanes<EPL, HD>(acc);
    if (lane == 0) {
        sm_ml[warp][0] = m;
        sm_ml[warp][1] = l;
    }
#pragma unroll
    for (int e = 0; e < EPL; e++) sm_o[warp][lane * EPL + e] = acc[e];
    __syncthreads();

    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < ATTN_WARPS; w++) M = fmaxf(M, sm_ml[w][0]);
    float L = 0.f, f[ATTN_WARPS];
#pragma unroll
    for (int w = 0; w < ATTN_WARPS; w++) {
        f[w] = sm_ml[w][0] == -INFINITY ? 0.f : __expf(sm_ml[w][0] - M);
        L += sm_ml[w][1] * f[w];
    }
    // Partial results are indexed by list position, the output by row.
    const size_t row = (size_t)blockIdx.x * nh + h, orow = (size_t)t * nh + h;
    const float fs = nsplit == 1 ? fold_sink(sinks, h, M, L) : 1.f;
    for (int i = threadIdx.x; i < HD; i += blockDim.x) {
        float o = 0.f;
#pragma unroll
        for (int w = 0; w < ATTN_WARPS; w++) o += sm_o[w][i] * f[w];
        if (nsplit == 1)
            out[orow * HD + i] = from_f<T>(L > 0.f ? o * fs / L : 0.f);
        else
            part_o[(row * stride + sp) * HD + i] = o;
    }
    if (nsplit == 1) return;
    if (threadIdx.x == 0) {
        part_ml[(row * stride + sp) * 2] = M;
        part_ml[(row * stride + sp) * 2 + 1] = L;
    }
    // Publish this split, then let the last one to finish merge them all.
    if (!split_last(&counters[row], (unsigned)nsplit)) return;
    // The merge reads every split at once: thread s takes split s's (m, l)
    // and its weight, then each output element sums the weighted partial
    // outputs with several loads in flight. (Split after split, each load
    // waiting on the test of the one before, it was two L2 round trips per
    // split: most of the extra cost of decoding at depth 2048.)
    __shared__ float sm_w[ATTN_MAX_SPLITS], sm_red[32];
    const float* ml = part_ml + row * stride * 2;
    const bool mine = threadIdx.x < nsplit;
    const float ms = mine ? __ldcg(ml + 2 * threadIdx.x) : -INFINITY;
    const float ls = mine ? __ldcg(ml + 2 * threadIdx.x + 1) : 0.f;
    const float MM = block_max(ms, sm_red);
    const float ws = ms == -INFINITY ? 0.f : __expf(ms - MM);
    if (mine) sm_w[threadIdx.x] = ws;
    float LL = block_sum(ls * ws, sm_red);  // its barriers publish sm_w
    const float fm = fold_sink(sinks, h, MM, LL);
    for (int i = threadIdx.x; i < HD; i += blockDim.x) {
        float o = 0.f;
#pragma unroll 8
        for (int s = 0; s < nsplit; s++) o += __ldcg(part_o + (row * stride + s) * HD + i) * sm_w[s];
        out[orow * HD + i] = from_f<T>(LL > 0.f ? o * fm / LL : 0.f);
    }
}

#ifndef KV_QUANT_TU  // the f16/bf16 cache's entries; kv_quant.cu holds the quantized ones
#define ATTN_ENTRY(SUF, TY, HD)                                                                                   \
    extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32)                                                \
        attn_split_##HD##_##SUF(const float* qkv, const TY* kc, const TY* vc, const uint32_t* pos,               \
                                const uint32_t* tab, const uint32_t* tables, const uint32_t* rows,               \
                                float* part_o, float* part_ml, uint32_t* counters, TY* out, int nh, int nkv,     \
                                int bs, int split_len, float scale, int window, const float* sinks) {            \
        attn_prefetch<TY, HD>(kc, vc, pos, tab, tables, rows, nh, nkv, bs, split_len, window);                   \
        pdl_wait();                                                                                              \
        if (!ATTN_LATE) pdl_launch();                                                                            \
        attn_split<TY, KvPlain<TY>, KvPlain<TY>, HD>(qkv, kc, vc, pos, tab, tables, rows, part_o, part_ml,      \
                                                     counters, out, nh, nkv, bs, split_len, scale, window, sinks); \
    }
ATTN_ENTRY(f16, __half, 64)
ATTN_ENTRY(f16, __half, 128)
ATTN_ENTRY(f16, __half, 256)
ATTN_ENTRY(bf16, __nv_bfloat16, 64)
ATTN_ENTRY(bf16, __nv_bfloat16, 128)
ATTN_ENTRY(bf16, __nv_bfloat16, 256)

#endif

#ifdef KV_QUANT_TU
// A quantized cache (K and V each f16, q8_0 or q4_0, not both f16):
// attn_split_<hd>_<dtype>_<k>_<v>, the pools as bytes (kv_quant.cu).
#define ATTN_ENTRY_Q(SUF, TY, HD, KN, KF, VN, VF)                                                                 \
    extern "C" __global__ void __launch_bounds__(ATTN_WARPS * 32)                                                \
        attn_split_##HD##_##SUF##_##KN##_##VN(                                                                   \
            const float* qkv, const typename KF::Elem* kc, const typename VF::Elem* vc, const uint32_t* pos,    \
            const uint32_t* tab, const uint32_t* tables, const uint32_t* rows, float* part_o, float* part_ml,    \
            uint32_t* counters, TY* out, int nh, int nkv, int bs, int split_len, float scale, int window,       \
            const float* sinks) {                                                                                \
        attn_prefetch_q<KF, VF, HD>(kc, vc, pos, tab, tables, rows, nh, nkv, bs, split_len, window);             \
        pdl_wait();                                                                                              \
        if (!ATTN_LATE) pdl_launch();                                                                            \
        attn_split<TY, KF, VF, HD>(qkv, kc, vc, pos, tab, tables, rows, part_o, part_ml, counters, out, nh, nkv, \
                                   bs, split_len, scale, window, sinks);                                         \
    }
// One (K, V) pair per build of kv_quant.cu (KV_K, KV_KF, KV_V, KV_VF).
#define ATTN_ENTRY_QX(...) ATTN_ENTRY_Q(__VA_ARGS__)
#define ATTN_Q_KV(SUF, TY, HD) ATTN_ENTRY_QX(SUF, TY, HD, KV_K, KV_KF<TY>, KV_V, KV_VF<TY>)
ATTN_Q_KV(f16, __half, 64)
ATTN_Q_KV(f16, __half, 128)
ATTN_Q_KV(f16, __half, 256)
ATTN_Q_KV(bf16, __nv_bfloat16, 64)
ATTN_Q_KV(bf16, __nv_bfloat16, 128)
ATTN_Q_KV(bf16, __nv_bfloat16, 256)
#endif
