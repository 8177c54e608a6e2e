//! Causal attention that reads K/V in place from the paged cache.
//!
//! **Cache layout.** Per layer one K pool and one V pool of 16-bit values
//! (stored as `u16` bits), in blocks of `block_size` tokens:
//! `[num_blocks][n_kv_heads][..]`. Within one (block, head), by
//! [`KvFormat`]:
//! - `F16`: K is stored *transposed*, `[head_dim][block_size]`: the scores
//!   of one query against a whole block are `head_dim` vector multiply-adds
//!   with no horizontal sums (a block of 16 keys is one 16-lane vector); V
//!   is `[block_size][head_dim]`.
//! - `Bf16Pairs`: bf16, laid out for the pairwise dot products of
//!   `vdpbf16ps` so the bf16 kernel reads the cache as it is: K as
//!   `[head_dim / 2][block_size][2]` (a key's dimensions `2i` and `2i + 1`
//!   side by side), V as `[block_size / 2][head_dim][2]` (keys `2j` and
//!   `2j + 1` of one dimension side by side).
//!
//! - `Quant { k, v }`: each side `f16` (as above) or quantized, GGML's
//!   `q8_0`/`q4_0` 32-value blocks laid out as `quant` describes (K by
//!   dimension, V by key), read in place and widened per block in registers.
//!
//! 16-bit values halve the bytes every decode step reads compared with `f32`
//! (at long contexts the cache is read as much as the weights). The f32
//! kernels widen values exactly as they read them (either format); on
//! [`AttnPath::Avx512Bf16`] prompt-sized sequences run the bf16 dot
//! products straight on the `Bf16Pairs` cache with f32 sums
//! (`avx512_bf16`).
//!
//! **Work split.** The unit of work is a *tile*: up to [`TILE_ROWS`] query
//! rows of one sequence against one KV head (all the query heads of its
//! group), over a range of key positions. A tile converts each K/V block to
//! `f32` once and uses it for every (row, head) pair of the tile, keeping a
//! running max and sum per pair (online softmax), so nothing of size
//! O(context) is materialized. Tiles are taken from a shared counter by the
//! pool's threads (longest first), so uneven contexts balance. When there
//! are too few tiles to occupy the threads (decoding one sequence: one tile
//! per KV head), each tile's context is split into ranges whose partial
//! results are merged afterwards (split-K, "flash decoding").
//!
//! Nothing is gathered or concatenated: each step costs O(context) reads and
//! no copies; scratch buffers are per-thread and only grow.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_bf16;
#[cfg(target_arch = "x86_64")]
mod avx512_quant;
mod quant;
mod tile;

#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::pool::ThreadPool;
use crate::quant::{check_len, KernelError};
pub use kiln_backend::KvType;
use tile::{Tile, TileScratch};

/// Query rows per tile.
pub const TILE_ROWS: usize = 4;
/// Fewest KV blocks per context range when a tile's context is split.
const MIN_SPLIT_BLOCKS: usize = 4;

/// How a cache stores its values (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvFormat {
    /// IEEE half precision; K transposed per block.
    F16,
    /// bf16 in the pairs of the bf16 dot products; block size and head
    /// dimension even.
    Bf16Pairs,
    /// K and V each of its own type, at least one quantized (an `f16` side
    /// as in [`KvFormat::F16`]); head dimension a multiple of 32.
    Quant {
        /// How K is stored.
        k: KvType,
        /// How V is stored.
        v: KvType,
    },
}

impl KvFormat {
    /// The format of a cache with these K and V types (`F16` when neither
    /// is quantized).
    pub fn of(k: KvType, v: KvType) -> Self {
        if k == KvType::F16 && v == KvType::F16 {
            Self::F16
        } else {
            Self::Quant { k, v }
        }
    }
    /// How K is stored (`F16` for either 16-bit format).
    pub fn k_type(self) -> KvType {
        match self {
            Self::Quant { k, .. } => k,
            _ => KvType::F16,
        }
    }
    /// How V is stored (`F16` for either 16-bit format).
    pub fn v_type(self) -> KvType {
        match self {
            Self::Quant { v, .. } => v,
            _ => KvType::F16,
        }
    }
}

/// Shape of one layer's K (or V) cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLayout {
    /// Tokens per block.
    pub block_size: usize,
    /// Key/value heads.
    pub n_kv_heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// How values are stored.
    pub format: KvFormat,
}

