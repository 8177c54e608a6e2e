// Decode attention by KV group on the tensor cores (building blocks and
// the precision argument: attention_group.cuh). The query heads that share
// a KV head are the rows of one mma tile, so a block reads each K and V row
// of its keys once for the whole group: the per-head kernel (attention.cu)
// reads it once per query head, 4x the L2 traffic at the 8B's groups of 4.
// A block of 4 warps takes one decode row, one KV group (or 16 of its
// heads) and one range of keys (split-K, as attention.cu), one tile in
// flight; with several ranges the partials go to global memory and the last
// block of the row and group to finish merges the ranges of all its heads
// at once. (Tried: the ranges of a row and group as the 8 blocks of one
// thread block cluster, merged through distributed shared memory with no
// global partials: slower at depth, too few blocks stream the keys;
// docs/cuda.md.)
//
// attn_cluster (sm_90): the ranges of a (row, group) are the 16 blocks of
// one thread block cluster (more clusters past 16 × KMAX keys), each block
// NW warps that load all of its keys (up to KMAX) at once and take 16 keys
// each; the blocks merge through distributed shared memory, so at the
// contexts one cluster covers there are no global partials, fence or
// counter in the step's critical path. With several clusters, each writes
// one partial per head and the last block merges them as attn_group does.
#include <cooperative_groups.h>

#include "attention_swap.cuh"

namespace cg = cooperative_groups;

// Most splits per (row, head): `plan::MAX_SPLITS` (a multiple of 32: the
// merge's lanes take splits lane, lane + 32, ...).
#define GRP_MAX_SPLITS 64
// 1: a block copies its first keys of earlier steps into shared memory
// before the wait for the previous kernel (`group_load_keys`); 0: it only
// prefetches them into L2 (for A/B runs).
#ifndef GRP_EARLY
#define GRP_EARLY 1
#endif

// The final outputs of heads h0 .. h0 + nq - 1 of one row from their
// splits' partials (`prow`: the first head's partial row), by the whole
// block: one warp per head weighs the splits (lane s takes splits s,
// s + 32, ...), then each thread sums 4 output elements of one head over the splits,
// all heads at once. `sw` holds GRP_ROWS × (GRP_MAX_SPLITS + 1) floats.
template <typename T, int HD>
__device__ __forceinline__ void merge_splits(const float* part_o, const float* part_ml, size_t prow, size_t stride,
                                             int nq, int nsplit, float* sw, T* out, const float* sinks, int h0) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float* tot = sw + GRP_ROWS * GRP_MAX_SPLITS;
    for (int r = warp; r < nq; r += (int)(blockDim.x >> 5)) {
        const float* ml = part_ml + (prow + r) * stride * 2;
        constexpr int PER = GRP_MAX_SPLITS / 32;  // splits per lane: lane + 32 j
        float m[PER], l[PER], mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const int s = lane + 32 * j;
            m[j] = s < nsplit ? __ldcg(ml + 2 * s) : -INFINITY;
            l[j] = s < nsplit ? __ldcg(ml + 2 * s + 1) : 0.f;
            mx = fmaxf(mx, m[j]);
        }
        const float M = warp_reduce<MaxOp>(mx);
        float lw = 0.f;
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const float w = m[j] == -INFINITY ? 0.f : __expf(m[j] - M);
            lw += l[j] * w;
            sw[r * GRP_MAX_SPLITS + lane + 32 * j] = w;
        }
        float L = warp_sum(lw);
        const float f = fold_sink(sinks, h0 + r, M, L);
        if (lane == 0) tot[r] = L > 0.f ? f / L : 0.f;
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

