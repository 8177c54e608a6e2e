//! The AVX-512 tile kernel of [`super::avx512`] for caches with a
//! quantized side ([`super::KvFormat::Quant`]), generic over how each side
//! is read: a [`KSide`] and a [`VSide`] widen 16 keys of two dimensions (K)
//! or 16 dimensions of two keys (V) into registers — `q8_0` bytes with a
//! sign extension, `q4_0` nibbles with a mask or a shift, times their
//! block's scale; an `f16` side with F16C — so the loops, the span of four
//! blocks, the batches of four (row, head) pairs and the online softmax are
//! those of the 16-bit kernel. (The 16-bit caches keep their own copy of
//! the kernel: with one instance per format here, LLVM inlines differently
//! and the 16-bit instances measured 5–10% slower.)
//!
//! `q4_0` keys take integer scores (heads of up to [`MAX_INT_HD`]
//! dimensions, calls of at least [`INT_MIN_KEYS`] keys): each query is
//! quantized once per call to two signed-byte digits per 32-dimension
//! group (about 15 bits), and a group's scores for 16 keys are `vpdpbusd`
//! of the keys' nibbles, transposed in registers to four dimensions per
//! key lane (`vpermd` + `vpshufb`), against the query's bytes, then scaled
//! by the key's and the query's scales: 16 multiply-adds of 64 bytes per
//! group and query instead of widening every key value to `f32`. (`q8_0`
//! keys the same way measured slower than widening them: twice the bytes
//! to transpose, and a second `vpdpbusd` for the keys' sums that the
//! unsigned-by-signed product needs.)
//!
//! Safety: callers check the CPU features (the AVX-512 level includes BW
//! and VNNI), `block_size == 16` and `head_dim % 32 == 0`
//! ([`super::AttnPath::supports`]).

use std::arch::x86_64::*;
use std::ops::Range;

use super::quant::{k_group_len, QK};
use super::tile::{pair_stride, Tile};
use super::{Call, KvFormat, KvType};
use crate::ops::vmath::exp512;

const BS: usize = 16;
/// Blocks per online-softmax update.
const SPAN: usize = 4;
/// Pairs processed together.
const MAX_NP: usize = 4;

/// Fetches blocks `blocks` of the tile's table into L1 ahead of their use
/// (as [`super::avx512::prefetch_span`], for sides of any size).
fn prefetch_span(call: &Call<'_>, tile: &Tile<'_>, blocks: Range<usize>) {
    for bi in blocks {
        let Some(&blk) = tile.table.get(bi) else { break };
        if let Some((kb, vb)) = call.head_blocks(blk as usize, tile.kvh) {
            prefetch(kb);
            prefetch(vb);
        }
    }
}

/// Runs the kernel for the cache's format.
///
/// # Safety
/// As [`run`]: the CPU has AVX-512 F/VL, F16C and FMA.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
pub(super) unsafe fn dispatch(call: &Call<'_>, tile: &Tile<'_>, range: Range<usize>, state: &mut [f32]) {
    use KvType::*;
    match call.layout.format {
        // 16-bit caches take `super::avx512`.
        KvFormat::F16 | KvFormat::Bf16Pairs => {}
        KvFormat::Quant { k, v } => match (k, v) {
            (F16, F16) => run::<F16K, F16V>(call, tile, range, state),
            (F16, Q8_0) => run::<F16K, Q8V>(call, tile, range, state),
            (F16, Q4_0) => run::<F16K, Q4V>(call, tile, range, state),
            (Q8_0, F16) => run::<Q8K, F16V>(call, tile, range, state),
            (Q8_0, Q8_0) => run::<Q8K, Q8V>(call, tile, range, state),
            (Q8_0, Q4_0) => run::<Q8K, Q4V>(call, tile, range, state),
            (Q4_0, F16) => run::<Q4K, F16V>(call, tile, range, state),
            (Q4_0, Q8_0) => run::<Q4K, Q8V>(call, tile, range, state),
            (Q4_0, Q4_0) => run::<Q4K, Q4V>(call, tile, range, state),
        },
    }
}

/// Largest head dimension whose queries the AVX-512 kernel quantizes for
/// integer scores against `q4_0` keys (larger heads widen their keys).
const MAX_INT_HD: usize = 256;

