// LoRA deltas, unmerged and batched (crates/kiln-cuda/src/backend/lora.rs):
// each row of the step names its adapter's slot (or none) and scale; one
// shrink t = x·Aᵀ and one expand y += scale·t·Bᵀ launch per matrix cover
// every part of it and every adapter of the step (a per-row table of
// adapters, as BGMV does), so the launches depend only on the step's size
// and a decode step with adapters replays from a CUDA graph like one
// without. A and B are f16: A rank × cols, B output-major (rows × the rank
// padded to a multiple of 8). In a decode step the shrink rides in extra
// blocks of a launch the product makes anyway (the activation quantizer's,
// quant.cu, or the 16-bit product's, gemv.cu's `*_lora` entries), and a
// [gate | up] product's expand runs SwiGLU too (lora_expand_silu): one
// launch per product is LoRA's own there.
#include "lora.cuh"

// The shrink in its own launch: grid (n, ranks, parts), 256 threads.
template <typename T>
__device__ void lora_shrink(const T* x, const float* xf, const float* nw, float eps, const LoraDesc* desc,
                            int slots, const LoraRow* rows, float* t, int n, int cols, int tr) {
    lora_shrink_one<T>(x, xf, nw, eps, desc, slots, rows, t, n, cols, tr, blockIdx.x, blockIdx.y, blockIdx.z);
}
// Entry points without KILN_BOTH's pdl_begin: the shrink waits itself,
// after its loads of the factors.
extern "C" __global__ void lora_shrink_f16(const __half* x, const float* xf, const float* nw, float eps,
                                           const LoraDesc* desc, int slots, const LoraRow* rows, float* t, int n,
                                           int cols, int tr) {
    lora_shrink<__half>(x, xf, nw, eps, desc, slots, rows, t, n, cols, tr);
}
extern "C" __global__ void lora_shrink_bf16(const __nv_bfloat16* x, const float* xf, const float* nw, float eps,
                                            const LoraDesc* desc, int slots, const LoraRow* rows, float* t, int n,
                                            int cols, int tr) {
    lora_shrink<__nv_bfloat16>(x, xf, nw, eps, desc, slots, rows, t, n, cols, tr);
}

// Output o's delta of row i, part p: scale · Σ_r t[r] · B[o][r] with the
// rank's t in shared memory (`ts`) and the first LORA_PRE 16-byte loads of
// B[o] in `pre` (loaded before the wait).
__device__ __forceinline__ float lora_dot(const float* ts, const __half* bo, int rp, const Raw16<8>* pre) {
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < LORA_PRE; ++k) {
        if (8 * k >= rp) break;
        float b8[8];
        unpack_raw<__half, 8>(pre[k], b8);
#pragma unroll
        for (int e = 0; e < 8; ++e) s += ts[8 * k + e] * b8[e];
    }
#pragma unroll 4
    for (int r = 8 * LORA_PRE; r < rp; r += 8) {
        float b8[8];
        load8(bo + r, b8);
#pragma unroll
        for (int e = 0; e < 8; ++e) s += ts[r + e] * b8[e];
    }
    return s;
}

// The first LORA_PRE 16-byte loads of output o's factors (none past the
// part's rows or the padded rank).
__device__ __forceinline__ void lora_pre_b(const LoraDesc& d, int o, Raw16<8>* pre) {
    if (d.bt == nullptr || o >= d.rows) return;
    const int rp = (d.rank + 7) & ~7;
    const __half* bo = d.bt + (size_t)o * rp;
#pragma unroll
    for (int k = 0; k < LORA_PRE; ++k)
        if (8 * k < rp) pre[k] = load_raw<__half, 8>(bo + 8 * k);
}

