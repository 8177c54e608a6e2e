// LoRA deltas, unmerged and batched (crates/kiln-cuda/src/backend/lora.rs):
// each row of the step names its adapter's slot (or none) and scale; one
// shrink t = x·Aᵀ and one expand y += scale·t·Bᵀ launch per matrix cover
// every part of it and every adapter of the step (a per-row table of
// adapters, as BGMV does), so the launches depend only on the step's size
// and a decode step with adapters replays from a CUDA graph like one
// without. A and Bᵀ are f16, rank × cols and rank × rows.
#include "common.cuh"

// One adapter's factors on one part of a matrix (host: `Desc` in
// backend/lora.rs; a null `a` means the adapter leaves the part alone).
struct LoraDesc {
    const __half* a;
    const __half* bt;
    int rank;
    int rows;
    int off;
    int pad;
};

// A row of the step: its adapter's slot (-1: the base model) and scale.
struct LoraRow {
    int slot;
    float scale;
};

// t[(p·n + i)·tr + r] = u[i] · A_p[r] for part p's rank r, where u[i] is
// row i of the 16-bit input x, or, with `xf`, the f32 residual row
// RMS-normed by `nw` (the fused decode products norm inside the product, so
// no normed copy exists). Grid (n, ranks, parts); rows of the base model and
// ranks past an adapter's return at once.
template <typename T>
__device__ void lora_shrink(const T* x, const float* xf, const float* nw, float eps, const LoraDesc* desc,
                            int slots, const LoraRow* rows, float* t, int n, int cols, int tr) {
    __shared__ float sm[32];
    const int i = blockIdx.x, r = blockIdx.y, p = blockIdx.z;
    const int slot = rows[i].slot;
    if (slot < 0) return;
    const LoraDesc d = desc[p * slots + slot];
    if (d.a == nullptr || r >= d.rank) return;
    const __half* ar = d.a + (size_t)r * cols;
    float s = 0.f;
    if (xf) {
        const float* xr = xf + (size_t)i * cols;
        float ss = 0.f;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) {
            const float v = xr[c];
            ss += v * v;
            s += v * nw[c] * __half2float(ar[c]);
        }
        const float inv = rsqrtf(block_sum(ss, sm) / cols + eps);
        s = block_sum(s, sm) * inv;
    } else {
        const T* xr = x + (size_t)i * cols;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) s += to_f<T>(xr[c]) * __half2float(ar[c]);
        s = block_sum(s, sm);
    }
    if (threadIdx.x == 0) t[((size_t)p * n + i) * tr + r] = s;
}
KILN_BOTH(lora_shrink,
          (const T* x, const float* xf, const float* nw, float eps, const LoraDesc* desc, int slots,
           const LoraRow* rows, float* t, int n, int cols, int tr),
          (x, xf, nw, eps, desc, slots, rows, t, n, cols, tr))

// y[i][off_p + o] += scale_i · Σ_r t[(p·n + i)·tr + r] · Bᵀ_p[r][o]: grid
// (n, outputs / 256, parts).
extern "C" __global__ void lora_expand(const float* t, const LoraDesc* desc, int slots, const LoraRow* rows, float* y,
                                       int n, int tr, int ystride) {
    pdl_begin();
    const int i = blockIdx.x, p = blockIdx.z;
    const LoraRow row = rows[i];
    if (row.slot < 0) return;
    const LoraDesc d = desc[p * slots + row.slot];
    const int o = blockIdx.y * blockDim.x + threadIdx.x;
    if (d.bt == nullptr || o >= d.rows) return;
    const float* ti = t + ((size_t)p * n + i) * tr;
    float s = 0.f;
    for (int r = 0; r < d.rank; ++r) s += ti[r] * __half2float(d.bt[(size_t)r * d.rows + o]);
    y[(size_t)i * ystride + d.off + o] += row.scale * s;
}
