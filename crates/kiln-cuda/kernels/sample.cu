// Sampling on the device: one block of SB threads per logit row picks the
// next token, so only token ids travel to the host.
//
// The stages follow kiln's CPU sampler (kiln-core/src/sample): temperature
// 0 is argmax (ties → lowest id); otherwise temperature → top-k → softmax →
// top-p → min-p → a draw with the host's uniform number. No stage sorts:
// top-k and top-p find their cut with a radix select (four 8-bit rounds
// over an order-preserving integer key of the logit), counting tokens for
// top-k and summing probability mass for top-p.
//
// Thread t owns the ids t, t + SB, t + 2·SB, ... (coalesced reads). Ties at
// a cut and the draw's cumulative walk go in that fixed order (thread, then
// id), and every mass is summed in 2^-32 fixed point, so a given row,
// parameter set and uniform number always give the same token.
#include "common.cuh"

#define SB 1024
#define NW (SB / 32)

// Per-row parameters, 8 u32 each (kiln-cuda/src/sample.rs writes them).
struct SampleParams {
    uint32_t greedy;  // 1: argmax
    uint32_t top_k;   // 0: off
    float inv_temp;
    float top_p;      // >= 1: off
    float min_p;      // <= 0: off
    uint32_t uniform; // the draw, as a 32-bit fraction of the total mass
    uint32_t pad0, pad1;
};

// Larger logit → larger key; NaN → 0 (below every number), -inf → 0x007fffff.
__device__ __forceinline__ uint32_t fkey(float f) {
    if (f != f) return 0u;
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
#define KEY_NEG_INF 0x007fffffu

__device__ __forceinline__ uint64_t fixed(float w) { return (uint64_t)(w * 4294967296.0f); }

// Block-wide exclusive prefix of one u64 per thread (in thread order) and the total.
__device__ uint64_t block_scan(uint64_t v, uint64_t* total, uint64_t* sm) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    uint64_t inc = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint64_t y = __shfl_up_sync(0xffffffffu, inc, o);
        if (lane >= o) inc += y;
    }
    if (lane == 31) sm[w] = inc;
    __syncthreads();
    if (w == 0) {
        uint64_t s = lane < NW ? sm[lane] : 0;
        uint64_t si = s;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const uint64_t y = __shfl_up_sync(0xffffffffu, si, o);
            if (lane >= o) si += y;
        }
        if (lane < NW) sm[lane] = si - s;  // exclusive prefix of warp totals
        if (lane == NW - 1) sm[NW] = si;
    }
    __syncthreads();
    const uint64_t r = sm[w] + inc - v;
    *total = sm[NW];
    __syncthreads();
    return r;
}

__device__ uint64_t block_max_u64(uint64_t v, uint64_t* sm) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const uint64_t y = __shfl_xor_sync(0xffffffffu, v, o);
        v = y > v ? y : v;
    }
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) sm[w] = v;
    __syncthreads();
    if (w == 0) {
        v = lane < NW ? sm[lane] : 0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const uint64_t y = __shfl_xor_sync(0xffffffffu, v, o);
            v = y > v ? y : v;
        }
        if (lane == 0) sm[0] = v;
    }
    __syncthreads();
    const uint64_t r = sm[0];
    __syncthreads();
    return r;
}

// A cut on the key order: keep key > key, and of the tokens with key equal
// to it the first `ties` in the fixed order.
struct Cut {
    uint32_t key;
    uint64_t ties;
};

// Radix select over the tokens that `visit` yields (visit(f) calls f(i, x,
// key) for each, in this thread's order): the largest key K such that
// weight(key > K) < target <= weight(key >= K), where a token weighs
// weight(x) (1 to count, its fixed-point mass to sum). Returns K; weight(key >
// K) goes to *above (shared).
template <typename Visit, typename Weight>
__device__ uint32_t radix_select(Visit visit, Weight weight, uint64_t target, uint64_t* above, uint64_t* hist,
                                 uint32_t* su) {
    uint32_t prefix = 0, mask = 0;
    uint64_t acc = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += SB) hist[b] = 0;
        __syncthreads();
        visit([&](int, float x, uint32_t k) {
            if ((k & mask) == prefix) atomicAdd((unsigned long long*)&hist[(k >> shift) & 255], (unsigned long long)weight(x));
        });
        __syncthreads();
        if (threadIdx.x == 0) {
            int b = 255;
            for (; b > 0; b--) {
                if (acc + hist[b] >= target) break;
                acc += hist[b];
            }
            su[0] = (uint32_t)b;
        }
        __syncthreads();
        prefix |= su[0] << shift;
        mask |= 255u << shift;
        __syncthreads();
    }
    if (threadIdx.x == 0) *above = acc;
    __syncthreads();
    return prefix;
}

// The logit whose key is k.
__device__ __forceinline__ float unkey(uint32_t k) { return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k); }