// Element d of head r's result over one key range: the row's output
// (normalised, head h0 + r's sink folded in) when the range is the row's
// only one, else the range's partial (unnormalised O, and (M, L) with
// element 0) for the merge.
template <typename T, int HD>
__device__ __forceinline__ void store_range(bool only, T* out, float* part_o, float* part_ml, size_t orow,
                                            size_t prow, size_t stride, int idx, int r, int d, float O, float M,
                                            float L, const float* sinks, int h0) {
    if (only) {
        const float f = fold_sink(sinks, h0 + r, M, L);
        out[(orow + r) * HD + d] = from_f<T>(L > 0.f ? O * f / L : 0.f);
    } else {
        const size_t at = (prow + r) * stride + idx;
        part_o[at * HD + d] = O;
        if (d == 0) {
            part_ml[at * 2] = M;
            part_ml[at * 2 + 1] = L;
        }
    }
}

// KF, VF: how K and V are stored (kv_fmt.cuh). A quantized side is read
// rotated as stored: Q is rotated instead when K is (Hq·Hk = q·k), and the
// output when V is (attention_group.cuh, group_stage and group_acc_rotate).
// SWAP (both sides quantized, f16, at most SWAP_HEADS heads per KV head:
// the host's choice, `attn_group8_*`): the transposed products of
// attention_swap.cuh, each warp walking its own 16-key chunks.
template <typename T, int HD, typename KF = KvPlain<T>, typename VF = KvPlain<T>, bool SWAP = false>
__device__ void attn_group(const float* qkv, const typename KF::Elem* kc, const typename VF::Elem* vc,
                           const uint32_t* pos, const uint32_t* tab, const uint32_t* tables, const uint32_t* rows,
                           float* part_o, float* part_ml, uint32_t* counters, T* out, int nh, int nkv, int bs,
                           int split_len, float scale, int window, const float* sinks) {
    constexpr bool PLAIN = !KF::quant && !VF::quant, RAW = KF::quant && VF::quant;
    using S = GroupShape<T, HD>;
    // Both sides quantized: two raw tiles (attention_group.cuh, RawK).
    constexpr int KRAW = GroupRawTile<KF, HD>::BYTES, RAW_STAGE = KRAW + GroupRawTile<VF, HD>::BYTES;
    constexpr int AREA0 = S::TILE_BYTES > S::MERGE_BYTES ? S::TILE_BYTES : S::MERGE_BYTES;
    constexpr int AREA = RAW && 2 * RAW_STAGE > AREA0 ? 2 * RAW_STAGE : AREA0;
    static_assert(GRP_ROWS * (GRP_MAX_SPLITS + 1) * (int)sizeof(float) <= AREA, "split weights");
    // The K/V tile; after the loop, the warps' partials; then the split weights.
    __shared__ __align__(16) unsigned char sm_tile[AREA];
    __shared__ __align__(16) unsigned char sm_q[S::Q_BYTES];
    __shared__ float sm_m[GRP_WARPS][GRP_ROWS], sm_l[GRP_WARPS][GRP_ROWS];

    const int group = nh / nkv, chunks = (group + GRP_ROWS - 1) / GRP_ROWS;
    const int kvh = blockIdx.y / chunks, h0 = kvh * group + (blockIdx.y % chunks) * GRP_ROWS;
    const int nq = min(GRP_ROWS, kvh * group + group - h0);  // heads of this block
    const int t = rows[blockIdx.x], sp = blockIdx.z;
    const int ctx = (int)pos[t] + 1, lo = window_start(ctx, window);
    const SplitRange sr = split_range(ctx - lo, window_split(ctx - lo, split_len, window), sp);
    const int k0 = lo + sr.k0, k1 = lo + sr.k1, nsplit = sr.n;
    if (sp >= nsplit) return;
    const size_t stride = gridDim.z;  // partials per (row, head)
    const uint32_t* table = tables + tab[t];

    // Before the wait: the first tile's keys of earlier steps into shared
    // memory, the rest into L2; after it the keys this step writes (its last).
    T* ks = reinterpret_cast<T*>(sm_tile);
    T* vs = ks + GRP_KEYS * S::LD;
    GroupAcc<HD> acc;
    // After the warps' states are in the merge area: the block's result,
    // as the row's output or (several ranges) a partial, and the merge of
    // the ranges by the last block of the row and heads to finish.
    auto finish = [&]() {
        // Partial results are indexed by list position, the output by row.
        const size_t prow = (size_t)blockIdx.x * nh + h0, orow = (size_t)t * nh + h0;
        group_combine<HD, GRP_WARPS>(sm_tile, sm_m, sm_l, nq, [&](int r, int d, float O, float M, float L) {
            store_range<T, HD>(nsplit == 1, out, part_o, part_ml, orow, prow, stride, sp, r, d, O, M, L, sinks, h0);
        });
        if (nsplit == 1) return;
        // Publish this split, then let the last one to finish merge them all
        // (a counter per row and block of heads).
        if (!split_last(&counters[prow], (unsigned)nsplit)) return;
        // (The tile area is free again: the warp partials were read before the
        // barriers above.)
        merge_splits<T, HD>(part_o, part_ml, prow, stride, nq, nsplit, reinterpret_cast<float*>(sm_tile),
                            out + orow * HD, sinks, h0);
    };
    if constexpr (PLAIN) {
        const int newest = ctx - 1, fresh = step_first_key(pos, tab, t);
        const int early_end = min(k1, k0 + GRP_KEYS) - 1;  // the last key of the first tile
        if (GRP_EARLY)
            group_load_rows<T, HD>(ks, vs, kc, vc, table, nkv, kvh, bs, k0, k1, GRP_KEYS, fresh,
                                   min(newest, early_end));
        group_prefetch<T, HD>(kc, vc, table, nkv, kvh, bs, GRP_EARLY ? k0 + GRP_KEYS : k0, k1);
        pdl_wait();
        if (!GRP_EARLY)
            group_load_tile<T, HD>(sm_tile, kc, vc, table, nkv, kvh, bs, k0, k1);
        else
            group_load_keys<T, HD>(ks, vs, kc, vc, table, nkv, kvh, bs, max(fresh, k0), min(newest, early_end), k0);
        group_load_q<T, HD>(sm_q, qkv, t, nh, nkv, h0, nq, scale);
        for (int kt = k0; kt < k1; kt += GRP_KEYS) {
            cp_async_wait_all();
            __syncthreads();
            group_tile<T, HD>(sm_tile, sm_q, kt, k1, acc);
            if (kt + GRP_KEYS < k1) {
                __syncthreads();  // every warp is done with the tile
                group_load_tile<T, HD>(sm_tile, kc, vc, table, nkv, kvh, bs, kt + GRP_KEYS, k1);
            }
        }
    } else if constexpr (RAW) {
        // Both sides quantized: raw rows come in by cp.async, two tiles in
        // flight (the next one's copies overlap this one's products).
        // Before the wait: the first tile's keys of earlier steps. SWAP:
        // the transposed products (attention_swap.cuh) over each warp's own
        // 16-key tiles; else the block's 64-key tiles, fragments straight
        // from the raw rows (RawK, RawV).
        const int fresh = step_first_key(pos, tab, t);
        if constexpr (SWAP) {
            static_assert(IsHalf<T>::value, "the transposed products take f16");
            // Each warp its own chunks c = warp + 4i of the range's 16-key
            // chunks, two in flight, in its own quarter of the tile area: no
            // block barriers in the loop. (The block walking 64-key tiles as
            // below, the same products: the same speed within 0.4%, and 8
            // bytes of spills; docs/bench-data/cuda/kv-depth/.)
            constexpr int WROWS = 16, WK = WROWS * (KRAW / GRP_KEYS), WSTAGE = RAW_STAGE / GRP_WARPS;
            const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
            const int nc = (k1 - k0 + WROWS - 1) / WROWS, mine = nc > warp ? (nc - warp + GRP_WARPS - 1) / GRP_WARPS : 0;
            uint8_t* wbuf = sm_tile + warp * 2 * WSTAGE;
            auto kt_of = [&](int i) { return k0 + (warp + GRP_WARPS * i) * WROWS; };
            auto wstage = [&](int i, int from, int to, uint32_t blk) {
                const int kt = kt_of(i);
                stage_raw_pair<KF, VF, HD, WROWS>(wbuf + (i & 1) * WSTAGE, WK, kc, vc, blk, nkv, kvh, bs, kt, k1,
                                              max(from, kt), min(to, kt + WROWS), lane);
            };
            const uint32_t b0 = mine > 0 ? stage_key_block(table, bs, kt_of(0), k1, lane) : 0;
            if (mine > 0) wstage(0, k0, fresh, b0);
            pdl_wait();
            if (mine > 0) wstage(0, fresh, k1 + WROWS, b0);
            cp_async_commit();
            if (mine > 1) wstage(1, k0, k1 + WROWS, stage_key_block(table, bs, kt_of(1), k1, lane));
            cp_async_commit();
            group_load_q_rotated<T, HD>(sm_q, qkv, t, nh, nkv, h0, nq, scale);
            __syncthreads();  // Q is in shared memory
            SwapQ<HD> q;
            swap_load_q<HD>(sm_q, q);
            SwapAcc<HD> sa;
            for (int i = 0; i < mine; i++) {
                const uint32_t next = i + 2 < mine ? stage_key_block(table, bs, kt_of(i + 2), k1, lane) : 0;
                cp_async_wait_group<1>();  // chunk i's copies (chunk i + 1's may be pending)
                __syncwarp();
                swap_chunk<KF, VF, HD, WROWS>(wbuf + (i & 1) * WSTAGE, WK, q, 0, kt_of(i), k1, sa);
                __syncwarp();  // every lane is done with chunk i's buffer
                if (i + 2 < mine) wstage(i + 2, k0, k1 + WROWS, next);
                cp_async_commit();
            }
            if constexpr (VF::quant) swap_acc_rotate<HD>(sa);
            pdl_launch();  // as ATTN_LATE in attention.cu
            swap_write_warps<HD>(sa, sm_tile, sm_m, sm_l);
            finish();
            return;
        } else {
            const int nt = (k1 - k0 + GRP_KEYS - 1) / GRP_KEYS;
            auto stage = [&](int i, int from, int to) {
                const int kt = k0 + i * GRP_KEYS;
                stage_raw_pair<KF, VF, HD>(sm_tile + (i & 1) * RAW_STAGE, KRAW, kc, vc,
                                       stage_key_block(table, bs, kt, k1, threadIdx.x), nkv, kvh, bs, kt, k1,
                                       max(from, kt), min(to, kt + GRP_KEYS), threadIdx.x);
            };
            stage(0, k0, fresh);
            pdl_wait();
            stage(0, fresh, k1 + GRP_KEYS);
            cp_async_commit();
            if (nt > 1) stage(1, k0, k1 + GRP_KEYS);
            cp_async_commit();
            group_load_q_rotated<T, HD>(sm_q, qkv, t, nh, nkv, h0, nq, scale);
            const int wk = (threadIdx.x >> 5) * 16;
            for (int i = 0; i < nt; i++) {
                cp_async_wait_group<1>();  // tile i's copies (tile i + 1's may be pending)
                __syncthreads();
                const int kt = k0 + i * GRP_KEYS;
                const uint8_t* b = sm_tile + (i & 1) * RAW_STAGE;
                if (kt + wk < k1)
                    group_chunk_from<T, HD>(RawK<KF, T, HD>{b}, RawV<VF, T, HD>{b + KRAW}, sm_q, wk, kt + wk, k1,
                                            acc);
                __syncthreads();  // every warp is done with tile i's buffer
                if (i + 2 < nt) stage(i + 2, k0, k1 + GRP_KEYS);
                cp_async_commit();
            }
            group_acc_rotate<HD>(acc);
        }
    } else {
        // A quantized side: a tile's rows come in as stored and are
        // dequantized in shared memory (group_stage). Before the wait: the
        // first tile's keys of earlier steps; the keys the step writes
        // after it. (Asking L2 for the block's later keys before the wait,
        // or for each next tile's, measured no faster: 152–155 tok/s at
        // 32k either way; docs/bench-data/cuda/kv-quant-stage/run3.sh.)
        const int fresh = step_first_key(pos, tab, t);
        group_stage_tile<T, KF, VF, HD>(ks, vs, kc, vc, table, nkv, kvh, bs, k0, k1, k0, fresh);
        pdl_wait();
        group_stage_tile<T, KF, VF, HD>(ks, vs, kc, vc, table, nkv, kvh, bs, k0, k1, fresh, k0 + GRP_KEYS);
        if (KF::quant)
            group_load_q_rotated<T, HD>(sm_q, qkv, t, nh, nkv, h0, nq, scale);
        else
            group_load_q<T, HD>(sm_q, qkv, t, nh, nkv, h0, nq, scale);
        for (int kt = k0; kt < k1; kt += GRP_KEYS) {
            if (kt > k0) {
                __syncthreads();  // every warp is done with the tile
                group_stage_tile<T, KF, VF, HD>(ks, vs, kc, vc, table, nkv, kvh, bs, kt, k1, kt, kt + GRP_KEYS);
            }
            cp_async_wait_all();
            __syncthreads();
            group_expand_q<T, KF, VF, HD>(ks, vs, kt, k1);
            group_tile<T, HD>(sm_tile, sm_q, kt, k1, acc);
        }
        if (VF::quant) group_acc_rotate<HD>(acc);
    }
    pdl_launch();  // as ATTN_LATE in attention.cu
    group_write_warps<HD>(acc, sm_tile, sm_m, sm_l);
    finish();
}

