// LoRA deltas, unmerged and batched (crates/kiln-cuda/src/backend/lora.rs):
// each row of the step names its adapter's slot (or none) and scale; one
// shrink t = x·Aᵀ and one expand y += scale·t·Bᵀ launch per matrix cover
// every part of it and every adapter of the step (a per-row table of
// adapters, as BGMV does), so the launches depend only on the step's size
// and a decode step with adapters replays from a CUDA graph like one
// without. A and B are f16: A rank × cols, B output-major (rows × the rank
// padded to a multiple of 8).
#include "common.cuh"

// Highest rank (backend/lora.rs MAX_RANK).
#define LORA_MAX_RANK 512

// One adapter's factors on one part of a matrix (host: `Desc` in
// backend/lora.rs; a null `a` means the adapter leaves the part alone).
struct LoraDesc {
    const __half* a;
    const __half* bt;  // B, output-major, rank padded to 8
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

// 8 values from `p` (16-byte aligned) as floats: 16-bit ones with
// common.cuh's load_f, f32 ones (the residual, the norm's weights) as two
// float4.
template <typename T> __device__ __forceinline__ void load8(const T* p, float* o) { load_f<T, 8>(p, o); }
__device__ __forceinline__ void load8(const float* p, float* o) {
    const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
    o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}

// t[(p·n + i)·tr + r] = u[i] · A_p[r] for part p's rank r, where u[i] is
// row i of the 16-bit input x, or, with `xf`, the f32 residual row
// RMS-normed by `nw` (the fused decode products norm inside the product, so
// no normed copy exists). Grid (n, ranks, parts); rows of the base model and
// ranks past an adapter's return at once. With `cols` a multiple of 8 each
// thread reads 16 bytes at a time, its loads unrolled so that they are in
// flight together (one rank of one row is a short dot product: latency,
// not bandwidth, bounds it).
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
    float s = 0.f, ss = 0.f;
    const bool vec = (cols & 7) == 0;
    if (xf) {
        const float* xr = xf + (size_t)i * cols;
        if (vec) {
#pragma unroll 4
            for (int c = 8 * threadIdx.x; c < cols; c += 8 * blockDim.x) {
                float a8[8], x8[8], w8[8];
                load8(ar + c, a8);
                load8(xr + c, x8);
                load8(nw + c, w8);
#pragma unroll
                for (int k = 0; k < 8; ++k) {
                    ss += x8[k] * x8[k];
                    s += x8[k] * w8[k] * a8[k];
                }
            }
        } else {
            for (int c = threadIdx.x; c < cols; c += blockDim.x) {
                const float v = xr[c];
                ss += v * v;
                s += v * nw[c] * __half2float(ar[c]);
            }
        }
        const float inv = rsqrtf(block_sum(ss, sm) / cols + eps);
        s = block_sum(s, sm) * inv;
    } else {
        const T* xr = x + (size_t)i * cols;
        if (vec) {
#pragma unroll 4
            for (int c = 8 * threadIdx.x; c < cols; c += 8 * blockDim.x) {
                float a8[8], x8[8];
                load8(ar + c, a8);
                load8(xr + c, x8);
#pragma unroll
                for (int k = 0; k < 8; ++k) s += x8[k] * a8[k];
            }
        } else {
            for (int c = threadIdx.x; c < cols; c += blockDim.x) s += to_f<T>(xr[c]) * __half2float(ar[c]);
        }
        s = block_sum(s, sm);
    }
    if (threadIdx.x == 0) t[((size_t)p * n + i) * tr + r] = s;
}
KILN_BOTH(lora_shrink,
          (const T* x, const float* xf, const float* nw, float eps, const LoraDesc* desc, int slots,
           const LoraRow* rows, float* t, int n, int cols, int tr),
          (x, xf, nw, eps, desc, slots, rows, t, n, cols, tr))

// y[i][off_p + o] += scale_i · Σ_r t[(p·n + i)·tr + r] · B_p[o][r]: grid
// (n, outputs / 256, parts). B is output-major with its rank padded to a
// multiple of 8 (zeros), so an output's factors are rank/8 16-byte loads.
extern "C" __global__ void lora_expand(const float* t, const LoraDesc* desc, int slots, const LoraRow* rows, float* y,
                                       int n, int tr, int ystride) {
    __shared__ float ts[LORA_MAX_RANK];
    pdl_begin();
    const int i = blockIdx.x, p = blockIdx.z;
    const LoraRow row = rows[i];
    if (row.slot < 0) return;
    const LoraDesc d = desc[p * slots + row.slot];
    if (d.bt == nullptr) return;
    const int rp = (d.rank + 7) & ~7;
    const float* ti = t + ((size_t)p * n + i) * tr;
    for (int r = threadIdx.x; r < rp; r += blockDim.x) ts[r] = r < d.rank ? ti[r] : 0.f;
    __syncthreads();
    const int o = blockIdx.y * blockDim.x + threadIdx.x;
    if (o >= d.rows) return;
    const __half* bo = d.bt + (size_t)o * rp;
    float s = 0.f;
#pragma unroll 4
    for (int r = 0; r < rp; r += 8) {
        float b8[8];
        load8(bo + r, b8);
#pragma unroll
        for (int k = 0; k < 8; ++k) s += ts[r + k] * b8[k];
    }
    y[(size_t)i * ystride + d.off + o] += row.scale * s;
}
