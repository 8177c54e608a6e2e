// Building blocks of the decode attention by KV group (attention_group.cu):
// the query heads that share a KV head (up to 16) are the 16 rows of one
// mma tile; K/V tiles of 64 keys come into shared memory with cp.async,
// and each of a block's 4 warps takes 16 keys of a tile, S = Q·Kᵀ and
// O += P·V on mma.sync m16n8k16 with an online softmax per row (head).
//
// Q and P enter the mma as 16-bit pairs hi + lo (lo = the rounding error of
// hi), each product taken twice: the scores and the weighting of V keep
// about f32's precision in Q and P, as the per-head kernel's float
// arithmetic does (K and V are stored 16-bit either way). Rounding Q and P
// to 16 bits once moved a random-weight Q4_K model's greedy tokens off the
// CPU path's after 12 of 48 (the per-head kernel: 48 of 48). The extra
// products cost nothing measurable: the kernel waits on memory.
#pragma once
#include "kv_fmt.cuh"
#include "mma.cuh"

#define GRP_ROWS 16  // query heads per block: one mma row tile
#define GRP_WARPS 4
#define GRP_KEYS (16 * GRP_WARPS)  // keys per tile, 16 per warp

template <typename T, int HD> struct GroupShape {
    static constexpr int LD = HD + 8;  // padded row, in elements (16-byte aligned, fewer bank conflicts)
    static constexpr int KS = HD / 16; // k-steps of Q·Kᵀ
    static constexpr int ND = HD / 8;  // n-tiles of O
    // One tile: K then V, GRP_KEYS rows each.
    static constexpr int TILE_BYTES = 2 * GRP_KEYS * LD * (int)sizeof(T);
    // Q's hi and lo parts.
    static constexpr int Q_BYTES = 2 * GRP_ROWS * LD * (int)sizeof(T);
    // The warps' partial outputs (floats).
    static constexpr int MERGE_BYTES = GRP_WARPS * GRP_ROWS * HD * (int)sizeof(float);
};

// Before the wait for the previous kernel: K and V rows k0..k1-1 of row t's
// sequence into L2 (as attn_prefetch in attention.cu; keys of earlier
// steps, and a prefetch of the newest one only costs bandwidth).
template <typename T, int HD>
__device__ __forceinline__ void group_prefetch(const T* kc, const T* vc, const uint32_t* table, int nkv, int kvh,
                                               int bs, int k0, int k1) {
    constexpr int LINES = HD * (int)sizeof(T) / 128;
    for (int i = threadIdx.x; i < (k1 - k0) * LINES; i += blockDim.x) {
        const int j = k0 + i / LINES;
        const size_t at = (((size_t)table[j / bs] * nkv + kvh) * bs + j % bs) * HD + (i % LINES) * (128 / sizeof(T));
        prefetch_l2(kc + at);
        prefetch_l2(vc + at);
    }
}

// Starts copying the K and V rows of keys kt..kt+nrows-1 of KV head kvh
// into smem rows 0..nrows-1 of `ks` and `vs` (keys from k1 on are zeroed,
// not read); the rows of keys skip_lo..skip_hi are left alone (none by
// default).
template <typename T, int HD>
__device__ __forceinline__ void group_load_rows(T* ks, T* vs, const T* kc, const T* vc, const uint32_t* table,
                                                int nkv, int kvh, int bs, int kt, int k1, int nrows, int skip_lo = 1,
                                                int skip_hi = 0) {
    constexpr int LD = GroupShape<T, HD>::LD;
    for (int i = threadIdx.x; i < nrows * HD / 8; i += blockDim.x) {
        const int key = i / (HD / 8), ch = i % (HD / 8), j = kt + key;
        if (j >= skip_lo && j <= skip_hi) continue;
        const bool ok = j < k1;
        const size_t at = ok ? (((size_t)table[j / bs] * nkv + kvh) * bs + j % bs) * HD + ch * 8 : 0;
        cp_async16(&ks[key * LD + ch * 8], kc + at, ok);
        cp_async16(&vs[key * LD + ch * 8], vc + at, ok);
    }
}

// The first key the step writes in row t's sequence: the row's own, or
// that of the first of the rows just before it in the same sequence (the
// same block table, consecutive positions: a verification step's token and
// proposals, or a short prompt, all of whose rows take the decode
// attention). Past 64 such rows, 0 (every key counts as written).
__device__ __forceinline__ int step_first_key(const uint32_t* pos, const uint32_t* tab, int t) {
    int f = (int)pos[t];
    for (int u = t - 1, k = 0; u >= 0 && tab[u] == tab[t] && (int)pos[u] == f - 1; u--, k++) {
        if (k == 64) return 0;
        f--;
    }
    return f;
}