/// One 32-value group of a (rotated) query as two signed-byte digits for
/// integer scores: `q ≈ d · (hi + lo / 254)` with `d = max|q| / 127`,
/// `hi = round(q / d)` and `lo` the rounded remainder (about 15 bits, as
/// the CUDA decode products quantize their inputs, so that the scores stay
/// within f32 rounding of the widened keys'). Returns `d`.
fn quantize_query_group(x: &[f32], hi: &mut [i8; QK], lo: &mut [i8; QK]) -> f32 {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    for ((h, l), &v) in hi.iter_mut().zip(lo.iter_mut()).zip(x) {
        let t = v * id;
        let r = t.round().clamp(-127.0, 127.0);
        *h = r as i8;
        *l = ((t - r) * 254.0).round().clamp(-127.0, 127.0) as i8;
    }
    d
}

/// Fewest keys in a call for the integer scores: quantizing the queries
/// costs each call about a microsecond, which shorter ranges do not earn
/// back (one decode row, 30 layers of SmolLM2's heads, 1 thread, against
/// widening: 128 keys +34%, 512 +2%, 1024 −7%, 2048 −12%; 16 rows at
/// 512 +4%, at 1024 −5%). In this crate's tests, every range (the model
/// tests take the widening path at their short contexts).
#[cfg(not(test))]
const INT_MIN_KEYS: usize = 1024;
#[cfg(test)]
const INT_MIN_KEYS: usize = 1;

/// A query quantized for the integer scores against `q4_0` keys: per
/// 32-dimension group `g`, its scale `d[g]`, and per digit (0: the high
/// one, 1: the low one, [`quantize_query_group`]) the correction
/// `corr[digit][g] = 8 · Σq` (the keys' zero point) and its bytes packed
/// four per `i32` (`quads[digit][8 g ..]`): dimensions 8j, 8j + 2, 8j + 4,
/// 8j + 6 (the low nibbles of the keys' transposed quad j), then 8j + 1,
/// 8j + 3, 8j + 5, 8j + 7 (the high nibbles).
#[derive(Clone, Copy)]
pub(super) struct QInt {
    quads: [[i32; MAX_INT_HD / 4]; 2],
    d: [f32; MAX_INT_HD / QK],
    corr: [[i32; MAX_INT_HD / QK]; 2],
}

impl QInt {
    /// `q` (`head_dim` values, at most [`MAX_INT_HD`]) quantized by
    /// [`quantize_query_group`]: the signed side of `vpdpbusd` (the keys'
    /// nibbles are the unsigned one).
    fn new(q: &[f32]) -> Self {
        let mut out =
            QInt { quads: [[0; MAX_INT_HD / 4]; 2], d: [0.0; MAX_INT_HD / QK], corr: [[0; MAX_INT_HD / QK]; 2] };
        for (g, x) in q.chunks_exact(QK).enumerate() {
            let (mut hi, mut lo) = ([0i8; QK], [0i8; QK]);
            out.d[g] = quantize_query_group(x, &mut hi, &mut lo);
            let pack = |b: [u8; 4]| i32::from_le_bytes(b);
            for (digit, qi) in [hi, lo].iter().enumerate() {
                let quads = &mut out.quads[digit][g * 8..][..8];
                for j in 0..4 {
                    let b = |k: usize| qi[k] as u8;
                    quads[2 * j] = pack([b(8 * j), b(8 * j + 2), b(8 * j + 4), b(8 * j + 6)]);
                    quads[2 * j + 1] = pack([b(8 * j + 1), b(8 * j + 3), b(8 * j + 5), b(8 * j + 7)]);
                }
                out.corr[digit][g] = 8 * qi.iter().map(|&v| v as i32).sum::<i32>();
            }
        }
        out
    }
}

/// How the kernel reads one K (block, head): two dimensions of its 16 keys
/// at a time.
pub(super) trait KSide {
    /// Whether values carry per-group scales.
    const SCALED: bool;
    /// Whether the side takes integer scores (`q4_0`).
    const INT: bool = false;
    /// Dimension pairs per scale group (the group's scales are loaded once).
    const GROUP2: usize;
    /// The 16 keys' scales of group `g` (unused by 16-bit sides).
    ///
    /// # Safety
    /// `k` points to one (block, head) of this side; the CPU has AVX-512 F and F16C.
    unsafe fn scales(k: *const u16, g: usize) -> __m512;
    /// The 16 keys' values of dimensions `2 * d2` and `2 * d2 + 1`, `sc`
    /// the scales of their group.
    ///
    /// # Safety
    /// As [`KSide::scales`], `2 * d2 + 1 < head_dim`.
    unsafe fn rows(k: *const u16, d2: usize, sc: __m512) -> (__m512, __m512);
}

