//! AVX2 kernels over [`PackedRows`] (layout in `packed`), with and
//! without AVX-VNNI.
//!
//! A 64-byte quant chunk holds 4 values of each of 16 rows; a 256-bit
//! register holds half of it, so a group is computed as two halves of 8
//! rows, each for up to [`QUANT_TOKENS`] tokens per pass over its weights.
//! Decode (1 or 2 tokens) takes both halves in one pass instead: a pass per
//! half would read each line from memory for its first half and again
//! (from cache) for its second, and at decode the memory stream is the
//! bound (1B-class Q8_0 on AVX2: +19% decode, BENCHMARKS.md, "AVX2 path").
//! Per 4 values of 8 rows and a token, the exact integer products of the
//! unsigned weights `u` and the signed activations are summed per row with
//! `vpdpbusd` (AVX-VNNI) or `vpmaddubsw` + `vpmaddwd`. `vpmaddubsw` saturates
//! pairs at ±32767, which 4- and 5-bit weights and `S8x2`'s 6-bit signed
//! values never reach; `Q8_0`'s `u = q + 128` could, so without VNNI its
//! signed weights go in as `|q|` with the sign moved onto the activation
//! (and no offset term). Then, per block, as the AVX-512 kernel:
//! `acc += (d · dx) · Σu·q + m · s`.
//!
//! The super-block kinds (`packed_k`): `Q4K` is `Q4_1`'s kernel with `d`
//! and `m` made per block from the super-block's `f16` scales and the
//! block's 8-bit ones (once per block, shared by the tokens). `Q6K` ORs
//! each value's high 2 bits (one 32-byte load per two quant chunks, a
//! shift and a mask each) onto the low nibbles, giving unsigned 6-bit
//! values, and sums `u · q` per half block in 32 bits (two `vpmaddubsw`
//! pairs of at most 2·63·127 add up in 16 bits first), starting from
//! `-32 ·` the activations' half sums, so the sums are `Σ (u − 32) · q`
//! exactly; then `acc += dx · (d·sc₀ · Σ₀ + d·sc₁ · Σ₁)`.
//!
//! Float kinds: one column of 8 rows per vector, times a broadcast activation.
//!
//! The kernels are written once (`kernels!`) and compiled twice, once per
//! feature set, so the compiler never uses AVX-VNNI where the CPU may lack it.
//!
//! Safety: every function requires the features of the module it is in
//! ([`super::CpuIsa::Avx2`] or [`super::CpuIsa::Avx2Vnni`]); callers check
//! them at run time.

/// Most tokens per tile of the quantized kernels (16 registers: 4 tokens'
/// accumulators and integer sums, and the unpacked weights).
const QUANT_TOKENS: usize = 4;
/// Tokens per float tile.
const FLOAT_TOKENS: usize = 4;

const Q4_0: u8 = 0;
const Q4_1: u8 = 1;
const Q8_0: u8 = 2;
const F16: u8 = 3;
const BF16: u8 = 4;
const F32: u8 = 5;
const Q5_1: u8 = 6;
const S8X2: u8 = 7;
const Q4K: u8 = 8;
const Q6K: u8 = 9;
/// Rows per half group.
const HALF: usize = 8;