// Before the wait for the previous kernel, a block may copy in the K/V
// rows of keys that no kernel of the step writes (those before
// `step_first_key`), so that the copy overlaps the previous kernel's tail;
// the keys the step writes come after the wait: `group_load_rows(…, first,
// last)` then this. Keys kt + r go to smem row r; `from` > `to`: none.
template <typename T, int HD>
__device__ __forceinline__ void group_load_keys(T* ks, T* vs, const T* kc, const T* vc, const uint32_t* table,
                                                int nkv, int kvh, int bs, int from, int to, int kt) {
    constexpr int LD = GroupShape<T, HD>::LD;
    for (int i = threadIdx.x; i < (to - from + 1) * (HD / 8); i += blockDim.x) {
        const int j = from + i / (HD / 8), ch = i % (HD / 8);
        const size_t at = (((size_t)table[j / bs] * nkv + kvh) * bs + j % bs) * HD + ch * 8;
        cp_async16(&ks[(j - kt) * LD + ch * 8], kc + at, true);
        cp_async16(&vs[(j - kt) * LD + ch * 8], vc + at, true);
    }
}

// Starts copying the K and V rows of keys kt..kt+63 of KV head kvh into the
// tile at `tile` (K rows, then V rows; keys from k1 on are zeroed).
template <typename T, int HD>
__device__ __forceinline__ void group_load_tile(unsigned char* tile, const T* kc, const T* vc, const uint32_t* table,
                                                int nkv, int kvh, int bs, int kt, int k1) {
    T* ks = reinterpret_cast<T*>(tile);
    group_load_rows<T, HD>(ks, ks + GRP_KEYS * GroupShape<T, HD>::LD, kc, vc, table, nkv, kvh, bs, kt, k1, GRP_KEYS);
}

// One side quantized, the other 16-bit (both quantized: RawK and RawV
// below): a tile's raw rows (as stored: quants, then
// scales) come into shared memory by cp.async, into the side's own K or V
// area of the tile (64 rows of HD 16-bit values: twice a q8_0 row's bytes
// and more), and are then dequantized in place (group_expand_q): each
// thread reads its values into registers, a barrier, then writes them as
// T. So a thread's copies of a whole tile are in flight at once and hold
// no registers, and the tile area stays the f16 kernel's (five blocks per
// multiprocessor by shared memory, four by registers). When this pass
// served q8_0 on both sides too (H200, 8B shape, 32k keys): 152.7 decode
// tok/s (f16 cache: 168.1); loading, dequantizing and storing each 8
// values in turn, one 8-byte load in flight per thread, had given 131.3,
// and holding a whole tile's loads in registers a tile ahead (~250
// registers, two blocks per multiprocessor) 119.6
// (docs/bench-data/cuda/kv-quant-stage/).
//
// Where a quantized side's raw tile sits in its area: at the end, so that
// the first half of the keys' 16-bit rows can be written before the second
// half's raw rows are read (group_expand_q).
template <typename F, typename T, int HD> struct GroupRaw {
    using B = KvRowBytes<HD, F::q4>;
    static constexpr int AREA = GRP_KEYS * GroupShape<T, HD>::LD * (int)sizeof(T);
    static constexpr int OFF = AREA - GRP_KEYS * (B::QB + B::SB);
    static_assert(OFF % 16 == 0 && (GRP_KEYS / 2) * GroupShape<T, HD>::LD * (int)sizeof(T) <= OFF,
                  "the first half's rows end before the raw tile");
};