/// How the kernel reads one V (block, head): 16 dimensions of two keys.
pub(super) trait VSide {
    /// Keys `j` and `j + 1` (`j` even), dimensions `c..c + 16`.
    ///
    /// # Safety
    /// `v` points to one (block, head) of this side of a cache with heads
    /// of `hd` values; `c + 16 <= hd`, `c % 16 == 0`; the CPU has AVX-512 F
    /// and F16C.
    unsafe fn rows(v: *const u16, hd: usize, j: usize, c: usize) -> (__m512, __m512);
}

/// `f16` K, transposed per block.
pub(super) struct F16K;
/// `f16` V, by key.
pub(super) struct F16V;
/// `q8_0` K (layout in `quant`).
pub(super) struct Q8K;
/// `q4_0` K.
pub(super) struct Q4K;
/// `q8_0` V (GGML blocks by key).
pub(super) struct Q8V;
/// `q4_0` V.
pub(super) struct Q4V;

impl KSide for F16K {
    const SCALED: bool = false;
    const GROUP2: usize = 8;
    #[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
    #[inline]
    unsafe fn scales(_: *const u16, _: usize) -> __m512 {
        _mm512_setzero_ps()
    }
    #[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
    #[inline]
    unsafe fn rows(k: *const u16, d2: usize, _: __m512) -> (__m512, __m512) {
        (load16(k.add(2 * d2 * BS)), load16(k.add((2 * d2 + 1) * BS)))
    }
}

impl KSide for Q8K {
    const SCALED: bool = true;
    const GROUP2: usize = QK / 2;
    #[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
    #[inline]
    unsafe fn scales(k: *const u16, g: usize) -> __m512 {
        load16(k.add(g * k_group_len(KvType::Q8_0, BS)))
    }
    #[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
    #[inline]
    unsafe fn rows(k: *const u16, d2: usize, sc: __m512) -> (__m512, __m512) {
        let (g, e) = (d2 / (QK / 2), d2 % (QK / 2));
        let vals = k.add(g * k_group_len(KvType::Q8_0, BS) + BS).cast::<u8>().add(2 * e * BS);
        (i8x16(vals, sc), i8x16(vals.add(BS), sc))
    }
}

impl KSide for Q4K {
    const SCALED: bool = true;
    const INT: bool = true;
    const GROUP2: usize = QK / 2;
    #[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
    #[inline]
    unsafe fn scales(k: *const u16, g: usize) -> __m512 {
        load16(k.add(g * k_group_len(KvType::Q4_0, BS)))
    }
    #[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
    #[inline]
    unsafe fn rows(k: *const u16, d2: usize, sc: __m512) -> (__m512, __m512) {
        let (g, e) = (d2 / (QK / 2), d2 % (QK / 2));
        let p = k.add(g * k_group_len(KvType::Q4_0, BS) + BS).cast::<u8>().add(e * BS);
        let w = _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast()));
        let eight = _mm512_set1_epi32(8);
        let lo = _mm512_sub_epi32(_mm512_and_si512(w, _mm512_set1_epi32(0xF)), eight);
        let hi = _mm512_sub_epi32(_mm512_srli_epi32::<4>(w), eight);
        (_mm512_mul_ps(_mm512_cvtepi32_ps(lo), sc), _mm512_mul_ps(_mm512_cvtepi32_ps(hi), sc))
    }
}

impl VSide for F16V {
    #[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
    #[inline]
    unsafe fn rows(v: *const u16, hd: usize, j: usize, c: usize) -> (__m512, __m512) {
        (load16(v.add(j * hd + c)), load16(v.add((j + 1) * hd + c)))
    }
}

/// 16 signed bytes at `p`, widened and scaled by `sc`.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
#[inline]
unsafe fn i8x16(p: *const u8, sc: __m512) -> __m512 {
    _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p.cast()))), sc)
}

/// The low (or `high`) nibbles of 16 bytes at `p`, less 8, times `d`.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
#[inline]
unsafe fn nib16(p: *const u8, high: bool, d: __m512) -> __m512 {
    let w = _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast()));
    let n = if high { _mm512_srli_epi32::<4>(w) } else { _mm512_and_si512(w, _mm512_set1_epi32(0xF)) };
    _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(n, _mm512_set1_epi32(8))), d)
}