// y[i][off_p + o] += scale_i · Σ_r t[(p·n + i)·tr + r] · B_p[o][r]: grid
// (n, outputs / 256, parts). B is output-major with its rank padded to a
// multiple of 8 (zeros), so an output's factors are rank/8 16-byte loads;
// the row's slot, the descriptor and the first of those loads come in
// before the PDL wait, t and y after it.
extern "C" __global__ void lora_expand(const float* t, const LoraDesc* desc, int slots, const LoraRow* rows, float* y,
                                       int n, int tr, int ystride) {
    __shared__ float ts[LORA_MAX_RANK];
    const int i = blockIdx.x, p = blockIdx.z;
    const int o = blockIdx.y * blockDim.x + threadIdx.x;
    const LoraRow row = rows[i];
    LoraDesc d{};
    if (row.slot >= 0) d = desc[p * slots + row.slot];
    Raw16<8> pre[LORA_PRE];
    lora_pre_b(d, o, pre);
    pdl_wait();
    pdl_launch();
    if (d.bt == nullptr) return;
    const int rp = (d.rank + 7) & ~7;
    const float* ti = t + ((size_t)p * n + i) * tr;
    for (int r = threadIdx.x; r < rp; r += blockDim.x) ts[r] = r < d.rank ? ti[r] : 0.f;
    __syncthreads();
    if (o >= d.rows) return;
    y[(size_t)i * ystride + d.off + o] += row.scale * lora_dot(ts, d.bt + (size_t)o * rp, rp, pre);
}

// The expand of a [gate | up] product of two parts with SwiGLU after it, in
// one launch: out[i][o] = silu(g) · u, where g and u are gu's gate and up
// of row i plus their deltas (rows of the base model take gu as it is).
// Grid (n, ff / 256).
template <typename T>
__device__ void lora_expand_silu(const float* t, const LoraDesc* desc, int slots, const LoraRow* rows,
                                 const float* gu, T* out, int n, int tr, int ff) {
    __shared__ float ts[2][LORA_MAX_RANK];
    const int i = blockIdx.x;
    const int o = blockIdx.y * blockDim.x + threadIdx.x;
    const LoraRow row = rows[i];
    LoraDesc dg{}, du{};
    if (row.slot >= 0) dg = desc[row.slot], du = desc[slots + row.slot];
    Raw16<8> pg[LORA_PRE], pu[LORA_PRE];
    lora_pre_b(dg, o, pg);
    lora_pre_b(du, o, pu);
    pdl_wait();
    pdl_launch();
    const int rg = (dg.rank + 7) & ~7, ru = (du.rank + 7) & ~7;
    if (row.slot >= 0) {
        const float* t0 = t + (size_t)i * tr;
        const float* t1 = t + ((size_t)n + i) * tr;
        for (int r = threadIdx.x; r < rg; r += blockDim.x) ts[0][r] = r < dg.rank ? t0[r] : 0.f;
        for (int r = threadIdx.x; r < ru; r += blockDim.x) ts[1][r] = r < du.rank ? t1[r] : 0.f;
        __syncthreads();
    }
    if (o >= ff) return;
    float g = gu[(size_t)i * 2 * ff + o], u = gu[(size_t)i * 2 * ff + ff + o];
    if (dg.bt != nullptr && o < dg.rows) g += row.scale * lora_dot(ts[0], dg.bt + (size_t)o * rg, rg, pg);
    if (du.bt != nullptr && o < du.rows) u += row.scale * lora_dot(ts[1], du.bt + (size_t)o * ru, ru, pu);
    out[(size_t)i * ff + o] = from_f<T>(g / (1.f + __expf(-g)) * u);
}
extern "C" __global__ void lora_expand_silu_f16(const float* t, const LoraDesc* desc, int slots, const LoraRow* rows,
                                                const float* gu, __half* out, int n, int tr, int ff) {
    lora_expand_silu<__half>(t, desc, slots, rows, gu, out, n, tr, ff);
}
extern "C" __global__ void lora_expand_silu_bf16(const float* t, const LoraDesc* desc, int slots,
                                                 const LoraRow* rows, const float* gu, __nv_bfloat16* out, int n,
                                                 int tr, int ff) {
    lora_expand_silu<__nv_bfloat16>(t, desc, slots, rows, gu, out, n, tr, ff);
}
