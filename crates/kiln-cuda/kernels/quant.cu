// GGUF K-quant weights used in place: decode products read the quantized
// blocks (a quarter of the bytes of f16 for Q4_K), prompt chunks dequantize
// a matrix to 16 bits for cuBLAS, the embedding dequantizes its rows.
//
// Formats (superblocks of 256 values):
// - Q4K: the GGUF block as it is (144 bytes: d, dmin, 12 bytes of packed
//   6-bit scales and mins, 128 bytes of nibbles); value = d·sc·q − dmin·m.
// - Q6K: GGUF's 210-byte block is not 16-byte aligned, so the host repacks
//   a matrix of S superblocks into planes: ql [S][128], qh [S][64],
//   scales [S][16] (int8), d [S] (f16); value = d·sc·(q − 32).
//
// Work split: 8 lanes per superblock; part p (0..7) of a superblock is 32
// values in two runs of 16 (`lo` at LO(p), `hi` 32 or 64 further on), each
// run inside one scale group. A lane turns its 16 stored quants of a run
// into floats f = 1 + q/2^k without a conversion instruction (the quant is
// placed in the mantissa of 1.0 with byte permutes), so every weight of the
// run is s·f − c with per-run constants s and c, and a run contributes
//     Σ w·x = s·Σ f·x − c·Σ x
// to the dot product: one FMA per weight and input row, plus the run's Σ x.
#include "gemv_out.cuh"

#define FMT_Q4K 0
#define FMT_Q6K 1

// Four floats 1 + byte/2^k from a word whose bytes are 0x80 | (q << (7 − k)):
// each byte is placed under the exponent byte 0x3F of 1.0.
__device__ __forceinline__ void mant4(uint32_t w, float* f) {
    f[0] = __uint_as_float(__byte_perm(w, 0x3F000000u, 0x7054));
    f[1] = __uint_as_float(__byte_perm(w, 0x3F000000u, 0x7154));
    f[2] = __uint_as_float(__byte_perm(w, 0x3F000000u, 0x7254));
    f[3] = __uint_as_float(__byte_perm(w, 0x3F000000u, 0x7354));
}

__device__ __forceinline__ uint32_t byte_of(const uint32_t* w, int k) { return (w[k >> 2] >> (8 * (k & 3))) & 0xFF; }

// One lane's part of one superblock: raw quants, then floats per run.
template <int FMT> struct Part;

template <> struct Part<FMT_Q4K> {
    static constexpr int HI = 32;  // the hi run starts 32 values after lo
    __device__ static int lo(int p) { return 64 * (p >> 1) + 16 * (p & 1); }
    uint4 q;
    float s[2], c[2];
    // Superblock `sb` of the matrix at `w` (S superblocks in all).
    __device__ void load(const uint8_t* w, size_t /*S*/, size_t sb, int p) {
        const uint8_t* b = w + sb * 144;
        const uint4 h = *reinterpret_cast<const uint4*>(b);
        q = *reinterpret_cast<const uint4*>(b + 16 + 16 * p);
        const float d = __half2float(__ushort_as_half((unsigned short)(h.x & 0xFFFF)));
        const float dmin = __half2float(__ushort_as_half((unsigned short)(h.x >> 16)));
        const uint32_t sc[3] = {h.y, h.z, h.w};
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int j = 2 * (p >> 1) + k;  // the scale group (32 values)
            uint32_t scale, min;
            if (j < 4) {
                scale = byte_of(sc, j) & 63;
                min = byte_of(sc, j + 4) & 63;
            } else {
                scale = (byte_of(sc, j + 4) & 0xF) | ((byte_of(sc, j - 4) >> 6) << 4);
                min = (byte_of(sc, j + 4) >> 4) | ((byte_of(sc, j) >> 6) << 4);
            }
            // d·sc·q − dmin·m with q = 16(f − 1).
            s[k] = 16.f * d * (float)scale;
            c[k] = s[k] + dmin * (float)min;
        }
    }
    // The 16 floats of run k (0: low nibbles, 1: high nibbles).
    __device__ void run(int k, float* f) const {
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t n = k == 0 ? (w[i] << 3) : (w[i] >> 1);
            mant4((n & 0x78787878u) | 0x80808080u, f + 4 * i);
        }
    }
};