// A side stored as F, keys from..to-1 of the tile whose first key is kt
// (a 16-bit side's keys from k1 on as zeros, straight into place; a
// quantized side's skipped: group_expand_q zeroes them).
template <typename F, typename T, int HD>
__device__ __forceinline__ void group_stage(T* area, const typename F::Elem* p, const uint32_t* table, int nkv,
                                            int kvh, int bs, int kt, int k1, int from, int to) {
    constexpr int THREADS = GRP_WARPS * 32;
    if constexpr (!F::quant) {
        constexpr int LD = GroupShape<T, HD>::LD;
        for (int i = threadIdx.x; i < GRP_KEYS * HD / 8; i += THREADS) {
            const int key = i / (HD / 8), ch = i % (HD / 8), j = kt + key;
            if (j < from || j >= to) continue;
            const bool ok = j < k1;
            const size_t at = ok ? (((size_t)table[j / bs] * nkv + kvh) * bs + j % bs) * HD + ch * 8 : 0;
            cp_async16(&area[key * LD + ch * 8], p + at, ok);
        }
    } else {
        using B = KvRowBytes<HD, F::q4>;
        constexpr int QC = B::QB / 16, PER = QC + 1;  // 16-byte quant chunks per row, then its scales
        uint8_t* raw = reinterpret_cast<uint8_t*>(area) + GroupRaw<F, T, HD>::OFF;
        for (int i = threadIdx.x; i < GRP_KEYS * PER; i += THREADS) {
            const int key = i / PER, c = i % PER, j = kt + key;
            if (j < from || j >= min(to, k1)) continue;
            const __half* sc;
            const uint8_t* q = kvq_row<HD, F::q4>(p, table[j / bs], kvh, j % bs, nkv, bs, &sc);
            if (c < QC)
                cp_async16(raw + key * B::QB + c * 16, q + c * 16, true);
            else
                cp_async_small<B::SB>(raw + GRP_KEYS * B::QB + key * B::SB, sc);
        }
    }
}

// Both sides of a tile (group_stage).
template <typename T, typename KF, typename VF, int HD>
__device__ __forceinline__ void group_stage_tile(T* ks, T* vs, const typename KF::Elem* kc,
                                                 const typename VF::Elem* vc, const uint32_t* table, int nkv, int kvh,
                                                 int bs, int kt, int k1, int from, int to) {
    group_stage<KF, T, HD>(ks, kc, table, nkv, kvh, bs, kt, k1, from, to);
    group_stage<VF, T, HD>(vs, vc, table, nkv, kvh, bs, kt, k1, from, to);
}

// A staged quantized side's 8 values from d0 of a key, as loaded (`raw`:
// the raw tile).
template <typename F, int HD> __device__ __forceinline__ RawQ<8> group_raw8(const uint8_t* raw, int key, int d0) {
    using B = KvRowBytes<HD, F::q4>;
    RawQ<8> r;
    load_bytes<F::q4 ? 4 : 8>(raw + key * B::QB + (F::q4 ? d0 / 2 : d0), r.w);
    r.d = __half2float(reinterpret_cast<const __half*>(raw + GRP_KEYS * B::QB + key * B::SB)[d0 / 32]);
    return r;
}
// 8 values as T at `dst`, zeros unless `ok`.
template <typename F, typename T>
__device__ __forceinline__ void group_put8(const RawQ<8>& r, bool ok, T* dst) {
    uint4 u = make_uint4(0, 0, 0, 0);
    if (ok) {
        float f[8];
        F::template unpack<8>(r, f);
        u = make_uint4(pack2<T>(f[0], f[1]), pack2<T>(f[2], f[3]), pack2<T>(f[4], f[5]), pack2<T>(f[6], f[7]));
    }
    *reinterpret_cast<uint4*>(dst) = u;
}

// N items from n0 of a thread's share of a staged quantized side (area
// `x`): item n is the 8 values from d0(n) of key key(n). Read, then
// written as T.
template <typename F, typename T, int HD, int N> struct GroupItems {
    RawQ<8> r[N > 0 ? N : 1];
    static constexpr int THREADS = GRP_WARPS * 32;
    static __device__ __forceinline__ int key(int n) { return ((int)threadIdx.x + n * THREADS) / (HD / 8); }
    static __device__ __forceinline__ int d0(int n) { return ((int)threadIdx.x + n * THREADS) % (HD / 8) * 8; }
    __device__ __forceinline__ void read(const T* x, int n0) {
        if constexpr (F::quant) {
            const uint8_t* raw = reinterpret_cast<const uint8_t*>(x) + GroupRaw<F, T, HD>::OFF;
#pragma unroll
            for (int n = 0; n < N; n++) r[n] = group_raw8<F, HD>(raw, key(n0 + n), d0(n0 + n));
        }
    }
    __device__ __forceinline__ void write(T* x, int n0, int kt, int k1) const {
        if constexpr (F::quant) {
            constexpr int LD = GroupShape<T, HD>::LD;
#pragma unroll
            for (int n = 0; n < N; n++)
                group_put8<F, T>(r[n], kt + key(n0 + n) < k1, x + key(n0 + n) * LD + d0(n0 + n));
        }
    }
};

