//! Re-rotated K/V copies between cache slots: a segment's K/V computed
//! alone at positions `0..n` placed at `p..p + n` of another sequence
//! (the segment cache, docs/segment-cache.md). Keys are stored rotated to
//! their position, and rotations compose (`R(p + d) = R(d)·R(p)`), so a
//! key moves by rotating it `d` more positions; values move as they are.

use super::attention::{write_kv, KvFormat, KvLayout, SendPtr16};
use super::rope::Rope;
use crate::pool::ThreadPool;
use kiln_backend::KvShift;

/// Copies each `copies[i]`'s K/V of one layer (`k_cache`/`v_cache`, of
/// `layout`) from slot `src` to slot `dst`, the key rotated by `shift`
/// positions of `rope`. Every copy is read before any is written. `None`
/// for a quantized cache (its blocks are Hadamard-rotated and scaled per
/// 32 values: they are not moved by this) or a slot outside the cache.
///
/// The copies the engine makes never write a slot another copy reads (a
/// segment's cached blocks go into the request's own, a context shift
/// writes fresh blocks) nor one slot twice: those are copied in place,
/// slot by slot, split over `pool`, values as their bits and keys rotated
/// from their stored 16 bits. Anything else takes the buffered path.
pub fn shift_kv(
    pool: &ThreadPool,
    layout: KvLayout,
    rope: &Rope,
    k_cache: &mut [u16],
    v_cache: &mut [u16],
    copies: &[KvShift],
) -> Option<()> {
    if matches!(layout.format, KvFormat::Quant { .. }) || !layout.is_valid() {
        return None;
    }
    let slots = (k_cache.len() / layout.k_block_len().max(1)) * layout.block_size;
    if copies.iter().any(|c| c.src as usize >= slots || c.dst as usize >= slots) {
        return None;
    }
    if copies.is_empty() {
        return Some(());
    }
    if !disjoint(copies) || rope.rot_dim() > layout.head_dim {
        return shift_buffered(pool, layout, rope, k_cache, v_cache, copies);
    }
    let (kp, vp) = (SendPtr16(k_cache.as_mut_ptr()), SendPtr16(v_cache.as_mut_ptr()));
    let (kl, vl) = (k_cache.len(), v_cache.len());
    let work = |range: std::ops::Range<usize>| {
        // SAFETY: every copy writes only its own `dst` slot, which no copy
        // reads and no other copy writes (`disjoint`), so threads touch
        // disjoint elements; the caches outlive the run.
        let (kc, vc) =
            unsafe { (std::slice::from_raw_parts_mut(kp.get(), kl), std::slice::from_raw_parts_mut(vp.get(), vl)) };
        for c in &copies[range] {
            copy_slot(layout, rope, kc, vc, c);
        }
    };
    if copies.len() < crate::ops::PAR_MIN_ROWS || pool.n_threads() == 1 {
        work(0..copies.len());
    } else {
        pool.run(&|ith, nth| work(crate::pool::split_range(copies.len(), ith, nth)));
    }
    Some(())
}

/// Whether no copy writes a slot that a copy reads, or that another copy
/// writes: sorted destinations, so the cost follows the copies, not the
/// cache's slots.
fn disjoint(copies: &[KvShift]) -> bool {
    let mut dst: Vec<u32> = copies.iter().map(|c| c.dst).collect();
    dst.sort_unstable();
    dst.windows(2).all(|w| w[0] != w[1]) && copies.iter().all(|c| dst.binary_search(&c.src).is_err())
}

