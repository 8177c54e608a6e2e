// The quantized weight formats that the kernels read in place (quant.cu's
// decode products, mmq.cu's tensor-core products): the device layout of
// each (see quant.cu's header) and `Part<FMT>`, one eighth of a superblock
// (32 weights in two runs of 16) with the scale s and offset c of each run,
// so that a weight is s·q − c for its small integer q.
#pragma once
#include "common.cuh"

// The order of QFormat in convert.rs.
#define FMT_Q4K 0
#define FMT_Q6K 1
#define FMT_Q8_0 2
#define FMT_Q4_0 3
#define FMT_Q4_1 4
#define FMT_Q5K 5
#define FMT_Q5_0 6
#define FMT_Q5_1 7
#define FMT_Q3K 8
#define FMT_Q2K 9
#define FMT_MXFP4 10

// One lane's part of one superblock: the raw quants, and s, c per run.
// `load` fills it; `fetch` only issues its loads and `prep` then computes
// s and c from what they brought (load = fetch + prep), so that a caller
// can have the loads in flight over other work (mmq.cu).
template <int FMT> struct Part;

// The 16 quants of run k of 16 bytes of nibbles (0: the low nibbles, 1: the
// high ones), one per byte.
__device__ __forceinline__ void nibble_ints(const uint4& q, int k, int* o) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; i++) o[i] = (int)((k == 0 ? w[i] : w[i] >> 4) & 0x0F0F0F0Fu);
}

// s, c of part p's two runs from a Q4K/Q5K superblock's first 16 bytes
// `h` (d, dmin, 12 bytes of packed 6-bit scales and mins). Scale groups
// j = 2a, 2a + 1 (a = p / 2): bytes a%2·2 .. +1 of the three scale words
// Y (h.y), Z (h.z), W (h.w), both groups at once. Groups 0-3: sc = Y & 63,
// m = Z & 63; groups 4-7 keep their low four bits in W and their top two in
// the spare bits of Y and Z.
__device__ __forceinline__ void k4_scales(const uint4& h, int p, float* s, float* c) {
    const float d = __half2float(__ushort_as_half((unsigned short)(h.x & 0xFFFF)));
    const float dmin = __half2float(__ushort_as_half((unsigned short)(h.x >> 16)));
    const int sh = 16 * ((p >> 1) & 1);
    const uint32_t y = (h.y >> sh) & 0xFFFF, z = (h.z >> sh) & 0xFFFF, wv = (h.w >> sh) & 0xFFFF;
    const bool upper = p >= 4;
    const uint32_t sc2 = upper ? (wv & 0x0F0F) | ((y >> 2) & 0x3030) : y & 0x3F3F;
    const uint32_t m2 = upper ? ((wv >> 4) & 0x0F0F) | ((z >> 2) & 0x3030) : z & 0x3F3F;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        s[k] = d * (float)((sc2 >> (8 * k)) & 0xFF);
        c[k] = dmin * (float)((m2 >> (8 * k)) & 0xFF);
    }
}

template <> struct Part<FMT_Q4K> {
    static constexpr int HI = 32;  // the second run starts 32 values after lo
    static constexpr bool SIGNED = false;  // quants are bytes 0..255, not -128..127
    // Rows may end inside a superblock (the 32-value formats: the host pads
    // each row with zero blocks to whole superblocks; the kernels skip the
    // padding's parts where they would read inputs past the row).
    static constexpr bool RAGGED = false;
    __device__ static int lo(int p) { return 64 * (p >> 1) + 16 * (p & 1); }
    uint4 q, h;
    int part;
    float s[2], c[2];
    // Superblock `sb` of the matrix at `w` (S superblocks in all).
    __device__ void fetch(const uint8_t* w, size_t /*S*/, size_t sb, int p) {
        const uint8_t* b = w + sb * 144;
        h = *reinterpret_cast<const uint4*>(b);
        q = *reinterpret_cast<const uint4*>(b + 16 + 16 * p);
        part = p;
    }
    __device__ void prep() { k4_scales(h, part, s, c); }
    __device__ void load(const uint8_t* w, size_t S, size_t sb, int p) {
        fetch(w, S, sb, p);
        prep();
    }
    __device__ void ints(int k, int* o) const { nibble_ints(q, k, o); }
};