// Dequantizes the staged quantized sides of the tile whose first key is kt
// in place, as stored (rotated: attn_group rotates Q and the output
// instead, once per block); keys from k1 on become zeros. Called by every
// thread after the copies are waited for and a barrier; ends with a
// barrier. The first half of the keys' rows end before the raw tile
// (GroupRaw), so they are written as soon as read; the second half's
// after a barrier. (All of a thread's values at once spilled 64 bytes
// under the kernel's 128-register cap; half of them, 16.)
template <typename T, typename KF, typename VF, int HD>
__device__ __forceinline__ void group_expand_q(T* ks, T* vs, int kt, int k1) {
    constexpr int N = GRP_KEYS * HD / 8 / (GRP_WARPS * 32), H = N / 2;
    static_assert(N * GRP_WARPS * 32 * 8 == GRP_KEYS * HD && N % 2 == 0, "whole items per thread, two halves");
    {
        GroupItems<KF, T, HD, H> k;
        GroupItems<VF, T, HD, H> v;
        k.read(ks, 0);
        v.read(vs, 0);
        k.write(ks, 0, kt, k1);
        v.write(vs, 0, kt, k1);
    }
    GroupItems<KF, T, HD, H> k;
    GroupItems<VF, T, HD, H> v;
    k.read(ks, H);
    v.read(vs, H);
    __syncthreads();  // every raw byte is read before the second half's rows overwrite them
    k.write(ks, H, kt, k1);
    v.write(vs, H, kt, k1);
    __syncthreads();
}

// Q of heads h0..h0+nq-1 of row t, scaled, as hi and lo parts (rows from nq
// on zero).
// Element d of head r's Q as its hi and lo parts.
template <typename T, int HD> __device__ __forceinline__ void group_store_q(T* qs, int r, int d, float q) {
    constexpr int LD = GroupShape<T, HD>::LD;
    const T hi = from_f<T>(q);
    qs[r * LD + d] = hi;
    qs[(GRP_ROWS + r) * LD + d] = from_f<T>(q - to_f(hi));
}
template <typename T, int HD>
__device__ __forceinline__ void group_load_q(unsigned char* qbuf, const float* qkv, int t, int nh, int nkv, int h0,
                                             int nq, float scale) {
    T* qs = reinterpret_cast<T*>(qbuf);
    const size_t width = (size_t)(nh + 2 * nkv) * HD;
    for (int i = threadIdx.x; i < GRP_ROWS * HD; i += blockDim.x) {
        const int r = i / HD, d = i % HD;
        group_store_q<T, HD>(qs, r, d, r < nq ? qkv[(size_t)t * width + (size_t)(h0 + r) * HD + d] * scale : 0.f);
    }
}

// group_load_q over a rotated K: each head's Q rotated by the orthonormal
// Walsh-Hadamard transform (kv_fmt.cuh), a warp per head (HD / 32
// consecutive values per lane), so that Q·K over the stored (rotated) keys
// is the product of the unrotated ones.
template <typename T, int HD>
__device__ __forceinline__ void group_load_q_rotated(unsigned char* qbuf, const float* qkv, int t, int nh, int nkv,
                                                     int h0, int nq, float scale) {
    constexpr int M = HD / 32;
    T* qs = reinterpret_cast<T*>(qbuf);
    const size_t width = (size_t)(nh + 2 * nkv) * HD;
    const int lane = threadIdx.x & 31;
    for (int r = threadIdx.x >> 5; r < GRP_ROWS; r += (int)(blockDim.x >> 5)) {
        float x[M];
#pragma unroll
        for (int e = 0; e < M; e++)
            x[e] = r < nq ? qkv[(size_t)t * width + (size_t)(h0 + r) * HD + lane * M + e] * scale : 0.f;
        wht_lanes<M, HD>(x);
#pragma unroll
        for (int e = 0; e < M; e++) group_store_q<T, HD>(qs, r, lane * M + e, x[e]);
    }
}

