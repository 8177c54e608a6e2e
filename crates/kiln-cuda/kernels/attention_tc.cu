// Prefill attention on the tensor cores (the FlashAttention-2 scheme):
// one block of 4 warps takes a tile of up to 64 consecutive query rows of
// one sequence and one query head; each warp owns 16 rows. Keys stream
// through shared memory 32 at a time, gathered from the paged cache. Per
// tile, S = Q·Kᵀ and O += P·V are mma.sync m16n8k16 (16-bit inputs, f32
// accumulators); the softmax is online, per row, in registers (fragment
// layouts: mma.cuh). With a sliding window (`window` > 0) a row at
// position p sees keys p - window + 1 ..= p: the key loop starts at the
// tile's first row's first key, and the rest is masked.
//
// Split keys (`nsplit` > 1, grid z): a few tiles over a long context (a
// short prompt after a long cached prefix, the runs between a request's
// copied segments) would leave most SMs idle while each block walks every
// key; block z then takes keys [z·split_len, (z+1)·split_len) of the
// tile's range and writes its unnormalized O and (m, l) per row to
// `part_o`/`part_ml`, and attn_tile_merge combines the splits.
#include "mma.cuh"
#include "kv_fmt.cuh"

#define TC_ROWS 64
#define TC_KEYS 32

