//! The KV memory on the CPU: one K and one V pool per layer, in blocks of
//! 16-bit values (`f16`, or bf16 pairs for the bf16 kernel) or of GGML's
//! `q8_0`/`q4_0` blocks, K and V each of its own [`KvType`] (layout in
//! [`crate::ops::KvLayout`]), and the host tier's slots, which hold blocks
//! in the same format. Pages are committed by the OS only when first written.

use kiln_backend::{BackendError, KvMemory, KvSpec, KvType, Result, WindowKv};

use crate::ops::{AttnPath, KvFormat, KvLayout};

/// K/V storage for every layer, and the host tier.
#[derive(Debug)]
pub struct CpuKv {
    layout: KvLayout,
    /// The kernel that reads it.
    path: AttnPath,
    num_blocks: usize,
    /// The sliding-window layers' pool ([`KvSpec::window`]).
    window: Option<WindowKv>,
    k: Vec<Vec<u16>>,
    v: Vec<Vec<u16>>,
    tier: Vec<u16>,
    tier_slots: usize,
}

impl CpuKv {
    /// Allocates `spec`'s pools (`num_blocks`, or four contexts' worth when
    /// `None`). With `spec.fast_format`, stores bf16 pairs read by bf16 dot
    /// products where this CPU has them ([`AttnPath::Avx512Bf16`], for
    /// prefill-sized tiles) when both sides are [`KvType::F16`]; else
    /// `spec`'s types for the f32 kernels.
    pub fn new(spec: &KvSpec) -> Result<Self> {
        spec.check_types()?;
        let bs = spec.block_size;
        let num_blocks = spec.num_blocks.unwrap_or(4 * spec.max_ctx.div_ceil(bs.max(1)));
        if bs == 0 || num_blocks * bs < spec.max_ctx {
            return Err(BackendError::OutOfMemory {
                device: "cpu",
                what: format!(
                    "a KV cache of {num_blocks} blocks of {bs} cannot hold one {}-token context",
                    spec.max_ctx
                ),
            });
        }
        let typed = KvLayout {
            block_size: bs,
            n_kv_heads: spec.kv_heads,
            head_dim: spec.head_dim,
            format: KvFormat::of(spec.type_k, spec.type_v),
        };
        let pairs = KvLayout { format: KvFormat::Bf16Pairs, ..typed };
        let (layout, path) = if spec.fast_format && spec.is_f16() && AttnPath::Avx512Bf16.supports(pairs) {
            (pairs, AttnPath::Avx512Bf16)
        } else {
            (typed, AttnPath::detect(typed))
        };
        let be = spec.full_layers() * (layout.k_block_len() + layout.v_block_len());
        debug_assert_eq!(2 * be, spec.block_bytes());
        let blocks = |l: usize| spec.layer_blocks(l, num_blocks);
        Ok(Self {
            layout,
            path,
            num_blocks,
            window: spec.window,
            k: (0..spec.layers).map(|l| vec![0u16; blocks(l) * layout.k_block_len()]).collect(),
            v: (0..spec.layers).map(|l| vec![0u16; blocks(l) * layout.v_block_len()]).collect(),
            tier: vec![0; spec.tier_slots * be],
            tier_slots: spec.tier_slots,
        })
    }

    /// Layout of one layer.
    pub fn layout(&self) -> KvLayout {
        self.layout
    }
    /// The attention kernel that reads this cache.
    pub fn attention_path(&self) -> AttnPath {
        self.path
    }
    /// `u16` values of one block over all layers outside the window pool,
    /// K and V (one tier slot).
    pub fn block_elems(&self) -> usize {
        (self.k.len() - self.window.map_or(0, |w| w.layers.len()))
            * (self.layout.k_block_len() + self.layout.v_block_len())
    }
    /// The sliding-window layers' pool, if there is one.
    pub fn window(&self) -> Option<WindowKv> {
        self.window
    }
    /// Whether `layer` keeps its K/V in the window pool.
    pub fn in_window(&self, layer: usize) -> bool {
        self.window.is_some_and(|w| w.layers.contains(layer))
    }

    /// How K and V are stored.
    pub fn types(&self) -> (KvType, KvType) {
        (self.layout.format.k_type(), self.layout.format.v_type())
    }

    /// K and V of one layer.
    pub fn layer(&self, layer: usize) -> Option<(&[u16], &[u16])> {
        Some((self.k.get(layer)?.as_slice(), self.v.get(layer)?.as_slice()))
    }
    /// Mutable K and V of one layer.
    pub fn layer_mut(&mut self, layer: usize) -> Option<(&mut [u16], &mut [u16])> {
        Some((self.k.get_mut(layer)?.as_mut_slice(), self.v.get_mut(layer)?.as_mut_slice()))
    }