/// One copy: each head's key, its rotated pairs turned by the copy's shift
/// and the rest as stored, and its value as stored.
fn copy_slot(layout: KvLayout, rope: &Rope, kc: &mut [u16], vc: &mut [u16], c: &KvShift) {
    let (bs, hd) = (layout.block_size, layout.head_dim);
    let (sb, st, db, dt) = (c.src as usize / bs, c.src as usize % bs, c.dst as usize / bs, c.dst as usize % bs);
    let rotation = rope.shift_rotation(c.shift);
    let half = rope.rot_dim() / 2;
    let bits = |x: f32| match layout.format {
        KvFormat::Bf16Pairs => half::bf16::from_f32(x).to_bits(),
        _ => half::f16::from_f32(x).to_bits(),
    };
    for h in 0..layout.n_kv_heads {
        let (so, dof) = (layout.head_offset(sb, h), layout.head_offset(db, h));
        match rotation {
            Some((cos, sin, sign)) => {
                for i in 0..half {
                    let (da, dbb) = rope.pair(i);
                    let a = layout.value(kc[so + layout.k_at(st, da)]);
                    let b = layout.value(kc[so + layout.k_at(st, dbb)]);
                    let (co, si) = (cos[i], sign * sin[i]);
                    kc[dof + layout.k_at(dt, da)] = bits(a * co - b * si);
                    kc[dof + layout.k_at(dt, dbb)] = bits(a * si + b * co);
                }
                for d in 2 * half..hd {
                    kc[dof + layout.k_at(dt, d)] = kc[so + layout.k_at(st, d)];
                }
            }
            None => {
                for d in 0..hd {
                    kc[dof + layout.k_at(dt, d)] = kc[so + layout.k_at(st, d)];
                }
            }
        }
        for d in 0..hd {
            vc[dof + layout.v_at(dt, d)] = vc[so + layout.v_at(st, d)];
        }
    }
}

