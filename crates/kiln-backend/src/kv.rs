//! The KV memory a backend allocates for the engine: one K and one V pool
//! per layer in fixed-size blocks, and optionally a host tier of block
//! slots. Which block belongs to which sequence is `kiln_core::kv`'s
//! business; this is storage and copies only.

use crate::Result;

/// How one side (K or V) of the KV cache stores its values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum KvType {
    /// 16-bit floats (IEEE half, or bf16 where the CPU's bf16 prompt
    /// attention reads them): 2 bytes a value.
    #[default]
    F16,
    /// GGML's `q8_0`: blocks of 32 values along the head dimension, each
    /// an `f16` scale `d` and 32 signed bytes `q` (`x = d · q`): 34 bytes
    /// per 32 values.
    Q8_0,
    /// GGML's `q4_0`: blocks of 32 values, an `f16` scale `d` and 32
    /// nibbles `q` (`x = d · (q − 8)`): 18 bytes per 32 values.
    Q4_0,
}

impl KvType {
    /// Every type, in the order of their names.
    pub const ALL: [KvType; 3] = [KvType::F16, KvType::Q8_0, KvType::Q4_0];

    /// The name used by flags and configs (llama.cpp's `-ctk`/`-ctv` names).
    pub fn name(self) -> &'static str {
        match self {
            Self::F16 => "f16",
            Self::Q8_0 => "q8_0",
            Self::Q4_0 => "q4_0",
        }
    }
    /// Values per quantization block (1: not quantized).
    pub fn block_values(self) -> usize {
        match self {
            Self::F16 => 1,
            Self::Q8_0 | Self::Q4_0 => 32,
        }
    }
    /// Bytes of one quantization block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::F16 => 2,
            Self::Q8_0 => 34,
            Self::Q4_0 => 18,
        }
    }
    /// Bytes of `n` values (`n` a multiple of [`KvType::block_values`]).
    pub fn bytes(self, n: usize) -> usize {
        n / self.block_values() * self.block_bytes()
    }
    /// Whether a head of `head_dim` values can be stored (quantized types
    /// need whole 32-value blocks).
    pub fn fits(self, head_dim: usize) -> bool {
        head_dim.is_multiple_of(self.block_values())
    }
}

/// The name of a cache of these K and V types: one name when both sides
/// agree (`q8_0`), else `K/V` (`f16` names the 16-bit type).
pub fn kv_pair_name(k: KvType, v: KvType) -> &'static str {
    use KvType::*;
    match (k, v) {
        (F16, F16) => "f16",
        (Q8_0, Q8_0) => "q8_0",
        (Q4_0, Q4_0) => "q4_0",
        (F16, Q8_0) => "f16/q8_0",
        (F16, Q4_0) => "f16/q4_0",
        (Q8_0, F16) => "q8_0/f16",
        (Q8_0, Q4_0) => "q8_0/q4_0",
        (Q4_0, F16) => "q4_0/f16",
        (Q4_0, Q8_0) => "q4_0/q8_0",
    }
}

impl std::fmt::Display for KvType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for KvType {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            // bf16 is the CPU's 16-bit format where its bf16 attention runs:
            // the same size and the same choice.
            "f16" | "bf16" => Ok(Self::F16),
            "q8_0" | "q8" => Ok(Self::Q8_0),
            "q4_0" | "q4" => Ok(Self::Q4_0),
            _ => Err(format!("unknown KV cache type '{s}' (use f16, q8_0 or q4_0)")),
        }
    }
}

/// What to allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvSpec {
    /// Decoder layers.
    pub layers: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// Blocks per layer; `None` lets the backend take what its memory
    /// allows (a GPU: the free memory less its reserve).
    pub num_blocks: Option<usize>,
    /// The longest context: the pool must hold at least one.
    pub max_ctx: usize,
    /// Block slots of the host tier (0: none).
    pub tier_slots: usize,
    /// Prefer the 16-bit format the backend's fastest prompt attention
    /// reads (the CPU's bf16 pairs) where the machine has it (only when
    /// both K and V are [`KvType::F16`]).
    pub fast_format: bool,
    /// How K is stored.
    pub type_k: KvType,
    /// How V is stored.
    pub type_v: KvType,
    /// Sliding-window layers that keep their K/V in a pool of their own,
    /// holding about a window per sequence (`None`: every layer's pool has
    /// `num_blocks` blocks).
    pub window: Option<WindowKv>,
}

/// A set of layer indices (below [`LayerSet::MAX`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LayerSet([u64; 4]);

impl LayerSet {
    /// Layers a set can hold.
    pub const MAX: usize = 256;

