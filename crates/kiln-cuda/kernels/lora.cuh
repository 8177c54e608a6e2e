// LoRA's shared pieces (crates/kiln-cuda/src/backend/lora.rs): the
// factors' descriptors, the step's rows, and the shrink of one rank of one
// row, which runs in its own launch (lora.cu) or as extra blocks of the
// activation quantizer that precedes a quantized decode product (quant.cu).
#pragma once
#include "common.cuh"

// Highest rank (backend/lora.rs MAX_RANK).
#define LORA_MAX_RANK 512

// 16-byte loads of a rank row of A (shrink) or an output's factors of B
// (expand) issued before the kernel waits for its predecessor: the shrink's
// first 4·8·256 inputs (all of a 4096-wide one), the expand's first 32 ranks.
#define LORA_PRE 4

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

// A shrink that a decode product's own launch runs in extra blocks (the
// activation quantizer's, or a 16-bit product's; gpu.rs `LoraShrink`):
// `desc` null for none; `tr` ranks per row and part, which is also t's row
// stride; blocks from `first` on are the shrink's, n · parts · tr of them.
struct LoraShrink {
    const LoraDesc* desc;
    const LoraRow* rows;
    float* t;
    int slots;
    int parts;
    int tr;
    int n;
    int first;
    int pad;
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
// no normed copy exists). Called by every thread of a 256-thread block.
//
// It does its own PDL wait (common.cuh): the row's slot (uploaded before
// the step), the descriptor and the first LORA_PRE loads of A (written at
// attach) come in before it, so that the chain of dependent loads runs
// while the previous kernel drains; only x is read after it. Every thread
// waits before it returns. Rows of the base model and ranks past an
// adapter's return at once. With `cols` a multiple of 8 each thread reads
// 16 bytes at a time, its loads unrolled so that they are in flight
// together (one rank of one row is a short dot product: latency, not
// bandwidth, bounds it).
template <typename T>
__device__ __forceinline__ void lora_shrink_one(const T* x, const float* xf, const float* nw, float eps,
                                                const LoraDesc* desc, int slots, const LoraRow* rows, float* t, int n,
                                                int cols, int tr, int i, int r, int p) {
    __shared__ float sm[32];
    const int slot = rows[i].slot;
    const __half* ar = nullptr;
    if (slot >= 0) {
        const LoraDesc d = desc[p * slots + slot];
        if (d.a != nullptr && r < d.rank) ar = d.a + (size_t)r * cols;
    }
    const bool vec = (cols & 7) == 0;
    const int c0 = 8 * threadIdx.x, cs = 8 * blockDim.x;
    Raw16<8> pre[LORA_PRE];
    if (ar != nullptr && vec) {
#pragma unroll
        for (int k = 0; k < LORA_PRE; ++k)
            if (c0 + k * cs < cols) pre[k] = load_raw<__half, 8>(ar + c0 + k * cs);
    }
    pdl_wait();
    pdl_launch();
    if (ar == nullptr) return;
    float s = 0.f, ss = 0.f;
    if (xf) {
        const float* xr = xf + (size_t)i * cols;
        if (vec) {
#pragma unroll
            for (int k = 0; k < LORA_PRE; ++k) {
                const int c = c0 + k * cs;
                if (c >= cols) break;
                float a8[8], x8[8], w8[8];
                unpack_raw<__half, 8>(pre[k], a8);
                load8(xr + c, x8);
                load8(nw + c, w8);
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    ss += x8[e] * x8[e];
                    s += x8[e] * w8[e] * a8[e];
                }
            }
#pragma unroll 4
            for (int c = c0 + LORA_PRE * cs; c < cols; c += cs) {
                float a8[8], x8[8], w8[8];
                load8(ar + c, a8);
                load8(xr + c, x8);
                load8(nw + c, w8);
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    ss += x8[e] * x8[e];
                    s += x8[e] * w8[e] * a8[e];
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
#pragma unroll
            for (int k = 0; k < LORA_PRE; ++k) {
                const int c = c0 + k * cs;
                if (c >= cols) break;
                float a8[8], x8[8];
                unpack_raw<__half, 8>(pre[k], a8);
                load8(xr + c, x8);
#pragma unroll
                for (int e = 0; e < 8; ++e) s += x8[e] * a8[e];
            }
#pragma unroll 4
            for (int c = c0 + LORA_PRE * cs; c < cols; c += cs) {
                float a8[8], x8[8];
                load8(ar + c, a8);
                load8(xr + c, x8);
#pragma unroll
                for (int e = 0; e < 8; ++e) s += x8[e] * a8[e];
            }
        } else {
            for (int c = threadIdx.x; c < cols; c += blockDim.x) s += to_f<T>(xr[c]) * __half2float(ar[c]);
        }
        s = block_sum(s, sm);
    }
    if (threadIdx.x == 0) t[((size_t)p * n + i) * tr + r] = s;
}

// Runs the shrink's block `blockIdx.x - lo.first` (row, part, rank) when
// this block is one of the shrink's, on row input x (16-bit) or, with xf,
// the f32 residual RMS-normed by nw; false for the product's own blocks.
template <typename T>
__device__ __forceinline__ bool lora_shrink_extra(const LoraShrink& lo, const T* x, const float* xf, const float* nw,
                                                  float eps, int cols, int k) {
    if (lo.desc == nullptr || k < lo.first) return false;
    k -= lo.first;
    const int per_row = lo.parts * lo.tr;
    const int i = k / per_row, q = k % per_row;
    lora_shrink_one<T>(x, xf, nw, eps, lo.desc, lo.slots, lo.rows, lo.t, lo.n, cols, lo.tr, i, q % lo.tr, q / lo.tr);
    return true;
}