impl KvLayout {
    /// `u16` elements of one block (every head) of the larger side (for a
    /// 16-bit cache, either side; [`KvLayout::k_block_len`] and
    /// [`KvLayout::v_block_len`] give each side's).
    pub fn block_len(&self) -> usize {
        self.k_block_len().max(self.v_block_len())
    }
    /// `u16` elements of one block (every head) of K.
    pub fn k_block_len(&self) -> usize {
        self.n_kv_heads * self.k_head_len()
    }
    /// `u16` elements of one block (every head) of V.
    pub fn v_block_len(&self) -> usize {
        self.n_kv_heads * self.v_head_len()
    }
    /// `u16` elements of one (block, head) of K.
    #[inline]
    pub fn k_head_len(&self) -> usize {
        quant::head_len(self.format.k_type(), self.block_size, self.head_dim)
    }
    /// `u16` elements of one (block, head) of V.
    #[inline]
    pub fn v_head_len(&self) -> usize {
        quant::head_len(self.format.v_type(), self.block_size, self.head_dim)
    }

    /// First element of (block, head) of a 16-bit cache.
    #[inline]
    pub(crate) fn head_offset(&self, block: usize, head: usize) -> usize {
        (block * self.n_kv_heads + head) * self.block_size * self.head_dim
    }

    /// Whether the format can hold this shape.
    pub fn is_valid(&self) -> bool {
        match self.format {
            KvFormat::F16 => true,
            KvFormat::Bf16Pairs => self.block_size.is_multiple_of(2) && self.head_dim.is_multiple_of(2),
            KvFormat::Quant { k, v } => k.fits(self.head_dim) && v.fits(self.head_dim),
        }
    }

    /// Element of key `t`, dimension `d` within one (block, head) of a
    /// 16-bit K.
    #[inline]
    pub(crate) fn k_at(&self, t: usize, d: usize) -> usize {
        match self.format {
            KvFormat::Bf16Pairs => ((d / 2) * self.block_size + t) * 2 + d % 2,
            _ => d * self.block_size + t,
        }
    }

    /// Element of key `t`, dimension `d` within one (block, head) of a
    /// 16-bit V.
    #[inline]
    pub(crate) fn v_at(&self, t: usize, d: usize) -> usize {
        match self.format {
            KvFormat::Bf16Pairs => ((t / 2) * self.head_dim + d) * 2 + t % 2,
            _ => t * self.head_dim + d,
        }
    }

    /// The value stored as `bits` in a 16-bit side.
    #[inline]
    pub(crate) fn value(&self, bits: u16) -> f32 {
        match self.format {
            KvFormat::Bf16Pairs => f32::from_bits(u32::from(bits) << 16),
            _ => half::f16::from_bits(bits).to_f32(),
        }
    }
}

/// One sequence's part of a batched attention call.
#[derive(Debug, Clone, Copy)]
pub struct AttnSeq<'a> {
    /// First row of this sequence's queries in `q` / `out`.
    pub q_start: usize,
    /// Number of query rows (1 for decode, the chunk length for prefill).
    pub n_q: usize,
    /// Position of the first query row; query `i` attends to positions `0..=pos0 + i`.
    pub pos0: usize,
    /// The sequence's blocks; must cover position `pos0 + n_q - 1`.
    pub block_table: &'a [u32],
    /// Split its context as if it were alone in the call: its result then
    /// does not depend on the rest of the batch (a speculative verification
    /// row equals, bit for bit, the decode step it stands for).
    pub solo: bool,
}