// A warp's running softmax state: rows (heads) g and g + 8 of its lane.
template <int HD> struct GroupAcc {
    float o[HD / 8][4];
    float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;
    __device__ __forceinline__ GroupAcc() {
#pragma unroll
        for (int n = 0; n < HD / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    }
};

// Where group_chunk takes its K and V fragments (B operands, PTX's
// m16n8k16 layout; g = lane / 4, c = lane % 4) for the warp's 16 keys from
// smem row wk: K's `b(n, k, wk, b0, b1)` holds key wk + 8n + g's values
// 16k + 2c, +1 (b0) and +8, +9 (b1); V's `b(n, wk, b0, b1)` holds value
// 8n + g of keys wk + 2c, +1 (b0) and wk + 2c + 8, +9 (b1). The 16-bit
// sources read rows of T (LD apart).
template <typename T, int HD> struct PlainK {
    const T* ks;
    __device__ __forceinline__ void b(int n, int k, int wk, uint32_t& b0, uint32_t& b1) const {
        constexpr int LD = GroupShape<T, HD>::LD;
        const int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
        const T* kr = &ks[(wk + n * 8 + g) * LD + k * 16 + 2 * c];
        b0 = ld32(kr);
        b1 = ld32(kr + 8);
    }
};
template <typename T, int HD> struct PlainV {
    const T* vs;
    __device__ __forceinline__ void b(int n, int wk, uint32_t& b0, uint32_t& b1) const {
        constexpr int LD = GroupShape<T, HD>::LD;
        const int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3;
        const uint16_t* v16 = reinterpret_cast<const uint16_t*>(vs) + (wk + 2 * c) * LD;
        const int d = n * 8 + g;
        b0 = join16(v16[d], v16[LD + d]);
        b1 = join16(v16[8 * LD + d], v16[9 * LD + d]);
    }
};

// One warp's 16 keys (fragments from K and V: see PlainK), key indices
// j0..j0+15, those from k1 on masked; the caller checks j0 < k1 (the
// maxima are then finite), warp-uniformly: mma.sync needs all 32 lanes.
template <typename T, int HD, typename KS, typename VS>
__device__ __forceinline__ void group_chunk_from(const KS& ksrc, const VS& vsrc, const unsigned char* qbuf, int wk,
                                                 int j0, int k1, GroupAcc<HD>& a) {
    using S = GroupShape<T, HD>;
    constexpr int LD = S::LD;
    const int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
    const T* qs = reinterpret_cast<const T*>(qbuf);
    float s[2][4];
#pragma unroll
    for (int n = 0; n < 2; n++) {
        s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
        for (int k = 0; k < S::KS; k++) {
            uint32_t b0, b1;
            ksrc.b(n, k, wk, b0, b1);
#pragma unroll
            for (int part = 0; part < 2; part++) {
                const T* q = &qs[(part * GRP_ROWS + g) * LD + k * 16 + 2 * c];
                const uint32_t qa[4] = {ld32(q), ld32(q + 8 * LD), ld32(q + 8), ld32(q + 8 * LD + 8)};
                mma16816<T>(s[n], qa, b0, b1);
            }
        }
    }
    // Keys from k1 on are masked; key j0 is below it, so the new maxima
    // are finite.
    float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
    for (int n = 0; n < 2; n++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            if (j0 + n * 8 + 2 * c + e >= k1) s[n][e] = s[n][2 + e] = -INFINITY;
            mxa = fmaxf(mxa, s[n][e]);
            mxb = fmaxf(mxb, s[n][2 + e]);
        }
    }
    mxa = quad_reduce<MaxOp>(mxa);
    mxb = quad_reduce<MaxOp>(mxb);
    const float na = fmaxf(a.ma, mxa), nb = fmaxf(a.mb, mxb);
    const float ca = __expf(a.ma - na), cb = __expf(a.mb - nb);
    a.ma = na;
    a.mb = nb;
    a.la *= ca;
    a.lb *= cb;
#pragma unroll
    for (int n = 0; n < S::ND; n++) {
        a.o[n][0] *= ca;
        a.o[n][1] *= ca;
        a.o[n][2] *= cb;
        a.o[n][3] *= cb;
    }
#pragma unroll
    for (int n = 0; n < 2; n++) {
#pragma unroll
        for (int e = 0; e < 2; e++) {
            s[n][e] = __expf(s[n][e] - na);
            s[n][2 + e] = __expf(s[n][2 + e] - nb);
            a.la += s[n][e];
            a.lb += s[n][2 + e];
        }
    }
    uint32_t ph[4], pl[4];
    split2<T>(s[0][0], s[0][1], ph[0], pl[0]);
    split2<T>(s[0][2], s[0][3], ph[1], pl[1]);
    split2<T>(s[1][0], s[1][1], ph[2], pl[2]);
    split2<T>(s[1][2], s[1][3], ph[3], pl[3]);
#pragma unroll
    for (int n = 0; n < S::ND; n++) {
        uint32_t b0, b1;
        vsrc.b(n, wk, b0, b1);
        mma16816<T>(a.o[n], ph, b0, b1);
        mma16816<T>(a.o[n], pl, b0, b1);
    }
}

