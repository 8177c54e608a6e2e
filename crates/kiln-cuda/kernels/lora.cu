// LoRA deltas, unmerged (crates/kiln-backend/src/lora.rs): for the rows of
// one adapter group, shrink t = x·Aᵀ (rank values per row), then expand
// y += scale·t·Bᵀ into the product's f32 output. x is the product's 16-bit
// input; A (rank × cols) and Bᵀ (rank × out) are f32.
#include "common.cuh"

// t[i][r] = x[rows[i]] · A[r]: one block per (row, rank).
template <typename T>
__device__ void lora_shrink(const T* x, const float* a, float* t, const unsigned* rows, int cols, int rank) {
    __shared__ float sm[32];
    const int i = blockIdx.x, r = blockIdx.y;
    const T* xr = x + (size_t)rows[i] * cols;
    const float* ar = a + (size_t)r * cols;
    float s = 0.f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) s += to_f<T>(xr[c]) * ar[c];
    s = block_sum(s, sm);
    if (threadIdx.x == 0) t[(size_t)i * rank + r] = s;
}
KILN_BOTH(lora_shrink, (const T* x, const float* a, float* t, const unsigned* rows, int cols, int rank),
          (x, a, t, rows, cols, rank))

// y[rows[i]][off + o] += scale · Σ_r t[i][r] · Bᵀ[r][o]: grid (outputs / 256, rows).
extern "C" __global__ void lora_expand(const float* t, const float* bt, float* y, const unsigned* rows, int rank,
                                       int out, int ystride, int off, float scale) {
    pdl_begin();
    const int i = blockIdx.y, o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= out) return;
    const float* ti = t + (size_t)i * rank;
    float s = 0.f;
    for (int r = 0; r < rank; ++r) s += ti[r] * bt[(size_t)r * out + o];
    y[(size_t)rows[i] * ystride + off + o] += scale * s;
}