// Blocks of a cluster (`plan::CLUSTER`): above the portable limit of 8, so
// the host allows it per function and checks that a cluster fits the GPU.
#define CL_BLOCKS 16

// Dynamic shared memory of attn_cluster: K and V rows of KMAX keys (after
// the loop: the warps' partials, then the split weights of the global
// merge), Q's hi and lo parts, then the block's (O, m, l) that the cluster
// reads. `plan::cluster_smem_bytes` computes the same.
template <typename T, int HD, int KMAX, int NW> struct ClusterShape {
    using S = GroupShape<T, HD>;
    static constexpr int KV = 2 * KMAX * S::LD * (int)sizeof(T);
    static constexpr int Q = KV;
    static constexpr int O = Q + S::Q_BYTES;
    static constexpr int ML = O + GRP_ROWS * HD * (int)sizeof(float);
    static constexpr int BYTES = ML + 2 * GRP_ROWS * (int)sizeof(float);
    static_assert(NW * GRP_ROWS * HD * (int)sizeof(float) <= KV, "warp partials in the K/V area");
    static_assert(GRP_ROWS * (GRP_MAX_SPLITS + 1) * (int)sizeof(float) <= KV, "split weights in the K/V area");
};

// A block's share of its row's keys lo..ctx-1: `ncl` clusters hold keys
// (the grid's z is CL_BLOCKS × the clusters it has room for); block z of
// them takes keys k0..k1-1, a multiple of 16 of them, at most KMAX per round.
struct ClusterRange {
    int ncl, k0, k1;
};
__device__ __forceinline__ ClusterRange cluster_range(int lo, int ctx, int kmax) {
    const int n = ctx - lo;
    const int room = (int)gridDim.z / CL_BLOCKS;
    const int ncl = max(1, min(room, (n + CL_BLOCKS * kmax - 1) / (CL_BLOCKS * kmax)));
    const int nb = ncl * CL_BLOCKS;
    const int per = ((n + nb - 1) / nb + 15) / 16 * 16;
    const int k0 = min(n, (int)blockIdx.z * per);
    return {ncl, lo + k0, lo + min(n, k0 + per)};
}