// group_chunk_from over 16-bit rows: smem rows wk..wk+15 of `ks` / `vs`.
template <typename T, int HD>
__device__ __forceinline__ void group_chunk(const T* ks, const T* vs, const unsigned char* qbuf, int wk, int j0,
                                            int k1, GroupAcc<HD>& a) {
    group_chunk_from<T, HD>(PlainK<T, HD>{ks}, PlainV<T, HD>{vs}, qbuf, wk, j0, k1, a);
}

// Both sides quantized, the products take their fragments straight from
// raw tiles in shared memory (RawK, RawV), two tiles in flight per block:
// no 16-bit pass and its barrier, and the next tile's copies overlap this
// one's products. H200, 8B shape, 32k keys, decode tok/s: q8_0 166.0, q4_0
// 168.8 (the staged pass: 155; the f16 cache 168.9;
// docs/bench-data/cuda/kv-quant-stage/run4.sh). Same float products per
// value as the staged pass, so the same results bit for bit.
//
// A quantized side's raw tile: 64 rows of
// quants QP bytes apart (the row's QB bytes padded to a multiple of 16
// that puts 8 consecutive rows in 8 different banks), then 64 rows of
// HD / 32 f16 scales.
template <typename F, int HD> struct GroupRawTile {
    using B = KvRowBytes<HD, F::q4>;
    static constexpr int QP = B::QB + 16;  // 144, 80 or 48: 36, 20, 12 words (rows 4, 20, 12 banks apart)
    static constexpr int BYTES = GRP_KEYS * (QP + B::SB);
};

// A raw value as float: value i of row r (quants `q`, scale `d`).
template <typename F> __device__ __forceinline__ float raw_value(const uint8_t* row, int i, float d) {
    if constexpr (F::q4)
        return d * (float)((int)((row[i / 2] >> (4 * (i & 1))) & 15u) - 8);
    else
        return d * (float)(int8_t)row[i];
}

// K fragments from a raw tile (as PlainK's, same float products as the
// 16-bit tile's dequantizing, so the same bits).
template <typename F, typename T, int HD> struct RawK {
    const uint8_t* t;  // the side's raw tile
    __device__ __forceinline__ void b(int n, int k, int wk, uint32_t& b0, uint32_t& b1) const {
        using R = GroupRawTile<F, HD>;
        const int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3, r = wk + n * 8 + g;
        const uint8_t* row = t + r * R::QP;
        const float d = __half2float(reinterpret_cast<const __half*>(t + GRP_KEYS * R::QP + r * R::B::SB)[k / 2]);
        const int i = k * 16 + 2 * c;
        if constexpr (F::q4) {
            const uint32_t lo = row[i / 2], hi = row[i / 2 + 4];
            b0 = pack2<T>(d * (float)((int)(lo & 15u) - 8), d * (float)((int)(lo >> 4) - 8));
            b1 = pack2<T>(d * (float)((int)(hi & 15u) - 8), d * (float)((int)(hi >> 4) - 8));
        } else {
            const uint32_t lo = *reinterpret_cast<const uint16_t*>(row + i);
            const uint32_t hi = *reinterpret_cast<const uint16_t*>(row + i + 8);
            b0 = pack2<T>(d * (float)(int8_t)(lo & 255u), d * (float)(int8_t)(lo >> 8));
            b1 = pack2<T>(d * (float)(int8_t)(hi & 255u), d * (float)(int8_t)(hi >> 8));
        }
    }
};
// V fragments from a raw tile (as PlainV's).
template <typename F, typename T, int HD> struct RawV {
    const uint8_t* t;
    __device__ __forceinline__ void b(int n, int wk, uint32_t& b0, uint32_t& b1) const {
        using R = GroupRawTile<F, HD>;
        const int g = (threadIdx.x & 31) >> 2, c = threadIdx.x & 3, r = wk + 2 * c, i = n * 8 + g;
        const __half* sc = reinterpret_cast<const __half*>(t + GRP_KEYS * R::QP) + i / 32;
        constexpr int SH = HD / 32;  // scales per row
        b0 = pack2<T>(raw_value<F>(t + r * R::QP, i, __half2float(sc[r * SH])),
                      raw_value<F>(t + (r + 1) * R::QP, i, __half2float(sc[(r + 1) * SH])));
        b1 = pack2<T>(raw_value<F>(t + (r + 8) * R::QP, i, __half2float(sc[(r + 8) * SH])),
                      raw_value<F>(t + (r + 9) * R::QP, i, __half2float(sc[(r + 9) * SH])));
    }
};

