// Per-row kernels of the llama graph: embedding lookup, RMSNorm (with the
// residual add fused in), bias add, SwiGLU (and Gemma's GeGLU, embedding
// scale and post-projection norm), and Q/K normalisation + RoPE + the
// paged-KV write in one pass. `T` is the weight type (f16 or bf16); the
// residual stream and every projection output are f32.
#include "common.cuh"

// x[t] = table[tokens[t]]. Grid: one block per token.
template <typename T>
__device__ void embed(const T* table, const uint32_t* tokens, float* x, int d) {
    const T* row = table + (size_t)tokens[blockIdx.x] * d;
    float* o = x + (size_t)blockIdx.x * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) o[i] = to_f(row[i]);
}
KILN_BOTH(embed, (const T* table, const uint32_t* tokens, float* x, int d), (table, tokens, x, d))

// Block b normalises row r = rows ? rows[b] : b of x, after adding `res`
// (when given) into it: x[r] += res[r]; out[b] = x[r] / rms(x[r]) * w.
// Block size: a multiple of 32.
template <typename T>
__device__ void rms_norm(float* x, const float* res, const float* w, T* out, const uint32_t* rows, int d,
                         float eps) {
    __shared__ float sm[32];
    const size_t r = rows ? rows[blockIdx.x] : blockIdx.x;
    float* xr = x + r * d;
    const float* rr = res ? res + r * d : nullptr;
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = xr[i];
        if (rr) {
            v += rr[i];
            xr[i] = v;
        }
        ss += v * v;
    }
    const float inv = rsqrtf(block_sum(ss, sm) / d + eps);
    T* o = out + (size_t)blockIdx.x * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) o[i] = from_f<T>(xr[i] * inv * w[i]);
}
KILN_BOTH(rms_norm,
          (float* x, const float* res, const float* w, T* out, const uint32_t* rows, int d, float eps),
          (x, res, w, out, rows, d, eps))

// y[t][c] += b[c] for n rows of `cols`.
extern "C" __global__ void bias_add(float* y, const float* b, int n, int cols) {
    pdl_begin();
    const size_t total = (size_t)n * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        y[i] += b[i % cols];
}

// out[t][i] = silu(gu[t][i]) * gu[t][ff + i]  (gate and up side by side).
template <typename T>
__device__ void silu_mul(const float* gu, T* out, int n, int ff) {
    const size_t total = (size_t)n * ff;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / ff, j = i % ff;
        const float g = gu[t * 2 * ff + j], u = gu[t * 2 * ff + ff + j];
        out[i] = from_f<T>(g / (1.f + __expf(-g)) * u);
    }
}
KILN_BOTH(silu_mul, (const float* gu, T* out, int n, int ff), (gu, out, n, ff))

// gpt-oss's clamped SwiGLU: out[t][i] = g·σ(1.702·g)·(u + 1) with
// g = min(gate, 7) and u = clamp(up, -7, 7) (gate and up side by side).
template <typename T>
__device__ void swiglu_oai_mul(const float* gu, T* out, int n, int ff) {
    const size_t total = (size_t)n * ff;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / ff, j = i % ff;
        const float g = fminf(gu[t * 2 * ff + j], 7.f), u = fminf(fmaxf(gu[t * 2 * ff + ff + j], -7.f), 7.f);
        out[i] = from_f<T>(g / (1.f + __expf(-1.702f * g)) * (u + 1.f));
    }
}
KILN_BOTH(swiglu_oai_mul, (const float* gu, T* out, int n, int ff), (gu, out, n, ff))

// out[t][i] = gelu(gu[t][i]) * gu[t][ff + i], GELU in its tanh form (Gemma's GeGLU).
template <typename T>
__device__ void gelu_mul(const float* gu, T* out, int n, int ff) {
    const size_t total = (size_t)n * ff;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / ff, j = i % ff;
        const float g = gu[t * 2 * ff + j], u = gu[t * 2 * ff + ff + j];
        const float gelu = 0.5f * g * (1.f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g)));
        out[i] = from_f<T>(gelu * u);
    }
}
KILN_BOTH(gelu_mul, (const float* gu, T* out, int n, int ff), (gu, out, n, ff))