// Q5K: Q4K's nibbles and scales, plus a fifth bit per weight: bit 2a + k of
// byte l of qh for the weight of run k at offset l of 64-value chunk a.
template <> struct Part<FMT_Q5K> {
    static constexpr int HI = 32;
    static constexpr bool SIGNED = false;
    static constexpr bool RAGGED = false;
    __device__ static int lo(int p) { return 64 * (p >> 1) + 16 * (p & 1); }
    uint4 q, qh, h;
    int shift;  // 2a: the first run's bit in each qh byte
    int part;
    float s[2], c[2];
    __device__ void fetch(const uint8_t* w, size_t /*S*/, size_t sb, int p) {
        const uint8_t* b = w + sb * 176;
        h = *reinterpret_cast<const uint4*>(b);
        qh = *reinterpret_cast<const uint4*>(b + 16 + 16 * (p & 1));
        q = *reinterpret_cast<const uint4*>(b + 48 + 16 * p);
        shift = 2 * (p >> 1);
        part = p;
    }
    __device__ void prep() { k4_scales(h, part, s, c); }
    __device__ void load(const uint8_t* w, size_t S, size_t sb, int p) {
        fetch(w, S, sb, p);
        prep();
    }
    __device__ void ints(int k, int* o) const {
        const uint32_t l[4] = {q.x, q.y, q.z, q.w}, hb[4] = {qh.x, qh.y, qh.z, qh.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t lo4 = (k == 0 ? l[i] : l[i] >> 4) & 0x0F0F0F0Fu;
            o[i] = (int)(lo4 | (((hb[i] >> (shift + k)) & 0x01010101u) << 4));
        }
    }
};

template <> struct Part<FMT_Q6K> {
    static constexpr int HI = 64;
    static constexpr bool SIGNED = false;
    static constexpr bool RAGGED = false;
    __device__ static int lo(int p) { return 128 * (p >> 2) + 16 * (p & 3); }
    uint4 ql, qh;
    int shift;
    int8_t sc[2];
    __half dh;
    float s[2], c[2];
    __device__ void fetch(const uint8_t* w, size_t S, size_t sb, int p) {
        const int n = p >> 2, h = p & 3;
        ql = *reinterpret_cast<const uint4*>(w + sb * 128 + 64 * n + 16 * h);
        qh = *reinterpret_cast<const uint4*>(w + S * 128 + sb * 64 + 32 * n + 16 * (h & 1));
        const int8_t* scales = reinterpret_cast<const int8_t*>(w + S * 192 + sb * 16);
        dh = reinterpret_cast<const __half*>(w + S * 208)[sb];
        shift = 2 * (h >> 1);
#pragma unroll
        for (int k = 0; k < 2; k++) sc[k] = scales[8 * n + 4 * k + h];
    }
    __device__ void prep() {
        const float d = __half2float(dh);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            s[k] = d * (float)sc[k];
            c[k] = 32.f * s[k];
        }
    }
    __device__ void load(const uint8_t* w, size_t S, size_t sb, int p) {
        fetch(w, S, sb, p);
        prep();
    }
    __device__ void ints(int k, int* o) const {
        const uint32_t l[4] = {ql.x, ql.y, ql.z, ql.w}, hb[4] = {qh.x, qh.y, qh.z, qh.w};
        const int sh = shift + 4 * k;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t lo4 = (k == 0 ? l[i] : l[i] >> 4) & 0x0F0F0F0Fu;
            o[i] = (int)(lo4 | (((hb[i] >> sh) & 0x03030303u) << 4));
        }
    }
};

// The 32-value formats: part p of a superblock is its block p, whose two
// runs are values 0..15 and 16..31; rows may end inside a superblock; a
// part loads as its format's fetch then prep (D: the format's Part).
template <typename D, bool SIGNED_> struct Block32 {
    static constexpr int HI = 16;
    static constexpr bool SIGNED = SIGNED_;
    static constexpr bool RAGGED = true;
    __device__ static int lo(int p) { return 32 * p; }
    __device__ void load(const uint8_t* w, size_t S, size_t sb, int p) {
        D* d = static_cast<D*>(this);
        d->fetch(w, S, sb, p);
        d->prep();
    }
};

template <> struct Part<FMT_Q8_0> : Block32<Part<FMT_Q8_0>, true> {
    uint4 q[2];
    __half dh;
    float s[2], c[2];
    __device__ void fetch(const uint8_t* w, size_t S, size_t sb, int p) {
        const uint4* b = reinterpret_cast<const uint4*>(w + sb * 256 + 32 * p);
        q[0] = b[0];
        q[1] = b[1];
        dh = reinterpret_cast<const __half*>(w + S * 256)[sb * 8 + p];
    }
    __device__ void prep() {
        s[0] = s[1] = __half2float(dh);
        c[0] = c[1] = 0.f;
    }
    __device__ void ints(int k, int* o) const {
        const uint4 v = q[k];
        o[0] = (int)v.x, o[1] = (int)v.y, o[2] = (int)v.z, o[3] = (int)v.w;
    }
};