// The block-table entry of thread `tid`'s key of the tile at kt (two
// threads per key: stage_raw_pair), 0 past k1.
__device__ __forceinline__ uint32_t stage_key_block(const uint32_t* table, int bs, int kt, int k1, int tid) {
    const int j = kt + (tid >> 1);
    return j < k1 ? table[j / bs] : 0u;
}

// Copies keys from..to-1 of the ROWS-key tile at kt of both quantized
// sides into the raw tiles at `buf` (K) and `buf + kraw` (V) by cp.async:
// two threads per key (`tid`: 0 .. 2 ROWS - 1), each a half of the key's
// quants of both sides and one side's scales (`blk`: the key's block,
// stage_key_block). Keys from k1 on get zero scales (their quants are left
// as they are: times zero).
template <typename KF, typename VF, int HD, int ROWS = GRP_KEYS>
__device__ __forceinline__ void stage_raw_pair(uint8_t* buf, int kraw, const uint8_t* kc, const uint8_t* vc,
                                               uint32_t blk, int nkv, int kvh, int bs, int kt, int k1, int from,
                                               int to, int tid) {
    using RK = GroupRawTile<KF, HD>;
    using RV = GroupRawTile<VF, HD>;
    const int key = tid >> 1, half = tid & 1, j = kt + key;
    if (j < from || j >= to) return;
    uint8_t* ksd = buf + ROWS * RK::QP + key * RK::B::SB;
    uint8_t* vsd = buf + kraw + ROWS * RV::QP + key * RV::B::SB;
    if (j >= k1) {
        uint8_t* sd = half ? vsd : ksd;
        const int sb = half ? RV::B::SB : RK::B::SB;
        if (sb == 8)
            *reinterpret_cast<uint2*>(sd) = make_uint2(0, 0);
        else
            *reinterpret_cast<uint32_t*>(sd) = 0;
        return;
    }
    const int slot = j % bs;
    const __half *ksc, *vsc;
    const uint8_t* kq = kvq_row<HD, KF::q4>(kc, blk, kvh, slot, nkv, bs, &ksc);
    const uint8_t* vq = kvq_row<HD, VF::q4>(vc, blk, kvh, slot, nkv, bs, &vsc);
    constexpr int KC = RK::B::QB / 32, VC = RV::B::QB / 32;  // 16-byte chunks per thread
#pragma unroll
    for (int i = 0; i < KC; i++) cp_async16(buf + key * RK::QP + (half * KC + i) * 16, kq + (half * KC + i) * 16, true);
#pragma unroll
    for (int i = 0; i < VC; i++)
        cp_async16(buf + kraw + key * RV::QP + (half * VC + i) * 16, vq + (half * VC + i) * 16, true);
    if (half)
        cp_async_small<RV::B::SB>(vsd, vsc);
    else
        cp_async_small<RK::B::SB>(ksd, ksc);
}

// The Walsh-Hadamard butterflies of an mma accumulator `o` (N tiles of 4
// values a lane) over index bits held by lanes: for each bit m of `id`
// below M, the partner lane is STEP·m away, and the lane with the bit set
// keeps the difference (attention_group.cuh's quad lanes: STEP 1, M 4;
// attention_swap.cuh's g lanes: STEP 4, M 8).
template <int N, int M, int STEP> __device__ __forceinline__ void acc_lane_butterflies(float (&o)[N][4], int id) {
#pragma unroll
    for (int m = 1; m < M; m *= 2) {
#pragma unroll
        for (int n = 0; n < N; n++) {
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const float x = __shfl_xor_sync(0xffffffffu, o[n][k], STEP * m);
                o[n][k] = (id & m) ? x - o[n][k] : o[n][k] + x;
            }
        }
    }
}
// Every value of an mma accumulator times s.
template <int N> __device__ __forceinline__ void acc_scale(float (&o)[N][4], float s) {
#pragma unroll
    for (int n = 0; n < N; n++)
#pragma unroll
        for (int k = 0; k < 4; k++) o[n][k] *= s;
}

