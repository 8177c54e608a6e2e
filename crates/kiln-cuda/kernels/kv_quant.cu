// The kernels of a quantized KV cache (kv_fmt.cuh: K and V each in the
// model's 16-bit type, q8_0 or q4_0, not both 16-bit), in a module of their
// own that is loaded only when such a cache is made: the KV write
// (rope_store_q) and the split-K, grouped decode and tensor-core prompt
// attention, the same templates as attention.cu, attention_group.cu and
// attention_tc.cu over the quantized formats. Entry names end in
// _<k type>_<v type>.
//
// build.rs compiles it once per (K, V) pair, naming the pair with
// -DKV_K=q8_0 -DKV_KF=KvSideQ8 -DKV_V=... -DKV_VF=... (kv_quant_<k>_<v>.ptx),
// so that a cache loads and JIT-compiles only its own pair's kernels.
#ifndef KV_K
#error "kv_quant.cu is built per (K, V) pair: see build.rs"
#endif
#define KV_QUANT_TU
#include "attention.cu"
#include "attention_tc.cu"
#include "attention_group.cu"

// rope_store for a quantized cache (K and V each in the model's type,
// q8_0 or q4_0; kv_fmt.cuh): the same per-head norm and rotation, then a KV
// head's rotated K and its V go through shared memory so that thread i
// holds values 2i and 2i+1 of each and a half-warp quantizes one 32-value
// block. Same grid and block size as rope_store (a multiple of 32 threads).
template <typename T, typename KF, typename VF>
__device__ void rope_store_q(float* qkv, const uint32_t* pos, const uint32_t* slots, const float* cos_t,
                             const float* sin_t, const float* qn, const float* kn, typename KF::Elem* kc,
                             typename VF::Elem* vc, int nh, int nkv, int hd, int neox, int bs, float eps) {
    __shared__ float sm[32];
    __shared__ float kr[256], vr[256];
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
    const size_t p = pos[t];
    const float c = on ? cos_t[p * half + i] : 0.f, s = on ? sin_t[p * half + i] : 0.f;
    const float ra = a * c - b * s, rb = a * s + b * c;
    if (h < nh) {  // the whole block: h is the block's
        if (on) {
            head[ia] = ra;
            head[ib] = rb;
        }
        return;
    }
    const int kvh = h - nh;
    const float* v = qkv + t * width + (size_t)(nh + nkv + kvh) * hd;
    if (on) {
        kr[ia] = ra;
        kr[ib] = rb;
        vr[ia] = v[ia];
        vr[ib] = v[ib];
    }
    __syncthreads();
    // Quantized sides are stored rotated (kv_fmt.cuh).
    if constexpr (KF::quant) wht_shared(kr, hd);
    if constexpr (VF::quant) wht_shared(vr, hd);
    const size_t slot = slots[t], blk = slot / bs;
    const int sl = (int)(slot % bs);
    kv_store_pair<KF, T>(kc, blk, kvh, sl, nkv, bs, hd, i, on ? kr[2 * i] : 0.f, on ? kr[2 * i + 1] : 0.f);
    kv_store_pair<VF, T>(vc, blk, kvh, sl, nkv, bs, hd, i, on ? vr[2 * i] : 0.f, on ? vr[2 * i + 1] : 0.f);
}
#define ROPE_Q(SUF, TY, KN, KF, VN, VF)                                                                        \
    extern "C" __global__ void rope_store_##SUF##_##KN##_##VN(                                                 \
        float* qkv, const uint32_t* pos, const uint32_t* slots, const float* cos_t, const float* sin_t,       \
        const float* qn, const float* kn, typename KF::Elem* kc, typename VF::Elem* vc, int nh, int nkv,      \
        int hd, int neox, int bs, float eps) {                                                                 \
        pdl_begin();                                                                                           \
        rope_store_q<TY, KF, VF>(qkv, pos, slots, cos_t, sin_t, qn, kn, kc, vc, nh, nkv, hd, neox, bs, eps);   \
    }
#define ROPE_QX(...) ROPE_Q(__VA_ARGS__)
#define ROPE_Q_KV(SUF, TY) ROPE_QX(SUF, TY, KV_K, KV_KF<TY>, KV_V, KV_VF<TY>)
ROPE_Q_KV(f16, __half)
ROPE_Q_KV(bf16, __nv_bfloat16)