/// `f32` → `f16` bits of a row, round to nearest even (`dst` as long as `src`).
fn to_f16_row(src: &[f32], dst: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    let vector = if crate::ops::vmath::has_avx512() {
        Some(to_f16_avx512 as RowKernel)
    } else {
        crate::ops::vmath::has_avx2().then_some(to_f16_avx2 as RowKernel)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let vector = None;
    round_row(src, dst, vector, |x| half::f16::from_f32(x).to_bits());
}

/// A vector kernel of [`round_row`].
type RowKernel = unsafe fn(&[f32], &mut [u16]);

/// Rounds a row with `vector` (whole 16-value vectors; the CPU has what it
/// needs) and `scalar` for the rest, or `scalar` throughout.
fn round_row(src: &[f32], dst: &mut [u16], vector: Option<RowKernel>, scalar: fn(f32) -> u16) {
    let mut done = 0;
    if let Some(v) = vector.filter(|_| src.len() == dst.len()) {
        // SAFETY: callers pass `vector` only where the CPU has its features;
        // it converts whole vectors of `src` into `dst` of the same length.
        unsafe { v(src, dst) };
        done = src.len() / 16 * 16;
    }
    for (d, &s) in dst[done..].iter_mut().zip(&src[done..]) {
        *d = scalar(s);
    }
}

/// The whole 16-value vectors of [`to_f16_row`].
///
/// # Safety
/// The CPU has AVX-512 F; `dst.len() >= src.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn to_f16_avx512(src: &[f32], dst: &mut [u16]) {
    use std::arch::x86_64::*;
    for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(16)) {
        let h = _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(_mm512_loadu_ps(s.as_ptr()));
        _mm256_storeu_si256(d.as_mut_ptr().cast(), h);
    }
}

/// The whole 16-value vectors of [`to_f16_row`] with F16C.
///
/// # Safety
/// The CPU has AVX2 and F16C; `dst.len() >= src.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,f16c")]
unsafe fn to_f16_avx2(src: &[f32], dst: &mut [u16]) {
    use std::arch::x86_64::*;
    for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(16)) {
        let round = |p: *const f32| _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(p));
        let h = _mm256_set_m128i(round(s.as_ptr().add(8)), round(s.as_ptr()));
        _mm256_storeu_si256(d.as_mut_ptr().cast(), h);
    }
}

/// Writes K and V rows (`slots.len()` rows of `n_kv_heads × head_dim`) into
/// the cache at flat slots `block * block_size + offset`, in the layout's
/// format (rounded to nearest even). Slots
/// outside the cache are ignored (callers validate block tables first).
/// Prefill-sized writes are split over the pool by (K or V, head), so
/// threads never touch the same elements whatever the slots.
pub fn write_kv(
    pool: &ThreadPool,
    layout: KvLayout,
    k_cache: &mut [u16],
    v_cache: &mut [u16],
    slots: &[u32],
    k: &[f32],
    v: &[f32],
) {
    if !layout.is_valid() {
        return;
    }
    let units = 2 * layout.n_kv_heads;
    if slots.len() < crate::ops::PAR_MIN_ROWS || pool.n_threads() == 1 {
        for u in 0..units {
            write_unit(layout, k_cache, v_cache, slots, k, v, u);
        }
        return;
    }
    let (kp, vp) = (SendPtr16(k_cache.as_mut_ptr()), SendPtr16(v_cache.as_mut_ptr()));
    let (kl, vl) = (k_cache.len(), v_cache.len());
    pool.run(&|ith, nth| {
        for u in crate::pool::split_range(units, ith, nth) {
            // SAFETY: unit `u` writes only head `u / 2` of the K (even) or V
            // (odd) cache, and units are split between threads, so no two
            // threads write the same element; the caches outlive the run.
            let (kc, vc) =
                unsafe { (std::slice::from_raw_parts_mut(kp.get(), kl), std::slice::from_raw_parts_mut(vp.get(), vl)) };
            write_unit(layout, kc, vc, slots, k, v, u);
        }
    });
}