template <typename T, int HD, int KMAX, int NW>
__device__ void attn_cluster(const float* qkv, const T* kc, const T* vc, const uint32_t* tab, const uint32_t* tables,
                             int t, int pos_last, int fresh, ClusterRange cr, float* part_o, float* part_ml,
                             uint32_t* counters, T* out, int nh, int nkv, int bs, float scale,
                             const float* sinks) {
    using C = ClusterShape<T, HD, KMAX, NW>;
    constexpr int LD = C::S::LD;
    extern __shared__ __align__(16) unsigned char dsm[];
    __shared__ float sm_m[NW][GRP_ROWS], sm_l[NW][GRP_ROWS];
    T* ks = reinterpret_cast<T*>(dsm);
    T* vs = ks + KMAX * LD;
    unsigned char* qbuf = dsm + C::Q;
    float* bo = reinterpret_cast<float*>(dsm + C::O);
    float* bm = reinterpret_cast<float*>(dsm + C::ML);
    float* bl = bm + GRP_ROWS;
    cg::cluster_group cluster = cg::this_cluster();
    const int warp = threadIdx.x >> 5;

    const int group = nh / nkv, chunks = (group + GRP_ROWS - 1) / GRP_ROWS;
    const int kvh = blockIdx.y / chunks, h0 = kvh * group + (blockIdx.y % chunks) * GRP_ROWS;
    const int nq = min(GRP_ROWS, kvh * group + group - h0);
    const int cl = blockIdx.z / CL_BLOCKS;
    const uint32_t* table = tables + tab[t];

    // Before the wait, as attn_group: the first round's keys of earlier
    // steps into shared memory, later rounds' into L2; this step's keys after.
    const int newest = pos_last, kb0 = min(cr.k1, cr.k0 + KMAX), rows0 = (kb0 - cr.k0 + 15) / 16 * 16;
    if (GRP_EARLY)
        group_load_rows<T, HD>(ks, vs, kc, vc, table, nkv, kvh, bs, cr.k0, kb0, rows0, fresh, min(newest, kb0 - 1));
    group_prefetch<T, HD>(kc, vc, table, nkv, kvh, bs, GRP_EARLY ? kb0 : cr.k0, cr.k1);
    pdl_wait();
    if (GRP_EARLY)
        group_load_keys<T, HD>(ks, vs, kc, vc, table, nkv, kvh, bs, max(fresh, cr.k0), min(newest, kb0 - 1), cr.k0);
    group_load_q<T, HD>(qbuf, qkv, t, nh, nkv, h0, nq, scale);
    GroupAcc<HD> acc;
    for (int ka = cr.k0; ka < cr.k1; ka += KMAX) {
        const int kb = min(cr.k1, ka + KMAX);
        if (ka > cr.k0) __syncthreads();  // every warp is done with the last round's rows
        if (!GRP_EARLY || ka > cr.k0)
            group_load_rows<T, HD>(ks, vs, kc, vc, table, nkv, kvh, bs, ka, kb, (kb - ka + 15) / 16 * 16);
        cp_async_wait_all();
        __syncthreads();
        for (int c = warp; c * 16 < kb - ka; c += NW) group_chunk<T, HD>(ks, vs, qbuf, c * 16, ka + c * 16, kb, acc);
    }
    pdl_launch();  // as ATTN_LATE in attention.cu
    group_merge_warps<HD, NW>(acc, dsm, sm_m, sm_l, nq, [&](int r, int d, float O, float M, float L) {
        bo[r * HD + d] = O;
        if (d == 0) {
            bm[r] = M;
            bl[r] = L;
        }
    });
    cluster.sync();  // every block's (O, m, l) is written and visible
    // Block `rank` merges elements [rank × share, (rank + 1) × share) of the
    // heads' outputs over the cluster's blocks.
    const size_t prow = (size_t)blockIdx.x * nh + h0, orow = (size_t)t * nh + h0;
    const size_t stride = gridDim.z / CL_BLOCKS;  // partials per (row, head)
    const int rank = (int)cluster.block_rank();
    const int share = (nq * HD + CL_BLOCKS - 1) / CL_BLOCKS;
    const int e1 = min(nq * HD, (rank + 1) * share);
    for (int i = rank * share + (int)threadIdx.x; i < e1; i += blockDim.x) {
        const int r = i / HD, d = i % HD;
        float M = -INFINITY;
#pragma unroll
        for (int b = 0; b < CL_BLOCKS; b++) M = fmaxf(M, cluster.map_shared_rank(bm, b)[r]);
        float L = 0.f, O = 0.f;
#pragma unroll
        for (int b = 0; b < CL_BLOCKS; b++) {
            const float m = cluster.map_shared_rank(bm, b)[r];
            if (m == -INFINITY) continue;
            const float f = __expf(m - M);
            L += cluster.map_shared_rank(bl, b)[r] * f;
            O += cluster.map_shared_rank(bo, b)[r * HD + d] * f;
        }
        store_range<T, HD>(cr.ncl == 1, out, part_o, part_ml, orow, prow, stride, cl, r, d, O, M, L, sinks, h0);
    }
    cluster.sync();  // no block leaves while others read its shared memory
    if (cr.ncl == 1) return;
    if (!split_last(&counters[prow], (unsigned)(cr.ncl * CL_BLOCKS))) return;
    merge_splits<T, HD>(part_o, part_ml, prow, stride, nq, cr.ncl, reinterpret_cast<float*>(dsm), out + orow * HD,
                        sinks, h0);
}