/// [`shift_kv`] for copies that read what others write: every K/V read
/// into f32 first, keys rotated, then all written.
fn shift_buffered(
    pool: &ThreadPool,
    layout: KvLayout,
    rope: &Rope,
    k_cache: &mut [u16],
    v_cache: &mut [u16],
    copies: &[KvShift],
) -> Option<()> {
    let (bs, hd, heads) = (layout.block_size, layout.head_dim, layout.n_kv_heads);
    let row = heads * hd;
    let (mut k, mut v) = (vec![0f32; copies.len() * row], vec![0f32; copies.len() * row]);
    for (i, c) in copies.iter().enumerate() {
        let (block, t) = (c.src as usize / bs, c.src as usize % bs);
        for h in 0..heads {
            let base = layout.head_offset(block, h);
            for d in 0..hd {
                k[i * row + h * hd + d] = layout.value(k_cache[base + layout.k_at(t, d)]);
                v[i * row + h * hd + d] = layout.value(v_cache[base + layout.v_at(t, d)]);
            }
        }
    }
    let shifts: Vec<i32> = copies.iter().map(|c| c.shift).collect();
    rope.shift(&mut k, &shifts, hd);
    let dst: Vec<u32> = copies.iter().map(|c| c.dst).collect();
    write_kv(pool, layout, k_cache, v_cache, &dst, &k, &v);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::KvType;
    use kiln_backend::RopeStyle;

    /// K rows of `n` tokens written at positions `p..p + n` (rotated
    /// there) into slots `slot0..`, as `attn_in` writes them.
    fn write_at(
        pool: &ThreadPool,
        layout: KvLayout,
        rope: &Rope,
        kc: &mut [u16],
        vc: &mut [u16],
        raw: &[f32],
        (p, slot0): (u32, u32),
    ) {
        let row = layout.n_kv_heads * layout.head_dim;
        let n = raw.len() / row;
        let mut k = raw.to_vec();
        let pos: Vec<u32> = (p..p + n as u32).collect();
        rope.apply(pool, &mut k, &pos, layout.n_kv_heads, layout.head_dim);
        let slots: Vec<u32> = (slot0..slot0 + n as u32).collect();
        write_kv(pool, layout, kc, vc, &slots, &k, raw);
    }

    fn read(layout: KvLayout, kc: &[u16], slot: usize, key: bool) -> Vec<f32> {
        let (bs, hd) = (layout.block_size, layout.head_dim);
        let mut out = Vec::new();
        for h in 0..layout.n_kv_heads {
            let base = layout.head_offset(slot / bs, h);
            for d in 0..hd {
                let at = if key { layout.k_at(slot % bs, d) } else { layout.v_at(slot % bs, d) };
                out.push(layout.value(kc[base + at]));
            }
        }
        out
    }

    #[test]
    fn a_shifted_copy_equals_the_keys_written_at_the_new_position() {
        let pool = ThreadPool::new(2);
        let (heads, hd, bs, n) = (2, 16, 4, 7);
        // Plain RoPE and each scaling kiln reads (all are frequency factors,
        // a position scale and an attention factor: rope_scaling.rs), and a
        // partial rotation.
        let factors: Vec<f32> = (0..hd / 2).map(|i| 1.0 + i as f32 * 0.7).collect();
        let descs = [
            ("plain", hd, None, 1.0, 1.0),
            ("linear", hd, None, 4.0, 1.0),
            ("llama3 factors", hd, Some(factors.clone()), 1.0, 1.0),
            ("yarn", hd, Some(factors), 1.0, 1.23),
            ("partial", hd / 2, None, 1.0, 1.0),
        ];
        for format in [KvFormat::F16, KvFormat::Bf16Pairs] {
            for (style, (name, rot_dim, freq_factors, scale, attn_factor)) in [RopeStyle::Normal, RopeStyle::Neox]
                .into_iter()
                .flat_map(|s| descs.iter().cloned().map(move |d| (s, d)))
            {
                let layout = KvLayout { block_size: bs, n_kv_heads: heads, head_dim: hd, format };
                let desc = kiln_backend::RopeDesc {
                    style,
                    rot_dim,
                    theta: 10000.0,
                    max_pos: 512,
                    freq_factors: freq_factors.map(|f| f[..rot_dim / 2].to_vec()),
                    scale,
                    attn_factor,
                };
                let rope = Rope::from_desc(&desc);
                let len = 16 * layout.k_block_len();
                let (mut kc, mut vc) = (vec![0u16; len], vec![0u16; len]);
                let raw: Vec<f32> = (0..n * heads * hd).map(|i| (i as f32 * 0.731).sin()).collect();
                // The segment alone at positions 0.., in slots 0..; the
                // reference at position 300 in slots 32..
                write_at(&pool, layout, &rope, &mut kc, &mut vc, &raw, (0, 0));
                let (mut rk, mut rv) = (kc.clone(), vc.clone());
                write_at(&pool, layout, &rope, &mut rk, &mut rv, &raw, (300, 32));
                let copies: Vec<KvShift> = (0..n as u32).map(|i| KvShift { src: i, dst: 33 + i, shift: 300 }).collect();
                shift_kv(&pool, layout, &rope, &mut kc, &mut vc, &copies).unwrap();
                let tol = if format == KvFormat::Bf16Pairs { 2e-2 } else { 2e-3 };
                for i in 0..n {
                    let (got, want) = (read(layout, &kc, 33 + i, true), read(layout, &rk, 32 + i, true));
                    for (g, w) in got.iter().zip(&want) {
                        assert!((g - w).abs() <= tol, "{format:?} {style:?} {name} token {i}: {g} vs {w}");
                    }
                    // Rotated: not the unshifted key (the check cannot pass by accident).
                    assert_ne!(read(layout, &kc, i, true), got);
                    assert_eq!(read(layout, &vc, 33 + i, false), read(layout, &rv, 32 + i, false), "V moves as is");
                }
                // Back (a context shift): the keys at 300.. moved by -300
                // into slots 48.. equal the keys written at 0.. (slots 0..).
                let back: Vec<KvShift> =
                    (0..n as u32).map(|i| KvShift { src: 32 + i, dst: 48 + i, shift: -300 }).collect();
                shift_kv(&pool, layout, &rope, &mut rk, &mut rv, &back).unwrap();
                for i in 0..n {
                    let (got, want) = (read(layout, &rk, 48 + i, true), read(layout, &kc, i, true));
                    for (g, w) in got.iter().zip(&want) {
                        assert!((g - w).abs() <= tol, "back: {format:?} {style:?} {name} token {i}: {g} vs {w}");
                    }
                    assert_ne!(read(layout, &rk, 32 + i, true), got);
                }
            }
        }
    }

    #[test]
    fn quantized_caches_and_bad_slots_are_refused() {
        let pool = ThreadPool::new(1);
        let rope = Rope::new(RopeStyle::Neox, 32, 10000.0, 64, None, 1.0);
        let q = KvLayout {
            block_size: 16,
            n_kv_heads: 1,
            head_dim: 32,
            format: KvFormat::Quant { k: KvType::Q8_0, v: KvType::F16 },
        };
        let (mut kc, mut vc) = (vec![0u16; 4 * q.k_block_len()], vec![0u16; 4 * q.v_block_len()]);
        let c = [KvShift { src: 0, dst: 1, shift: 3 }];
        assert!(shift_kv(&pool, q, &rope, &mut kc, &mut vc, &c).is_none());
        let f = KvLayout { format: KvFormat::F16, ..q };
        let (mut kc, mut vc) = (vec![0u16; 4 * f.k_block_len()], vec![0u16; 4 * f.v_block_len()]);
        assert!(shift_kv(&pool, f, &rope, &mut kc, &mut vc, &c).is_some());
        let out = [KvShift { src: 0, dst: 64, shift: 3 }];
        assert!(shift_kv(&pool, f, &rope, &mut kc, &mut vc, &out).is_none());
    }

    #[test]
    fn copies_in_place_equal_the_buffered_path_bit_for_bit() {
        // 80 copies (enough to split over the pool) from blocks 0..5 into
        // blocks 8..13, shifts of both signs and none; the direct path must
        // write what reading everything first writes. A chain of copies
        // (one reads what another writes) takes the buffered path and
        // still reads before writing.
        let pool = ThreadPool::new(3);
        let (heads, hd, bs) = (2, 16, 16);
        for format in [KvFormat::F16, KvFormat::Bf16Pairs] {
            for (style, rot_dim) in [(RopeStyle::Normal, hd), (RopeStyle::Neox, hd), (RopeStyle::Neox, hd / 2)] {
                let layout = KvLayout { block_size: bs, n_kv_heads: heads, head_dim: hd, format };
                let rope = Rope::new(style, rot_dim, 10000.0, 1024, None, 1.0);
                let len = 16 * layout.k_block_len();
                let fill = |seed: f32| -> Vec<u16> {
                    (0..len)
                        .map(|i| {
                            let x = ((i as f32 + seed) * 0.37).sin();
                            match format {
                                KvFormat::Bf16Pairs => half::bf16::from_f32(x).to_bits(),
                                _ => half::f16::from_f32(x).to_bits(),
                            }
                        })
                        .collect()
                };
                let (kc, vc) = (fill(0.0), fill(5.0));
                let copies: Vec<KvShift> = (0..80u32)
                    .map(|i| KvShift { src: i, dst: 128 + i, shift: [0, 7, -3, 500][i as usize % 4] })
                    .collect();
                let (mut k1, mut v1) = (kc.clone(), vc.clone());
                shift_kv(&pool, layout, &rope, &mut k1, &mut v1, &copies).unwrap();
                let (mut k2, mut v2) = (kc.clone(), vc.clone());
                shift_buffered(&pool, layout, &rope, &mut k2, &mut v2, &copies).unwrap();
                assert!(k1 == k2 && v1 == v2, "{format:?} {style:?} rot {rot_dim}");
                assert_ne!(k1, kc);
                // A chain: slot 1 reads slot 0's old K/V while slot 0 is
                // written from slot 40, so the in-place path is not taken.
                let chain = [KvShift { src: 0, dst: 1, shift: 1 }, KvShift { src: 40, dst: 0, shift: 2 }];
                let (mut k3, mut v3) = (kc.clone(), vc.clone());
                shift_kv(&pool, layout, &rope, &mut k3, &mut v3, &chain).unwrap();
                let (mut k4, mut v4) = (kc.clone(), vc.clone());
                shift_buffered(&pool, layout, &rope, &mut k4, &mut v4, &chain).unwrap();
                assert!(k3 == k4 && v3 == v4);
                assert!(!disjoint(&chain));
                assert!(disjoint(&copies));
                let twice = [KvShift { src: 0, dst: 5, shift: 1 }, KvShift { src: 1, dst: 5, shift: 1 }];
                assert!(!disjoint(&twice), "one slot written twice");
            }
        }
    }
}
