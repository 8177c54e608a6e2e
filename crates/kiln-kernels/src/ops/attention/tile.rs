//! One attention tile: up to `TILE_ROWS` query rows × the query heads of one
//! KV head, over a range of key positions, with an online softmax.
//!
//! Per (row, head) pair the state is `[m, l, acc[head_dim]]`: the running
//! maximum score, the running sum of `exp(score - m)`, and the unnormalized
//! output `Σ exp(score - m) · v`. A new block of scores with maximum `m'`
//! rescales the old state by `exp(m - max(m, m'))`. The final output is
//! `acc / l`; partial states of one pair over disjoint key ranges merge the
//! same way.

use std::ops::Range;

use super::{AttnPath, AttnSeq, Call, KvFormat, KvLayout, KvType};

/// Floats of state per (row, head) pair.
pub(crate) fn pair_stride(head_dim: usize) -> usize {
    head_dim + 2
}

/// The query rows and KV head of one tile.
pub(crate) struct Tile<'a> {
    pub(crate) table: &'a [u32],
    pub(crate) kvh: usize,
    /// Batch row of the tile's first query.
    pub(crate) q_row0: usize,
    pub(crate) nrows: usize,
    /// Position of the tile's first query.
    pub(crate) pos_first: usize,
    /// The call's sliding window (0: none).
    window: usize,
}

impl<'a> Tile<'a> {
    pub(crate) fn new(call: &Call<'_>, seq: &AttnSeq<'a>, kvh: usize, row0: usize, nrows: usize) -> Self {
        let (q_row0, pos_first) = (seq.q_start + row0, seq.pos0 + row0);
        Self { table: seq.block_table, kvh, q_row0, nrows, pos_first, window: call.mask.window }
    }

    /// Query vector of pair (row `r`, group head `g`).
    #[inline]
    pub(crate) fn query<'q>(&self, call: &Call<'q>, r: usize, g: usize) -> &'q [f32] {
        let hd = call.layout.head_dim;
        let at = (self.q_row0 + r) * call.n_heads * hd + (self.kvh * call.group() + g) * hd;
        &call.q[at..at + hd]
    }

    /// Columns of query row `r` whose key positions `p0 + j` are in `range`,
    /// not after the row's own position and, with a window, inside it: `j`
    /// in the returned range.
    #[inline]
    pub(crate) fn valid_cols(&self, r: usize, p0: usize, bs: usize, range: &Range<usize>) -> Range<usize> {
        let qpos = self.pos_first + r;
        let start = match self.window {
            0 => range.start,
            w => range.start.max((qpos + 1).saturating_sub(w)),
        };
        let lo = start.saturating_sub(p0).min(bs);
        let hi = bs.min(range.end.saturating_sub(p0)).min((qpos + 1).saturating_sub(p0));
        lo..hi.max(lo)
    }

    /// The sink's share of the denominator of group head `g` whose scores'
    /// running maximum is `m`: `exp(sink - m)` (0 without sinks, or before
    /// any key).
    #[inline]
    fn sink_mass(&self, call: &Call<'_>, g: usize, m: f32) -> f32 {
        match call.mask.sinks {
            Some(s) if m > f32::NEG_INFINITY => (s[self.kvh * call.group() + g] - m).exp(),
            _ => 0.0,
        }
    }

    /// Writes the normalized outputs of a tile that saw its whole context.
    pub(crate) fn finish(&self, call: &Call<'_>, state: &[f32], out: &mut [f32]) {
        let hd = call.layout.head_dim;
        let group = call.group();
        let stride = pair_stride(hd);
        for r in 0..self.nrows {
            for g in 0..group {
                let st = &state[(r * group + g) * stride..][..stride];
                let l = st[1] + self.sink_mass(call, g, st[0]);
                let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
                let at = (self.q_row0 + r) * call.n_heads * hd + (self.kvh * group + g) * hd;
                for (o, a) in out[at..at + hd].iter_mut().zip(&st[2..]) {
                    *o = a * inv;
                }
            }
        }
    }

    /// Combines `n` partial states (slots `first..first + n` of `parts`) and
    /// writes the normalized outputs.
    pub(crate) fn merge(&self, call: &Call<'_>, parts: &[f32], first: usize, n: usize, out: &mut [f32]) {
        let hd = call.layout.head_dim;
        let group = call.group();
        let stride = pair_stride(hd);
        let slot = stride * super::TILE_ROWS * group;
        for r in 0..self.nrows {
            for g in 0..group {
                let pair = (r * group + g) * stride;
                let state = |i: usize| &parts[(first + i) * slot + pair..][..stride];
                let m = (0..n).map(|i| state(i)[0]).fold(f32::NEG_INFINITY, f32::max);
                let at = (self.q_row0 + r) * call.n_heads * hd + (self.kvh * group + g) * hd;
                let o = &mut out[at..at + hd];
                o.fill(0.0);
                if m == f32::NEG_INFINITY {
                    continue;
                }
                let mut l = 0.0;
                for i in 0..n {
                    let st = state(i);
                    if st[0] == f32::NEG_INFINITY {
                        continue;
                    }
                    let w = (st[0] - m).exp();
                    l += w * st[1];
                    for (o, a) in o.iter_mut().zip(&st[2..]) {
                        *o += w * a;
                    }
                }
                l += self.sink_mass(call, g, m);
                let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
                o.iter_mut().for_each(|v| *v *= inv);
            }
        }
    }
}