#define GROUP_ENTRY(SUF, TY, HD)                                                                                   \
    extern "C" __global__ void __launch_bounds__(GRP_WARPS * 32)                                                  \
        attn_group_##HD##_##SUF(const float* qkv, const TY* kc, const TY* vc, const uint32_t* pos,               \
                                const uint32_t* tab, const uint32_t* tables, const uint32_t* rows,               \
                                float* part_o, float* part_ml, uint32_t* counters, TY* out, int nh, int nkv,     \
                                int bs, int split_len, float scale, int window, const float* sinks) {            \
        attn_group<TY, HD>(qkv, kc, vc, pos, tab, tables, rows, part_o, part_ml, counters, out, nh, nkv, bs,     \
                           split_len, scale, window, sinks);                                                     \
    }
#ifndef KV_QUANT_TU  // the f16/bf16 cache's entries; kv_quant.cu holds the quantized ones
GROUP_ENTRY(f16, __half, 64)
GROUP_ENTRY(f16, __half, 128)
GROUP_ENTRY(bf16, __nv_bfloat16, 64)
GROUP_ENTRY(bf16, __nv_bfloat16, 128)
#else
// A quantized cache: attn_group_<hd>_<dtype>_<k>_<v> (kv_quant.cu). Four
// blocks per multiprocessor, as the 16-bit kernel: left alone, ptxas
// spends ~166 registers on group_expand_q's conversions (three blocks,
// and at 32k keys the 8B's 512 blocks no longer run in one wave); capped
// at 128 it spills 16 bytes at most (the raw-fragment path of two
// quantized sides: 4 bytes at most; 48 KB of static shared memory at head
// dim 128 with q8_0 on both sides, within the limit).
#define GROUP_ENTRY_Q(SUF, TY, HD, KN, KF, VN, VF)                                                                \
    extern "C" __global__ void __launch_bounds__(GRP_WARPS * 32, 4) attn_group_##HD##_##SUF##_##KN##_##VN(       \
        const float* qkv, const typename KF::Elem* kc, const typename VF::Elem* vc, const uint32_t* pos,        \
        const uint32_t* tab, const uint32_t* tables, const uint32_t* rows, float* part_o, float* part_ml,        \
        uint32_t* counters, TY* out, int nh, int nkv, int bs, int split_len, float scale, int window,           \
        const float* sinks) {                                                                                    \
        attn_group<TY, HD, KF, VF>(qkv, kc, vc, pos, tab, tables, rows, part_o, part_ml, counters, out, nh, nkv, \
                                   bs, split_len, scale, window, sinks);                                         \
    }