// Q4_0 and Q4_1: 16 bytes per block, byte j holding value j in its low
// nibble and j + 16 in its high one.
template <bool MIN> struct Nibbles32 : Block32<Nibbles32<MIN>, false> {
    uint4 q;
    __half dh, mh;
    float s[2], c[2];
    __device__ void fetch(const uint8_t* w, size_t S, size_t sb, int p) {
        q = *reinterpret_cast<const uint4*>(w + sb * 128 + 16 * p);
        const __half* dm = reinterpret_cast<const __half*>(w + S * 128);
        dh = dm[sb * 8 + p];
        if (MIN) mh = dm[S * 8 + sb * 8 + p];
    }
    __device__ void prep() {
        const float d = __half2float(dh);
        s[0] = s[1] = d;
        c[0] = c[1] = MIN ? -__half2float(mh) : 8.f * d;
    }
    __device__ void ints(int k, int* o) const { nibble_ints(q, k, o); }
};
template <> struct Part<FMT_Q4_0> : Nibbles32<false> {};
template <> struct Part<FMT_Q4_1> : Nibbles32<true> {};

// Q5_0 and Q5_1: Q4_x's nibbles plus a fifth bit per value, bit j of the
// block's 32-bit qh for value j.
template <bool MIN> struct Fives32 : Block32<Fives32<MIN>, false> {
    uint4 q;
    uint32_t qh;
    __half dh, mh;
    float s[2], c[2];
    __device__ void fetch(const uint8_t* w, size_t S, size_t sb, int p) {
        q = *reinterpret_cast<const uint4*>(w + sb * 128 + 16 * p);
        qh = reinterpret_cast<const uint32_t*>(w + S * 128)[sb * 8 + p];
        const __half* dm = reinterpret_cast<const __half*>(w + S * 160);
        dh = dm[sb * 8 + p];
        if (MIN) mh = dm[S * 8 + sb * 8 + p];
    }
    __device__ void prep() {
        const float d = __half2float(dh);
        s[0] = s[1] = d;
        c[0] = c[1] = MIN ? -__half2float(mh) : 16.f * d;
    }
    __device__ void ints(int k, int* o) const {
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            // Values 16k + 4i .. +3: their fifth bits to bit 4 of each byte.
            const uint32_t h = (qh >> (16 * k + 4 * i)) & 0xFu;
            const uint32_t hi = ((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25);
            o[i] = (int)(((k == 0 ? w[i] : w[i] >> 4) & 0x0F0F0F0Fu) | hi);
        }
    }
};
template <> struct Part<FMT_Q5_0> : Fives32<false> {};
template <> struct Part<FMT_Q5_1> : Fives32<true> {};

// Q3K and Q2K: part p is 2-bit field j = p % 4 of qs bytes 32h .. 32h + 31
// (h = p / 4), i.e. values 128h + 32j + l, in runs l < 16 and l ≥ 16,
// each one scale group (index 8h + 2j + k).
template <> struct Part<FMT_Q3K> {
    static constexpr int HI = 16;
    static constexpr bool SIGNED = false;
    static constexpr bool RAGGED = false;
    __device__ static int lo(int p) { return 128 * (p >> 2) + 32 * (p & 3); }
    uint4 q[2], hm[2];
    int shift, hbit;
    float s[2], c[2];
    __device__ void load(const uint8_t* w, size_t S, size_t sb, int p) {
        const int h = p >> 2, j = p & 3;
        const uint4* qs = reinterpret_cast<const uint4*>(w + sb * 64 + 32 * h);
        const uint4* hmask = reinterpret_cast<const uint4*>(w + S * 64 + sb * 32);
        q[0] = qs[0], q[1] = qs[1];
        hm[0] = hmask[0], hm[1] = hmask[1];
        shift = 2 * j;
        hbit = 4 * h + j;
        const uint8_t* sc = w + S * 96 + sb * 12;
        const float d = __half2float(reinterpret_cast<const __half*>(w + S * 108)[sb]);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const int is = 8 * h + 2 * j + k;
            const int low = is < 8 ? sc[is] & 0x0F : sc[is - 8] >> 4;
            const int high = (sc[8 + (is & 3)] >> (2 * (is >> 2))) & 3;
            s[k] = d * (float)((low | (high << 4)) - 32);
            c[k] = 4.f * s[k];
        }
    }
    // The scales are bytes spread over the block: loaded and decoded at once.
    __device__ void fetch(const uint8_t* w, size_t S, size_t sb, int p) { load(w, S, sb, p); }
    __device__ void prep() {}
    __device__ void ints(int k, int* o) const {
        const uint32_t l[4] = {q[k].x, q[k].y, q[k].z, q[k].w}, hb[4] = {hm[k].x, hm[k].y, hm[k].z, hm[k].w};
#pragma unroll
        for (int i = 0; i < 4; i++)
            o[i] = (int)(((l[i] >> shift) & 0x03030303u) | (((hb[i] >> hbit) & 0x01010101u) << 2));
    }
};