/// The `f16` value `bits` in every lane.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
#[inline]
unsafe fn splat_f16(bits: u16) -> __m512 {
    _mm512_cvtph_ps(_mm256_set1_epi16(bits as i16))
}

/// The GGML block of key `j` holding dimension `c` of a quantized V side
/// of `bl` `u16`s per block.
#[inline]
unsafe fn v_block(v: *const u16, hd: usize, bl: usize, j: usize, c: usize) -> *const u16 {
    v.add((j * (hd / QK) + c / QK) * bl)
}

impl VSide for Q8V {
    #[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
    #[inline]
    unsafe fn rows(v: *const u16, hd: usize, j: usize, c: usize) -> (__m512, __m512) {
        let (b0, b1) = (v_block(v, hd, 17, j, c), v_block(v, hd, 17, j + 1, c));
        let at = |b: *const u16| b.add(1).cast::<u8>().add(c % QK);
        (i8x16(at(b0), splat_f16(*b0)), i8x16(at(b1), splat_f16(*b1)))
    }
}

impl VSide for Q4V {
    #[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
    #[inline]
    unsafe fn rows(v: *const u16, hd: usize, j: usize, c: usize) -> (__m512, __m512) {
        // Dimensions 0..16 of a block are the low nibbles, 16..32 the high ones.
        let high = !c.is_multiple_of(QK);
        let (b0, b1) = (v_block(v, hd, 9, j, c), v_block(v, hd, 9, j + 1, c));
        (nib16(b0.add(1).cast(), high, splat_f16(*b0)), nib16(b1.add(1).cast(), high, splat_f16(*b1)))
    }
}

/// Prefetches every cache line of `data` into L1.
#[inline(always)]
fn prefetch(data: &[u16]) {
    let p = data.as_ptr().cast::<i8>();
    for off in (0..data.len() * 2).step_by(64) {
        // SAFETY: prefetching is a hint: the address is inside `data`.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.add(off)) };
    }
}

/// One (row, head) pair of the current span: its valid keys per block.
#[derive(Clone, Copy)]
struct Pair {
    q: *const f32,
    /// The query quantized for integer scores, or null.
    qi: *const QInt,
    st: *mut f32,
    masks: [__mmask16; SPAN],
}

/// The blocks of the current span: K and V pointers, first position.
#[derive(Clone, Copy)]
struct Blk {
    k: *const u16,
    v: *const u16,
    p0: usize,
}

#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
fn run<K: KSide, V: VSide>(call: &Call<'_>, tile: &Tile<'_>, range: Range<usize>, state: &mut [f32]) {
    let hd = call.layout.head_dim;
    let group = call.group();
    let stride = pair_stride(hd);
    assert!(hd.is_multiple_of(2 * K::GROUP2));
    assert!(state.len() >= tile.nrows * group * stride);
    assert!(hd.is_multiple_of(16) && call.layout.block_size == BS);
    // Query vectors are read through raw pointers: check them once.
    for r in 0..tile.nrows {
        for g in 0..group {
            assert_eq!(tile.query(call, r, g).len(), hd);
        }
    }
    // Queries quantized once per call for integer scores.
    let qints: Vec<QInt> = if K::INT && hd <= MAX_INT_HD && range.len() >= INT_MIN_KEYS {
        (0..tile.nrows)
            .flat_map(|r| (0..group).map(move |g| (r, g)))
            .map(|(r, g)| QInt::new(tile.query(call, r, g)))
            .collect()
    } else {
        Vec::new()
    };
    let blocks = range.start / BS..range.end.div_ceil(BS);
    let none = Blk { k: std::ptr::null(), v: std::ptr::null(), p0: 0 };
    let mut batch =
        [Pair { q: std::ptr::null(), qi: std::ptr::null(), st: std::ptr::null_mut(), masks: [0; SPAN] }; MAX_NP];
    let mut bi = blocks.start;
    while bi < blocks.end {
        // The next SPAN blocks that are in the table and the cache (a table
        // that ends early ends the context there).
        let mut span = [none; SPAN];
        let mut nb = 0;
        while nb < SPAN && bi < blocks.end {
            let Some(&blk) = tile.table.get(bi) else {
                bi = blocks.end;
                break;
            };
            if let Some((kb, vb)) = call.head_blocks(blk as usize, tile.kvh) {
                span[nb] = Blk { k: kb.as_ptr(), v: vb.as_ptr(), p0: bi * BS };
                nb += 1;
            }
            bi += 1;
        }
        if nb == 0 {
            continue;
        }
        prefetch_span(call, tile, bi..(bi + SPAN).min(blocks.end));
        let span = &span[..nb];
        let mut n = 0;
        for r in 0..tile.nrows {
            let mut masks = [0 as __mmask16; SPAN];
            for (m, b) in masks.iter_mut().zip(span) {
                let cols = tile.valid_cols(r, b.p0, BS, &range);
                *m = (((1u32 << cols.end) - 1) & !((1u32 << cols.start) - 1)) as u16;
            }
            if masks.iter().all(|&m| m == 0) {
                continue;
            }
            for g in 0..group {
                let st = state[(r * group + g) * stride..][..stride].as_mut_ptr();
                let qi = qints.get(r * group + g).map_or(std::ptr::null(), |q| q as *const QInt);
                batch[n] = Pair { q: tile.query(call, r, g).as_ptr(), qi, st, masks };
                n += 1;
                if n == MAX_NP {
                    // SAFETY: K/V blocks of `len` elements (checked above),
                    // query and state pointers of `hd` / `hd + 2` floats.
                    unsafe { update::<K, V>(span, hd, call.scale, &batch[..n]) };
                    n = 0;
                }
            }
        }
        if n > 0 {
            // SAFETY: as above.
            unsafe { update::<K, V>(span, hd, call.scale, &batch[..n]) };
        }
    }
}