#define GROUP_ENTRY_QX(...) GROUP_ENTRY_Q(__VA_ARGS__)
#define GROUP_Q_KV(SUF, TY, HD) GROUP_ENTRY_QX(SUF, TY, HD, KV_K, KV_KF<TY>, KV_V, KV_VF<TY>)
GROUP_Q_KV(f16, __half, 64)
GROUP_Q_KV(f16, __half, 128)
GROUP_Q_KV(bf16, __nv_bfloat16, 64)
GROUP_Q_KV(bf16, __nv_bfloat16, 128)
// Both sides quantized, f16 activations, at most SWAP_HEADS query heads
// per KV head (the host checks): attn_group8_<hd>_f16_<k>_<v>, the
// transposed products. An entry of its own so that the raw-fragment
// path's registers do not count against it (in one kernel both spilled).
#define KV_QUANT_q8_0 1
#define KV_QUANT_q4_0 1
#define KV_QUANT_f16 0
#define KV_CAT(a, b) a##b
#define KV_IS_QUANT(x) KV_CAT(KV_QUANT_, x)
#if KV_IS_QUANT(KV_K) && KV_IS_QUANT(KV_V)
#define GROUP_ENTRY_S(NAME, SW, HD, KN, KF, VN, VF)                                                                \
    extern "C" __global__ void __launch_bounds__(GRP_WARPS * 32, 4) NAME##_##HD##_f16_##KN##_##VN(                \
        const float* qkv, const uint8_t* kc, const uint8_t* vc, const uint32_t* pos, const uint32_t* tab,        \
        const uint32_t* tables, const uint32_t* rows, float* part_o, float* part_ml, uint32_t* counters,         \
        __half* out, int nh, int nkv, int bs, int split_len, float scale, int window, const float* sinks) {      \
        attn_group<__half, HD, KF, VF, SW>(qkv, kc, vc, pos, tab, tables, rows, part_o, part_ml, counters, out,   \
                                           nh, nkv, bs, split_len, scale, window, sinks);                        \
    }