template <> struct Part<FMT_Q2K> {
    static constexpr int HI = 16;
    static constexpr bool SIGNED = false;
    static constexpr bool RAGGED = false;
    __device__ static int lo(int p) { return 128 * (p >> 2) + 32 * (p & 3); }
    uint4 q[2];
    int shift;
    float s[2], c[2];
    __device__ void load(const uint8_t* w, size_t S, size_t sb, int p) {
        const int h = p >> 2, j = p & 3;
        const uint4* qs = reinterpret_cast<const uint4*>(w + sb * 64 + 32 * h);
        q[0] = qs[0], q[1] = qs[1];
        shift = 2 * j;
        const uint8_t* sc = w + S * 64 + sb * 16 + 8 * h + 2 * j;
        const __half* dm = reinterpret_cast<const __half*>(w + S * 80) + 2 * sb;
        const float d = __half2float(dm[0]), dmin = __half2float(dm[1]);
#pragma unroll
        for (int k = 0; k < 2; k++) {
            s[k] = d * (float)(sc[k] & 0x0F);
            c[k] = dmin * (float)(sc[k] >> 4);
        }
    }
    // The scales are bytes spread over the block: loaded and decoded at once.
    __device__ void fetch(const uint8_t* w, size_t S, size_t sb, int p) { load(w, S, sb, p); }
    __device__ void prep() {}
    __device__ void ints(int k, int* o) const {
        const uint32_t l[4] = {q[k].x, q[k].y, q[k].z, q[k].w};
#pragma unroll
        for (int i = 0; i < 4; i++) o[i] = (int)((l[i] >> shift) & 0x03030303u);
    }
};


// MXFP4 (gpt-oss's experts): 32-value blocks of an E8M0 scale byte e and 16
// bytes of 4-bit E2M1 codes laid out as Q4_0's nibbles; the host splits a
// matrix of S superblocks into planes: the codes [S][8 · 16 bytes], then
// the scale bytes [8 S]. A code is a sign (bit 3) and twice its magnitude
// as an integer (0, 1, 2, 3, 4, 6, 8, 12), so the quants are the signed
// bytes -12..12 and s = 2^(e-128), half the block's scale (the CPU's
// kiln_kernels::quant::fp4).
__device__ __forceinline__ float e8m0_half(uint32_t e) {
    return __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
}

// The signed quants of four codes (one per byte's low nibble of v & 0x0F0F0F0F).
__device__ __forceinline__ int fp4_ints(uint32_t v) {
    // Magnitude index (bits 0-2 of each byte) as four byte selectors.
    const uint32_t m = v & 0x07070707u;
    const uint32_t sel = (m & 0xFu) | ((m >> 4) & 0xF0u) | ((m >> 8) & 0xF00u) | ((m >> 12) & 0xF000u);
    const uint32_t mag = __byte_perm(0x03020100u, 0x0C080604u, sel);
    const uint32_t neg = ((v >> 3) & 0x01010101u) * 0xFFu;  // 0xFF in each byte whose sign bit is set
    return (int)((mag & ~neg) | (__vsub4(0u, mag) & neg));
}

template <> struct Part<FMT_MXFP4> : Block32<Part<FMT_MXFP4>, true> {
    uint4 q;
    uint32_t e;
    float s[2], c[2];
    __device__ void fetch(const uint8_t* w, size_t S, size_t sb, int p) {
        q = *reinterpret_cast<const uint4*>(w + sb * 128 + 16 * p);
        e = w[S * 128 + sb * 8 + p];
    }
    __device__ void prep() {
        s[0] = s[1] = e8m0_half(e);
        c[0] = c[1] = 0.f;
    }
    __device__ void ints(int k, int* o) const {
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int i = 0; i < 4; i++) o[i] = fp4_ints((k == 0 ? w[i] : w[i] >> 4) & 0x0F0F0F0Fu);
    }
};