/// Dispatches a batch of pairs and a span of blocks to the kernel of their sizes.
///
/// # Safety
/// Each block's `k` and `v` point to `16 * hd` readable `f16` values; each
/// pair's `q` to `hd` floats and `st` to `hd + 2` writable floats, distinct
/// per pair.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
unsafe fn update<K: KSide, V: VSide>(span: &[Blk], hd: usize, scale: f32, pairs: &[Pair]) {
    match span.len() {
        1 => update_nb::<K, V, 1>(span, hd, scale, pairs),
        2 => update_nb::<K, V, 2>(span, hd, scale, pairs),
        3 => update_nb::<K, V, 3>(span, hd, scale, pairs),
        _ => update_nb::<K, V, 4>(span, hd, scale, pairs),
    }
}

/// As [`update`], for a span of `NB` blocks.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
unsafe fn update_nb<K: KSide, V: VSide, const NB: usize>(span: &[Blk], hd: usize, scale: f32, pairs: &[Pair]) {
    match pairs.len() {
        1 => update_n::<K, V, 1, NB>(span, hd, scale, pairs),
        2 => update_n::<K, V, 2, NB>(span, hd, scale, pairs),
        3 => update_n::<K, V, 3, NB>(span, hd, scale, pairs),
        _ => update_n::<K, V, 4, NB>(span, hd, scale, pairs),
    }
}

/// Widens 16 `f16` values at `p`.
#[target_feature(enable = "avx512f,f16c")]
#[inline]
unsafe fn load16(p: *const u16) -> __m512 {
    _mm512_cvtph_ps(_mm256_loadu_si256(p.cast()))
}