macro_rules! kernels {
    ($features:literal, $vnni:expr) => {
        use std::arch::x86_64::*;
        use std::ops::Range;

        use super::super::act::QK;
        use super::super::packed::{PackKind, PackedRows, PACK_ROWS};
        use super::super::Job;
        use super::*;

        /// Row groups `groups` of a packed job, every token.
        #[target_feature(enable = $features)]
        pub(in super::super) fn rows(job: &Job<'_>, p: &PackedRows, groups: Range<usize>) {
            match p.kind() {
                PackKind::Q4_0 => groups_k::<Q4_0>(job, p, groups),
                PackKind::Q4_1 => groups_k::<Q4_1>(job, p, groups),
                PackKind::Q5_1 => groups_k::<Q5_1>(job, p, groups),
                PackKind::S8x2 => groups_k::<S8X2>(job, p, groups),
                PackKind::Q8_0 => groups_k::<Q8_0>(job, p, groups),
                PackKind::Q4K => groups_k::<Q4K>(job, p, groups),
                PackKind::Q6K => groups_k::<Q6K>(job, p, groups),
                PackKind::F16 => groups_f::<F16>(job, p, groups),
                PackKind::BF16 => groups_f::<BF16>(job, p, groups),
                PackKind::F32 => groups_f::<F32>(job, p, groups),
            }
        }

        /// `acc + Σ` of the 4 products `u · s` in each 32-bit lane
        /// (`u` unsigned, `s` signed bytes; no pair reaches ±32767 here).
        #[target_feature(enable = $features)]
        #[inline]
        fn dot4(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
            #[allow(unused_unsafe)]
            if $vnni {
                // SAFETY: AVX-VNNI is in this module's features.
                unsafe { dpbusd(acc, u, s) }
            } else {
                let pairs = _mm256_maddubs_epi16(u, s);
                _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
            }
        }

        #[target_feature(enable = $features)]
        fn groups_k<const K: u8>(job: &Job<'_>, p: &PackedRows, groups: Range<usize>) {
            let act = job.act;
            let nb = act.nb();
            // The tile reads activations and packed bytes through raw
            // pointers: check the extents once.
            assert!(act.q.len() >= job.n * nb * QK && act.d.len() >= job.n * nb && act.s.len() >= job.n * nb);
            assert!(nb * QK == p.cols() && groups.end * PACK_ROWS <= p.rows());
            assert!(p.bytes().len() >= groups.end * p.kind().group_bytes(nb));
            assert!(K != Q6K || act.h.len() >= job.n * nb * 2);
            if job.n <= 2 {
                // Decode: both halves of a group in one pass.
                for g in groups {
                    // SAFETY: extents asserted above.
                    unsafe {
                        if job.n == 1 {
                            tile::<K, 1, 2>(job, p, g, 0, 0);
                        } else {
                            tile::<K, 2, 2>(job, p, g, 0, 0);
                        }
                    }
                }
                return;
            }
            let ntiles = job.n.div_ceil(QUANT_TOKENS);
            for g in groups {
                for h in 0..2 {
                    let mut t = 0;
                    for i in 0..ntiles {
                        // Tiles as even as possible, as in the AVX-512 kernel.
                        let nt = job.n * (i + 1) / ntiles - t;
                        // SAFETY: extents asserted above.
                        unsafe {
                            match nt {
                                1 => tile::<K, 1, 1>(job, p, g, h, t),
                                2 => tile::<K, 2, 1>(job, p, g, h, t),
                                3 => tile::<K, 3, 1>(job, p, g, h, t),
                                _ => tile::<K, 4, 1>(job, p, g, h, t),
                            }
                        }
                        t += nt;
                    }
                }
            }
        }

        /// Halves `h0..h0 + H` (8 rows each) of group `g` against tokens
        /// `t0..t0 + T`; decode takes both halves in one pass, so that each
        /// 64-byte line read from memory is used whole at once.
        ///
        /// # Safety
        /// The extents asserted in `groups_k` must hold for `g`, `h0 + H <= 2`
        /// and `t0 + T <= job.n`.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn tile<const K: u8, const T: usize, const H: usize>(
            job: &Job<'_>,
            p: &PackedRows,
            g: usize,
            h0: usize,
            t0: usize,
        ) {
            let nb = job.act.nb();
            let kind = p.kind();
            let gbb = kind.group_block_bytes();
            let base = p.bytes().as_ptr().add(g * kind.group_bytes(nb));
            let mut acc = [[_mm256_setzero_ps(); T]; H];
            for b in 0..nb {
                let (gb, hdr) = if K == Q4K || K == Q6K {
                    (base.add(kind.block_at(b)), base.add(kind.header_at(b)))
                } else {
                    (base.add(b * gbb), base)
                };
                for (hh, acc) in acc.iter_mut().enumerate() {
                    half_block::<K, T>(job, kind, gb, hdr, b, h0 + hh, t0, acc);
                }
            }
            for (hh, acc) in acc.iter().enumerate() {
                for (t, acc) in acc.iter().enumerate() {
                    let mut out = [0f32; HALF];
                    _mm256_storeu_ps(out.as_mut_ptr(), *acc);
                    job.store_rows(t0 + t, g * PACK_ROWS + HALF * (h0 + hh), &out);
                }
            }
        }

        /// Adds half `h` of group-block `gb` (block `b` of its rows) times
        /// tokens `t0..t0 + T` to `acc`.
        ///
        /// # Safety
        /// As `tile`; `gb` is the group-block of block `b`, `hdr` its
        /// super-block's header (super-block kinds).
        #[target_feature(enable = $features)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        unsafe fn half_block<const K: u8, const T: usize>(
            job: &Job<'_>,
            kind: PackKind,
            gb: *const u8,
            hdr: *const u8,
            b: usize,
            h: usize,
            t0: usize,
            acc: &mut [__m256; T],
        ) {
            let act = job.act;
            let nb = act.nb();
            let qo = kind.quant_offset();
            let xq = act.q.as_ptr();
            let (xd, xs) = (act.d.as_ptr(), act.s.as_ptr());
            let nib = _mm256_set1_epi8(0x0F);
            // Q8_0 without VNNI: signed weights, so no offset term.
            let signed8 = K == Q8_0 && !$vnni;
            let implied = _mm256_set1_ps(kind.implied_m());
            let q = gb.add(qo + 4 * HALF * h);
            let x = |t: usize, at: usize| x4(xq, ((t0 + t) * nb + b) * QK + at);
            if K == Q6K {
                q6k_half::<T>(job, gb, hdr, q, b, h, t0, acc);
                return;
            }
            let (dv, mv) = if K == Q4K {
                // Row r's (sc, m) bytes as one 32-bit lane of two u16s.
                let pairs = _mm256_cvtepu8_epi16(_mm_loadu_si128(gb.add(2 * HALF * h).cast()));
                let sc = _mm256_cvtepi32_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(0xFFFF)));
                let m = _mm256_cvtepi32_ps(_mm256_srli_epi32::<16>(pairs));
                let d = _mm256_cvtph_ps(_mm_loadu_si128(hdr.add(2 * HALF * h).cast()));
                let dmin = _mm256_cvtph_ps(_mm_loadu_si128(hdr.add(32 + 2 * HALF * h).cast()));
                // w = d·sc·u − dmin·m.
                (_mm256_mul_ps(d, sc), _mm256_xor_ps(_mm256_mul_ps(dmin, m), _mm256_set1_ps(-0.0)))
            } else {
                let dv = _mm256_cvtph_ps(_mm_loadu_si128(gb.add(2 * HALF * h).cast()));
                (dv, half_m::<K>(gb, h, dv, implied))
            };
            if K == S8X2 {
                // As the AVX-512 kernel: signed values times the
                // activations offset to unsigned, per half block, less
                // the offset's share `corr`.
                let corr = _mm256_loadu_ps(gb.add(64 + 4 * HALF * h).cast());
                let flip = _mm256_set1_epi8(-128);
                let mut ilo = [_mm256_setzero_si256(); T];
                let mut ihi = [_mm256_setzero_si256(); T];
                for k in 0..8 {
                    let w = _mm256_loadu_si256(q.add(64 * k).cast());
                    for t in 0..T {
                        let a = _mm256_xor_si256(x(t, 4 * k), flip);
                        if k < 4 {
                            ilo[t] = dot4(ilo[t], a, w);
                        } else {
                            ihi[t] = dot4(ihi[t], a, w);
                        }
                    }
                }
                for t in 0..T {
                    let i = (t0 + t) * nb + b;
                    let sum = _mm256_fmadd_ps(
                        _mm256_cvtepi32_ps(ilo[t]),
                        dv,
                        _mm256_fmsub_ps(_mm256_cvtepi32_ps(ihi[t]), mv, corr),
                    );
                    acc[t] = _mm256_fmadd_ps(sum, _mm256_set1_ps(*xd.add(i)), acc[t]);
                }
                return;
            }
            let mut isum = [_mm256_setzero_si256(); T];
            if K == Q8_0 {
                let flip = _mm256_set1_epi8(-128);
                for k in 0..8 {
                    let w = _mm256_loadu_si256(q.add(64 * k).cast());
                    if signed8 {
                        let w = _mm256_xor_si256(w, flip);
                        let aw = _mm256_abs_epi8(w);
                        for (t, s) in isum.iter_mut().enumerate() {
                            *s = dot4(*s, aw, _mm256_sign_epi8(x(t, 4 * k), w));
                        }
                    } else {
                        for (t, s) in isum.iter_mut().enumerate() {
                            *s = dot4(*s, w, x(t, 4 * k));
                        }
                    }
                }
            } else {
                let qh = if K == Q5_1 {
                    _mm256_loadu_si256(gb.add(64 + 4 * HALF * h).cast())
                } else {
                    _mm256_setzero_si256()
                };
                // 4-bit weights without VNNI: the block's 16-bit pair
                // sums add up in 16 bits (8 pairs of at most 2·15·127
                // each stay below 32767), widened once per block.
                let sum16 = !$vnni && K != Q5_1;
                let mut p16 = [_mm256_setzero_si256(); T];
                for k in 0..4 {
                    let z = _mm256_loadu_si256(q.add(64 * k).cast());
                    let mut lo = _mm256_and_si256(z, nib);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(z), nib);
                    if K == Q5_1 {
                        lo = _mm256_or_si256(lo, fifth_bits(qh, 4 * k as i32));
                        hi = _mm256_or_si256(hi, fifth_bits(qh, 16 + 4 * k as i32));
                    }
                    for t in 0..T {
                        if sum16 {
                            let a = _mm256_maddubs_epi16(lo, x(t, 4 * k));
                            let b = _mm256_maddubs_epi16(hi, x(t, 16 + 4 * k));
                            p16[t] = _mm256_add_epi16(p16[t], _mm256_add_epi16(a, b));
                        } else {
                            isum[t] = dot4(isum[t], lo, x(t, 4 * k));
                            isum[t] = dot4(isum[t], hi, x(t, 16 + 4 * k));
                        }
                    }
                }
                if sum16 {
                    for t in 0..T {
                        isum[t] = _mm256_madd_epi16(p16[t], _mm256_set1_epi16(1));
                    }
                }
            }
            for t in 0..T {
                let i = (t0 + t) * nb + b;
                let scale = _mm256_mul_ps(dv, _mm256_set1_ps(*xd.add(i)));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), scale, acc[t]);
                if !signed8 {
                    acc[t] = _mm256_fmadd_ps(mv, _mm256_set1_ps(*xs.add(i)), acc[t]);
                }
            }
        }

        /// `m` of half `h` of a group-block: stored (Q4_1, Q5_1), the second
        /// half's scale (S8x2), or `c · d` (`implied` = `c`).
        ///
        /// # Safety
        /// `gb` is a group-block of kind `K`.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn half_m<const K: u8>(gb: *const u8, h: usize, dv: __m256, implied: __m256) -> __m256 {
            if K == Q4_1 || K == Q5_1 || K == S8X2 {
                _mm256_cvtph_ps(_mm_loadu_si128(gb.add(32 + 2 * HALF * h).cast()))
            } else {
                _mm256_mul_ps(dv, implied)
            }
        }

        /// `acc + Σ u₀·s₀ + u₁·s₁` per 32-bit lane, for 6-bit `u`: without
        /// VNNI the two `vpmaddubsw` pair sums (each at most 2·63·127) add
        /// up in 16 bits, widened once.
        #[target_feature(enable = $features)]
        #[inline]
        fn dot8(acc: __m256i, u0: __m256i, s0: __m256i, u1: __m256i, s1: __m256i) -> __m256i {
            if $vnni {
                dot4(dot4(acc, u0, s0), u1, s1)
            } else {
                let pairs = _mm256_add_epi16(_mm256_maddubs_epi16(u0, s0), _mm256_maddubs_epi16(u1, s1));
                _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
            }
        }

        /// Half `h` of a `Q6K` group-block (`gb`, quants of the half at
        /// `q`, super-block header `hdr`) times tokens `t0..t0 + T`, added
        /// to `acc` (module docs).
        ///
        /// # Safety
        /// As `half_block`; `act.h` holds the half sums (asserted in `groups_k`).
        #[target_feature(enable = $features)]
        #[inline]
        #[allow(clippy::too_many_arguments)]
        unsafe fn q6k_half<const T: usize>(
            job: &Job<'_>,
            gb: *const u8,
            hdr: *const u8,
            q: *const u8,
            b: usize,
            h: usize,
            t0: usize,
            acc: &mut [__m256; T],
        ) {
            let act = job.act;
            let nb = act.nb();
            let (xq, xd, xh) = (act.q.as_ptr(), act.d.as_ptr(), act.h.as_ptr());
            let x = |t: usize, at: usize| x4(xq, ((t0 + t) * nb + b) * QK + at);
            // Row r's (sc₀, sc₁) as one 32-bit lane of two i16s.
            let pairs = _mm256_cvtepi8_epi16(_mm_loadu_si128(gb.add(2 * HALF * h).cast()));
            let sc0 = _mm256_srai_epi32::<16>(_mm256_slli_epi32::<16>(pairs));
            let sc1 = _mm256_srai_epi32::<16>(pairs);
            let d = _mm256_cvtph_ps(_mm_loadu_si128(hdr.add(2 * HALF * h).cast()));
            let (d0, d1) = (_mm256_mul_ps(d, _mm256_cvtepi32_ps(sc0)), _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc1)));
            let (nib, two) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(0x30));
            let mut lo = [_mm256_setzero_si256(); T];
            let mut hi = [_mm256_setzero_si256(); T];
            for t in 0..T {
                let i = (t0 + t) * nb + b;
                lo[t] = _mm256_set1_epi32(-32 * *xh.add(2 * i));
                hi[t] = _mm256_set1_epi32(-32 * *xh.add(2 * i + 1));
            }
            for c in 0..2 {
                // Chunks k = 2c and 2c + 1 and their high bits.
                let hb = _mm256_loadu_si256(q.add(4 * 64 + 64 * c).cast());
                let z0 = _mm256_loadu_si256(q.add(64 * 2 * c).cast());
                let z1 = _mm256_loadu_si256(q.add(64 * (2 * c + 1)).cast());
                let l0 = _mm256_or_si256(_mm256_and_si256(z0, nib), _mm256_and_si256(_mm256_slli_epi16::<4>(hb), two));
                let l1 = _mm256_or_si256(_mm256_and_si256(z1, nib), _mm256_and_si256(hb, two));
                for (t, lo) in lo.iter_mut().enumerate() {
                    *lo = dot8(*lo, l0, x(t, 8 * c), l1, x(t, 8 * c + 4));
                }
                let h0 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(z0), nib),
                    _mm256_and_si256(_mm256_slli_epi16::<2>(hb), two),
                );
                let h1 = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16::<4>(z1), nib),
                    _mm256_and_si256(_mm256_srli_epi16::<2>(hb), two),
                );
                for (t, hi) in hi.iter_mut().enumerate() {
                    *hi = dot8(*hi, h0, x(t, 16 + 8 * c), h1, x(t, 20 + 8 * c));
                }
            }
            for t in 0..T {
                let sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo[t]), d0, _mm256_mul_ps(_mm256_cvtepi32_ps(hi[t]), d1));
                acc[t] = _mm256_fmadd_ps(sum, _mm256_set1_ps(*xd.add((t0 + t) * nb + b)), acc[t]);
            }
        }

        /// Bits `at..at + 4` of each 32-bit lane of `qh`, moved to bit 4 of
        /// the lane's four bytes (byte i gets bit `at + i`).
        #[target_feature(enable = $features)]
        #[inline]
        fn fifth_bits(qh: __m256i, at: i32) -> __m256i {
            let four = _mm256_and_si256(_mm256_srlv_epi32(qh, _mm256_set1_epi32(at)), _mm256_set1_epi32(0xF));
            // x · 0x00204081 = x + x<<7 + x<<14 + x<<21: bit i of x lands on bit 8i.
            let spread = _mm256_and_si256(
                _mm256_mullo_epi32(four, _mm256_set1_epi32(0x0020_4081)),
                _mm256_set1_epi32(0x0101_0101),
            );
            _mm256_slli_epi32::<4>(spread)
        }

        /// The 4 activation bytes at `xq + at`, on every lane.
        ///
        /// # Safety
        /// `xq + at .. xq + at + 4` must be readable.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn x4(xq: *const i8, at: usize) -> __m256i {
            _mm256_set1_epi32(std::ptr::read_unaligned(xq.add(at).cast::<i32>()))
        }

        #[target_feature(enable = $features)]
        fn groups_f<const K: u8>(job: &Job<'_>, p: &PackedRows, groups: Range<usize>) {
            let cols = p.cols();
            assert!(job.x.len() >= job.n * cols && cols.is_multiple_of(2));
            assert!(groups.end * PACK_ROWS <= p.rows());
            assert!(p.bytes().len() >= groups.end * cols / QK * p.kind().group_block_bytes());
            for g in groups {
                for h in 0..2 {
                    let mut t = 0;
                    while t < job.n {
                        let nt = (job.n - t).min(FLOAT_TOKENS);
                        // SAFETY: extents asserted above.
                        unsafe {
                            match nt {
                                1 => tile_f::<K, 1>(job, p, g, h, t),
                                2 => tile_f::<K, 2>(job, p, g, h, t),
                                3 => tile_f::<K, 3>(job, p, g, h, t),
                                _ => tile_f::<K, 4>(job, p, g, h, t),
                            }
                        }
                        t += nt;
                    }
                }
            }
        }

        /// One column of 8 rows as `f32`.
        ///
        /// # Safety
        /// 8 values of kind `K` readable at `p`.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn column<const K: u8>(p: *const u8) -> __m256 {
            match K {
                F16 => _mm256_cvtph_ps(_mm_loadu_si128(p.cast())),
                BF16 => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast())))),
                _ => _mm256_loadu_ps(p.cast()),
            }
        }

        /// Half `h` of group `g` of a float kind against tokens `t0..t0 + T`.
        ///
        /// # Safety
        /// The extents asserted in `groups_f` must hold for `g` and `t0 + T <= job.n`.
        #[target_feature(enable = $features)]
        #[inline]
        unsafe fn tile_f<const K: u8, const T: usize>(job: &Job<'_>, p: &PackedRows, g: usize, h: usize, t0: usize) {
            let cols = p.cols();
            let es = if K == F32 { 4 } else { 2 };
            // Column `c` of the group starts at `16 c` values; half `h` 8 values in.
            let base = p.bytes().as_ptr().add(g * cols * PACK_ROWS * es + HALF * h * es);
            let x = job.x.as_ptr();
            let mut acc = [[_mm256_setzero_ps(); 2]; T];
            for c in (0..cols).step_by(2) {
                let w0 = column::<K>(base.add(c * PACK_ROWS * es));
                let w1 = column::<K>(base.add((c + 1) * PACK_ROWS * es));
                for (t, acc) in acc.iter_mut().enumerate() {
                    let xr = x.add((t0 + t) * cols + c);
                    acc[0] = _mm256_fmadd_ps(w0, _mm256_set1_ps(*xr), acc[0]);
                    acc[1] = _mm256_fmadd_ps(w1, _mm256_set1_ps(*xr.add(1)), acc[1]);
                }
            }
            for (t, acc) in acc.iter().enumerate() {
                let mut out = [0f32; HALF];
                _mm256_storeu_ps(out.as_mut_ptr(), _mm256_add_ps(acc[0], acc[1]));
                job.store_rows(t0 + t, g * PACK_ROWS + HALF * h, &out);
            }
        }
    };
}

/// AVX2 + FMA + F16C: integer dots with `vpmaddubsw` + `vpmaddwd`.
pub(super) mod plain {
    kernels!("avx2,fma,f16c", false);

    /// Never called (`dot4` takes the other branch); keeps one kernel text.
    #[inline(always)]
    unsafe fn dpbusd(acc: __m256i, _u: __m256i, _s: __m256i) -> __m256i {
        acc
    }
}

/// AVX2 + FMA + F16C + AVX-VNNI: integer dots with 256-bit `vpdpbusd`.
pub(super) mod vnni {
    kernels!("avx2,fma,f16c,avxvnni", true);

    #[target_feature(enable = "avx2,avxvnni")]
    #[inline]
    unsafe fn dpbusd(acc: __m256i, u: __m256i, s: __m256i) -> __m256i {
        _mm256_dpbusd_avx_epi32(acc, u, s)
    }
}