/// Writes unit `u` of [`write_kv`]: head `u / 2` of K (`u` even) or V (odd).
fn write_unit(
    layout: KvLayout,
    k_cache: &mut [u16],
    v_cache: &mut [u16],
    slots: &[u32],
    k: &[f32],
    v: &[f32],
    u: usize,
) {
    let (hd, bs) = (layout.head_dim, layout.block_size);
    let row = layout.n_kv_heads * hd;
    let h = u / 2;
    let is_k = u.is_multiple_of(2);
    let (src_all, cache) = if is_k { (k, k_cache) } else { (v, v_cache) };
    let (ty, len) = if is_k {
        (layout.format.k_type(), layout.k_head_len())
    } else {
        (layout.format.v_type(), layout.v_head_len())
    };
    // One row, converted, before it is spread over the block.
    let mut row16 = [0u16; 256];
    // A row to rotate before it is quantized.
    let mut rot = Vec::new();
    for (t, &slot) in slots.iter().enumerate() {
        let (block, off) = (slot as usize / bs, slot as usize % bs);
        let base = (block * layout.n_kv_heads + h) * len;
        let src = t * row + h * hd;
        let (Some(xs), Some(dst)) = (src_all.get(src..src + hd), cache.get_mut(base..base + len)) else { continue };
        if ty != KvType::F16 {
            rot.clear();
            rot.extend_from_slice(xs);
            quant::rotate_head(&mut rot);
            if is_k {
                quant::write_k(ty, bs, dst, off, &rot);
            } else {
                quant::write_v(ty, dst, off, &rot);
            }
            continue;
        }
        match layout.format {
            // V rows of `f16` are contiguous: convert in place.
            KvFormat::F16 | KvFormat::Quant { .. } if !is_k => to_f16_row(xs, &mut dst[off * hd..(off + 1) * hd]),
            // A bf16 V row fills one half of every 32-bit pair.
            #[cfg(target_arch = "x86_64")]
            KvFormat::Bf16Pairs if !is_k && hd.is_multiple_of(16) && avx512_bf16_supported() => {
                // SAFETY: AVX-512 F/BW/BF16 checked; `dst` holds the whole
                // (block, head), row `off` of it ends inside.
                unsafe { write_v_pairs_avx512(xs, dst, off) }
            }
            format => {
                let bits = &mut row16[..hd.min(256)];
                if hd <= 256 {
                    match format {
                        KvFormat::Bf16Pairs => to_bf16_row(xs, bits),
                        _ => to_f16_row(xs, bits),
                    }
                } else {
                    // Heads wider than the buffer: value by value.
                    for (d, &x) in xs.iter().enumerate() {
                        let at = if is_k { layout.k_at(off, d) } else { layout.v_at(off, d) };
                        dst[at] = match format {
                            KvFormat::Bf16Pairs => half::bf16::from_f32(x).to_bits(),
                            _ => half::f16::from_f32(x).to_bits(),
                        };
                    }
                    continue;
                }
                for (d, &x) in bits.iter().enumerate() {
                    let at = if is_k { layout.k_at(off, d) } else { layout.v_at(off, d) };
                    dst[at] = x;
                }
            }
        }
    }
}

/// `f32` → bf16 bits of a row, round to nearest even (`dst` as long as `src`).
fn to_bf16_row(src: &[f32], dst: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    let vector = avx512_bf16_supported().then_some(to_bf16_avx512 as RowKernel);
    #[cfg(not(target_arch = "x86_64"))]
    let vector = None;
    round_row(src, dst, vector, |x| half::bf16::from_f32(x).to_bits());
}

/// The whole 16-value vectors of [`to_bf16_row`].
///
/// # Safety
/// The CPU has AVX-512 F and BF16; `dst.len() >= src.len()`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn to_bf16_avx512(src: &[f32], dst: &mut [u16]) {
    use std::arch::x86_64::*;
    for (s, d) in src.chunks_exact(16).zip(dst.chunks_exact_mut(16)) {
        let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(_mm512_loadu_ps(s.as_ptr())));
        _mm256_storeu_si256(d.as_mut_ptr().cast(), h);
    }
}

/// Writes V row `off` of a `Bf16Pairs` (block, head) `dst`: each value into
/// its half (low for even keys, high for odd) of its dimension's pair, 16
/// dimensions per masked store, the partner key's half untouched.
///
/// # Safety
/// The CPU has AVX-512 F/BW/BF16; `src.len() % 16 == 0` and `dst` holds
/// `(off / 2 + 1) * src.len() * 2` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn write_v_pairs_avx512(src: &[f32], dst: &mut [u16], off: usize) {
    use std::arch::x86_64::*;
    let hd = src.len();
    let (mask, shift) = if off.is_multiple_of(2) { (0x5555_5555u32, 0) } else { (0xAAAA_AAAAu32, 16) };
    let out = dst.as_mut_ptr().add((off / 2) * hd * 2);
    for (c, s) in src.chunks_exact(16).enumerate() {
        let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(_mm512_loadu_ps(s.as_ptr())));
        let w = _mm512_sll_epi32(_mm512_cvtepu16_epi32(h), _mm_cvtsi32_si128(shift));
        _mm512_mask_storeu_epi16(out.add(c * 32).cast(), mask, w);
    }
}