/// `NP` pairs against `NB` blocks: scores, online softmax, V accumulation.
///
/// # Safety
/// As [`update`], with `pairs.len() >= NP` and `span.len() >= NB`.
#[target_feature(enable = "avx512f,avx512vl,f16c,fma")]
#[inline]
#[allow(clippy::needless_range_loop)] // indices address registers of several arrays at once
unsafe fn update_n<K: KSide, V: VSide, const NP: usize, const NB: usize>(
    span: &[Blk],
    hd: usize,
    scale: f32,
    pairs: &[Pair],
) {
    // Scores: one accumulator per pair and block (NP · NB independent chains).
    let mut s = [[_mm512_setzero_ps(); NB]; NP];
    if !K::SCALED {
        // 16-bit keys: no scales, one loop over the dimensions.
        let none = _mm512_setzero_ps();
        for d2 in 0..hd / 2 {
            let mut k0 = [_mm512_setzero_ps(); NB];
            let mut k1 = [_mm512_setzero_ps(); NB];
            for b in 0..NB {
                (k0[b], k1[b]) = K::rows(span[b].k, d2, none);
            }
            for i in 0..NP {
                let q0 = _mm512_set1_ps(*pairs[i].q.add(2 * d2));
                let q1 = _mm512_set1_ps(*pairs[i].q.add(2 * d2 + 1));
                for b in 0..NB {
                    s[i][b] = _mm512_fmadd_ps(k1[b], q1, _mm512_fmadd_ps(k0[b], q0, s[i][b]));
                }
            }
        }
    }
    if K::INT && !pairs[0].qi.is_null() {
        // SAFETY: the AVX-512 level has BW and VNNI; every pair of a call
        // has its quantized query when the first has; blocks as above.
        scores_q4::<NP, NB>(span, hd, pairs, &mut s);
    }
    let float_groups = if K::SCALED && pairs[0].qi.is_null() { hd / (2 * K::GROUP2) } else { 0 };
    for g in 0..float_groups {
        let mut sc = [_mm512_setzero_ps(); NB];
        for b in 0..NB {
            sc[b] = K::scales(span[b].k, g);
        }
        for d2 in g * K::GROUP2..(g + 1) * K::GROUP2 {
            let mut k0 = [_mm512_setzero_ps(); NB];
            let mut k1 = [_mm512_setzero_ps(); NB];
            for b in 0..NB {
                (k0[b], k1[b]) = K::rows(span[b].k, d2, sc[b]);
            }
            for i in 0..NP {
                let q0 = _mm512_set1_ps(*pairs[i].q.add(2 * d2));
                let q1 = _mm512_set1_ps(*pairs[i].q.add(2 * d2 + 1));
                for b in 0..NB {
                    s[i][b] = _mm512_fmadd_ps(k1[b], q1, _mm512_fmadd_ps(k0[b], q0, s[i][b]));
                }
            }
        }
    }
    // Online softmax per pair, once for the span.
    let mut pj = [[[0f32; BS]; NB]; NP];
    let mut alpha = [1f32; NP];
    let mut rescale = [false; NP];
    let neg = _mm512_set1_ps(f32::NEG_INFINITY);
    for i in 0..NP {
        let Pair { st, masks, .. } = pairs[i];
        let mut sc = [neg; NB];
        let mut mx = neg;
        for b in 0..NB {
            sc[b] = _mm512_mask_mov_ps(neg, masks[b], _mm512_mul_ps(s[i][b], _mm512_set1_ps(scale)));
            mx = _mm512_max_ps(mx, sc[b]);
        }
        let m_old = *st;
        let m_new = m_old.max(_mm512_reduce_max_ps(mx));
        let mv = _mm512_set1_ps(m_new);
        let mut sum = _mm512_setzero_ps();
        for b in 0..NB {
            let p = _mm512_maskz_mov_ps(masks[b], exp512(_mm512_sub_ps(sc[b], mv)));
            sum = _mm512_add_ps(sum, p);
            _mm512_storeu_ps(pj[i][b].as_mut_ptr(), p);
        }
        // The running max rarely changes after the first spans: rescale
        // only when it does.
        rescale[i] = m_new != m_old;
        alpha[i] = if !rescale[i] {
            1.0
        } else if m_old == f32::NEG_INFINITY {
            0.0
        } else {
            _mm512_cvtss_f32(exp512(_mm512_set1_ps(m_old - m_new)))
        };
        *st = m_new;
        *st.add(1) = *st.add(1) * alpha[i] + _mm512_reduce_add_ps(sum);
    }
    // acc = acc · alpha + Σ_j p_j · V_j, 64 dimensions at a time.
    let mut c = 0;
    while c + 64 <= hd {
        pv::<V, NP, NB, 4>(span, hd, c, pairs, &pj, &alpha, &rescale);
        c += 64;
    }
    while c < hd {
        pv::<V, NP, NB, 1>(span, hd, c, pairs, &pj, &alpha, &rescale);
        c += 16;
    }
}