    fn check(&self, blocks: &[u32], slots: &[u32]) -> Result<()> {
        let bad = blocks.len() != slots.len()
            || blocks.iter().any(|&b| b as usize >= self.num_blocks)
            || slots.iter().any(|&s| s as usize >= self.tier_slots);
        if bad {
            return Err(BackendError::Batch(format!(
                "a tier copy of {} blocks to {} slots (ids below {}, slots below {})",
                blocks.len(),
                slots.len(),
                self.num_blocks,
                self.tier_slots
            )));
        }
        Ok(())
    }
}

impl KvMemory for CpuKv {
    fn num_blocks(&self) -> usize {
        self.num_blocks
    }
    fn block_size(&self) -> usize {
        self.layout.block_size
    }
    fn tier_slots(&self) -> usize {
        self.tier_slots
    }
    fn tier_batch(&self) -> usize {
        usize::MAX
    }
    fn tier_save(&mut self, blocks: &[u32], slots: &[u32]) -> Result<()> {
        self.check(blocks, slots)?;
        let (nk, nv, be) = (self.layout.k_block_len(), self.layout.v_block_len(), self.block_elems());
        for (&b, &s) in blocks.iter().zip(slots) {
            let (b, s) = (b as usize, s as usize);
            let window = self.window;
            let tiered = |(l, _): &(usize, &Vec<u16>)| !window.is_some_and(|w| w.layers.contains(*l));
            let ks = self.k.iter().enumerate().filter(tiered).map(|(_, p)| (p, nk));
            let vs = self.v.iter().enumerate().filter(tiered).map(|(_, p)| (p, nv));
            let mut dst = &mut self.tier[s * be..(s + 1) * be];
            for (pool, n) in ks.chain(vs) {
                let (d, rest) = dst.split_at_mut(n);
                d.copy_from_slice(&pool[b * n..(b + 1) * n]);
                dst = rest;
            }
        }
        Ok(())
    }
    fn tier_load(&mut self, slots: &[u32], blocks: &[u32]) -> Result<()> {
        self.check(blocks, slots)?;
        let (nk, nv, be) = (self.layout.k_block_len(), self.layout.v_block_len(), self.block_elems());
        for (&b, &s) in blocks.iter().zip(slots) {
            let (b, s) = (b as usize, s as usize);
            let mut src = &self.tier[s * be..(s + 1) * be];
            let window = self.window;
            let tiered = |&(l, _): &(usize, &mut Vec<u16>)| !window.is_some_and(|w| w.layers.contains(l));
            let ks = self.k.iter_mut().enumerate().filter(tiered).map(|(_, p)| (p, nk));
            let vs = self.v.iter_mut().enumerate().filter(tiered).map(|(_, p)| (p, nv));
            for (pool, n) in ks.chain(vs) {
                let (s, rest) = src.split_at(n);
                pool[b * n..(b + 1) * n].copy_from_slice(s);
                src = rest;
            }
        }
        Ok(())
    }
    fn tier_slot(&mut self, i: usize) -> Result<Vec<u16>> {
        let be = self.block_elems();
        self.tier
            .get(i * be..(i + 1) * be)
            .map(<[u16]>::to_vec)
            .ok_or_else(|| BackendError::Batch(format!("no tier slot {i} (there are {})", self.tier_slots)))
    }
    fn format_name(&self) -> &'static str {
        match self.layout.format {
            KvFormat::F16 => "f16",
            KvFormat::Bf16Pairs => "bf16-pairs",
            KvFormat::Quant { k, v } => kiln_backend::kv_pair_name(k, v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_block_loads_back_into_another_block() {
        let spec = KvSpec {
            layers: 2,
            kv_heads: 2,
            head_dim: 16,
            block_size: 4,
            num_blocks: Some(4),
            max_ctx: 16,
            tier_slots: 2,
            fast_format: false,
            type_k: KvType::F16,
            type_v: KvType::F16,
            window: None,
        };
        let mut kv = CpuKv::new(&spec).unwrap();
        let n = kv.layout().block_len();
        for l in 0..spec.layers {
            let (k, v) = kv.layer_mut(l).unwrap();
            for (i, x) in k[n..2 * n].iter_mut().enumerate() {
                *x = (l * 1000 + i) as u16;
            }
            for (i, x) in v[n..2 * n].iter_mut().enumerate() {
                *x = (l * 1000 + i + 500) as u16;
            }
        }
        kv.tier_save(&[1], &[1]).unwrap();
        kv.tier_load(&[1], &[3]).unwrap();
        for l in 0..spec.layers {
            let (k, v) = kv.layer(l).unwrap();
            assert_eq!(k[n..2 * n], k[3 * n..4 * n]);
            assert_eq!(v[n..2 * n], v[3 * n..4 * n]);
            assert!(k[2 * n..3 * n].iter().all(|&x| x == 0));
        }
        assert_eq!(kv.tier_slot(1).unwrap().len(), kv.block_elems());
        assert!(kv.tier_save(&[4], &[0]).is_err(), "block out of range");
        assert!(kv.tier_load(&[2], &[0]).is_err(), "slot out of range");
        assert!(kv.tier_load(&[0, 1], &[0]).is_err(), "unpaired");
    }

    #[test]
    fn quantized_blocks_round_trip_through_the_tier() {
        use crate::ops::{write_kv, AttnPath};
        let pool = crate::ThreadPool::new(1);
        for (type_k, type_v) in
            [(KvType::Q8_0, KvType::Q8_0), (KvType::Q4_0, KvType::Q8_0), (KvType::F16, KvType::Q4_0)]
        {
            let spec = KvSpec {
                layers: 2,
                kv_heads: 2,
                head_dim: 32,
                block_size: 16,
                num_blocks: Some(4),
                max_ctx: 32,
                tier_slots: 2,
                fast_format: true,
                type_k,
                type_v,
                window: None,
            };
            let mut kv = CpuKv::new(&spec).unwrap();
            assert_eq!(kv.types(), (type_k, type_v));
            assert_ne!(kv.attention_path(), AttnPath::Avx512Bf16, "bf16 pairs only for 16-bit caches");
            // Each side's pool holds its own type's bytes.
            assert_eq!(2 * kv.block_elems(), spec.block_bytes());
            let layout = kv.layout();
            let slots: Vec<u32> = (16..32).collect();
            let x: Vec<f32> = (0..16 * 64).map(|i| (i as f32 * 0.37).sin()).collect();
            for l in 0..2 {
                let (k, v) = kv.layer_mut(l).unwrap();
                write_kv(&pool, layout, k, v, &slots, &x, &x);
            }
            kv.tier_save(&[1], &[0]).unwrap();
            let saved = kv.tier_slot(0).unwrap();
            assert_eq!(saved.len(), kv.block_elems());
            assert!(saved.iter().any(|&w| w != 0));
            kv.tier_load(&[0], &[3]).unwrap();
            for l in 0..2 {
                let (k, v) = kv.layer(l).unwrap();
                let (nk, nv) = (layout.k_block_len(), layout.v_block_len());
                assert_eq!(k[nk..2 * nk], k[3 * nk..4 * nk]);
                assert_eq!(v[nv..2 * nv], v[3 * nv..4 * nv]);
            }
        }
    }

    #[test]
    fn a_quantized_type_needs_whole_blocks_per_head() {
        let spec = KvSpec {
            layers: 1,
            kv_heads: 1,
            head_dim: 48,
            block_size: 16,
            num_blocks: Some(4),
            max_ctx: 64,
            tier_slots: 0,
            fast_format: false,
            type_k: KvType::F16,
            type_v: KvType::Q4_0,
            window: None,
        };
        let err = CpuKv::new(&spec).unwrap_err().to_string();
        assert!(err.contains("q4_0 V cache") && err.contains("48"), "{err}");
    }

    #[test]
    fn a_pool_smaller_than_one_context_is_refused() {
        let spec = KvSpec {
            layers: 1,
            kv_heads: 1,
            head_dim: 16,
            block_size: 16,
            num_blocks: Some(2),
            max_ctx: 64,
            tier_slots: 0,
            fast_format: false,
            type_k: KvType::F16,
            type_v: KvType::F16,
            window: None,
        };
        assert!(matches!(CpuKv::new(&spec), Err(BackendError::OutOfMemory { .. })));
    }

    #[test]
    fn window_layers_get_their_own_pool_and_the_tier_keeps_the_others() {
        let layers = kiln_backend::LayerSet::from_fn(3, |l| l != 1).unwrap();
        let spec = KvSpec {
            layers: 3,
            kv_heads: 1,
            head_dim: 32,
            block_size: 4,
            num_blocks: Some(10),
            max_ctx: 16,
            tier_slots: 2,
            fast_format: false,
            type_k: KvType::F16,
            type_v: KvType::F16,
            window: Some(kiln_backend::WindowKv { layers, num_blocks: 3 }),
        };
        let mut kv = CpuKv::new(&spec).unwrap();
        let len = |l: usize| kv.layer(l).unwrap().0.len();
        assert_eq!((len(0), len(1), len(2)), (3 * 4 * 32, 10 * 4 * 32, 3 * 4 * 32));
        assert!(kv.in_window(0) && !kv.in_window(1));
        // A tier slot holds layer 1 only: K and V of one block.
        assert_eq!(kv.block_elems(), 2 * 4 * 32);
        assert_eq!(2 * kv.block_elems(), spec.block_bytes());
        let (k1, _) = kv.layer_mut(1).unwrap();
        k1[9 * 128..10 * 128].fill(7);
        kv.tier_save(&[9], &[1]).unwrap();
        assert!(kv.tier_slot(1).unwrap()[..128].iter().all(|&v| v == 7));
        kv.tier_load(&[1], &[0]).unwrap();
        assert!(kv.layer(1).unwrap().0[..128].iter().all(|&v| v == 7));
        // The window layers' blocks were not touched.
        assert!(kv.layer(0).unwrap().0.iter().all(|&v| v == 0));
    }
}