    /// The layers for which `f` is true, of the first `n` (at most
    /// [`LayerSet::MAX`]; `None` past it).
    pub fn from_fn(n: usize, mut f: impl FnMut(usize) -> bool) -> Option<Self> {
        if n > Self::MAX {
            return None;
        }
        let mut s = Self::default();
        for l in (0..n).filter(|&l| f(l)) {
            s.0[l / 64] |= 1 << (l % 64);
        }
        Some(s)
    }
    /// Whether `layer` is in the set.
    pub fn contains(&self, layer: usize) -> bool {
        layer < Self::MAX && self.0[layer / 64] >> (layer % 64) & 1 == 1
    }
    /// Layers in the set.
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }
    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The window pool of [`KvSpec::window`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowKv {
    /// The layers that keep their K/V there.
    pub layers: LayerSet,
    /// Its blocks (of [`KvSpec::block_size`] tokens, every window layer).
    pub num_blocks: usize,
}

impl KvSpec {
    /// Whether `layer`'s K/V lives in the window pool.
    pub fn in_window(&self, layer: usize) -> bool {
        self.window.is_some_and(|w| w.layers.contains(layer))
    }
    /// Blocks of `layer`'s pools.
    pub fn layer_blocks(&self, layer: usize, num_blocks: usize) -> usize {
        match self.window {
            Some(w) if w.layers.contains(layer) => w.num_blocks,
            _ => num_blocks,
        }
    }
    /// Layers whose pools have `num_blocks` blocks (not in the window pool).
    pub fn full_layers(&self) -> usize {
        self.layers - self.window.map_or(0, |w| w.layers.len())
    }
    /// Bytes of the window pool (0 without one).
    pub fn window_bytes(&self) -> usize {
        self.window.map_or(0, |w| {
            w.num_blocks
                * self.block_size
                * kv_bytes_per_token(w.layers.len(), self.kv_heads * self.head_dim, self.type_k, self.type_v)
        })
    }

    /// 16-bit values of one token over every layer outside the window pool,
    /// K and V, in an `f16` cache.
    pub fn values_per_token(&self) -> usize {
        2 * self.full_layers() * self.kv_heads * self.head_dim
    }
    /// 16-bit values of one block over every layer outside the window
    /// pool, K and V, in an `f16` cache (one tier slot).
    pub fn block_values(&self) -> usize {
        self.values_per_token() * self.block_size
    }
    /// Bytes of one token over every layer outside the window pool, K and
    /// V, in this spec's types (what each block of `num_blocks` costs, per
    /// token).
    pub fn bytes_per_token(&self) -> usize {
        kv_bytes_per_token(self.full_layers(), self.kv_heads * self.head_dim, self.type_k, self.type_v)
    }
    /// Bytes of one block over every layer outside the window pool, K and
    /// V (one tier slot: the tier keeps those layers only).
    pub fn block_bytes(&self) -> usize {
        self.bytes_per_token() * self.block_size
    }
    /// Whether both sides are 16-bit.
    pub fn is_f16(&self) -> bool {
        self.type_k == KvType::F16 && self.type_v == KvType::F16
    }
    /// An error naming the side whose type cannot hold this head dimension.
    pub fn check_types(&self) -> Result<()> {
        for (side, ty) in [("K", self.type_k), ("V", self.type_v)] {
            if !ty.fits(self.head_dim) {
                return Err(crate::BackendError::Unsupported {
                    device: "this device",
                    what: format!(
                        "a {ty} {side} cache for heads of {} values ({ty} needs a multiple of {})",
                        self.head_dim,
                        ty.block_values()
                    ),
                });
            }
        }
        Ok(())
    }
}

/// Bytes one token costs in a KV cache of `layers` layers of `kv_dim`
/// values (KV heads × head dimension) per side.
pub fn kv_bytes_per_token(layers: usize, kv_dim: usize, type_k: KvType, type_v: KvType) -> usize {
    layers * (type_k.bytes(kv_dim) + type_v.bytes(kv_dim))
}

/// One token's K/V copied from one slot to another, the key rotated by
/// `shift` positions ([`crate::Backend::kv_shift`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvShift {
    /// Flat slot (`block * block_size + offset`) to read.
    pub src: u32,
    /// Flat slot to write.
    pub dst: u32,
    /// Positions to rotate the key by: positive to move it later (the
    /// segment cache), negative to move it earlier (context shift).
    pub shift: i32,
}

/// KV memory on a device, with its host tier.
pub trait KvMemory: Send {
    /// Blocks per layer.
    fn num_blocks(&self) -> usize;
    /// Tokens per block.
    fn block_size(&self) -> usize;
    /// Block slots in the host tier.
    fn tier_slots(&self) -> usize;
    /// Most blocks one tier copy moves (`usize::MAX` where any number does).
    fn tier_batch(&self) -> usize;
    /// Copies blocks `blocks[j]` (every layer's K and V) into tier slots
    /// `slots[j]` (distinct slots, at most [`KvMemory::tier_batch`]). A
    /// device may do it asynchronously, in order before the next step.
    fn tier_save(&mut self, blocks: &[u32], slots: &[u32]) -> Result<()>;
    /// Copies tier slots `slots[j]` into blocks `blocks[j]` (distinct
    /// blocks, at most [`KvMemory::tier_batch`]), before the next step.
    fn tier_load(&mut self, slots: &[u32], blocks: &[u32]) -> Result<()>;
    /// The values in tier slot `i`, once every copy so far has finished
    /// (for checks: the engine never reads slots).
    fn tier_slot(&mut self, i: usize) -> Result<Vec<u16>>;
    /// A short name of the storage format (`f16`, `bf16-pairs`, ...).
    fn format_name(&self) -> &'static str;
}

/// Checks a batch against a KV memory's window pool: with one, every
/// sequence has a window table of ids below its size and every row a
/// window slot; without one, none has.
pub fn check_window_batch(batch: &crate::ForwardBatch, window: Option<WindowKv>) -> Result<()> {
    let bad = |what: String| Err(crate::BackendError::Batch(what));
    match window {
        None if !batch.window_slots.is_empty() => bad("window slots for a KV cache without a window pool".into()),
        None => Ok(()),
        Some(_) if batch.window_slots.len() != batch.tokens.len() => bad(format!(
            "{} window slots for {} rows (the KV cache has a window pool)",
            batch.window_slots.len(),
            batch.tokens.len()
        )),
        Some(w) => match batch.seqs.iter().flat_map(|s| s.window_table.iter()).find(|&&b| b as usize >= w.num_blocks) {
            Some(b) => bad(format!("window block {b} is outside the window pool ({} blocks)", w.num_blocks)),
            None => Ok(()),
        },
    }
}
