//! The tile kernel with AVX-512 BF16 dot products, for blocks of 16 tokens
//! of a [`super::KvFormat::Bf16Pairs`] cache.
//!
//! `vdpbf16ps` multiplies pairs of bf16 values and adds both products to
//! one f32 lane: twice the multiply-adds of an f32 FMA per instruction. The
//! cache holds its values in exactly those pairs, so blocks are read as
//! they are:
//! - scores (lane = key): one vector holds 16 keys × a pair of dimensions,
//!   and the query's pair of dimensions is a 32-bit broadcast;
//! - output (lane = dimension): one vector holds 16 dimensions × a pair of
//!   keys, and the pair of softmax weights is a 32-bit broadcast.
//!
//! Queries and softmax weights are rounded to bf16 too; scores, the online
//! softmax and all sums stay f32, as in GPU flash attention. Attention
//! outputs move by ~0.5% relative against the f32 kernel.
//!
//! Safety: callers check the CPU features, the format, `block_size == 16`
//! and `head_dim % 32 == 0` ([`super::AttnPath::supports`]).

use std::arch::x86_64::*;
use std::ops::Range;

use super::tile::{pair_stride, Tile};
use super::Call;
use crate::ops::vmath::exp512;

const BS: usize = 16;
/// Blocks per online-softmax update.
const SPAN: usize = 4;
/// Pairs processed together.
const MAX_NP: usize = 4;

/// Per-thread bf16 queries of a tile (grow-only).
#[derive(Default)]
pub(crate) struct Bf16Scratch {
    /// Per (row, head) pair of the tile: `head_dim / 2` dimension pairs.
    q: Vec<u32>,
}

/// One (row, head) pair of the current span: its valid keys per block.
#[derive(Clone, Copy)]
struct Pair {
    q: *const u32,
    st: *mut f32,
    masks: [__mmask16; SPAN],
}

/// Runs `tile` over key positions `range`.
///
/// # Safety
/// As the module's.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,f16c,fma")]
pub(super) unsafe fn run(
    call: &Call<'_>,
    tile: &Tile<'_>,
    range: Range<usize>,
    state: &mut [f32],
    buf: &mut Bf16Scratch,
) {
    let hd = call.layout.head_dim;
    let group = call.group();
    let stride = pair_stride(hd);
    let len = BS * hd;
    assert!(state.len() >= tile.nrows * group * stride);
    assert!(hd.is_multiple_of(32) && call.layout.block_size == BS);
    assert!(call.layout.format == super::KvFormat::Bf16Pairs);
    let npairs = tile.nrows * group;
    if buf.q.len() < npairs * hd / 2 {
        buf.q.resize(npairs * hd / 2, 0);
    }
    // Queries as bf16: consecutive elements are the dimension pairs.
    for r in 0..tile.nrows {
        for g in 0..group {
            let q = tile.query(call, r, g);
            let dst = &mut buf.q[(r * group + g) * hd / 2..][..hd / 2];
            for (c, out) in q.chunks_exact(32).zip(dst.chunks_exact_mut(16)) {
                let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(
                    _mm512_loadu_ps(c.as_ptr().add(16)),
                    _mm512_loadu_ps(c.as_ptr()),
                ));
                _mm512_storeu_si512(out.as_mut_ptr().cast(), v);
            }
        }
    }
    let blocks = range.start / BS..range.end.div_ceil(BS);
    let mut batch = [Pair { q: std::ptr::null(), st: std::ptr::null_mut(), masks: [0; SPAN] }; MAX_NP];
    let none = Blk { k: std::ptr::null(), v: std::ptr::null(), p0: 0 };
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
            let at = call.layout.head_offset(blk as usize, tile.kvh);
            if let (Some(kb), Some(vb)) = (call.k_cache.get(at..at + len), call.v_cache.get(at..at + len)) {
                span[nb] = Blk { k: kb.as_ptr().cast(), v: vb.as_ptr().cast(), p0: bi * BS };
                nb += 1;
            }
            bi += 1;
        }
        if nb == 0 {
            continue;
        }
        super::avx512::prefetch_span(call, tile, bi..(bi + SPAN).min(blocks.end));
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
                let pi = r * group + g;
                let st = state[pi * stride..][..stride].as_mut_ptr();
                batch[n] = Pair { q: buf.q[pi * hd / 2..].as_ptr(), st, masks };
                n += 1;
                if n == MAX_NP {
                    // SAFETY: blocks of `hd * 8` u32 each (checked above),
                    // query and state pointers of `hd / 2` u32 / `hd + 2` floats.
                    update(span, hd, call.scale, &batch[..n]);
                    n = 0;
                }
            }
        }
        if n > 0 {
            // SAFETY: as above.
            update(span, hd, call.scale, &batch[..n]);
        }
    }
}