extern "C" __global__ void __launch_bounds__(SB)
    sample_rows(const float* logits, int vocab, const uint32_t* params, uint32_t* out) {
    pdl_begin();
    __shared__ uint64_t sm[NW + 1];
    __shared__ uint64_t hist[256];
    __shared__ uint64_t above;
    __shared__ uint32_t su[1];
    const float* l = logits + (size_t)blockIdx.x * vocab;
    const SampleParams p = *reinterpret_cast<const SampleParams*>(params + 8 * blockIdx.x);

    // Argmax: the largest key, then the lowest id (packed so one max does both).
    uint64_t best = 0;
    for (int i = threadIdx.x; i < vocab; i += SB) {
        const uint64_t v = ((uint64_t)fkey(l[i]) << 32) | (uint32_t)(0xffffffffu - (uint32_t)i);
        best = v > best ? v : best;
    }
    best = block_max_u64(best, sm);
    const uint32_t argmax = vocab > 0 ? 0xffffffffu - (uint32_t)best : 0u;
    const uint32_t max_key = (uint32_t)(best >> 32);
    if (p.greedy || max_key <= KEY_NEG_INF) {
        // Greedy, or nothing drawable: the CPU sampler falls back to argmax too.
        if (threadIdx.x == 0) out[blockIdx.x] = argmax;
        return;
    }
    const float maxl = l[argmax] * p.inv_temp;
    const bool inf_max = isinf(maxl);
    // Softmax weight relative to the best token (which weighs 1).
    auto weight_of = [&](float x) -> float {
        const float s = x * p.inv_temp;
        if (inf_max) return s == maxl ? 1.f : 0.f;
        return __expf(s - maxl);
    };
    auto mass = [&](float x) { return fixed(weight_of(x)); };
    // Whether a token at key k passes cut c; j counts this thread's ties so far.
    auto passes = [](const Cut& c, uint64_t base, uint32_t k, uint64_t& j) {
        if (k != c.key) return k > c.key;
        return base + j++ < c.ties;
    };
    // Every drawable token (not NaN, not -inf).
    auto drawable = [&](auto f) {
        for (int i = threadIdx.x; i < vocab; i += SB) {
            const float x = l[i];
            const uint32_t k = fkey(x);
            if (k > KEY_NEG_INF) f(i, x, k);
        }
    };

    // Top-k: the cut is the k-th largest key; its ties go in the fixed order.
    const bool k_on = p.top_k > 0 && p.top_k < (uint32_t)vocab;
    Cut kc{KEY_NEG_INF, 0};
    uint64_t k_base = 0;
    if (k_on) {
        const uint32_t key = radix_select(drawable, [](float) { return (uint64_t)1; }, p.top_k, &above, hist, su);
        const uint64_t gt = above;
        uint64_t eq = 0, tot;
        drawable([&](int, float, uint32_t k) { eq += k == key; });
        k_base = block_scan(eq, &tot, sm);
        kc = Cut{key, p.top_k - gt};
    }
    auto topk = [&](auto f) {
        uint64_t j = 0;
        drawable([&](int i, float x, uint32_t k) {
            if (!k_on || passes(kc, k_base, k, j)) f(i, x, k);
        });
    };

    // Top-p over the top-k survivors: the cut where their mass, largest
    // first, reaches top_p of their total.
    const bool p_on = p.top_p < 1.f;
    Cut pc{KEY_NEG_INF, 0};
    uint64_t p_base = 0;
    if (p_on) {
        uint64_t mine = 0, total, tot;
        topk([&](int, float x, uint32_t) { mine += mass(x); });
        block_scan(mine, &total, sm);
        uint64_t target = (uint64_t)((double)p.top_p * (double)total);
        target = target > 0 ? target : 1;
        const uint32_t key = radix_select(topk, mass, target, &above, hist, su);
        const uint64_t gt = above;
        // The tokens at the cut weigh the same: keep as many as the missing
        // mass needs, at least one when nothing is above.
        const uint64_t wt = fixed(weight_of(unkey(key)));
        uint64_t need = wt > 0 ? (target - gt + wt - 1) / wt : ~0ull;
        if (need == 0) need = 1;
        uint64_t eq = 0;
        topk([&](int, float, uint32_t k) { eq += k == key; });
        p_base = block_scan(eq, &tot, sm);
        pc = Cut{key, need};
    }

    // Min-p, then the draw: this thread's surviving mass, the block prefix,
    // and the thread holding the target walks its own tokens.
    const float min_p = p.min_p;
    auto survivors = [&](auto f) {
        uint64_t j = 0;
        topk([&](int i, float x, uint32_t k) {
            if (p_on && !passes(pc, p_base, k, j)) return;
            const float w = weight_of(x);
            if (min_p > 0.f && w < min_p) return;
            f(i, fixed(w));
        });
    };
    uint64_t mine = 0, total;
    survivors([&](int, uint64_t w) { mine += w; });
    const uint64_t before = block_scan(mine, &total, sm);
    if (total == 0) {
        if (threadIdx.x == 0) out[blockIdx.x] = argmax;
        return;
    }
    // The target in [0, total): total times the uniform 32-bit fraction.
    const uint64_t target = (total >> 32) * p.uniform + (((total & 0xffffffffu) * p.uniform) >> 32);
    if (before <= target && target < before + mine) {
        uint64_t cum = before;
        uint32_t pick = 0xffffffffu;
        survivors([&](int i, uint64_t w) {
            cum += w;
            if (pick == 0xffffffffu && w > 0 && cum > target) pick = (uint32_t)i;
        });
        out[blockIdx.x] = pick != 0xffffffffu ? pick : argmax;
    }
}