// y[i][c] += b[e][c] for the n rows of y gathered by expert (expert e's rows
// starts[e] .. starts[e + 1], `experts` of them): a mixture of experts'
// per-expert biases (gpt-oss) after a grouped product. b: `experts` rows of
// `cols`.
extern "C" __global__ void moe_bias_rows(float* y, const float* b, const uint32_t* starts, int experts, int n,
                                         int cols) {
    pdl_begin();
    const size_t total = (size_t)n * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const uint32_t r = (uint32_t)(i / cols);
        // The last expert whose first row is at most r (empty experts share starts).
        int lo = 0, hi = experts - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) >> 1;
            if (starts[mid] <= r) lo = mid; else hi = mid - 1;
        }
        y[i] += b[(size_t)lo * cols + i % cols];
    }
}

// x[t][c] += sum_j w[t*k + j] * y[at[t*k + j]][c]: a mixture-of-experts
// block's weighted expert outputs (rows of y grouped by expert) added into
// the residual, each row's k picks in order.
extern "C" __global__ void moe_combine(float* x, const float* y, const unsigned* at, const float* w, int n, int k,
                                       int d) {
    pdl_begin();
    const size_t total = (size_t)n * d;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const size_t t = i / d, c = i % d;
        float s = 0.f;
        for (int j = 0; j < k; ++j) s += w[t * k + j] * y[(size_t)at[t * k + j] * d + c];
        x[i] += s;
    }
}