#[derive(Clone, Copy)]
pub(crate) struct SendPtr16(pub(crate) *mut u16);
// SAFETY: used only to hand disjoint elements to pool threads (`write_kv`,
// `kv_shift::shift_kv`).
unsafe impl Send for SendPtr16 {}
unsafe impl Sync for SendPtr16 {}
impl SendPtr16 {
    pub(crate) fn get(self) -> *mut u16 {
        self.0
    }
}

/// Which kernel runs the tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnPath {
    /// Portable Rust, any block size and head dimension, either format.
    Portable,
    /// AVX2 + F16C + FMA on an `F16` cache; block size 16, head dimension a
    /// multiple of 8.
    Avx2,
    /// AVX-512 F + F16C + FMA, any format (quantized sides widened per
    /// block in registers); block size 16, head dimension a multiple of 16.
    Avx512,
    /// AVX-512 BF16 dot products on a [`KvFormat::Bf16Pairs`] cache for
    /// prompt-sized sequences (queries and softmax weights rounded to bf16
    /// too, sums in f32: ~0.5% relative error in the outputs); decode rows
    /// take [`AttnPath::Avx512`] on the same cache. Block size 16, head
    /// dimension a multiple of 32.
    Avx512Bf16,
}

impl AttnPath {
    /// The fastest path for `layout` on this CPU.
    pub fn detect(layout: KvLayout) -> Self {
        if Self::Avx512.supports(layout) {
            Self::Avx512
        } else if Self::Avx2.supports(layout) {
            Self::Avx2
        } else {
            Self::Portable
        }
    }

    /// Whether this path can run `layout` on this CPU.
    pub fn supports(self, layout: KvLayout) -> bool {
        layout.is_valid()
            && match self {
                Self::Portable => true,
                Self::Avx2 => {
                    layout.format == KvFormat::F16
                        && layout.block_size == 16
                        && layout.head_dim.is_multiple_of(8)
                        && crate::ops::vmath::has_avx2()
                }
                Self::Avx512 => layout.block_size == 16 && layout.head_dim.is_multiple_of(16) && avx512_supported(),
                Self::Avx512Bf16 => {
                    layout.format == KvFormat::Bf16Pairs
                        && layout.block_size == 16
                        && layout.head_dim.is_multiple_of(32)
                        && avx512_bf16_supported()
                }
            }
    }
}

fn avx512_supported() -> bool {
    crate::ops::vmath::has_avx512()
}

fn avx512_bf16_supported() -> bool {
    crate::isa::has_avx512_bf16()
}

/// What an attention call adds to the causal mask (gpt-oss).
#[derive(Debug, Clone, Copy, Default)]
pub struct AttnMask<'a> {
    /// Each query attends to its last `window` positions only (itself
    /// included); 0: the whole context.
    pub window: usize,
    /// One logit per query head in the softmax denominator (a key of value
    /// zero that every query sees): `n_heads` values (another count is
    /// refused), or `None`.
    pub sinks: Option<&'a [f32]>,
}

/// The shared arguments of one attention call.
#[derive(Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) layout: KvLayout,
    pub(crate) k_cache: &'a [u16],
    pub(crate) v_cache: &'a [u16],
    pub(crate) q: &'a [f32],
    pub(crate) n_heads: usize,
    pub(crate) scale: f32,
    /// `u16`s of one (block, head) of K and of V (computed once per call).
    pub(crate) k_len: usize,
    pub(crate) v_len: usize,
    pub(crate) mask: AttnMask<'a>,
}

impl Call<'_> {
    pub(crate) fn group(&self) -> usize {
        self.n_heads / self.layout.n_kv_heads.max(1)
    }
    /// First elements of (block, head) in K and in V.
    #[inline]
    pub(crate) fn offsets(&self, block: usize, head: usize) -> (usize, usize) {
        let i = block * self.layout.n_kv_heads + head;
        (i * self.k_len, i * self.v_len)
    }
    /// K and V of (block, head), where the caches hold them.
    #[inline]
    pub(crate) fn head_blocks(&self, block: usize, head: usize) -> Option<(&[u16], &[u16])> {
        let (k, v) = self.offsets(block, head);
        Some((self.k_cache.get(k..k + self.k_len)?, self.v_cache.get(v..v + self.v_len)?))
    }
}