// tiles: pairs (first row, rows) per block.x; rows of one tile belong to one
// sequence and have consecutive positions.
// KF, VF: how K and V are stored (kv_fmt.cuh); a quantized side is
// dequantized into the 16-bit tile as it loads.
template <typename T, typename KF, typename VF, int HD>
__device__ void attn_tile(const float* qkv, const typename KF::Elem* kc, const typename VF::Elem* vc,
                          const uint32_t* pos, const uint32_t* tab,
                          const uint32_t* tables, const uint32_t* tiles, T* out, int nh, int nkv, int bs,
                          float scale, int window, const float* sinks, float* part_o, float* part_ml, int nsplit,
                          int split_len) {
    constexpr int LD = HD + 8;  // padded row, in elements (16-byte aligned, fewer bank conflicts)
    constexpr int KS = HD / 16; // k-steps of Q·Kᵀ
    constexpr int ND = HD / 8;  // n-tiles of O
    __shared__ __align__(16) T qs[TC_ROWS * LD];
    __shared__ __align__(16) T ks[TC_KEYS * LD];
    __shared__ __align__(16) T vs[TC_KEYS * LD];
    const int h = blockIdx.y, kvh = h / (nh / nkv);
    const int r0 = tiles[2 * blockIdx.x], nr = tiles[2 * blockIdx.x + 1];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c = lane & 3;
    const int pos0 = pos[r0];
    const uint32_t* table = tables + tab[r0];
    const size_t width = (size_t)(nh + 2 * nkv) * HD;

    for (int i = tid; i < TC_ROWS * HD; i += blockDim.x) {
        const int r = i / HD, d = i % HD;
        qs[r * LD + d] = from_f<T>(r < nr ? qkv[(size_t)(r0 + r) * width + (size_t)h * HD + d] * scale : 0.f);
    }
    __syncthreads();
    uint32_t qf[KS][4];
    const int wr = warp * 16;
#pragma unroll
    for (int k = 0; k < KS; k++) {
        qf[k][0] = ld32(&qs[(wr + g) * LD + k * 16 + 2 * c]);
        qf[k][1] = ld32(&qs[(wr + g + 8) * LD + k * 16 + 2 * c]);
        qf[k][2] = ld32(&qs[(wr + g) * LD + k * 16 + 2 * c + 8]);
        qf[k][3] = ld32(&qs[(wr + g + 8) * LD + k * 16 + 2 * c + 8]);
    }
    // Positions of this lane's two rows (-1: a row past the tile's end).
    const int pa = wr + g < nr ? pos0 + wr + g : -1, pb = wr + g + 8 < nr ? pos0 + wr + g + 8 : -1;
    const int wlast = __reduce_max_sync(0xffffffffu, max(pa, pb));
    float o[ND][4];
#pragma unroll
    for (int n = 0; n < ND; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;

    const int kend = pos0 + nr;
    // This block's keys: all of the tile's, or split z of them (split_len
    // is a multiple of TC_KEYS, so key tiles never cross a split).
    int kbeg = window_start(pos0 + 1, window), kstop = kend;
    if (nsplit > 1) {
        kbeg += blockIdx.z * split_len;
        kstop = min(kend, kbeg + split_len);
    }
    for (int kt = kbeg; kt < kstop; kt += TC_KEYS) {
        __syncthreads();
        if constexpr (!KF::quant && !VF::quant) {
            for (int i = tid; i < TC_KEYS * HD / 8; i += blockDim.x) {
                const int key = i / (HD / 8), ch = i % (HD / 8), j = kt + key;
                uint4 kv4 = make_uint4(0, 0, 0, 0), vv4 = make_uint4(0, 0, 0, 0);
                if (j < kend) {
                    const size_t base = (((size_t)table[j / bs] * nkv + kvh) * bs + j % bs) * HD + ch * 8;
                    kv4 = *reinterpret_cast<const uint4*>(kc + base);
                    vv4 = *reinterpret_cast<const uint4*>(vc + base);
                }
                *reinterpret_cast<uint4*>(&ks[key * LD + ch * 8]) = kv4;
                *reinterpret_cast<uint4*>(&vs[key * LD + ch * 8]) = vv4;
            }
        } else {
            // A quantized side: one key per quad of lanes, dequantized and
            // rotated back (kv_tile_row); the 128 threads take the 32 keys.
            static_assert(TC_KEYS * 4 == 128, "one key per quad of the block's 128 threads");
            const int key = tid / 4, j = kt + key;
            const bool ok = j < kend;
            const size_t blk = ok ? table[j / bs] : 0;
            kv_tile_row<KF, T, HD>(kc, ok, blk, kvh, j % bs, nkv, bs, tid % 4, &ks[key * LD]);
            kv_tile_row<VF, T, HD>(vc, ok, blk, kvh, j % bs, nkv, bs, tid % 4, &vs[key * LD]);
        }
        __syncthreads();
        // The whole key tile is in the future of every row of this warp
        // (decided per warp: mma.sync needs all 32 lanes).
        if (kt > wlast) continue;

        float s[TC_KEYS / 8][4];
#pragma unroll
        for (int n = 0; n < TC_KEYS / 8; n++) {
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
#pragma unroll
            for (int k = 0; k < KS; k++) {
                const T* kr = &ks[(n * 8 + g) * LD + k * 16 + 2 * c];
                mma16816<T>(s[n], qf[k], ld32(kr), ld32(kr + 8));
            }
        }
        // Keys before a row's window (a branch the whole grid takes alike:
        // no cost without a window).
        if (window > 0 && kt <= wlast - window) {
#pragma unroll
            for (int n = 0; n < TC_KEYS / 8; n++) {
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int j = kt + n * 8 + 2 * c + e;
                    if (j <= pa - window) s[n][e] = -INFINITY;
                    if (j <= pb - window) s[n][2 + e] = -INFINITY;
                }
            }
        }
        float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
        for (int n = 0; n < TC_KEYS / 8; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int j = kt + n * 8 + 2 * c + e;
                if (j > pa) s[n][e] = -INFINITY;
                if (j > pb) s[n][2 + e] = -INFINITY;
                mxa = fmaxf(mxa, s[n][e]);
                mxb = fmaxf(mxb, s[n][2 + e]);
            }
        }
        mxa = quad_reduce<MaxOp>(mxa);
        mxb = quad_reduce<MaxOp>(mxb);
        const float na = fmaxf(ma, mxa), nb = fmaxf(mb, mxb);
        const float ca = na == -INFINITY ? 1.f : __expf(ma - na), cb = nb == -INFINITY ? 1.f : __expf(mb - nb);
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
        for (int n = 0; n < TC_KEYS / 8; n++) {
#pragma unroll
            for (int e = 0; e < 2; e++) {
                s[n][e] = na == -INFINITY ? 0.f : __expf(s[n][e] - na);
                s[n][2 + e] = nb == -INFINITY ? 0.f : __expf(s[n][2 + e] - nb);
                la += s[n][e];
                lb += s[n][2 + e];
            }
        }
#pragma unroll
        for (int kk = 0; kk < TC_KEYS / 16; kk++) {
            uint32_t pf[4];
            pf[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
            pf[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
            pf[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            pf[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
            const uint16_t* v16 = reinterpret_cast<const uint16_t*>(vs);
            const int k0 = kk * 16 + 2 * c;
#pragma unroll
            for (int n = 0; n < ND; n++) {
                const int d = n * 8 + g;
                const uint32_t b0 = join16(v16[k0 * LD + d], v16[(k0 + 1) * LD + d]);
                const uint32_t b1 = join16(v16[(k0 + 8) * LD + d], v16[(k0 + 9) * LD + d]);
                mma16816<T>(o[n], pf, b0, b1);
            }
        }
    }
    la = quad_reduce<SumOp>(la);
    lb = quad_reduce<SumOp>(lb);
    if (nsplit > 1) {
        const size_t ia = ((size_t)(r0 + wr + g) * nh + h) * nsplit + blockIdx.z;
        const size_t ib = ((size_t)(r0 + wr + g + 8) * nh + h) * nsplit + blockIdx.z;
#pragma unroll
        for (int n = 0; n < ND; n++) {
            const int d = n * 8 + 2 * c;
            if (pa >= 0) {
                part_o[ia * HD + d] = o[n][0];
                part_o[ia * HD + d + 1] = o[n][1];
            }
            if (pb >= 0) {
                part_o[ib * HD + d] = o[n][2];
                part_o[ib * HD + d + 1] = o[n][3];
            }
        }
        if (c == 0 && pa >= 0) {
            part_ml[2 * ia] = ma;
            part_ml[2 * ia + 1] = la;
        }
        if (c == 0 && pb >= 0) {
            part_ml[2 * ib] = mb;
            part_ml[2 * ib + 1] = lb;
        }
        return;
    }
    const float fa = fold_sink(sinks, h, ma, la), fb = fold_sink(sinks, h, mb, lb);
    const float ia = la > 0.f ? fa / la : 0.f, ib = lb > 0.f ? fb / lb : 0.f;
#pragma unroll
    for (int n = 0; n < ND; n++) {
        const int d = n * 8 + 2 * c;
        if (pa >= 0) {
            T* p = out + ((size_t)(r0 + wr + g) * nh + h) * HD + d;
            *reinterpret_cast<uint32_t*>(p) = pack2<T>(o[n][0] * ia, o[n][1] * ia);
        }
        if (pb >= 0) {
            T* p = out + ((size_t)(r0 + wr + g + 8) * nh + h) * HD + d;
            *reinterpret_cast<uint32_t*>(p) = pack2<T>(o[n][2] * ib, o[n][3] * ib);
        }
    }
}

// Combines the key splits of attn_tile: per (row, head) of each tile,
// O = Σ O_z·e^(m_z - M) / (Σ l_z·e^(m_z - M) [+ the sink]), M = max m_z.
// Grid: (tiles, heads); a warp per row.
template <typename T, int HD>
__device__ void attn_tile_merge(const uint32_t* tiles, const float* part_o, const float* part_ml, T* out, int nh,
                                int nsplit, const float* sinks) {
    const int h = blockIdx.y, r0 = tiles[2 * blockIdx.x], nr = tiles[2 * blockIdx.x + 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int rr = warp; rr < nr; rr += nw) {
        const size_t base = ((size_t)(r0 + rr) * nh + h) * nsplit;
        float M = -INFINITY, L = 0.f;
        for (int z = 0; z < nsplit; z++) M = fmaxf(M, part_ml[2 * (base + z)]);
        for (int z = 0; z < nsplit; z++) {
            const float m = part_ml[2 * (base + z)];
            if (m != -INFINITY) L += part_ml[2 * (base + z) + 1] * __expf(m - M);
        }
        const float f = fold_sink(sinks, h, M, L);
        const float inv = L > 0.f ? f / L : 0.f;
        for (int d = lane; d < HD; d += 32) {
            float acc = 0.f;
            for (int z = 0; z < nsplit; z++) {
                const float m = part_ml[2 * (base + z)];
                if (m != -INFINITY) acc += part_o[(base + z) * HD + d] * __expf(m - M);
            }
            out[((size_t)(r0 + rr) * nh + h) * HD + d] = from_f<T>(acc * inv);
        }
    }
}

#ifndef KV_QUANT_TU  // the f16/bf16 cache's entries; kv_quant.cu holds the quantized ones
#define TILE_ENTRY(SUF, TY, HD)                                                                                \
    extern "C" __global__ void __launch_bounds__(128)                                                          \
        attn_tile_##HD##_##SUF(const float* qkv, const TY* kc, const TY* vc, const uint32_t* pos,             \
                               const uint32_t* tab, const uint32_t* tables, const uint32_t* tiles, TY* out,   \
                               int nh, int nkv, int bs, float scale, int window, const float* sinks,          \
                               float* part_o, float* part_ml, int nsplit, int split_len) {                    \
        pdl_begin();                                                                                           \
        attn_tile<TY, KvPlain<TY>, KvPlain<TY>, HD>(qkv, kc, vc, pos, tab, tables, tiles, out, nh, nkv, bs,    \
                                                    scale, window, sinks, part_o, part_ml, nsplit, split_len); \
    }                                                                                                          \
    extern "C" __global__ void __launch_bounds__(128)                                                          \
        attn_tile_merge_##HD##_##SUF(const uint32_t* tiles, const float* part_o, const float* part_ml, TY* out, \
                                     int nh, int nsplit, const float* sinks) {                                 \
        pdl_begin();                                                                                           \
        attn_tile_merge<TY, HD>(tiles, part_o, part_ml, out, nh, nsplit, sinks);                               \
    }
TILE_ENTRY(f16, __half, 64)
TILE_ENTRY(f16, __half, 128)
TILE_ENTRY(bf16, __nv_bfloat16, 64)
TILE_ENTRY(bf16, __nv_bfloat16, 128)

#endif

#ifdef KV_QUANT_TU
// A quantized cache: attn_tile_<hd>_<dtype>_<k>_<v> (as attention.cu).
#define TILE_ENTRY_Q(SUF, TY, HD, KN, KF, VN, VF)                                                              \
    extern "C" __global__ void __launch_bounds__(128) attn_tile_##HD##_##SUF##_##KN##_##VN(                   \
        const float* qkv, const typename KF::Elem* kc, const typename VF::Elem* vc, const uint32_t* pos,      \
        const uint32_t* tab, const uint32_t* tables, const uint32_t* tiles, TY* out, int nh, int nkv, int bs,  \
        float scale, int window, const float* sinks, float* part_o, float* part_ml, int nsplit, int split_len) { \
        pdl_begin();                                                                                           \
        attn_tile<TY, KF, VF, HD>(qkv, kc, vc, pos, tab, tables, tiles, out, nh, nkv, bs, scale, window, sinks, \
                                  part_o, part_ml, nsplit, split_len);                                         \
    }
#define TILE_ENTRY_QX(...) TILE_ENTRY_Q(__VA_ARGS__)
#define TILE_Q_KV(SUF, TY, HD) TILE_ENTRY_QX(SUF, TY, HD, KV_K, KV_KF<TY>, KV_V, KV_VF<TY>)
TILE_Q_KV(f16, __half, 64)
TILE_Q_KV(f16, __half, 128)
TILE_Q_KV(bf16, __nv_bfloat16, 64)
TILE_Q_KV(bf16, __nv_bfloat16, 128)
#endif
