// Tensor-core helpers shared by the attention kernels: mma.sync m16n8k16
// with 16-bit inputs and f32 accumulators, and packing of 16-bit pairs.
// Fragment layouts are the PTX ISA's for m16n8k16: with g = lane/4 and
// c = lane%4, A regs hold (row g | g+8, cols 2c..2c+1 | +8), B regs (k rows
// 2c..2c+1 | +8, column g), C regs (row g | g+8, cols 2c..2c+1).
#pragma once
#include "common.cuh"

template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
}

template <typename T> __device__ __forceinline__ void mma16816(float* c, const uint32_t* a, uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma16816<__half>(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// (x, y) as a 16-bit pair `hi2`, and what rounding took off them as `lo2`
// (hi2 + lo2 holds x and y to about 2 × 16-bit precision).
template <typename T> __device__ __forceinline__ void split2(float x, float y, uint32_t& hi2, uint32_t& lo2) {
    hi2 = pack2<T>(x, y);
    const T* h = reinterpret_cast<const T*>(&hi2);
    lo2 = pack2<T>(x - to_f(h[0]), y - to_f(h[1]));
}

// A reduction over the 4 lanes of an mma quad (lanes 4g..4g+3: the lanes
// holding one C row).
template <typename Op> __device__ __forceinline__ float quad_reduce(float v) {
#pragma unroll
    for (int off = 1; off < 4; off <<= 1) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

__device__ __forceinline__ uint32_t ld32(const void* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint32_t join16(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

// Asynchronous 16-byte copy global → shared (cp.async, sm_80+), bypassing
// L1; with `valid` false nothing is read and the 16 bytes are zeroed.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 16 : 0));
}
// Asynchronous copy of N (4 or 8) bytes global → shared, through L1
// (cp.async.ca: .cg takes only 16).
template <int N> __device__ __forceinline__ void cp_async_small(void* smem, const void* gmem) {
    static_assert(N == 4 || N == 8, "cp.async.ca copies 4, 8 or 16 bytes");
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(N));
}
// Closes this thread's group of cp.async copies so far.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are pending.
template <int N> __device__ __forceinline__ void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Waits for this thread's cp.async copies (a barrier then publishes them).
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