#define GROUP_ENTRY_SX(...) GROUP_ENTRY_S(__VA_ARGS__)
GROUP_ENTRY_SX(attn_group8, true, 64, KV_K, KV_KF<__half>, KV_V, KV_VF<__half>)
GROUP_ENTRY_SX(attn_group8, true, 128, KV_K, KV_KF<__half>, KV_V, KV_VF<__half>)
#endif
#endif


#if !defined(KV_QUANT_TU) && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900)
// KMAX keys per block and round, NW warps: head dim 64 takes up to 256 keys
// (a cluster covers 4096) with 16 warps, so that a block's keys at 2048 to
// 4096 are one 16-key chunk per warp; head dim 128 128 keys with 8 warps
// (87 KB of shared memory: two blocks per multiprocessor). `plan::cluster_*`
// has the same numbers.
#define CLUSTER_ENTRY(SUF, TY, HD, KMAX, NW)                                                                       \
    extern "C" __global__ void __launch_bounds__(NW * 32, 512 / (NW * 32))                                       \
        attn_cluster_##HD##_##SUF(const float* qkv, const TY* kc, const TY* vc, const uint32_t* pos,             \
                                  const uint32_t* tab, const uint32_t* tables, const uint32_t* rows,             \
                                  float* part_o, float* part_ml, uint32_t* counters, TY* out, int nh, int nkv,   \
                                  int bs, float scale, int window, const float* sinks) {                         \
        const int t = rows[blockIdx.x], ctx = (int)pos[t] + 1;                                                   \
        const ClusterRange cr = cluster_range(window_start(ctx, window), ctx, KMAX);                             \
        if ((int)blockIdx.z >= cr.ncl * CL_BLOCKS) return; /* a whole cluster past the keys */                  \
        attn_cluster<TY, HD, KMAX, NW>(qkv, kc, vc, tab, tables, t, (int)pos[t], step_first_key(pos, tab, t), cr, \
                                       part_o, part_ml, counters, out, nh, nkv, bs, scale, sinks);               \
    }
CLUSTER_ENTRY(f16, __half, 64, 256, 16)
CLUSTER_ENTRY(f16, __half, 128, 128, 8)
CLUSTER_ENTRY(bf16, __nv_bfloat16, 64, 256, 16)
CLUSTER_ENTRY(bf16, __nv_bfloat16, 128, 128, 8)
#endif