/// One block of the current span: K and V pairs, first position.
#[derive(Clone, Copy)]
struct Blk {
    k: *const u32,
    v: *const u32,
    p0: usize,
}

/// Dispatches a batch of pairs and a span of blocks.
///
/// # Safety
/// Each block's `k` and `v` point to `hd * 8` readable u32; each pair's `q`
/// to `hd / 2` u32 and `st` to `hd + 2` writable floats, distinct per pair.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,fma")]
unsafe fn update(span: &[Blk], hd: usize, scale: f32, pairs: &[Pair]) {
    match span.len() {
        1 => update_nb::<1>(span, hd, scale, pairs),
        2 => update_nb::<2>(span, hd, scale, pairs),
        3 => update_nb::<3>(span, hd, scale, pairs),
        _ => update_nb::<4>(span, hd, scale, pairs),
    }
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,fma")]
unsafe fn update_nb<const NB: usize>(span: &[Blk], hd: usize, scale: f32, pairs: &[Pair]) {
    match pairs.len() {
        1 => update_n::<1, NB>(span, hd, scale, pairs),
        2 => update_n::<2, NB>(span, hd, scale, pairs),
        3 => update_n::<3, NB>(span, hd, scale, pairs),
        _ => update_n::<4, NB>(span, hd, scale, pairs),
    }
}

#[target_feature(enable = "avx512f,avx512bf16")]
#[inline]
fn dp(acc: __m512, a: __m512i, b: __m512i) -> __m512 {
    // SAFETY: register reinterpretations of equal sizes.
    unsafe {
        _mm512_dpbf16_ps(acc, std::mem::transmute::<__m512i, __m512bh>(a), std::mem::transmute::<__m512i, __m512bh>(b))
    }
}

/// `NP` pairs against `NB` blocks: scores, online softmax, V accumulation.
///
/// # Safety
/// As [`update`], with `pairs.len() >= NP`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,fma")]
#[inline]
#[allow(clippy::needless_range_loop)] // indices address registers of several arrays at once
unsafe fn update_n<const NP: usize, const NB: usize>(span: &[Blk], hd: usize, scale: f32, pairs: &[Pair]) {
    // Scores: one accumulator per pair and block.
    let mut s = [[_mm512_setzero_ps(); NB]; NP];
    for i2 in 0..hd / 2 {
        let mut kv = [_mm512_setzero_si512(); NB];
        for b in 0..NB {
            kv[b] = _mm512_loadu_si512(span[b].k.add(i2 * 16).cast());
        }
        for i in 0..NP {
            let q = _mm512_set1_epi32(*pairs[i].q.add(i2) as i32);
            for b in 0..NB {
                s[i][b] = dp(s[i][b], kv[b], q);
            }
        }
    }
    // Online softmax per pair, once for the span; weights rounded to bf16
    // pairs for the output products.
    let mut pw = [[0u32; 8 * SPAN]; NP];
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
        let mut p = [_mm512_setzero_ps(); SPAN];
        for b in 0..NB {
            p[b] = _mm512_maskz_mov_ps(masks[b], exp512(_mm512_sub_ps(sc[b], mv)));
            sum = _mm512_add_ps(sum, p[b]);
        }
        // Blocks b and b + 1: 16 weight pairs (8 per block), in key order.
        for b in (0..NB).step_by(2) {
            let pair: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(p[b + 1], p[b]));
            _mm512_storeu_si512(pw[i].as_mut_ptr().add(8 * b).cast(), pair);
        }
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
        pv::<NP, NB, 4>(span, hd, c, pairs, &pw, &alpha, &rescale);
        c += 64;
    }
    while c < hd {
        pv::<NP, NB, 1>(span, hd, c, pairs, &pw, &alpha, &rescale);
        c += 16;
    }
}

/// Dimensions `c..c + 16 W` of the V accumulation for `NP` pairs over the
/// span's `NB` blocks, the accumulators kept in registers.
///
/// # Safety
/// As [`update`]; `c + 16 W <= hd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512bf16,fma")]
#[inline]
#[allow(clippy::needless_range_loop)]
unsafe fn pv<const NP: usize, const NB: usize, const W: usize>(
    span: &[Blk],
    hd: usize,
    c: usize,
    pairs: &[Pair],
    pw: &[[u32; 8 * SPAN]; NP],
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
        for j in 0..BS / 2 {
            let row = span[b].v.add(j * hd + c);
            for q in 0..W {
                let v = _mm512_loadu_si512(row.add(16 * q).cast());
                for i in 0..NP {
                    a[i][q] = dp(a[i][q], v, _mm512_set1_epi32(pw[i][8 * b + j] as i32));
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