// Routing::pick on the device: each row's top_k experts by router logit,
// best first (ties to the lower index), and their softmax weights (over
// every expert; with renorm scaled to sum to 1, the sum kept above the
// smallest normal f16). One warp per row: lane l holds experts l, l + 32,
// ... in registers (PER of them: e <= 32·PER), and k rounds of a warp
// argmax over the experts not taken yet; lane j keeps pick j, and the
// first k lanes write the row's picks at once (k <= 32; the host checks
// both).
constexpr int NO_EXPERT = 0x7fffffff;
template <int PER>
__device__ __forceinline__ void route_row(const float* row, int e, int k, int renorm, unsigned* ids, float* w) {
    const int lane = threadIdx.x;
    float v[PER];
    float mx = -INFINITY;
#pragma unroll
    for (int s = 0; s < PER; s++) {
        const int i = lane + 32 * s;
        v[s] = i < e ? row[i] : -INFINITY;
        mx = fmaxf(mx, v[s]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    float z = 0.f;
#pragma unroll
    for (int s = 0; s < PER; s++)
        if (lane + 32 * s < e) z += expf(v[s] - mx);
    z = warp_sum(z);
    unsigned long long taken = 0;
    unsigned my_id = 0;
    float my_p = 0.f;
    for (int j = 0; j < k; ++j) {
        float best = -INFINITY;
        int bi = NO_EXPERT;
#pragma unroll
        for (int s = 0; s < PER; s++) {
            const int i = lane + 32 * s;
            if (i < e && !((taken >> s) & 1) && (bi == NO_EXPERT || v[s] > best)) best = v[s], bi = i;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ob = __shfl_xor_sync(0xffffffffu, best, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi != NO_EXPERT && (bi == NO_EXPERT || ob > best || (ob == best && oi < bi))) best = ob, bi = oi;
        }
        if (bi == NO_EXPERT) bi = 0;  // fewer experts than k (the host refuses)
        if ((bi & 31) == lane) taken |= 1ull << (bi >> 5);
        if (lane == j) my_id = (unsigned)bi, my_p = expf(best - mx) / z;
    }
    float sum = warp_sum(lane < k ? my_p : 0.f);
    sum = fmaxf(sum, 6.1035156e-5f);
    if (lane < k) ids[lane] = my_id, w[lane] = renorm ? my_p / sum : my_p;
}

extern "C" __global__ void moe_route(const float* logits, int n, int e, int k, int renorm, unsigned* ids, float* w) {
    pdl_begin();
    const int t = blockIdx.x;
    if (t >= n) return;
    const float* row = logits + (size_t)t * e;
    if (e <= 256)
        route_row<8>(row, e, k, renorm, ids + (size_t)t * k, w + (size_t)t * k);
    else
        route_row<64>(row, e, k, renorm, ids + (size_t)t * k, w + (size_t)t * k);
}

// The picks grouped by expert on the device (the host's counting sort of
// backend/moe.rs, for steps that route here): `nk` picks `ids` in slot order
// (k per token) give
// - starts[0..=e]: each expert's first gathered row, then the end;
// - order[row]: the token of each gathered row; at[slot]: the gathered row
//   of each pick. Stable: within an expert, rows follow slot order, as the
//   host's sort places them;
// - tiles[0]: the count of `bn`-row tiles of the grouped product
//   (mmq.cu `mmq_ids`), tiles[1 + i]: tile i as expert << 16 | its index
//   within the expert, expert by expert.
// One block; warp w takes slots w·per .. (w + 1)·per: it counts them per
// expert into its own row of `cnt` (dynamic shared memory, warps × e
// counters, then e + 1 tile offsets), the counts become offsets, and the
// warp places its slots in order, 32 at a time (lanes with the same expert
// ranked by lane).
extern "C" __global__ void moe_sort(const unsigned* ids, int nk, int k, int e, int bn, unsigned* starts,
                                    unsigned* order, unsigned* at, unsigned* tiles) {
    pdl_begin();
    extern __shared__ unsigned moe_cnt[];
    const int nw = (int)(blockDim.x >> 5), warp = (int)(threadIdx.x >> 5), lane = (int)(threadIdx.x & 31);
    unsigned* tile_at = moe_cnt + nw * e;  // e + 1
    for (int i = threadIdx.x; i < nw * e; i += blockDim.x) moe_cnt[i] = 0;
    __syncthreads();
    const int per = (nk + nw - 1) / nw, s0 = warp * per, s1 = min(nk, s0 + per);
    unsigned* mine = moe_cnt + warp * e;
    for (int s = s0 + lane; s < s1; s += 32) {
        const unsigned x = ids[s];
        if (x < (unsigned)e) atomicAdd(&mine[x], 1u);
    }
    __syncthreads();
    // Per expert: each warp's offset within the expert, the expert's total.
    for (int x = threadIdx.x; x < e; x += blockDim.x) {
        unsigned run = 0;
        for (int w = 0; w < nw; w++) {
            const unsigned c = moe_cnt[w * e + x];
            moe_cnt[w * e + x] = run;
            run += c;
        }
        tile_at[x] = run;  // the total, for the scan below
    }
    __syncthreads();
    // Exclusive scans over the experts of rows and of tiles (warp 0: lane l
    // takes experts l·per_l ..).
    if (warp == 0) {
        const int pl = (e + 31) / 32, x0 = lane * pl, x1 = min(e, x0 + pl);
        unsigned rows = 0, nt = 0;
        for (int x = x0; x < x1; x++) rows += tile_at[x], nt += (tile_at[x] + bn - 1) / bn;
        unsigned r_ex = rows, t_ex = nt;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const unsigned ro = __shfl_up_sync(0xffffffffu, r_ex, o), to = __shfl_up_sync(0xffffffffu, t_ex, o);
            if (lane >= o) r_ex += ro, t_ex += to;
        }
        r_ex -= rows, t_ex -= nt;
        for (int x = x0; x < x1; x++) {
            const unsigned c = tile_at[x], ct = (c + bn - 1) / bn;
            starts[x] = r_ex;
            for (unsigned j = 0; j < ct; j++) tiles[1 + t_ex + j] = (unsigned)x << 16 | j;
            tile_at[x] = r_ex;  // now the expert's first row
            r_ex += c, t_ex += ct;
        }
        if (lane == 31) starts[e] = r_ex, tiles[0] = t_ex;
    }
    __syncthreads();
    for (int x = threadIdx.x; x < nw * e; x += blockDim.x) moe_cnt[x] += tile_at[x % e];
    __syncthreads();
    // Each warp places its slots in order.
    for (int b = s0; b < s1; b += 32) {
        const int s = b + lane;
        const unsigned x = s < s1 ? ids[s] : 0xffffffffu;
        const unsigned peers = __match_any_sync(0xffffffffu, x);
        const int rank = __popc(peers & ((1u << lane) - 1));
        const bool ok = x < (unsigned)e;
        const unsigned row = ok ? mine[x] + rank : 0;
        __syncwarp();
        if (ok && rank == 0) mine[x] += __popc(peers);
        __syncwarp();
        if (ok) {
            order[row] = (unsigned)(s / k);
            at[s] = row;
        }
    }
}

// x[i] *= s for n rows of `cols` (Gemma's embedding scale).
extern "C" __global__ void scale_rows(float* x, float s, int n, int cols) {
    pdl_begin();
    const size_t total = (size_t)n * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

// x[r] += rmsnorm(y[r]) * w, one block per row (Gemma's norm of a
// projection before its residual add). Block size: a multiple of 32.
extern "C" __global__ void norm_add(float* x, const float* y, const float* w, int d, float eps) {
    pdl_begin();
    __shared__ float sm[32];
    const float* yr = y + (size_t)blockIdx.x * d;
    float* xr = x + (size_t)blockIdx.x * d;
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) ss += yr[i] * yr[i];
    const float inv = rsqrtf(block_sum(ss, sm) / d + eps);
    for (int i = threadIdx.x; i < d; i += blockDim.x) xr[i] += yr[i] * inv * w[i];
}

// One block per (token, head) over the fused projection output
// qkv[t] = [q (nh·hd) | k (nkv·hd) | v (nkv·hd)], for the nh query heads and
// the nkv key heads: optional per-head RMSNorm (Qwen3), RoPE at the token's
// position, then queries are written back in place and keys (with their
// values) go to the paged cache, laid out [block][kv head][slot][hd].
// Thread i owns the rotation pair i: (2i, 2i+1) or, for neox, (i, i+hd/2).
// Block size: hd/2 rounded up to a multiple of 32.
template <typename T>
__device__ void rope_store(float* qkv, const uint32_t* pos, const uint32_t* slots, const float* cos_t,
                           const float* sin_t, const float* qn, const float* kn, T* kc, T* vc, int nh, int nkv,
                           int hd, int neox, int bs, float eps) {
    __shared__ float sm[32];
    const int t = blockIdx.x, h = blockIdx.y, i = threadIdx.x, half = hd / 2;
    const size_t width = (size_t)(nh + 2 * nkv) * hd;
    float* head = qkv + t * width + (size_t)h * hd;
    const bool on = i < half;
    const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
    float a = on ? head[ia] : 0.f, b = on ? head[ib] : 0.f;
    const float* nw = h < nh ? qn : kn;
    if (nw) {
        const float inv = rsqrtf(block_sum(a * a + b * b, sm) / hd + eps);
        if (on) {
            a *= inv * nw[ia];
            b *= inv * nw[ib];
        }
    }
    if (!on) return;
    const size_t p = pos[t];
    const float c = cos_t[p * half + i], s = sin_t[p * half + i];
    const float ra = a * c - b * s, rb = a * s + b * c;
    if (h < nh) {
        head[ia] = ra;
        head[ib] = rb;
        return;
    }
    const int kvh = h - nh;
    const size_t slot = slots[t];
    const size_t base = (((slot / bs) * nkv + kvh) * bs + slot % bs) * hd;
    const float* v = qkv + t * width + (size_t)(nh + nkv + kvh) * hd;
    kc[base + ia] = from_f<T>(ra);
    kc[base + ib] = from_f<T>(rb);
    vc[base + ia] = from_f<T>(v[ia]);
    vc[base + ib] = from_f<T>(v[ib]);
}
KILN_BOTH(rope_store,
          (float* qkv, const uint32_t* pos, const uint32_t* slots, const float* cos_t, const float* sin_t,
           const float* qn, const float* kn, T* kc, T* vc, int nh, int nkv, int hd, int neox, int bs, float eps),
          (qkv, pos, slots, cos_t, sin_t, qn, kn, kc, vc, nh, nkv, hd, neox, bs, eps))

// KV copies in one layer (the segment cache's, a context shift's): for copy
// c (`copies[3c..3c+3]` = source slot, destination slot, shift as a signed
// 32-bit value), K and V of every KV head move from the source slot to the
// destination slot, K rotated by `shift` more positions (the pair's cos/sin
// at |shift|, the sine negated for a negative shift, times `unscale` to take
// out the table's attention factor: a shift is a pure rotation). Pools as
// rope_store writes them. Grid: (copies, nkv); thread i owns pair i.
template <typename T>
__device__ void kv_shift(T* kc, T* vc, const uint32_t* copies, const float* cos_t, const float* sin_t, int nkv,
                         int hd, int neox, int bs, float unscale) {
    const int c = blockIdx.x, h = blockIdx.y, i = threadIdx.x, half = hd / 2;
    if (i >= half) return;
    const size_t src = copies[3 * c], dst = copies[3 * c + 1];
    const int sd = (int)copies[3 * c + 2];
    const size_t d = sd < 0 ? (size_t)(-(long long)sd) : (size_t)sd;
    const float sgn = sd < 0 ? -1.0f : 1.0f;
    const size_t sb = (((src / bs) * nkv + h) * bs + src % bs) * hd;
    const size_t db = (((dst / bs) * nkv + h) * bs + dst % bs) * hd;
    const int ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
    const float a = to_f<T>(kc[sb + ia]), b = to_f<T>(kc[sb + ib]);
    const float co = cos_t[d * half + i] * unscale, s = sgn * sin_t[d * half + i] * unscale;
    kc[db + ia] = from_f<T>(a * co - b * s);
    kc[db + ib] = from_f<T>(a * s + b * co);
    vc[db + ia] = vc[sb + ia];
    vc[db + ib] = vc[sb + ib];
}
KILN_BOTH(kv_shift,
          (T* kc, T* vc, const uint32_t* copies, const float* cos_t, const float* sin_t, int nkv, int hd, int neox,
           int bs, float unscale),
          (kc, vc, copies, cos_t, sin_t, nkv, hd, neox, bs, unscale))

// The host KV tier's copies between the KV pools and a staging buffer:
// `stage[j]` holds block `blocks[j]` of each of the `np` pools in turn (the
// pools' addresses in `pools`: every layer's K, then every layer's V), `kw`
// 16-byte words per block of a K pool and `vw` of a V pool (they differ
// when K and V are stored in different types). `save` = 1 copies pools →
// stage, 0 stage → pools. Grid: (np, count); blocks of one launch are
// distinct.
extern "C" __global__ void kv_blocks(const unsigned long long* pools, int np, const uint32_t* blocks, int kw,
                                     int vw, uint4* stage, int save) {
    pdl_begin();
    const int p = blockIdx.x, j = blockIdx.y, nk = np / 2;
    const int w = p < nk ? kw : vw;
    const size_t at = p < nk ? (size_t)p * kw : (size_t)nk * kw + (size_t)(p - nk) * vw;
    uint4* pool = reinterpret_cast<uint4*>(pools[p]) + (size_t)blocks[j] * w;
    uint4* st = stage + (size_t)j * nk * (kw + vw) + at;
    for (int i = threadIdx.x; i < w; i += blockDim.x) {
        if (save)
            st[i] = pool[i];
        else
            pool[i] = st[i];
    }
}

// Encoders (BERT and kin). `x = LayerNorm(x + y + bias)` row by row
// (`y`, `bias` optional), writing the 16-bit copy `h` that the next product
// reads. One block per row; block size a multiple of 32.
template <typename T>
__device__ void add_ln(float* x, const float* y, const float* bias, const float* w, const float* b, T* h, int d,
                       float eps) {
    __shared__ float sm[32];
    const size_t r = blockIdx.x;
    float* xr = x + r * d;
    const float* yr = y ? y + r * d : nullptr;
    float s = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = xr[i];
        if (yr) v += yr[i];
        if (bias) v += bias[i];
        xr[i] = v;
        s += v;
    }
    const float mean = block_sum(s, sm) / d;
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        const float c = xr[i] - mean;
        ss += c * c;
    }
    const float inv = rsqrtf(block_sum(ss, sm) / d + eps);
    T* hr = h + r * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        const float v = (xr[i] - mean) * inv * w[i] + b[i];
        xr[i] = v;
        hr[i] = from_f<T>(v);
    }
}
KILN_BOTH(add_ln, (float* x, const float* y, const float* bias, const float* w, const float* b, T* h, int d, float eps),
          (x, y, bias, w, b, h, d, eps))