template <> struct Part<FMT_Q6K> {
    static constexpr int HI = 64;
    __device__ static int lo(int p) { return 128 * (p >> 2) + 16 * (p & 3); }
    uint4 ql, qh;
    int shift;
    float s[2], c[2];
    __device__ void load(const uint8_t* w, size_t S, size_t sb, int p) {
        const int n = p >> 2, h = p & 3;
        ql = *reinterpret_cast<const uint4*>(w + sb * 128 + 64 * n + 16 * h);
        qh = *reinterpret_cast<const uint4*>(w + S * 128 + sb * 64 + 32 * n + 16 * (h & 1));
        const int8_t* scales = reinterpret_cast<const int8_t*>(w + S * 192 + sb * 16);
        const float d = __half2float(reinterpret_cast<const __half*>(w + S * 208)[sb]);
        shift = 2 * (h >> 1);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            // d·sc·(q − 32) with q = 64(f − 1).
            s[k] = 64.f * d * (float)scales[8 * n + 4 * k + h];
            c[k] = 1.5f * s[k];
        }
    }
    __device__ void run(int k, float* f) const {
        const uint32_t l[4] = {ql.x, ql.y, ql.z, ql.w}, hb[4] = {qh.x, qh.y, qh.z, qh.w};
        const int sh = shift + 4 * k;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t lo4 = (k == 0 ? l[i] : l[i] >> 4) & 0x0F0F0F0Fu;
            const uint32_t q6 = lo4 | (((hb[i] >> sh) & 0x03030303u) << 4);
            mant4((q6 << 1) | 0x80808080u, f + 4 * i);
        }
    }
};

// Loads 16 inputs of row x at column c as floats: f32 (scaled by g, with
// their squares summed into ss) for the normed forms, else 16-bit.
template <typename T, bool NORM>
__device__ __forceinline__ void load_x16(const void* x, size_t c, const float* g, float* o, float& ss) {
    if constexpr (NORM) {
        const float4* xv = reinterpret_cast<const float4*>(reinterpret_cast<const float*>(x) + c);
        const float4* gv = reinterpret_cast<const float4*>(g + c);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float4 a = xv[i], b = gv[i];
            ss += a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w;
            o[4 * i] = a.x * b.x, o[4 * i + 1] = a.y * b.y, o[4 * i + 2] = a.z * b.z, o[4 * i + 3] = a.w * b.w;
        }
    } else {
        load_f<T, 16>(reinterpret_cast<const T*>(x) + c, o);
    }
}

// The decode products of gemv.cu with a K-quant W (`cols` a multiple of
// 256): one warp per output feature, 4 superblocks per warp step.
template <int FMT, typename T, int NT, bool NORM, int OUT>
__device__ void gemvq(const uint8_t* w, size_t S, const void* xin, const float* g, const uint32_t* xrows,
                      const float* bias, void* yout, int rows, int cols, int ystride, float eps) {
    constexpr int NM = OUT == OUT_SWIGLU ? 2 : 1;
    const int lane = threadIdx.x & 31, p = lane & 7;
    const int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const int nsb = cols >> 8;
    const size_t esz = NORM ? 4 : 2;
    const char* xr[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        const size_t row = xrows ? xrows[t] : t;
        xr[t] = reinterpret_cast<const char*>(xin) + row * cols * esz;
    }
    float acc[NM][NT], ss[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        ss[t] = 0.f;
#pragma unroll
        for (int m = 0; m < NM; m++) acc[m][t] = 0.f;
    }
#pragma unroll 2
    for (int sb = lane >> 3; sb < nsb; sb += 4) {
        Part<FMT> part[NM];
#pragma unroll
        for (int m = 0; m < NM; m++) part[m].load(w, S, (size_t)(r + m * rows) * nsb + sb, p);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int c = sb * 256 + Part<FMT>::lo(p) + k * Part<FMT>::HI;
            float f[NM][16];
#pragma unroll
            for (int m = 0; m < NM; m++) part[m].run(k, f[m]);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                float xv[16];
                load_x16<T, NORM>(xr[t], c, g, xv, ss[t]);
                float sx = 0.f;
#pragma unroll
                for (int e = 0; e < 16; e++) sx += xv[e];
#pragma unroll
                for (int m = 0; m < NM; m++) {
                    float a = 0.f;
#pragma unroll
                    for (int e = 0; e < 16; e++) a += f[m][e] * xv[e];
                    acc[m][t] += part[m].s[k] * a - part[m].c[k] * sx;
                }
            }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++) {
        float v[NM];
#pragma unroll
        for (int m = 0; m < NM; m++) v[m] = warp_sum(acc[m][t]);
        if constexpr (NORM) {
            const float inv = rsqrtf(warp_sum(ss[t]) / cols + eps);
#pragma unroll
            for (int m = 0; m < NM; m++) v[m] *= inv;
        }
        if (lane == 0) gemv_store<T, OUT, NM>(v, bias, yout, t, r, ystride);
    }
}

#define GEMVQ_ENTRY(KIND, NORM, OUT, FN, FMT, SUF, TY, NT)                                                       \
    extern "C" __global__ void gemv_##KIND##_##NT##_##FN##_##SUF(                                                \
        const uint8_t* w, const void* x, const float* g, const uint32_t* xrows, const float* bias, void* y,      \
        int rows, int cols, int ystride, float eps, unsigned long long S) {                                     \
        pdl_begin();                                                                                             \
        gemvq<FMT, TY, NT, NORM, OUT>(w, S, x, g, xrows, bias, y, rows, cols, ystride, eps);                     \
    }