/// The scores of `NP` pairs against `NB` blocks of `q4_0` keys from the
/// pairs' quantized queries, added to `s`: per 32-dimension group, the
/// keys' bytes four at a time transposed to one key per 32-bit lane, their
/// low and high nibbles `vpdpbusd` against each digit's packed bytes, the
/// integer sums less the zero point's `8 · Σq`, the digits combined and
/// scaled by the key's and the query's scales.
///
/// # Safety
/// As [`update`], every pair's `qi` non-null; the CPU has AVX-512 BW and VNNI.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")]
#[allow(clippy::needless_range_loop)] // indices address registers of several arrays at once
unsafe fn scores_q4<const NP: usize, const NB: usize>(
    span: &[Blk],
    hd: usize,
    pairs: &[Pair],
    s: &mut [[__m512; NB]; NP],
) {
    let gl = k_group_len(KvType::Q4_0, BS);
    // 64 bytes = 4 rows (byte e holds dimensions 2e, 2e + 1) of 16 keys:
    // dword r·4 + L (row r, keys 4L..4L+3) to lane L's position r, then
    // within each lane byte r·4 + k to k·4 + r.
    let perm = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    let shuf = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
    let transpose =
        |p: *const u8| _mm512_shuffle_epi8(_mm512_permutexvar_epi32(perm, _mm512_loadu_si512(p.cast())), shuf);
    let nib = _mm512_set1_epi8(0x0F);
    let qi: [&QInt; NP] = std::array::from_fn(|i| &*pairs[i].qi);
    for b in 0..NB {
        for g in 0..hd / QK {
            let grp = span[b].k.add(g * gl);
            let dk = load16(grp);
            let vals = grp.add(BS).cast::<u8>();
            // Per pair, the sums of the high and the low digit.
            let mut acc = [[_mm512_setzero_si512(); 2]; NP];
            let quad = |i: usize, digit: usize, j: usize| _mm512_set1_epi32(qi[i].quads[digit][g * 8 + j]);
            for j in 0..4 {
                let t = transpose(vals.add(64 * j));
                let lo = _mm512_and_si512(t, nib);
                let hi = _mm512_and_si512(_mm512_srli_epi16::<4>(t), nib);
                for i in 0..NP {
                    for digit in 0..2 {
                        let a = _mm512_dpbusd_epi32(acc[i][digit], lo, quad(i, digit, 2 * j));
                        acc[i][digit] = _mm512_dpbusd_epi32(a, hi, quad(i, digit, 2 * j + 1));
                    }
                }
            }
            for i in 0..NP {
                let n = |digit: usize| {
                    _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[i][digit], _mm512_set1_epi32(qi[i].corr[digit][g])))
                };
                let v = _mm512_fmadd_ps(n(1), _mm512_set1_ps(1.0 / 254.0), n(0));
                let sc = _mm512_mul_ps(dk, _mm512_set1_ps(qi[i].d[g]));
                s[i][b] = _mm512_fmadd_ps(v, sc, s[i][b]);
            }
        }
    }
}

/// Dimensions `c..c + 16 W` of the V accumulation for `NP` pairs over the
/// span's `NB` blocks, the accumulators kept in registers throughout.
///
/// # Safety
/// As [`update`]; `c + 16 W <= hd`; called only from [`update_n`], which
/// enables the CPU features (always inlined there: with one instance per
/// cache format, LLVM no longer inlined it on its own and the accumulators
/// went through memory, 10–15% slower).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // indices address registers of several arrays at once
unsafe fn pv<V: VSide, const NP: usize, const NB: usize, const W: usize>(
    span: &[Blk],
    hd: usize,
    c: usize,
    pairs: &[Pair],
    pj: &[[[f32; BS]; NB]; NP],
    alpha: &[f32; NP],
    rescale: &[bool; NP],
) {
    let mut a = [[_mm512_setzero_ps(); W]; NP];
    for i in 0..NP {
        let acc = pairs[i].st.add(2 + c);
        for (q, a) in a[i].iter_mut().enumerate() {
            *a = _mm512_loadu_ps(acc.add(16 * q));
            if rescale[i] {
                *a = _mm512_mul_ps(*a, _mm512_set1_ps(alpha[i]));
            }
        }
    }
    for b in 0..NB {
        for j in (0..BS).step_by(2) {
            for q in 0..W {
                let (v0, v1) = V::rows(span[b].v, hd, j, c + 16 * q);
                for i in 0..NP {
                    let acc = _mm512_fmadd_ps(v0, _mm512_set1_ps(pj[i][b][j]), a[i][q]);
                    a[i][q] = _mm512_fmadd_ps(v1, _mm512_set1_ps(pj[i][b][j + 1]), acc);
                }
            }
        }
    }
    for i in 0..NP {
        let acc = pairs[i].st.add(2 + c);
        for (q, a) in a[i].iter().enumerate() {
            _mm512_storeu_ps(acc.add(16 * q), *a);
        }
    }
}