/// Per-thread buffers of the tile kernels (grow-only).
#[derive(Default)]
pub(crate) struct TileScratch {
    state: Vec<f32>,
    kbuf: Vec<f32>,
    vbuf: Vec<f32>,
    scores: Vec<f32>,
    #[cfg(target_arch = "x86_64")]
    bf16: super::avx512_bf16::Bf16Scratch,
}

impl TileScratch {
    /// Runs `tile` over key positions `range`; returns its pair states. On
    /// the bf16 path, tiles of sequences with `bf16` false (decode rows)
    /// take the f32 kernel.
    pub(crate) fn run(
        &mut self,
        path: AttnPath,
        call: &Call<'_>,
        tile: &Tile<'_>,
        range: Range<usize>,
        bf16: bool,
    ) -> &[f32] {
        let (bs, hd) = (call.layout.block_size, call.layout.head_dim);
        let stride = pair_stride(hd);
        let n = tile.nrows * call.group() * stride;
        grow(&mut self.state, n);
        grow(&mut self.kbuf, bs * hd);
        grow(&mut self.vbuf, bs * hd);
        grow(&mut self.scores, bs);
        for st in self.state[..n].chunks_exact_mut(stride) {
            st[0] = f32::NEG_INFINITY;
            st[1..].fill(0.0);
        }
        let state = &mut self.state[..n];
        let path = if path == AttnPath::Avx512Bf16 && !bf16 { AttnPath::Avx512 } else { path };
        match path {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Avx512` is only chosen when `supports` said so (CPU
            // features, block size 16, head_dim % 16 == 0).
            AttnPath::Avx512 => unsafe {
                match call.layout.format {
                    KvFormat::F16 => super::avx512::run::<false>(call, tile, range, state),
                    KvFormat::Bf16Pairs => super::avx512::run::<true>(call, tile, range, state),
                    KvFormat::Quant { .. } => super::avx512_quant::dispatch(call, tile, range, state),
                }
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `Avx2` is only chosen when `supports` said so (CPU
            // features, `F16`, block size 16, head_dim % 8 == 0).
            AttnPath::Avx2 => unsafe { super::avx2::run(call, tile, range, state) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above (`Bf16Pairs`, `head_dim % 32 == 0`, AVX-512 BF16 and BW).
            AttnPath::Avx512Bf16 => unsafe { super::avx512_bf16::run(call, tile, range, state, &mut self.bf16) },
            _ => portable(call, tile, range, state, &mut self.kbuf, &mut self.vbuf, &mut self.scores),
        }
        &self.state[..n]
    }
}

fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}

/// Widens one (block, head) of the cache to `f32` in the `F16` order: K
/// transposed (`[head_dim][block_size]`), V by row.
fn widen(layout: &KvLayout, kb: &[u16], vb: &[u16], kbuf: &mut [f32], vbuf: &mut [f32]) {
    let (bs, hd) = (layout.block_size, layout.head_dim);
    if let KvFormat::Quant { k, v } = layout.format {
        let f16 = |src: &[u16], dst: &mut [f32]| {
            for (d, &s) in dst.iter_mut().zip(src) {
                *d = half::f16::from_bits(s).to_f32();
            }
        };
        match k {
            KvType::F16 => f16(kb, kbuf),
            k => super::quant::widen_k(k, bs, hd, kb, kbuf),
        }
        match v {
            KvType::F16 => f16(vb, vbuf),
            v => super::quant::widen_v(v, bs, hd, vb, vbuf),
        }
        return;
    }
    if layout.format == KvFormat::F16 {
        // Already in that order.
        for (d, &s) in kbuf.iter_mut().zip(kb).chain(vbuf.iter_mut().zip(vb)) {
            *d = half::f16::from_bits(s).to_f32();
        }
        return;
    }
    for t in 0..bs {
        for d in 0..hd {
            kbuf[d * bs + t] = layout.value(kb[layout.k_at(t, d)]);
            vbuf[t * hd + d] = layout.value(vb[layout.v_at(t, d)]);
        }
    }
}

/// The tile kernel in plain Rust: any block size and head dimension.
fn portable(
    call: &Call<'_>,
    tile: &Tile<'_>,
    range: Range<usize>,
    state: &mut [f32],
    kbuf: &mut [f32],
    vbuf: &mut [f32],
    scores: &mut [f32],
) {
    let (bs, hd) = (call.layout.block_size, call.layout.head_dim);
    let group = call.group();
    let stride = pair_stride(hd);
    let len = bs * hd;
    for bi in range.start / bs..range.end.div_ceil(bs) {
        let Some(&blk) = tile.table.get(bi) else { break };
        let Some((kb, vb)) = call.head_blocks(blk as usize, tile.kvh) else {
            continue;
        };
        widen(&call.layout, kb, vb, &mut kbuf[..len], &mut vbuf[..len]);
        let p0 = bi * bs;
        for r in 0..tile.nrows {
            let cols = tile.valid_cols(r, p0, bs, &range);
            if cols.is_empty() {
                continue;
            }
            for g in 0..group {
                let qv = tile.query(call, r, g);
                let s = &mut scores[cols.clone()];
                s.fill(0.0);
                for (d, &qd) in qv.iter().enumerate() {
                    let krow = &kbuf[d * bs + cols.start..d * bs + cols.end];
                    for (sj, &k) in s.iter_mut().zip(krow) {
                        *sj += qd * k;
                    }
                }
                let st = &mut state[(r * group + g) * stride..][..stride];
                let mut mb = f32::NEG_INFINITY;
                for sj in s.iter_mut() {
                    *sj *= call.scale;
                    mb = mb.max(*sj);
                }
                let m_new = st[0].max(mb);
                let alpha = if st[0] == f32::NEG_INFINITY { 0.0 } else { (st[0] - m_new).exp() };
                let mut sum = 0.0;
                for sj in s.iter_mut() {
                    *sj = (*sj - m_new).exp();
                    sum += *sj;
                }
                st[0] = m_new;
                st[1] = st[1] * alpha + sum;
                let acc = &mut st[2..];
                acc.iter_mut().for_each(|a| *a *= alpha);
                for (j, &p) in cols.clone().zip(s.iter()) {
                    for (a, &v) in acc.iter_mut().zip(&vbuf[j * hd..(j + 1) * hd]) {
                        *a += p * v;
                    }
                }
            }
        }
    }
}