/// One unit of work: see the module docs.
#[derive(Debug, Clone, Copy)]
struct Item {
    seq: u32,
    kvh: u32,
    /// First query row of the tile, within the sequence.
    row0: u32,
    nrows: u32,
    /// Key positions `[ctx_lo, ctx_hi)`.
    ctx_lo: u32,
    ctx_hi: u32,
    /// Partial-result slot, or `NO_PART` when the tile covers its whole
    /// context and writes `out` directly.
    part: u32,
}

const NO_PART: u32 = u32::MAX;

/// Per-call plan, kept on the calling thread (grow-only).
#[derive(Default)]
struct Plan {
    items: Vec<Item>,
    /// Partial results: per slot, `TILE_ROWS * group` pairs of `[m, l, acc[hd]]`.
    parts: Vec<f32>,
    /// Split tiles to merge: (first part slot, number of parts, template item).
    merges: Vec<(u32, u32, Item)>,
}

/// Fewest query rows in a sequence for the bf16 kernel. Reading the bf16
/// pairs straight from the cache, it is the faster kernel at every size
/// (`attn-bench`, 1028 positions, SmolLM2's heads, 2 threads: 1 row 0.39–0.40
/// vs 0.43–0.46 ms per step, 2 rows 0.61–0.63 vs 0.73–0.77, 4 rows 0.82–0.88
/// vs 1.27–1.28); decode rows still take the f32 kernel, which keeps their
/// queries and softmax weights exact for a few hundredths of a millisecond.
const BF16_MIN_ROWS: usize = 2;

/// (first row, rows) of each tile of a sequence of `n_q` rows: [`TILE_ROWS`]
/// each, the last one what is left. Full tiles keep the kernels' batches of
/// four pairs full (even tiles of 3 and 4 rows measured slower: a tile of 3
/// rows × 3 heads leaves a batch of one pair).
fn tile_rows(n_q: usize) -> impl DoubleEndedIterator<Item = (usize, usize)> {
    (0..n_q.div_ceil(TILE_ROWS)).map(move |t| (t * TILE_ROWS, TILE_ROWS.min(n_q - t * TILE_ROWS)))
}