// A warp's partial outputs over a rotated V, rotated back (the transform
// is its own inverse, and linear, so the merges after it are unchanged).
// Element d = 8n + 2c + e of rows g and g + 8 sits in o[n][e] and
// o[n][2 + e] of lane 4g + c: the butterflies over bit 0 of d are in
// registers, over bits 1-2 across the quad's lanes, over bits 3 on across
// n.
template <int HD> __device__ __forceinline__ void group_acc_rotate(GroupAcc<HD>& a) {
    constexpr int ND = HD / 8;
    const int c = threadIdx.x & 3;
#pragma unroll
    for (int n = 0; n < ND; n++) {
#pragma unroll
        for (int h = 0; h < 4; h += 2) {
            const float x0 = a.o[n][h], x1 = a.o[n][h + 1];
            a.o[n][h] = x0 + x1;
            a.o[n][h + 1] = x0 - x1;
        }
    }
    acc_lane_butterflies<ND, 4, 1>(a.o, c);
#pragma unroll
    for (int m = 1; m < ND; m *= 2) {
#pragma unroll
        for (int n = 0; n < ND; n++) {
            if ((n & m) == 0) {
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const float x0 = a.o[n][k], x1 = a.o[n + m][k];
                    a.o[n][k] = x0 + x1;
                    a.o[n + m][k] = x0 - x1;
                }
            }
        }
    }
    acc_scale<ND>(a.o, rsqrtf((float)HD));
}

// This warp's 16 keys of the 64-key tile whose first key is kt (warp w:
// keys kt + 16w ..), those below k1; nothing if none is.
template <typename T, int HD>
__device__ __forceinline__ void group_tile(const unsigned char* tile, const unsigned char* qbuf, int kt, int k1,
                                           GroupAcc<HD>& a) {
    const int wk = (threadIdx.x >> 5) * 16;
    if (kt + wk >= k1) return;
    const T* ks = reinterpret_cast<const T*>(tile);
    group_chunk<T, HD>(ks, ks + GRP_KEYS * GroupShape<T, HD>::LD, qbuf, wk, kt + wk, k1, a);
}

// A warp's state into the block's merge area (`merge`: NW × GRP_ROWS × HD
// floats of shared memory no warp still reads; head r's partial output at
// r × HD, its (m, l) in sm_m and sm_l). Starts with a barrier.
template <int HD>
__device__ __forceinline__ void group_write_warps(GroupAcc<HD>& a, unsigned char* merge, float (*sm_m)[GRP_ROWS],
                                                  float (*sm_l)[GRP_ROWS]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    a.la = quad_reduce<SumOp>(a.la);
    a.lb = quad_reduce<SumOp>(a.lb);
    __syncthreads();  // every warp is done with the tiles `merge` overlaps
    float* so = reinterpret_cast<float*>(merge) + (size_t)warp * GRP_ROWS * HD;
#pragma unroll
    for (int n = 0; n < HD / 8; n++) {
        const int d = n * 8 + 2 * c;
        so[g * HD + d] = a.o[n][0];
        so[g * HD + d + 1] = a.o[n][1];
        so[(g + 8) * HD + d] = a.o[n][2];
        so[(g + 8) * HD + d + 1] = a.o[n][3];
    }
    if (c == 0) {
        sm_m[warp][g] = a.ma;
        sm_m[warp][g + 8] = a.mb;
        sm_l[warp][g] = a.la;
        sm_l[warp][g + 8] = a.lb;
    }
}

// The block's (m, l, O) of heads 0..nq-1 from its NW warps' states in the
// merge area (group_write_warps), handed to `sink(r, d, O, M, L)` for every
// head r < nq and element d. A head no warp saw keys for gets M = -inf,
// L = 0, O = 0. Starts with a barrier.
template <int HD, int NW, typename Sink>
__device__ __forceinline__ void group_combine(const unsigned char* merge, float (*sm_m)[GRP_ROWS],
                                              float (*sm_l)[GRP_ROWS], int nq, Sink sink) {
    const float* all = reinterpret_cast<const float*>(merge);
    __syncthreads();
    for (int i = threadIdx.x; i < nq * HD; i += blockDim.x) {
        const int r = i / HD, d = i % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < NW; w++) M = fmaxf(M, sm_m[w][r]);
        float L = 0.f, O = 0.f;
#pragma unroll
        for (int w = 0; w < NW; w++) {
            const float f = sm_m[w][r] == -INFINITY ? 0.f : __expf(sm_m[w][r] - M);
            L += sm_l[w][r] * f;
            O += all[((size_t)w * GRP_ROWS + r) * HD + d] * f;
        }
        sink(r, d, O, M, L);
    }
}

// group_write_warps, then group_combine.
template <int HD, int NW, typename Sink>
__device__ __forceinline__ void group_merge_warps(GroupAcc<HD>& a, unsigned char* merge, float (*sm_m)[GRP_ROWS],
                                                  float (*sm_l)[GRP_ROWS], int nq, Sink sink) {
    group_write_warps<HD>(a, merge, sm_m, sm_l);
    group_combine<HD, NW>(merge, sm_m, sm_l, nq, sink);
}