// out = act(y + bias) as the 16-bit type, n rows of `cols` (`bias`
// optional); act 0: none, 1: GELU (erf), 2: GELU (tanh).
template <typename T>
__device__ void bias_act(const float* y, const float* bias, T* out, int n, int cols, int act) {
    const size_t total = (size_t)n * cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        float v = y[i] + (bias ? bias[i % cols] : 0.f);
        if (act == 1) v = 0.5f * v * (1.f + erff(v * 0.70710678118654752f));
        if (act == 2) v = 0.5f * v * (1.f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v)));
        out[i] = from_f<T>(v);
    }
}
KILN_BOTH(bias_act, (const float* y, const float* bias, T* out, int n, int cols, int act), (y, bias, out, n, cols, act))

// Attention of row t, head h over every row of its own sequence (no mask):
// qkv rows are [q (nh·hd) | k (nkv·hd) | v (nkv·hd)] in f32; start[t] and
// len[t] give the sequence's rows. With `rope` (1: pairs (i, i + hd/2), 2:
// pairs (2i, 2i + 1)), Q and K are rotated at their rows' positions `pos`
// by the tables `cos_t`/`sin_t` (hd/2 per position) as they are read.
// Grid (n, nh); block 128 threads; dynamic shared memory: hd + max len floats.
template <typename T>
__device__ void attn_within(const float* qkv, const uint32_t* start, const uint32_t* len, const uint32_t* pos,
                            const float* cos_t, const float* sin_t, T* out, int nh, int nkv, int hd, float scale,
                            int rope) {
    extern __shared__ float sh[];
    __shared__ float red[32];
    const int t = blockIdx.x, h = blockIdx.y, kh = h / (nh / nkv), half = hd / 2;
    const size_t width = (size_t)(nh + 2 * nkv) * hd;
    const int s0 = start[t], L = len[t];
    float* q = sh;
    float* p = sh + hd;
    const float* qr = qkv + t * width + (size_t)h * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float v = qr[e];
        if (rope) {
            const int i = rope == 1 ? e % half : e / 2;
            const bool lo = rope == 1 ? e < half : (e & 1) == 0;
            const int other = rope == 1 ? (lo ? e + half : e - half) : (lo ? e + 1 : e - 1);
            const float c = cos_t[(size_t)pos[t] * half + i], s = sin_t[(size_t)pos[t] * half + i];
            v = lo ? v * c - qr[other] * s : qr[other] * s + v * c;
        }
        q[e] = v * scale;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < L; j += blockDim.x) {
        const float* k = qkv + (size_t)(s0 + j) * width + (size_t)(nh + kh) * hd;
        float s = 0.f;
        if (!rope) {
            for (int e = 0; e < hd; ++e) s += q[e] * k[e];
        } else {
            const float* ct = cos_t + (size_t)pos[s0 + j] * half;
            const float* st = sin_t + (size_t)pos[s0 + j] * half;
            for (int i = 0; i < half; ++i) {
                const int a = rope == 1 ? i : 2 * i, b = rope == 1 ? i + half : 2 * i + 1;
                const float ka = k[a] * ct[i] - k[b] * st[i], kb = k[a] * st[i] + k[b] * ct[i];
                s += q[a] * ka + q[b] * kb;
            }
        }
        p[j] = s;
        mx = fmaxf(mx, s);
    }
    mx = block_max(mx, red);
    float z = 0.f;
    for (int j = threadIdx.x; j < L; j += blockDim.x) {
        const float e = __expf(p[j] - mx);
        p[j] = e;
        z += e;
    }
    z = block_sum(z, red);
    __syncthreads();
    const float inv = 1.f / z;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float acc = 0.f;
        for (int j = 0; j < L; ++j) acc += p[j] * qkv[(size_t)(s0 + j) * width + (size_t)(nh + nkv + kh) * hd + e];
        out[(size_t)t * nh * hd + (size_t)h * hd + e] = from_f<T>(acc * inv);
    }
}
KILN_BOTH(attn_within,
          (const float* qkv, const uint32_t* start, const uint32_t* len, const uint32_t* pos, const float* cos_t,
           const float* sin_t, T* out, int nh, int nkv, int hd, float scale, int rope),
          (qkv, start, len, pos, cos_t, sin_t, out, nh, nkv, hd, scale, rope))