thread_local! {
    static PLAN: RefCell<Plan> = RefCell::new(Plan::default());
    static SCRATCH: RefCell<TileScratch> = RefCell::new(TileScratch::default());
    /// Queries rotated for a quantized K (`quant`'s rotation).
    static QROT: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Batched causal attention over the paged cache.
///
/// `q` and `out` hold rows of `n_heads × head_dim` floats; query head `h`
/// uses KV head `h / (n_heads / n_kv_heads)`. Query row `i` of a sequence
/// attends to its positions `0..=pos0 + i`. Blocks missing from a table or
/// outside the cache are skipped (callers validate tables first).
#[allow(clippy::too_many_arguments)]
pub fn paged_attention(
    pool: &ThreadPool,
    layout: KvLayout,
    k_cache: &[u16],
    v_cache: &[u16],
    seqs: &[AttnSeq<'_>],
    q: &[f32],
    n_heads: usize,
    scale: f32,
    out: &mut [f32],
) {
    let path = AttnPath::detect(layout);
    paged_attention_with(path, None, pool, layout, k_cache, v_cache, seqs, q, n_heads, scale, out);
}

/// [`paged_attention`] on an explicit path, optionally forcing every tile's
/// context to be split in `force_split` ranges (tests).
#[allow(clippy::too_many_arguments)]
pub fn paged_attention_with(
    path: AttnPath,
    force_split: Option<usize>,
    pool: &ThreadPool,
    layout: KvLayout,
    k_cache: &[u16],
    v_cache: &[u16],
    seqs: &[AttnSeq<'_>],
    q: &[f32],
    n_heads: usize,
    scale: f32,
    out: &mut [f32],
) {
    let mask = AttnMask::default();
    paged_attention_masked(path, force_split, pool, layout, k_cache, v_cache, seqs, q, n_heads, scale, mask, out)
        .unwrap_or_else(|_| unreachable!("no sinks: nothing to refuse"));
}

/// [`paged_attention_with`] with a sliding window and/or attention sinks
/// ([`AttnMask`]). The window narrows each row's columns in every kernel
/// (the same masks as the causal edge) and drops the blocks before it from
/// the tiles.
///
/// # Errors
/// [`KernelError::Length`] when the sinks are not one value per query head
/// (`n_heads`); nothing is computed then.
#[allow(clippy::too_many_arguments)]
pub fn paged_attention_masked(
    path: AttnPath,
    force_split: Option<usize>,
    pool: &ThreadPool,
    layout: KvLayout,
    k_cache: &[u16],
    v_cache: &[u16],
    seqs: &[AttnSeq<'_>],
    q: &[f32],
    n_heads: usize,
    scale: f32,
    mask: AttnMask<'_>,
    out: &mut [f32],
) -> Result<(), KernelError> {
    if let Some(sinks) = mask.sinks {
        check_len("attention sinks (one per query head)", n_heads, sinks.len())?;
    }
    let path = if path.supports(layout) { path } else { AttnPath::detect(layout) };
    if !path.supports(layout) {
        return Ok(());
    }
    let (rot_k, rot_v) = (layout.format.k_type() != KvType::F16, layout.format.v_type() != KvType::F16);
    if rot_k {
        // A quantized K holds rotated keys: rotate the queries alike.
        QROT.with(|cell| {
            let mut qr = cell.borrow_mut();
            qr.clear();
            qr.extend_from_slice(q);
            for head in qr.chunks_exact_mut(layout.head_dim.max(1)) {
                quant::rotate_head(head);
            }
            paged_attention_in(path, force_split, pool, layout, k_cache, v_cache, seqs, &qr, n_heads, scale, mask, out);
        });
    } else {
        paged_attention_in(path, force_split, pool, layout, k_cache, v_cache, seqs, q, n_heads, scale, mask, out);
    }
    if rot_v {
        // Outputs over a rotated V are rotated: rotate them back.
        let row_len = n_heads * layout.head_dim;
        for s in seqs {
            if let Some(rows) = out.get_mut(s.q_start * row_len..(s.q_start + s.n_q) * row_len) {
                for head in rows.chunks_exact_mut(layout.head_dim.max(1)) {
                    quant::rotate_head(head);
                }
            }
        }
    }
    Ok(())
}

/// [`paged_attention_with`] on the cache's values as stored (queries
/// rotated already where K is).
#[allow(clippy::too_many_arguments)]
fn paged_attention_in(
    path: AttnPath,
    force_split: Option<usize>,
    pool: &ThreadPool,
    layout: KvLayout,
    k_cache: &[u16],
    v_cache: &[u16],
    seqs: &[AttnSeq<'_>],
    q: &[f32],
    n_heads: usize,
    scale: f32,
    mask: AttnMask<'_>,
    out: &mut [f32],
) {
    let (k_len, v_len) = (layout.k_head_len(), layout.v_head_len());
    let call = Call { layout, k_cache, v_cache, q, n_heads, scale, k_len, v_len, mask };
    let row_len = n_heads * layout.head_dim;
    if layout.n_kv_heads == 0 || layout.block_size == 0 || !n_heads.is_multiple_of(layout.n_kv_heads) {
        return;
    }
    if q.len() < seqs.iter().map(|s| (s.q_start + s.n_q) * row_len).max().unwrap_or(0) || out.len() < q.len() {
        return;
    }
    let bf16 = |s: &AttnSeq<'_>| path == AttnPath::Avx512Bf16 && s.n_q >= BF16_MIN_ROWS;
    PLAN.with(|cell| {
        let mut plan = cell.borrow_mut();
        plan.build(&call, seqs, pool.n_threads(), force_split);
        let Plan { items, parts, merges } = &mut *plan;
        let next = AtomicUsize::new(0);
        let out_ptr = SendPtr(out.as_mut_ptr());
        let parts_ptr = SendPtr(parts.as_mut_ptr());
        let (out_len, parts_len) = (out.len(), parts.len());
        let items = &*items;
        pool.run(&|_, _| {
            SCRATCH.with(|s| {
                let mut scratch = s.borrow_mut();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let Some(seq) = seqs.get(item.seq as usize) else { continue };
                    let tile = Tile::new(&call, seq, item.kvh as usize, item.row0 as usize, item.nrows as usize);
                    let range = item.ctx_lo as usize..item.ctx_hi as usize;
                    let state = scratch.run(path, &call, &tile, range, bf16(seq));
                    if item.part == NO_PART {
                        // SAFETY: tiles write disjoint (row, head) outputs, and
                        // `out` outlives the pool run.
                        let out = unsafe { std::slice::from_raw_parts_mut(out_ptr.get(), out_len) };
                        tile.finish(&call, state, out);
                    } else {
                        let stride = tile::pair_stride(layout.head_dim) * TILE_ROWS * call.group();
                        let at = item.part as usize * stride;
                        // SAFETY: each part slot belongs to one item, and the
                        // buffer outlives the pool run.
                        let parts = unsafe { std::slice::from_raw_parts_mut(parts_ptr.get(), parts_len) };
                        let n = state.len().min(stride);
                        parts[at..at + n].copy_from_slice(&state[..n]);
                    }
                }
            });
        });
        for &(first, n, item) in merges.iter() {
            let Some(seq) = seqs.get(item.seq as usize) else { continue };
            let tile = Tile::new(&call, seq, item.kvh as usize, item.row0 as usize, item.nrows as usize);
            tile.merge(&call, parts, first as usize, n as usize, out);
        }
    });
}

impl Plan {
    /// Lists the tiles (longest context first) and decides the splits.
    fn build(&mut self, call: &Call<'_>, seqs: &[AttnSeq<'_>], nth: usize, force_split: Option<usize>) {
        self.items.clear();
        self.merges.clear();
        let bs = call.layout.block_size;
        let n_kv = call.layout.n_kv_heads;
        let n_tiles: usize = seqs.iter().map(|s| s.n_q.div_ceil(TILE_ROWS) * n_kv).sum();
        let want = if nth > 1 { 4 * nth } else { 1 };
        let mut n_parts = 0usize;
        for (si, s) in seqs.iter().enumerate() {
            // Later tiles attend to more keys: list them first.
            let n_tiles = if s.solo { s.n_q.div_ceil(TILE_ROWS) * n_kv } else { n_tiles };
            for (row0, nrows) in tile_rows(s.n_q).rev() {
                let ctx = s.pos0 + row0 + nrows;
                // A window leaves out the blocks before the first row's.
                let first = match call.mask.window {
                    0 => 0,
                    w => (s.pos0 + row0 + 1).saturating_sub(w) / bs,
                };
                let blocks = ctx.div_ceil(bs) - first;
                let split = match force_split {
                    Some(n) => n.clamp(1, blocks.max(1)),
                    None if n_tiles >= want => 1,
                    None => split_count(n_tiles, nth, want, blocks / MIN_SPLIT_BLOCKS),
                };
                for kvh in 0..n_kv {
                    let base = Item {
                        seq: si as u32,
                        kvh: kvh as u32,
                        row0: row0 as u32,
                        nrows: nrows as u32,
                        ctx_lo: (first * bs) as u32,
                        ctx_hi: ctx as u32,
                        part: NO_PART,
                    };
                    if split == 1 {
                        self.items.push(base);
                        continue;
                    }
                    self.merges.push((n_parts as u32, split as u32, base));
                    for p in 0..split {
                        let lo = (first + blocks * p / split) * bs;
                        let hi = ((first + blocks * (p + 1) / split) * bs).min(ctx);
                        self.items.push(Item { ctx_lo: lo as u32, ctx_hi: hi as u32, part: n_parts as u32, ..base });
                        n_parts += 1;
                    }
                }
            }
        }
        let stride = tile::pair_stride(call.layout.head_dim) * TILE_ROWS * call.group();
        let need = n_parts * stride;
        if self.parts.len() < need {
            self.parts.resize(need, 0.0);
        }
    }
}

/// Ranges per tile when `n_tiles` tiles are too few for `nth` threads: at
/// least `want / n_tiles`, rounded up so the items divide evenly among the
/// threads where possible, and at most `max` (each range keeps some blocks).
fn split_count(n_tiles: usize, nth: usize, want: usize, max: usize) -> usize {
    let lo = want.div_ceil(n_tiles.max(1));
    let even = (lo..lo + nth).find(|s| (n_tiles * s).is_multiple_of(nth)).unwrap_or(lo);
    even.min(max).max(1)
}

#[derive(Clone, Copy)]
struct SendPtr(*mut f32);
// SAFETY: used only to hand disjoint regions to pool threads.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}
impl SendPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}