#define GEMVQ_ROWS(KIND, NORM, OUT, FN, FMT, SUF, TY)                                                            \
    GEMVQ_ENTRY(KIND, NORM, OUT, FN, FMT, SUF, TY, 1)                                                            \
    GEMVQ_ENTRY(KIND, NORM, OUT, FN, FMT, SUF, TY, 2)                                                            \
    GEMVQ_ENTRY(KIND, NORM, OUT, FN, FMT, SUF, TY, 3)                                                            \
    GEMVQ_ENTRY(KIND, NORM, OUT, FN, FMT, SUF, TY, 4)                                                            \
    GEMVQ_ENTRY(KIND, NORM, OUT, FN, FMT, SUF, TY, 5)                                                            \
    GEMVQ_ENTRY(KIND, NORM, OUT, FN, FMT, SUF, TY, 6)                                                            \
    GEMVQ_ENTRY(KIND, NORM, OUT, FN, FMT, SUF, TY, 7)                                                            \
    GEMVQ_ENTRY(KIND, NORM, OUT, FN, FMT, SUF, TY, 8)
#define GEMVQ_ALL(FN, FMT, SUF, TY)                                                                              \
    GEMVQ_ROWS(norm, true, OUT_STORE, FN, FMT, SUF, TY)                                                          \
    GEMVQ_ROWS(swiglu, true, OUT_SWIGLU, FN, FMT, SUF, TY)                                                       \
    GEMVQ_ROWS(add, false, OUT_ADD, FN, FMT, SUF, TY)
// f16 activations only: quantized GGUFs run in f16 (a bf16 checkpoint has
// no quantized matrices to keep).
GEMVQ_ALL(q4k, FMT_Q4K, f16, __half)
GEMVQ_ALL(q6k, FMT_Q6K, f16, __half)

// Superblocks [s0, s0 + n) of a matrix of S to 16-bit values, row-major
// (superblock s holds values 256·s ..): one thread per part.
template <int FMT, typename T>
__device__ void dequant(const uint8_t* w, size_t S, size_t s0, size_t n, T* out) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * 8) return;
    const size_t sb = s0 + i / 8;
    const int p = (int)(i & 7);
    Part<FMT> part;
    part.load(w, S, sb, p);
#pragma unroll
    for (int k = 0; k < 2; k++) {
        float f[16];
        part.run(k, f);
        T v[16];
#pragma unroll
        for (int e = 0; e < 16; e++) v[e] = from_f<T>(part.s[k] * f[e] - part.c[k]);
        uint4* o = reinterpret_cast<uint4*>(out + (sb - s0) * 256 + Part<FMT>::lo(p) + k * Part<FMT>::HI);
        o[0] = *reinterpret_cast<const uint4*>(v);
        o[1] = *reinterpret_cast<const uint4*>(v + 8);
    }
}

// x[t] = row tokens[t] of a quantized table of `d` columns (S superblocks).
// Grid: one block per token, d / 32 threads.
template <int FMT>
__device__ void embedq(const uint8_t* table, size_t S, const uint32_t* tokens, float* x, int d) {
    const int p = threadIdx.x & 7;
    const int nsb = d >> 8;
    const int sbi = threadIdx.x >> 3;
    if (sbi >= nsb) return;
    Part<FMT> part;
    part.load(table, S, (size_t)tokens[blockIdx.x] * nsb + sbi, p);
    float* o = x + (size_t)blockIdx.x * d + sbi * 256;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        float f[16];
        part.run(k, f);
        float* ok = o + Part<FMT>::lo(p) + k * Part<FMT>::HI;
#pragma unroll
        for (int e = 0; e < 16; e++) ok[e] = part.s[k] * f[e] - part.c[k];
    }
}

#define QUANT_FMT(FN, FMT)                                                                                       \
    extern "C" __global__ void dequant_##FN##_f16(const uint8_t* w, unsigned long long S, unsigned long long s0, \
                                                  unsigned long long n, __half* out) {                           \
        pdl_begin();                                                                                             \
        dequant<FMT, __half>(w, S, s0, n, out);                                                                  \
    }                                                                                                            \
    extern "C" __global__ void dequant_##FN##_bf16(const uint8_t* w, unsigned long long S,                       \
                                                   unsigned long long s0, unsigned long long n,                  \
                                                   __nv_bfloat16* out) {                                         \
        pdl_begin();                                                                                             \
        dequant<FMT, __nv_bfloat16>(w, S, s0, n, out);                                                           \
    }                                                                                                            \
    extern "C" __global__ void embed_##FN(const uint8_t* table, unsigned long long S, const uint32_t* tokens,    \
                                          float* x, int d) {                                                     \
        pdl_begin();                                                                                             \
        embedq<FMT>(table, S, tokens, x, d);                                                                     \
    }
QUANT_FMT(q4k, FMT_Q4K)
QUANT_FMT(q6k, FMT_Q6K)
